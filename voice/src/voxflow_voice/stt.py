"""Speech to text with faster-whisper: one utterance in, one transcript (or nothing) out.

faster-whisper's ``transcribe()`` returns a *lazy* generator that decodes as it is
iterated, so :meth:`WhisperStt.transcribe` iterates it inside the executor thread; the
event loop never decodes. Cancelling the awaiting task stops the wait, not the thread, so
the audio handed in is bounded (``max_utterance``) and the thread finishes soon.

Noise is not a turn. A segment is dropped when

* Whisper's own rule holds: ``no_speech_prob > no_speech_threshold`` and
  ``avg_logprob < log_prob_threshold`` (the decoder thinks there is no speech *and* is
  unsure of the words it produced); on silence, hum and noise tiny.en scores about
  0.92 to 0.95 and below -1.2, on speech below 0.15 and above -0.2;
* or its text is one of Whisper's well-known silence hallucinations ("Thank you.",
  "you", ...) *and* ``no_speech_prob > hallucination_no_speech``, so a user who really
  says "Thank you." (no-speech about 0.08) is still heard;
* or it has no letter or digit (".", "...", "-").

A transcript whose segments are all dropped is ``None``: no turn is committed.

Encoder window: Whisper pads every input to 30 s, and on a CPU the encoder pass over
those 30 s is most of the cost (tiny.en: about 530 ms of a 600 ms transcription on a
2-core machine, base over 1.3 s). A voice turn is a few seconds long, so with
``encoder_window`` below 30 an utterance up to that length is padded to the window
instead; longer ones keep 30 s. It is a trade with faster-whisper's own padding
(``encoder_padding="zeros"``: the log-mel *features* are padded with 0, which is louder
than the log-mel floor of real silence): 10 s makes tiny.en about 3 to 4x faster but, on
80 synthesized commands (an earlier ad-hoc measurement), raised its word error rate from
1.4% to 6% ("Please set a timer" heard as "Police at a time are"), and some utterances
turn into long loops; a window that merely fits the speech makes Whisper repeat itself.
With ``encoder_padding="silence"`` the *audio* is padded with silence to the window
before the mel, as OpenAI's Whisper pads its 30 s, so the padded frames are what the
model was trained on. ``benchmarks/stt_accuracy.py`` measures both on 67 synthesized
turns (clean and 20 dB noise, three speaking rates): with ``silence``, a 10 s window
keeps the 30 s word error rate (tiny.en 2.8% vs 3.0%, base 1.7% vs 2.1%) at a quarter to
a third of the time (tiny.en 100 ms vs 430 ms, base 240 ms vs 760 ms on a 2-core
machine), while ``zeros`` at 10 s sent one tiny.en turn into a 150-word loop. A short
window can still, rarely, send the decoder into a loop (tens of words for a 2 s turn, or
the turn said twice); a windowed transcript with more than 4 + 6 words per second of
audio, or made of one phrase of two words or more repeated, is thrown away and the turn
decoded again in the 30 s window (logged as a warning), so a loop costs one more decode
instead of a run-away transcript. So the defaults are a 10 s window padded with
silence, chosen by that measurement (67 turns; tiny.en 2.8% WER at a median 100 ms vs
3.0% at 432 ms for faster-whisper's 30 s; base 1.7% at 242 ms vs 2.1% at 755 ms);
``encoder_window=30, encoder_padding="zeros"`` is faster-whisper's own behaviour.
"""

from __future__ import annotations

import asyncio
import logging
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from numpy.typing import NDArray
from pydantic import BaseModel, ConfigDict, Field

from .audio import STT_SAMPLE_RATE, AudioChunk
from .models import (
    BASE_PART_MODULES,
    DEFAULT_TINY_EN_MODULE,
    find_whisper_model,
    load_whisper_model,
)
from .scheduler import ModelScheduler

if TYPE_CHECKING:
    from faster_whisper import WhisperModel

__all__ = [
    "DEFAULT_STT_SETTINGS",
    "KNOWN_HALLUCINATIONS",
    "SttSettings",
    "Transcript",
    "WhisperStt",
]

_log = logging.getLogger(__name__)

KNOWN_HALLUCINATIONS = frozenset(
    {
        "thank you",
        "thank you very much",
        "thanks for watching",
        "thank you for watching",
        "you",
        "bye",
        "okay",
        "oh",
        "so",
        "subtitles by the amaraorg community",
    }
)
"""Normalized texts Whisper tends to produce on silence or noise."""

_NORMALIZE = re.compile(r"[^a-z0-9 ]+")
_HOP = STT_SAMPLE_RATE // 100  # samples per 10 ms mel frame


