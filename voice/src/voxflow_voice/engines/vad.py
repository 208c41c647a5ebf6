"""Voice activity detection: per-frame speech probabilities at 16 kHz.

Two detectors implement :class:`VoiceActivityDetector`:

* :class:`SileroVad` (the default): Silero VAD v6, the ONNX model bundled in faster-whisper,
  run frame by frame with its recurrent LSTM state (``h``, ``c``: ``(1, 1, 128)``) and the
  64 samples of context that precede each 512-sample frame, exactly as faster-whisper's
  own ``SileroVADModel`` feeds it (there all frames go in one call; the model's first
  input axis is the frame sequence, so streaming with the carried state gives the same
  probabilities). Robust to noise; about a hundred microseconds per 32 ms frame.
* :class:`EnergyVad`: the frame's RMS level against a threshold in dBFS, squashed into a
  probability. No model and nearly free, but any loud sound is "speech": use it for
  quiet rooms, tests without models or as a cheap pre-gate, not in noise.

:class:`VadStream` cuts an arbitrary stream of samples into frames for a detector.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np
from numpy.typing import NDArray
from pydantic import BaseModel, ConfigDict, Field

from ..audio import STT_SAMPLE_RATE
from .models import load_silero_session
from .rates import ModelRates, timing
from .registry import EngineContext, EngineFactory

if TYPE_CHECKING:
    import onnxruntime

__all__ = [
    "ENERGY_ENGINE",
    "FRAME_SAMPLES",
    "SILERO_ENGINE",
    "EnergyOptions",
    "EnergyVad",
    "SileroVad",
    "VadStream",
    "VoiceActivityDetector",
]

FRAME_SAMPLES = 512
"""Samples per VAD frame at 16 kHz (32 ms), the frame size Silero v6 is trained for."""

_CONTEXT_SAMPLES = 64
_STATE_SHAPE = (1, 1, 128)


@runtime_checkable
class VoiceActivityDetector(Protocol):
    """A streaming detector: frames in, one speech probability per frame out.

    A detector holds the state of *one* stream; use one per input stream (models behind
    it are shared). Frames are float32 mono at :attr:`sample_rate`.
    """

    @property
    def sample_rate(self) -> int:
        """Rate the frames must have."""
        ...

    @property
    def frame_samples(self) -> int:
        """Samples per frame."""
        ...

    def process_frames(self, frames: NDArray[np.float32]) -> NDArray[np.float32]:
        """Speech probabilities in [0, 1] for consecutive ``(n, frame_samples)`` frames."""
        ...

    def reset(self) -> None:
        """Forget the stream (state, context): the next frame starts a new stream."""
        ...


def _check_frames(frames: NDArray[Any], frame_samples: int) -> NDArray[np.float32]:
    array = np.asarray(frames, dtype=np.float32)
    if array.ndim == 1 and array.size == frame_samples:
        array = array.reshape(1, frame_samples)
    if array.ndim != 2 or array.shape[1] != frame_samples:
        raise ValueError(
            f"frames must have shape (n, {frame_samples}), got {tuple(array.shape)}"
        )
    _check_finite(array)
    return array


def _check_finite(array: NDArray[np.float32]) -> None:
    # A NaN would live on in Silero's recurrent state: every later frame, noise
    # included, would score as speech. Refuse it before anything changes.
    if not np.isfinite(array).all():
        raise ValueError("frames must be finite: NaN or infinity found (nothing was scored)")


class SileroVad:
    """Silero VAD v6 on onnxruntime, streamed with its recurrent state.

    Args:
        session: an onnxruntime session of ``silero_vad_v6.onnx``; the process-wide
            shared one (:func:`voxflow_voice.engines.models.load_silero_session`) if ``None``.
        model_path: the model file, when ``session`` is ``None``; the bundled one if
            ``None``.
        rates: where each run's seconds and its frames' are recorded (``vad``).
    """

    def __init__(
        self,
        session: onnxruntime.InferenceSession | None = None,
        *,
        model_path: Path | None = None,
        rates: ModelRates | None = None,
    ) -> None:
        if rates is not None and not isinstance(rates, ModelRates):
            raise TypeError(f"rates must be ModelRates, got {type(rates).__name__}")
        self.rates = rates
        if session is None:
            session = load_silero_session(model_path)
        self._session = session
        self._h = np.zeros(_STATE_SHAPE, dtype=np.float32)
        self._c = np.zeros(_STATE_SHAPE, dtype=np.float32)
        self._context = np.zeros(_CONTEXT_SAMPLES, dtype=np.float32)
        self._frames = 0

    @property
    def sample_rate(self) -> int:
        """16 kHz."""
        return STT_SAMPLE_RATE

    @property
    def frame_samples(self) -> int:
        """512 samples (32 ms)."""
        return FRAME_SAMPLES

    def process_frames(self, frames: NDArray[np.float32]) -> NDArray[np.float32]:
        """Speech probabilities for consecutive frames; carries state to the next call."""
        batch = _check_frames(frames, FRAME_SAMPLES)
        count = batch.shape[0]
        if count == 0:
            return np.zeros(0, dtype=np.float32)
        # Each frame is preceded by the last 64 samples of the frame before it.
        contexts = np.empty((count, _CONTEXT_SAMPLES), dtype=np.float32)
        contexts[0] = self._context
        if count > 1:
            contexts[1:] = batch[:-1, -_CONTEXT_SAMPLES:]
        model_input = np.concatenate([contexts, batch], axis=1)
        with timing(self.rates, "vad") as job:
            probs, self._h, self._c = self._session.run(
                None, {"input": model_input, "h": self._h, "c": self._c}
            )
            job.audio_seconds = count * FRAME_SAMPLES / STT_SAMPLE_RATE
        self._context = batch[-1, -_CONTEXT_SAMPLES:].copy()
        self._frames += count
        return np.asarray(probs, dtype=np.float32).reshape(count)

    def reset(self) -> None:
        """Zero the LSTM state and the context."""
        self._h = np.zeros(_STATE_SHAPE, dtype=np.float32)
        self._c = np.zeros(_STATE_SHAPE, dtype=np.float32)
        self._context = np.zeros(_CONTEXT_SAMPLES, dtype=np.float32)
        self._frames = 0

    def __repr__(self) -> str:
        return f"SileroVad(frames={self._frames})"


class EnergyVad:
    """Frame loudness as a speech probability: a logistic around ``threshold_db``.

    ``probability = 1 / (1 + exp(-(rms_dbfs - threshold_db) / width_db))``, so a frame at
    the threshold scores 0.5. It cannot tell speech from other sound.

    Args:
        threshold_db: RMS level (dBFS) that scores 0.5; ``-40`` suits a close microphone.
        width_db: dB over which the probability goes from about 0.27 to 0.73 (> 0).
        frame_samples: samples per frame (> 0).
        sample_rate: the frames' rate (> 0).
    """

    def __init__(
        self,
        *,
        threshold_db: float = -40.0,
        width_db: float = 3.0,
        frame_samples: int = FRAME_SAMPLES,
        sample_rate: int = STT_SAMPLE_RATE,
    ) -> None:
        if not math.isfinite(threshold_db) or threshold_db > 0:
            raise ValueError(f"threshold_db must be a finite level <= 0 dBFS, got {threshold_db}")
        if not width_db > 0:
            raise ValueError(f"width_db must be > 0, got {width_db}")
        if frame_samples <= 0:
            raise ValueError(f"frame_samples must be > 0, got {frame_samples}")
        if sample_rate <= 0:
            raise ValueError(f"sample_rate must be > 0, got {sample_rate}")
        self.threshold_db = threshold_db
        self.width_db = width_db
        self._frame_samples = frame_samples
        self._sample_rate = sample_rate

    @property
    def sample_rate(self) -> int:
        """Rate the frames must have."""
        return self._sample_rate

    @property
    def frame_samples(self) -> int:
        """Samples per frame."""
        return self._frame_samples

    def process_frames(self, frames: NDArray[np.float32]) -> NDArray[np.float32]:
        """Speech probabilities from each frame's RMS level."""
        batch = _check_frames(frames, self._frame_samples).astype(np.float64)
        rms = np.sqrt(np.mean(batch * batch, axis=1))
        level = 20.0 * np.log10(np.maximum(rms, 1e-10))
        z = np.clip((level - self.threshold_db) / self.width_db, -60.0, 60.0)
        probs: NDArray[np.float32] = (1.0 / (1.0 + np.exp(-z))).astype(np.float32)
        return probs

    def reset(self) -> None:
        """Nothing to forget: every frame is judged alone."""

    def __repr__(self) -> str:
        return f"EnergyVad(threshold_db={self.threshold_db}, width_db={self.width_db})"


