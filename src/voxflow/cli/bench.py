"""``voxflow bench``: run the scripts under ``benchmarks/`` and gather their headline figures.

Each script records figures with ``benchmarks/_figures.py``'s ``figure(name, value,
unit, target=...)``; this runner gives every script a file to append them to, prints a
progress line per script, and judges each figure against its target (``<= 0.3``,
``< 5``, ``0``; a target it cannot read, such as ``flat``, is left unjudged).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

__all__ = [
    "NOT_IN_A_CHECKOUT",
    "BenchRun",
    "benchmark_scripts",
    "default_benchmark_dir",
    "meets_target",
    "run_bench",
]

_TARGET = re.compile(r"^\s*(<=|>=|<|>|=|==)?\s*(-?\d+(?:\.\d+)?)\b")


NOT_IN_A_CHECKOUT = (
    "the benchmarks live in the voxflow source checkout (its benchmarks/ folder), not in "
    "the installed package: run voxflow bench from a checkout (git clone the voxflow "
    "repository), or point --dir at its benchmarks/ folder"
)
"""What ``voxflow bench`` says when it finds no benchmarks (an install from wheels)."""


def _benchmarks_in(folder: Path) -> Path | None:
    found = folder / "benchmarks"
    return found if (found / "_figures.py").is_file() else None


def default_benchmark_dir(
    cwd: Path | None = None, package_file: Path | None = None
) -> Path | None:
    """The ``benchmarks/`` folder ``voxflow bench`` runs: that of the current directory,
    else voxflow's own (``_figures.py`` in it) in a folder above it (anywhere inside a
    checkout) or above this package (an editable install); None when there is none
    (installed from wheels: the benchmarks are not shipped).

    Args:
        cwd: where to look first (the current directory if None).
        package_file: a file of this package (this module if None).
    """
    here = (cwd if cwd is not None else Path.cwd()).resolve()
    if (here / "benchmarks").is_dir():  # ./benchmarks, whatever it holds
        return here / "benchmarks"
    source = (package_file if package_file is not None else Path(__file__)).resolve()
    for folder in (*here.parents, *source.parents):  # voxflow's own: _figures.py in it
        found = _benchmarks_in(folder)
        if found is not None:
            return found
    return None


def benchmark_scripts(folder: Path) -> list[Path]:
    """The benchmark scripts of ``folder`` (``*.py`` not starting with ``_``), by name."""
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.glob("*.py") if not p.name.startswith("_"))


def meets_target(value: object, target: str) -> bool | None:
    """Whether ``value`` meets ``target`` (``"<= 0.3"``, ``"< 5"``, ``"0"``...); None when
    the value is not a number or the target is not a comparison with a number."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    match = _TARGET.match(target or "")
    if match is None:
        return None
    op, bound = match.group(1) or "==", float(match.group(2))
    return {
        "<=": value <= bound, "<": value < bound, ">=": value >= bound, ">": value > bound,
        "=": value == bound, "==": value == bound,
    }[op]


@dataclass(frozen=True, slots=True)
class BenchRun:
    """What one ``voxflow bench`` produced."""

    runs: list[dict[str, Any]]
    figures: list[dict[str, Any]]

    @property
    def failed(self) -> bool:
        """A script exited with an error."""
        return any(r["exit"] != 0 for r in self.runs)

    @property
    def missed(self) -> list[dict[str, Any]]:
        """Figures that miss their target."""
        return [f for f in self.figures if f.get("meets_target") is False]


def run_bench(scripts: Sequence[Path], *, progress: TextIO, quiet: bool = False) -> BenchRun:
    """Run ``scripts`` one after another (each prints its own table unless ``quiet``),
    with a progress line per script on ``progress``."""
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        sink = Path(tmp) / "figures.jsonl"
        env = {**os.environ, "VOXFLOW_BENCH_FIGURES": str(sink)}
        for i, script in enumerate(scripts, 1):
            print(f"[{i}/{len(scripts)}] {script.stem} …", file=progress, flush=True)
            began = time.perf_counter()
            result = subprocess.run([sys.executable, str(script)], env=env, check=False,
                                    stdout=progress if quiet else None)
            seconds = round(time.perf_counter() - began, 1)
            runs.append({"benchmark": script.stem, "exit": result.returncode,
                         "seconds": seconds})
            status = "ok" if result.returncode == 0 else f"FAILED (exit {result.returncode})"
            print(f"[{i}/{len(scripts)}] {script.stem}: {status} in {seconds:.1f} s",
                  file=progress, flush=True)
        lines = sink.read_text(encoding="utf-8").splitlines() if sink.exists() else []
    figures = [json.loads(line) for line in lines if line]
    for f in figures:
        f["meets_target"] = meets_target(f.get("value"), str(f.get("target") or ""))
    return BenchRun(runs, figures)
