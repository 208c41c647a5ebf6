"""``benchmarks/cpu_budget.py`` times the reply track's Opus encoder.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def _benchmark(name: str) -> ModuleType:
    """A benchmark module, imported as its scripts import it (their folder on the path)."""
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    return importlib.import_module(name)


def test_cpu_budget_times_the_encoder_the_reply_track_uses(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The reply track encodes with MonoOpusEncoder (250f616); cpu_budget.py's Opus
    figure timed aiortc's stereo encoder, which no call uses any more."""
    from voxflow_adapters.webrtc.opus import MonoOpusEncoder

    budget = _benchmark("cpu_budget")
    encode = MonoOpusEncoder.encode
    frames: list[int] = []

    def counted(self: MonoOpusEncoder, pcm: bytes, *, silent: bool = False) -> bytes:
        frames.append(len(pcm))
        return encode(self, pcm, silent=silent)

    monkeypatch.setattr(MonoOpusEncoder, "encode", counted)
    encoding, decoding = budget._opus_ms_per_s(0.2, 1)
    assert frames == [1920] * 10  # each 20 ms frame of the 0.2 s tone, mono s16
    assert encoding > 0 and decoding > 0