class VadStream:
    """Feeds an arbitrary stream of samples to a detector frame by frame.

    Leftover samples that do not fill a frame wait for the next :meth:`push`, so chunk
    boundaries never change the result.
    """

    def __init__(self, detector: VoiceActivityDetector) -> None:
        if not isinstance(detector, VoiceActivityDetector):
            raise TypeError(f"detector must be a VoiceActivityDetector, got {detector!r}")
        self.detector = detector
        self._pending = np.zeros(0, dtype=np.float32)
        self._frames_done = 0

    @property
    def frames_done(self) -> int:
        """Frames scored so far."""
        return self._frames_done

    def push(self, samples: NDArray[Any]) -> tuple[NDArray[np.float32], NDArray[np.float32]]:
        """Add samples; score every frame that is now complete.

        Raises:
            ValueError: ``samples`` is not 1-D or holds NaN/infinity (nothing changed).

        Returns:
            ``(frames, probabilities)``: the completed ``(n, frame_samples)`` frames and
            their ``n`` speech probabilities (``n`` may be 0).
        """
        size = self.detector.frame_samples
        data = np.asarray(samples, dtype=np.float32)
        if data.ndim != 1:
            raise ValueError(f"samples must be mono 1-D, got shape {data.shape}")
        _check_finite(data)
        if self._pending.size:
            data = np.concatenate([self._pending, data])
        count = data.size // size
        self._pending = data[count * size :].copy()
        frames = data[: count * size].reshape(count, size)
        if count == 0:
            return frames, np.zeros(0, dtype=np.float32)
        probs = self.detector.process_frames(frames)
        self._frames_done += count
        return frames, probs

    def reset(self) -> None:
        """Drop buffered samples and the detector's state."""
        self._pending = np.zeros(0, dtype=np.float32)
        self._frames_done = 0
        self.detector.reset()


