"""A sound as the phone path hears it: over an 8 kHz μ-law line, then the call's own
decoder (for the benchmarks that compare the phone path with the wideband one)."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray
from voxflow_adapters.phone.codec import MULAW_RATE, MulawDecoder, mulaw_encode
from voxflow_voice.audio import STT_SAMPLE_RATE, resample

__all__ = ["line"]


def line(audio: NDArray[np.float32]) -> NDArray[np.float32]:
    """``audio`` (16 kHz) resampled to 8 kHz, μ-law encoded, and decoded to 16 kHz by
    :class:`~voxflow_adapters.phone.codec.MulawDecoder` 20 ms at a time, as a call does."""
    narrow = np.clip(resample(audio, STT_SAMPLE_RATE, MULAW_RATE), -1.0, 1.0)
    data = mulaw_encode(narrow)
    decoder = MulawDecoder()
    out = [np.frombuffer(decoder.decode(data[i : i + 160]), np.int16)
           for i in range(0, len(data), 160)]
    return (np.concatenate(out).astype(np.float32) / 32768.0)[: audio.size]
