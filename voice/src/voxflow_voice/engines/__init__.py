"""The engines a voice session needs, loaded once per process and shared.

:class:`VoiceEngines` bundles speech-to-text, text-to-speech, a factory of per-session
voice activity detectors (a VAD keeps recurrent state, so each session gets its own; the
ONNX model under it is shared) and, optionally, the end-of-turn model (stateless, one for
every call).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from voxflow.ids import DeliveryId
from voxflow.settings import Settings

from ..audio import AudioChunk
from ..scheduler import ModelScheduler
from .end_of_turn import EndOfTurnModel, SmartTurn
from .stt import SttSettings, Transcript, WhisperStt
from .tts import DETERMINISTIC_TTS_SETTINGS, PiperTts, TtsSettings
from .vad import EnergyVad, SileroVad, VoiceActivityDetector

__all__ = ["SpeechToText", "TextToSpeech", "VoiceEngines"]


class SpeechToText(Protocol):
    """What the session needs of an STT engine."""

    async def transcribe(self, audio: AudioChunk) -> Transcript | None:
        """The words of one 16 kHz utterance, or None when it holds none."""
        ...


class TextToSpeech(Protocol):
    """What the session needs of a TTS engine."""

    @property
    def sample_rate(self) -> int:
        """Output rate."""
        ...

    def stream(
        self, text: str, *, delivery_id: DeliveryId | None = None, segment_id: int | None = None
    ) -> AsyncIterator[AudioChunk]:
        """Identity-tagged audio chunks of ``text``."""
        ...

    def synthesize(self, text: str) -> Iterator[Any]:
        """Blocking synthesis, sentence by sentence (used to render scripted speech)."""
        ...


@dataclass(frozen=True, slots=True)
class VoiceEngines:
    """STT, TTS and a VAD factory for voice sessions.

    Attributes:
        stt: the speech-to-text engine.
        tts: the text-to-speech engine.
        make_vad: builds one fresh detector per session.
        end_of_turn: judges the user's pauses (:mod:`voxflow_voice.engines.end_of_turn`); the
            silence timer alone if ``None``.
        scheduler: the :class:`~voxflow_voice.scheduler.ModelScheduler` running ``stt``
            and ``tts`` work, deadline first (for its statistics); ``None`` when they run
            first come, first served on the default executor.
    """

    stt: SpeechToText
    tts: TextToSpeech
    make_vad: Callable[[], VoiceActivityDetector]
    end_of_turn: EndOfTurnModel | None = None
    scheduler: ModelScheduler | None = None

    @classmethod
    def load(
        cls,
        *,
        stt: SttSettings | None = None,
        tts: TtsSettings | None = None,
        voice: str | None = None,
        vad: Literal["silero", "energy"] = "silero",
        deterministic: bool = False,
        end_of_turn: Literal["none", "smart-turn"] = "none",
        scheduling: bool = False,
    ) -> VoiceEngines:
        """Load the bundled models (blocking: call from a thread or before the loop).

        Args:
            stt: Whisper settings (model ``tiny.en`` by default).
            tts: Piper settings.
            voice: a Piper ``.onnx`` path instead of the bundled voice.
            vad: ``silero`` (default) or the ``energy`` alternative.
            deterministic: synthesize without sampling noise
                (:data:`DETERMINISTIC_TTS_SETTINGS`) unless ``tts`` is given.
            end_of_turn: ``smart-turn`` loads :class:`~voxflow_voice.engines.end_of_turn.SmartTurn`
                (the extra ``voxflow-voice[smart-turn]``); ``none``, the default, does not.
            scheduling: run STT and TTS on one deadline-aware
                :class:`~voxflow_voice.scheduler.ModelScheduler` (a worker per core and
                an urgent lane); ``False`` (the default: ``benchmarks/capacity.py`` found
                it no better at 12 and 16 calls on an idle 2-core machine): a
                default-executor thread per job, first come first served.

        Raises:
            voxflow.errors.ModelNotFoundError: a model package is missing (the message
                names the package to install).
        """
        if vad not in ("silero", "energy"):
            raise ValueError(f"vad must be 'silero' or 'energy', got {vad!r}")
        if end_of_turn not in ("none", "smart-turn"):
            raise ValueError(f"end_of_turn must be 'none' or 'smart-turn', got {end_of_turn!r}")
        judge = SmartTurn() if end_of_turn == "smart-turn" else None  # fails first if missing
        scheduler = ModelScheduler() if scheduling else None
        stt_engine = WhisperStt(stt, scheduler=scheduler)
        if tts is None and deterministic:
            tts = DETERMINISTIC_TTS_SETTINGS
        tts_engine = PiperTts(voice, settings=tts, scheduler=scheduler)
        make_vad: Callable[[], VoiceActivityDetector]
        if vad == "silero":
            SileroVad()  # load the shared ONNX session now, not on the first frame
            make_vad = SileroVad
        else:
            make_vad = EnergyVad
        return cls(stt=stt_engine, tts=tts_engine, make_vad=make_vad, end_of_turn=judge,
                   scheduler=scheduler)

    @classmethod
    def from_settings(cls, settings: Settings, *, deterministic: bool = False) -> VoiceEngines:
        """Load the engines a command's :class:`~voxflow.settings.Settings` name (blocking).

        Whisper ``settings.stt_model``; ``settings.voice`` instead of the bundled voice;
        ``settings.end_of_turn_model``.

        Raises:
            TypeError: ``settings`` is not a :class:`~voxflow.settings.Settings`.
            voxflow.errors.ModelNotFoundError: as :meth:`load`.
        """
        if not isinstance(settings, Settings):
            raise TypeError(f"settings must be voxflow Settings, got {type(settings).__name__}")
        return cls.load(stt=SttSettings(model=settings.stt_model),
                        voice=str(settings.voice) if settings.voice else None,
                        deterministic=deterministic, end_of_turn=settings.end_of_turn_model)