class SttSettings(BaseModel):
    """Which Whisper model and how it decodes (defaults measured on a 2-core CPU)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str = Field("tiny.en", description="'tiny.en', 'base' or a model directory path")
    language: str | None = Field(
        "en", description="spoken language; always set for .en models (detection costs seconds)"
    )
    cpu_threads: int = Field(2, ge=1, le=64, description="CTranslate2 threads")
    compute_type: str = Field("int8", description="CTranslate2 compute type")
    beam_size: int = Field(1, ge=1, le=10, description="1 = greedy decoding")
    without_timestamps: bool = Field(True, description="skip timestamp tokens (faster)")
    temperatures: tuple[float, ...] = Field(
        (0.0,), min_length=1, description="decoding temperatures; later ones are fallbacks"
    )
    max_utterance: float = Field(30.0, gt=0, le=30, description="longest audio (s) decoded")
    no_speech_threshold: float = Field(0.6, gt=0, lt=1)
    log_prob_threshold: float = Field(-1.0, lt=0)
    hallucination_no_speech: float = Field(
        0.5, gt=0, lt=1, description="no-speech probability above which known hallucinations drop"
    )
    initial_prompt: str | None = Field(None, description="vocabulary hint for the decoder")
    encoder_window: float = Field(
        10.0, ge=1.0, le=30.0,
        description="audio (s) up to which an utterance is padded to this window, not 30 s",
    )
    encoder_padding: Literal["zeros", "silence"] = Field(
        "silence",
        description="pad to the window with zero log-mel features (faster-whisper) or by "
        "padding the audio with silence before the mel (Whisper's training input)",
    )


DEFAULT_STT_SETTINGS = SttSettings()


@dataclass(frozen=True, slots=True)
class Transcript:
    """What the user said in one utterance.

    Attributes:
        text: the kept segments' text, stripped.
        duration: seconds of audio decoded.
        no_speech_prob: highest no-speech probability among the kept segments.
        avg_logprob: mean token log probability of the kept segments.
        truncated: the audio was longer than ``max_utterance`` and was cut.
    """

    text: str
    duration: float
    no_speech_prob: float
    avg_logprob: float
    truncated: bool = False


class WhisperStt:
    """A faster-whisper transcriber sharing the process-wide model.

    Args:
        settings: model and decoding; :data:`DEFAULT_STT_SETTINGS` if ``None``.
        cache_dir: where ``base`` is reassembled (default cache if ``None``).
        tiny_en_module: module providing ``tiny.en``.
        base_modules: modules providing the ``base`` parts.
        scheduler: runs the decodes (on its ``stt`` resource, by the context's
            :class:`~voxflow_voice.scheduler.Work` ticket); a default-executor thread
            each if ``None``.
    """

    def __init__(
        self,
        settings: SttSettings | None = None,
        *,
        cache_dir: Path | None = None,
        tiny_en_module: str = DEFAULT_TINY_EN_MODULE,
        base_modules: tuple[str, str] = BASE_PART_MODULES,
        scheduler: ModelScheduler | None = None,
    ) -> None:
        if scheduler is not None and not isinstance(scheduler, ModelScheduler):
            raise TypeError(f"scheduler must be a ModelScheduler, got {type(scheduler).__name__}")
        self.scheduler = scheduler
        if settings is not None and not isinstance(settings, SttSettings):
            raise TypeError(f"settings must be an SttSettings, got {type(settings).__name__}")
        self.settings = settings if settings is not None else DEFAULT_STT_SETTINGS
        self.model_dir = find_whisper_model(
            self.settings.model,
            tiny_en_module=tiny_en_module,
            base_modules=base_modules,
            cache_dir=cache_dir,
        )
        self._model: WhisperModel = load_whisper_model(
            self.model_dir,
            cpu_threads=self.settings.cpu_threads,
            compute_type=self.settings.compute_type,
        )
        language = self.settings.language
        if language is None and not self._model.model.is_multilingual:
            language = "en"  # English-only models: never pay for language detection
        self._language = language

    async def transcribe(self, audio: AudioChunk | NDArray[Any]) -> Transcript | None:
        """Transcribe one utterance in a worker thread; ``None`` if it holds no words."""
        samples = self._samples(audio)
        if self.scheduler is not None:
            return await self.scheduler.run_on("stt", self._decode, samples)
        return await asyncio.to_thread(self._decode, samples)

    def transcribe_sync(self, audio: AudioChunk | NDArray[Any]) -> Transcript | None:
        """Blocking :meth:`transcribe`, for threads, scripts and benchmarks."""
        return self._decode(self._samples(audio))

    def _samples(self, audio: AudioChunk | NDArray[Any]) -> NDArray[np.float32]:
        if isinstance(audio, AudioChunk):
            if audio.sample_rate != STT_SAMPLE_RATE:
                raise ValueError(
                    f"audio must be {STT_SAMPLE_RATE} Hz mono, got {audio.sample_rate} Hz"
                )
            return audio.samples()
        array = np.asarray(audio, dtype=np.float32)
        if array.ndim != 1:
            raise ValueError(f"audio must be 1-D mono samples, got shape {array.shape}")
        if not np.isfinite(array).all():
            raise ValueError("audio must be finite: NaN or infinity found (Whisper hears nothing)")
        return array

    def _decode(self, samples: NDArray[np.float32]) -> Transcript | None:
        s = self.settings
        limit = round(s.max_utterance * STT_SAMPLE_RATE)
        truncated = samples.size > limit
        if truncated:
            _log.warning("utterance cut to max_utterance", extra={"seconds": s.max_utterance})
            samples = samples[:limit]
        if samples.size == 0:
            return None
        duration = samples.size / STT_SAMPLE_RATE
        frames = min(round(s.encoder_window * 100), 3000)  # 10 ms mel frames
        if frames >= 3000 or samples.size > frames * _HOP:
            return self._run_decoder(self._pad(samples, 3000), truncated, duration)
        _install_window_hook()
        _window.frames = frames
        try:
            transcript = self._run_decoder(self._pad(samples, frames), truncated, duration)
        finally:
            _window.frames = None
        if transcript is not None and _runs_away(transcript.text, duration):
            _log.warning(
                "windowed decode ran away; decoded again in the 30 s window",
                extra={"encoder_window": s.encoder_window, "words": len(transcript.text.split())},
            )
            return self._run_decoder(self._pad(samples, 3000), truncated, duration)
        return transcript

    def _pad(self, samples: NDArray[np.float32], frames: int) -> NDArray[np.float32]:
        """``samples`` silence-padded to ``frames`` mel frames if so configured."""
        size = frames * _HOP  # exactly `frames` frames of content: never padded again
        if self.settings.encoder_padding != "silence" or samples.size >= size:
            return samples
        return np.pad(samples, (0, size - samples.size))

    def _run_decoder(
        self, samples: NDArray[np.float32], truncated: bool, duration: float
    ) -> Transcript | None:
        s = self.settings
        segments, _info = self._model.transcribe(
            samples,
            language=self._language,
            beam_size=s.beam_size,
            best_of=1,
            temperature=list(s.temperatures),
            without_timestamps=s.without_timestamps,
            condition_on_previous_text=False,
            vad_filter=False,
            no_speech_threshold=None,  # applied below, with the segment's own scores
            log_prob_threshold=s.log_prob_threshold,
            initial_prompt=s.initial_prompt,
        )
        texts: list[str] = []
        no_speech = 0.0
        logprobs: list[float] = []
        for segment in segments:  # decoding happens here, in this (worker) thread
            if self._is_noise(segment.text, segment.no_speech_prob, segment.avg_logprob):
                continue
            texts.append(segment.text.strip())
            no_speech = max(no_speech, float(segment.no_speech_prob))
            logprobs.append(float(segment.avg_logprob))
        text = " ".join(t for t in texts if t)
        if not text:
            return None
        return Transcript(
            text=text,
            duration=duration,
            no_speech_prob=no_speech,
            avg_logprob=float(np.mean(logprobs)),
            truncated=truncated,
        )

    def _is_noise(self, text: str, no_speech_prob: float, avg_logprob: float) -> bool:
        s = self.settings
        if no_speech_prob > s.no_speech_threshold and avg_logprob < s.log_prob_threshold:
            return True
        normalized = " ".join(_NORMALIZE.sub("", text.lower()).split())
        if not normalized:
            return True
        return normalized in KNOWN_HALLUCINATIONS and no_speech_prob > s.hallucination_no_speech

    def __repr__(self) -> str:
        return f"WhisperStt(model={self.settings.model!r}, language={self._language!r})"


def _runs_away(text: str, duration: float) -> bool:
    """Whether a transcript loops: too many words, or one phrase said over again.

    Nobody speaks 6 words a second for long; a decode that loops ("the the the ...",
    a sentence over and over) produces tens to hundreds of words for a short turn, or
    repeats the whole utterance ("Set the volume to 40%. Set the volume to 40%.").
    """
    words = _NORMALIZE.sub("", text.lower()).split()
    if len(words) > _RUNAWAY_BASE_WORDS + _RUNAWAY_WORDS_PER_SECOND * duration:
        return True
    count = len(words)
    return any(
        count % period == 0 and words == words[:period] * (count // period)
        for period in range(2, count // 2 + 1)
    )


_RUNAWAY_BASE_WORDS = 4
_RUNAWAY_WORDS_PER_SECOND = 6.0

_window = threading.local()
"""The encoder window (mel frames) of the transcription running in this thread."""
_hook_lock = threading.Lock()


def _install_window_hook() -> None:
    """Let faster-whisper pad to this thread's ``encoder_window`` instead of 30 s.

    faster-whisper pads each window with the module-level ``pad_or_trim`` (length 3000
    frames, not configurable); it is wrapped once per process. The wrapper changes
    nothing outside a :class:`WhisperStt` decode (the thread-local is unset there) and
    never trims: features longer than the window keep the 30 s default.
    """
    # faster-whisper (~0.4 s, CTranslate2): loaded with the model
    import faster_whisper.transcribe as fw

    with _hook_lock:
        if getattr(fw.pad_or_trim, "voxflow_window", False):
            return
        original = fw.pad_or_trim

        def pad_or_trim(array: Any, length: int = 3000, *, axis: int = -1) -> Any:
            frames = getattr(_window, "frames", None)
            if frames is not None and array.shape[axis] <= frames:
                length = frames
            return original(array, length, axis=axis)

        pad_or_trim.voxflow_window = True  # type: ignore[attr-defined]
        fw.pad_or_trim = pad_or_trim
