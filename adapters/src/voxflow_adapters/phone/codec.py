"""G.711 μ-law at 8 kHz both ways, with no per-frame array allocation in the hot path.

* :class:`MulawDecoder`: a carrier's 20 ms of μ-law (160 bytes) → 16 kHz s16 (320
  samples) for VAD and STT: one 256-entry lookup table (``np.take`` into a preallocated
  buffer, with ``intp`` indices: any other index type makes it copy) and a fixed 2x
  polyphase interpolator (a 16-tap Kaiser-windowed sinc, 1 ms of delay, one in-place
  multiply-add per tap) whose history and output live in preallocated buffers; the only
  new array-sized object per frame is the ``bytes`` of the
  :class:`~voxflow_voice.audio.AudioChunk` handed on (measured: ~30 µs a frame).
* :class:`MulawEncoder`: 8 kHz float samples → μ-law bytes through a 65 536-entry table
  indexed by the 16-bit sample (again into preallocated buffers).
* :func:`mulaw_decode` / :func:`mulaw_encode`: the same tables for whole signals.

The tables follow ITU-T G.711 (bias 0x84, clip 32 635, bits inverted on the wire).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "MULAW_RATE",
    "MulawDecoder",
    "MulawEncoder",
    "mulaw_decode",
    "mulaw_encode",
]

MULAW_RATE = 8_000
"""The rate of G.711 telephone audio."""

_BIAS = 0x84
_CLIP = 32_635


def _decode_table() -> NDArray[np.int16]:
    codes = ~np.arange(256, dtype=np.int32) & 0xFF
    sign = codes & 0x80
    exponent = (codes >> 4) & 0x07
    mantissa = codes & 0x0F
    magnitude = (((mantissa << 3) + _BIAS) << exponent) - _BIAS
    return np.where(sign != 0, -magnitude, magnitude).astype(np.int16)


def _encode_table() -> NDArray[np.uint8]:
    samples = np.arange(-32768, 32768, dtype=np.int32)
    sign = np.where(samples < 0, 0x80, 0)
    magnitude = np.minimum(np.abs(samples), _CLIP) + _BIAS
    exponent = np.floor(np.log2(magnitude)).astype(np.int32) - 7
    exponent = np.clip(exponent, 0, 7)
    mantissa = (magnitude >> (exponent + 3)) & 0x0F
    codes = ~(sign | (exponent << 4) | mantissa) & 0xFF
    table = np.empty(65536, np.uint8)
    table[samples.astype(np.uint16)] = codes.astype(np.uint8)  # indexed by the s16 bits
    return table


DECODE_TABLE = _decode_table()
ENCODE_TABLE = _encode_table()
_DECODE_FLOAT = (DECODE_TABLE.astype(np.float32) / np.float32(32768.0))


def mulaw_decode(data: bytes) -> NDArray[np.int16]:
    """μ-law bytes → s16 samples (a new array; for whole signals, not the hot path)."""
    return DECODE_TABLE[np.frombuffer(data, np.uint8)]


def mulaw_encode(samples: NDArray[Any]) -> bytes:
    """s16 samples (or floats in [-1, 1], clipped) → μ-law bytes."""
    array = np.asarray(samples)
    if array.dtype != np.int16:
        array = np.clip(np.rint(np.asarray(array, np.float64) * 32768.0), -32768, 32767
                        ).astype(np.int16)
    return bytes(ENCODE_TABLE[array.view(np.uint16)])


def _interpolator(half: int) -> NDArray[np.float32]:
    """The odd phase of a 2x interpolator: sinc at ±0.5, ±1.5, ... input samples."""
    offsets = np.arange(2 * half) - (half - 0.5)
    taps = np.sinc(offsets) * np.kaiser(2 * half, 6.0)
    normalized: NDArray[np.float32] = (taps / taps.sum()).astype(np.float32)
    return normalized


class MulawDecoder:
    """A call's inbound μ-law stream → 16 kHz s16 bytes, frame by frame (one per call).

    Args:
        max_frame: the most μ-law bytes one :meth:`decode` takes (the buffers' size).
    """

    HALF = 8
    """Taps on each side of an interpolated sample (delay: ``HALF`` input samples)."""

    def __init__(self, max_frame: int = 4000) -> None:
        if isinstance(max_frame, bool) or not isinstance(max_frame, int) or max_frame < 1:
            raise ValueError(f"max_frame must be an int >= 1, got {max_frame!r}")
        self.max_frame = max_frame
        self._taps = _interpolator(self.HALF)
        keep = 2 * self.HALF - 1
        self._keep = keep
        self._history = np.zeros(keep + max_frame, np.float32)  # the last `keep`, then new
        self._codes = np.zeros(max_frame, np.intp)
        self._odd = np.zeros(max_frame, np.float32)
        self._term = np.zeros(max_frame, np.float32)
        self._out = np.zeros(2 * max_frame, np.float32)
        self._pcm = np.zeros(2 * max_frame, np.int16)
        self.frames = 0

    def decode(self, data: bytes) -> bytes:
        """The next ``len(data)`` μ-law bytes → ``2 * len(data)`` samples at 16 kHz (s16le).

        Raises:
            ValueError: more than ``max_frame`` bytes.
        """
        n = len(data)
        if n > self.max_frame:
            raise ValueError(f"a frame of {n} bytes is longer than {self.max_frame}")
        if n == 0:
            return b""
        keep = self._keep
        codes = self._codes[:n]  # (intp: np.take copies any other index type)
        np.copyto(codes, np.frombuffer(data, np.uint8), casting="safe")
        window = self._history[: keep + n]
        np.take(_DECODE_FLOAT, codes, out=window[keep:], mode="clip")  # (no copy)
        # odd outputs: between input samples HALF-1 and HALF of each 2*HALF window
        odd = self._odd[:n]
        term = self._term[:n]
        np.multiply(window[:n], self._taps[0], out=odd)
        for k in range(1, 2 * self.HALF):
            np.multiply(window[k : k + n], self._taps[k], out=term)
            np.add(odd, term, out=odd)
        out = self._out[: 2 * n]
        out[0::2] = window[self.HALF - 1 : self.HALF - 1 + n]
        out[1::2] = odd
        np.multiply(out, 32768.0, out=out)
        np.rint(out, out=out)
        np.clip(out, -32768.0, 32767.0, out=out)
        pcm = self._pcm[: 2 * n]
        np.copyto(pcm, out, casting="unsafe")
        if n >= keep:
            window[:keep] = window[n : n + keep]
        else:  # (a tiny frame: overlapping ranges, numpy copies them safely)
            window[:keep] = window[n : n + keep].copy()
        self.frames += 1
        return pcm.tobytes()


class MulawEncoder:
    """8 kHz float samples → μ-law bytes, through preallocated buffers (one per call).

    Args:
        max_frame: the most samples one :meth:`encode` takes.
    """

    def __init__(self, max_frame: int = 4000) -> None:
        if isinstance(max_frame, bool) or not isinstance(max_frame, int) or max_frame < 1:
            raise ValueError(f"max_frame must be an int >= 1, got {max_frame!r}")
        self.max_frame = max_frame
        self._scaled = np.zeros(max_frame, np.float32)
        self._ints = np.zeros(max_frame, np.int16)
        self._index = np.zeros(max_frame, np.intp)  # (np.take copies any other index type)
        self._codes = np.zeros(max_frame, np.uint8)

    def encode(self, samples: NDArray[np.float32]) -> bytes:
        """Float samples in [-1, 1] (clipped) → as many μ-law bytes.

        Raises:
            ValueError: more than ``max_frame`` samples.
        """
        n = samples.shape[0]
        if n > self.max_frame:
            raise ValueError(f"{n} samples are more than {self.max_frame}")
        scaled = self._scaled[:n]
        np.multiply(samples, 32768.0, out=scaled)
        np.rint(scaled, out=scaled)
        np.clip(scaled, -32768.0, 32767.0, out=scaled)
        ints = self._ints[:n]
        np.copyto(ints, scaled, casting="unsafe")
        index = self._index[:n]
        np.copyto(index, ints.view(np.uint16), casting="safe")
        codes = self._codes[:n]
        np.take(ENCODE_TABLE, index, out=codes, mode="clip")  # (no copy)
        return codes.tobytes()
