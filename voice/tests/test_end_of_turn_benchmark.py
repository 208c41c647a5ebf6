"""``benchmarks/end_of_turn.py --v2v`` says how many of its turns were heard as each
transcript (it printed the set of them: one mishearing in eight looked like eight)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def test_the_v2v_line_counts_the_turns_heard_as_each_transcript() -> None:
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    v2v = importlib.import_module("_eot_v2v")  # as end_of_turn.py imports it
    heard = ["What is the weather?", "Pairs.", "What is the weather?", "What is the weather?"]
    assert v2v.transcript_counts(heard) == "'What is the weather?' x3, 'Pairs.' x1"
    assert v2v.transcript_counts([]) == ""
