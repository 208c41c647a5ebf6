"""How fast this machine runs its models: their real-time factors.

A real-time factor (RTF) is compute seconds per second of audio: Whisper's decode per
second of the utterance, Piper's synthesis per second of speech, Silero's per second of
input. It is what a call's model work costs here, on this CPU, with these models.

* :meth:`VoiceEngines.warm_up <voxflow_voice.engines.VoiceEngines.warm_up>` (which every
  entry point runs once the engines are loaded) runs each model once on real speech and
  measures its **CPU** real-time factor (``time.process_time``: every thread of the
  process, Whisper's CTranslate2 threads too; nothing else runs yet):
  :class:`WarmUpRates`. Its work is a short sentence said by the TTS (its first, short
  sentence warms the model up untimed), that speech heard by a fresh VAD and
  transcribed by the STT after one untimed decode of 1 s of silence (a model's first
  run allocates): 0.7-0.8 s of CPU with tiny.en and the bundled voice here. Admission
  derives the cost of a call from it before any call was measured
  (:mod:`voxflow_adapters.hosting.call_cost`).
* :class:`ModelRates` keeps, from then on, each model's recent **wall** real-time
  factor: the built-in engines (``whisper``, ``piper``, ``silero``) record every job
  they run (its seconds, its audio's seconds). Under load it rises (the job waits for
  a core as it runs): ``GET /load`` shows it (:attr:`ModelRates.recent`).
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal

__all__ = ["MODELS", "RECENT_JOBS", "WARM_UP_TEXT", "Job", "Model", "ModelRates",
           "WarmUpRates", "timing"]

Model = Literal["stt", "tts", "vad"]
MODELS: tuple[Model, ...] = ("stt", "tts", "vad")
RECENT_JOBS = 64
"""Jobs per model the recent real-time factor is taken over (their seconds over their
audio's seconds)."""
WARM_UP_TEXT = "Hello. Can you tell me what is on my calendar this afternoon?"
"""What the warm-up says and hears: the first sentence warms the TTS up untimed; the
second, a question of about 3 s (``benchmarks/capacity.py``'s caller asks it), is
timed, then heard by the VAD and the STT."""


@dataclass(frozen=True, slots=True)
class WarmUpRates:
    """CPU real-time factors measured at warm-up (CPU seconds per second of audio).

    Attributes:
        stt: the STT's decode per second of the utterance.
        tts: the TTS's synthesis per second of speech.
        vad: the VAD per second of input.
        audio_seconds: the timed utterance's length.
        cpu_seconds: what the whole warm-up cost (the untimed runs included).
    """

    stt: float
    tts: float
    vad: float
    audio_seconds: float
    cpu_seconds: float


class ModelRates:
    """Each model's recent real-time factor, and the warm-up's (thread-safe).

    Args:
        recent: jobs per model the recent factor is taken over.
    """

    def __init__(self, recent: int = RECENT_JOBS) -> None:
        if isinstance(recent, bool) or not isinstance(recent, int) or not 1 <= recent <= 10_000:
            raise ValueError(f"recent must be an int in 1..10000, got {recent!r}")
        self._lock = threading.Lock()
        self._jobs: dict[Model, deque[tuple[float, float]]] = {
            m: deque(maxlen=recent) for m in MODELS}
        self.warmed_up: WarmUpRates | None = None
        """The warm-up's CPU factors (None before :func:`warm_up` ran)."""

    def record(self, model: Model, seconds: float, audio_seconds: float) -> None:
        """One job of ``model``: it ran ``seconds`` on ``audio_seconds`` of audio (a job
        without audio is not counted)."""
        if model not in MODELS:
            raise ValueError(f"model must be one of {MODELS}, got {model!r}")
        if not (0 <= seconds < math.inf and 0 <= audio_seconds < math.inf):
            raise ValueError(f"seconds and audio_seconds must be finite and >= 0, got "
                             f"{seconds!r} and {audio_seconds!r}")
        if audio_seconds > 0:
            with self._lock:
                self._jobs[model].append((float(seconds), float(audio_seconds)))

    def recent(self) -> dict[str, float]:
        """Each model's wall real-time factor over its recent jobs (a model with none
        is absent)."""
        with self._lock:
            jobs = {m: list(kept) for m, kept in self._jobs.items() if kept}
        return {m: sum(s for s, _ in kept) / sum(a for _, a in kept)
                for m, kept in jobs.items()}

    def __repr__(self) -> str:
        figures = ", ".join(f"{m} {rtf:.3f}" for m, rtf in self.recent().items())
        return f"ModelRates({figures or 'no job yet'})"


class Job:
    """One model job being timed (:func:`timing`): the seconds of audio it works on."""

    __slots__ = ("audio_seconds",)

    def __init__(self, audio_seconds: float) -> None:
        self.audio_seconds = audio_seconds

    def __repr__(self) -> str:
        return f"Job(audio_seconds={self.audio_seconds!r})"


@contextmanager
def timing(rates: ModelRates | None, model: Model, audio_seconds: float = 0.0) -> Iterator[Job]:
    """Time the block as one job of ``model`` and record it in ``rates`` (nothing when
    None), on ``audio_seconds`` of audio, or the :attr:`Job.audio_seconds` the block set
    (a figure known once the work is done: set after it, a job that raised is not
    counted). A job that raised after its audio was given is recorded too::

        with timing(self.rates, "tts") as job:
            samples = ...
            job.audio_seconds = samples.size / self.sample_rate
    """
    job = Job(audio_seconds)
    if rates is None:
        yield job
        return
    begun = time.perf_counter()
    try:
        yield job
    finally:
        rates.record(model, time.perf_counter() - begun, job.audio_seconds)
