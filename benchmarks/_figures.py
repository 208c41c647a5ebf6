"""How a benchmark reports a headline figure, so `voxflow bench` can gather one table.

``figure(name, value, unit)`` records the figure for ``voxflow bench`` (which sets
``VOXFLOW_BENCH_FIGURES`` to a file) and does nothing else: each script keeps printing
its own, fuller table.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

__all__ = ["figure"]


def figure(name: str, value: float, unit: str, *, target: str = "") -> None:
    """Record one figure (``target`` is a human note such as ``"<= 200"``)."""
    path = os.environ.get("VOXFLOW_BENCH_FIGURES")
    if not path:
        return
    record = {
        "benchmark": Path(sys.argv[0]).stem,
        "name": name,
        "value": value,
        "unit": unit,
        "target": target,
    }
    with open(path, "a", encoding="utf-8") as out:
        out.write(json.dumps(record) + "\n")
