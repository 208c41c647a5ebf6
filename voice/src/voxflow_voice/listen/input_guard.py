"""The audio boundary: every inbound frame is validated before anything listens to it.

Microphone audio comes from outside the process (a sound card driver, a browser's
decoder, a test script), so a transport hands each raw frame to an :class:`InputGuard`
and passes on only what it returns. The guard checks, in this order:

* the sample rate: an ``int`` (not a ``bool``) in [:data:`MIN_INPUT_RATE`,
  :data:`MAX_INPUT_RATE`];
* the channel count: an ``int`` in [1, :data:`MAX_INPUT_CHANNELS`];
* the samples: a numpy array of ``int16`` (s16) or ``float32``/``float64`` (full scale
  ±1), or ``bytes`` of s16le; 1-D interleaved or 2-D ``(frames, channels)``; at most
  :data:`MAX_FRAME_SECONDS` long;
* the values: a float frame with any NaN or infinity is *zeroed* (replaced by silence
  of the same length, so the stream's timeline is kept); values beyond ±1 are clipped.

A frame that fails any other check is *dropped*. Both are counted
(:meth:`InputGuard.statistics`, exposed by every transport's statistics) and logged once
per problem, never raised into the audio thread. What passes is converted to 16 kHz mono
s16 (:class:`~voxflow_voice.audio.InputConverter`), so a NaN can never reach the VAD's
recurrent state or the STT: Silero's LSTM carries a NaN forever (noise then scores as
speech) and Whisper returns nothing for an utterance that holds one.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..audio import STT_SAMPLE_RATE, AudioChunk, InputConverter

__all__ = [
    "MAX_FRAME_SECONDS",
    "MAX_INPUT_CHANNELS",
    "MAX_INPUT_RATE",
    "MIN_INPUT_RATE",
    "InputGuard",
    "InputStatistics",
]

logger = logging.getLogger(__name__)

MIN_INPUT_RATE = 8_000
"""The lowest microphone sample rate accepted (telephone audio)."""

MAX_INPUT_RATE = 192_000
"""The highest microphone sample rate accepted."""

MAX_INPUT_CHANNELS = 8
"""The most interleaved channels one input frame may carry."""

MAX_FRAME_SECONDS = 2.0
"""The longest single input frame accepted (devices deliver milliseconds at a time)."""

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
_INT16 = np.dtype(np.int16)
_NUMBERS = re.compile(r"\d+(?:\.\d+)?")


@dataclass(frozen=True, slots=True)
class InputStatistics:
    """What an :class:`InputGuard` let through and what it stopped.

    Attributes:
        frames: frames offered.
        dropped: frames refused outright (type, dtype, shape, rate, channels, size).
        zeroed: float frames holding NaN/infinity, passed on as silence.
        last_problem: why the latest bad frame was bad (None if there was none).
    """

    frames: int = 0
    dropped: int = 0
    zeroed: int = 0
    last_problem: str | None = None

    @property
    def rejected(self) -> int:
        """Frames that did not pass unchanged (dropped + zeroed)."""
        return self.dropped + self.zeroed


class _Bad(Exception):
    """A frame that must be dropped (internal)."""


def _int_in(value: Any, low: int, high: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise _Bad(f"{what} must be an int, got {type(value).__name__}")
    if not low <= int(value) <= high:
        raise _Bad(f"{what} {int(value)} is outside [{low}, {high}]")
    return int(value)


def _samples(value: Any, channels: int) -> NDArray[Any]:
    if isinstance(value, bytes | bytearray | memoryview):
        if len(value) % 2:
            raise _Bad(f"s16le bytes must hold whole samples, got {len(value)} bytes")
        value = np.frombuffer(value, dtype="<i2")
    if not isinstance(value, np.ndarray):
        raise _Bad(f"samples must be a numpy array or bytes, got {type(value).__name__}")
    if value.dtype != _INT16 and value.dtype not in _FLOATS:
        raise _Bad(f"samples must be int16, float32 or float64, got {value.dtype}")
    if value.ndim == 2 and value.shape[1] == channels:
        return value.reshape(-1)  # (frames, channels) → interleaved
    if value.ndim != 1:
        raise _Bad(f"samples must be 1-D or (frames, {channels}), got shape {value.shape}")
    if value.size % channels:
        raise _Bad(f"{value.size} samples do not divide into {channels} channels")
    return value


class InputGuard:
    """Validates one inbound stream frame by frame and converts it to 16 kHz mono.

    One guard per input stream (it keeps the resampler state of
    :class:`~voxflow_voice.audio.InputConverter`). Safe to call from the event loop only.

    Args:
        out_rate: the rate of the chunks it returns (16 kHz for VAD and STT).
    """

    def __init__(self, out_rate: int = STT_SAMPLE_RATE) -> None:
        self._converter = InputConverter(out_rate)
        self._frames = 0
        self._dropped = 0
        self._zeroed = 0
        self._last: str | None = None
        self._logged: set[str] = set()

    def convert(
        self, samples: Any, sample_rate: Any, channels: Any = 1, *, muted: bool = False
    ) -> AudioChunk | None:
        """One raw frame in; the 16 kHz mono chunk to pass on, or None (dropped).

        Args:
            samples: the frame (see the module docstring for what is accepted).
            sample_rate: its rate.
            channels: interleaved channels in it.
            muted: replace the audio with silence of the same length (after the checks).
        """
        self._frames += 1
        try:
            rate = _int_in(sample_rate, MIN_INPUT_RATE, MAX_INPUT_RATE, "sample_rate")
            count = _int_in(channels, 1, MAX_INPUT_CHANNELS, "channels")
            raw = _samples(samples, count)
            if raw.size > MAX_FRAME_SECONDS * rate * count:
                raise _Bad(f"a frame of {raw.size / count / rate:.1f} s is too long")
        except _Bad as bad:
            self._dropped += 1
            self._note(str(bad))
            return None
        if raw.dtype == _INT16:
            mono = raw.astype(np.float32) / np.float32(32768.0)
        else:
            mono = raw.astype(np.float32)
            if not np.isfinite(mono).all():
                self._zeroed += 1
                self._note("a float frame held NaN or infinity: passed on as silence")
                mono = np.zeros_like(mono)
            else:
                np.clip(mono, -1.0, 1.0, out=mono)
        if count > 1:
            mono = mono.reshape(-1, count).mean(axis=1, dtype=np.float32)
        if muted:
            mono = np.zeros_like(mono)
        return self._converter.convert_float(mono, rate)

    def convert_chunk(self, chunk: Any) -> AudioChunk | None:
        """A chunk from a transport in; at ``out_rate`` it passes as is, else converted.

        For a consumer of an :class:`~voxflow_voice.transport.AudioTransport` that may
        not validate its own frames: anything but an :class:`AudioChunk` is dropped.
        """
        if not isinstance(chunk, AudioChunk):
            self._frames += 1
            self._dropped += 1
            self._note(f"expected an AudioChunk, got {type(chunk).__name__}")
            return None
        if chunk.sample_rate == self._converter.out_rate:
            self._frames += 1
            return chunk
        return self.convert(chunk.pcm, chunk.sample_rate)

    def flush(self) -> AudioChunk:
        """End of input: the samples the resampler still holds."""
        return self._converter.flush()

    @property
    def position(self) -> int:
        """16 kHz samples passed on so far."""
        return self._converter.position

    def statistics(self) -> InputStatistics:
        """Counters of the stream so far."""
        return InputStatistics(self._frames, self._dropped, self._zeroed, self._last)

    def _note(self, problem: str) -> None:
        self._last = problem
        key = _NUMBERS.sub("#", problem)  # the kind: the problem without its numbers
        if key not in self._logged:  # once per kind of problem, not per frame
            self._logged.add(key)
            logger.warning("bad input audio frame: %s", problem)

    def __repr__(self) -> str:
        return (
            f"InputGuard(frames={self._frames}, dropped={self._dropped}, "
            f"zeroed={self._zeroed})"
        )
