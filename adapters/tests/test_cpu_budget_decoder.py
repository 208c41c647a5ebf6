"""``benchmarks/cpu_budget.py`` times the receive path's Opus decoder, and no longer
counts a 48 → 16 kHz decimator in a WebRTC call (the decoder gives 16 kHz).

Since 99cfcc8 the receive path decodes with :class:`MonoOpusDecoder`; the budget's
"Opus decode (input)" figure timed aiortc's stereo ``OpusDecoder``, which no call uses
any more (the mistake bc6945b fixed for the encoder). The figure itself is a CPU time
the benchmark prints; this only checks which decoder it times.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest
from aiortc.jitterbuffer import JitterFrame
from voxflow_adapters.webrtc.opus import DecodedFrame, MonoOpusDecoder

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def test_cpu_budget_times_the_decoder_the_receive_path_uses(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    budget = importlib.import_module("cpu_budget")
    decode = MonoOpusDecoder.decode
    packets: list[int] = []

    def counted(self: MonoOpusDecoder, encoded: JitterFrame) -> list[DecodedFrame]:
        packets.append(encoded.timestamp)
        return decode(self, encoded)

    monkeypatch.setattr(MonoOpusDecoder, "decode", counted)
    encoding, decoding = budget._opus_ms_per_s(0.2, 1)
    assert packets == [i * 960 for i in range(10)]  # each 20 ms packet of the 0.2 s tone
    assert encoding > 0 and decoding > 0


def test_cpu_budget_counts_no_decimator_in_a_webrtc_call() -> None:
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    budget = importlib.import_module("cpu_budget")
    fields = budget.Budget.__dataclass_fields__
    measured = budget.Budget(**{name: 1.0 for name in fields})
    names = [name for name, _ in budget.parts(measured, webrtc=True)]
    assert "Opus decode (input)" in names
    assert not [name for name in names if "decimat" in name]