def _silero(options: None, context: EngineContext) -> SileroVad:
    return SileroVad(rates=context.rates)  # the ONNX session is shared: the first one loads it


class EnergyOptions(BaseModel):
    """The options of the ``energy`` engine (:class:`EnergyVad`)."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    threshold_db: float = Field(-40.0, le=0, description="RMS level (dBFS) that scores 0.5")
    width_db: float = Field(3.0, gt=0, le=60, description="dB from about 0.27 to 0.73")


def _energy(options: EnergyOptions, context: EngineContext) -> EnergyVad:
    return EnergyVad(threshold_db=options.threshold_db, width_db=options.width_db)


SILERO_ENGINE: EngineFactory[SileroVad] = EngineFactory(
    "vad", _silero, summary="Silero VAD v6 (onnxruntime), robust to noise",
    models="silero_vad_v6.onnx inside faster-whisper",
)
"""``silero``: :class:`SileroVad`; it takes no options."""

ENERGY_ENGINE: EngineFactory[EnergyVad] = EngineFactory(
    "vad", _energy, options=EnergyOptions, main_option="threshold_db",
    summary="loudness alone (any loud sound is speech): quiet rooms, tests",
    models="none",
)
"""``energy``: :class:`EnergyVad` (``energy:-35``, ``energy:threshold_db=-35,width_db=4``)."""
