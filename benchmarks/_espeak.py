"""A caller in a voice that is not the bundled one: espeak-ng (``apt-get install
espeak-ng``), for the benchmarks and the tests that speak through the session
(``adapters/tests/test_continuation_session.py`` and ``test_provisional_session.py`` load
this file: one helper, not a copy each)."""

from __future__ import annotations

import subprocess
import wave
from pathlib import Path

import numpy as np
from numpy.typing import NDArray
from voxflow_voice.audio import STT_SAMPLE_RATE, resample

__all__ = ["espeak"]


def espeak(folder: Path, text: str, voice: str = "en+f2", rate: int = 150
           ) -> NDArray[np.float32]:
    """``text`` said by espeak-ng's ``voice`` at ``rate`` words a minute, at 16 kHz, its
    silence before and after trimmed (``folder`` holds the file espeak-ng writes)."""
    out = folder / "say.wav"
    subprocess.run(["espeak-ng", "-v", voice, "-s", str(rate), "-w", str(out), text],
                   check=True, capture_output=True, timeout=60)
    with wave.open(str(out), "rb") as w:
        rate_hz = w.getframerate()
        pcm = np.frombuffer(w.readframes(w.getnframes()), np.int16)
    audio = resample(pcm.astype(np.float32) / 32768.0, rate_hz, STT_SAMPLE_RATE)
    loud = np.flatnonzero(np.abs(audio) >= 0.01)
    return audio[loud[0] : loud[-1] + 1].astype(np.float32)
