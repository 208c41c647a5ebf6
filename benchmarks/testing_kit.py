"""How long the README's example test takes: examples/test_assistant.py, run as a user runs it.

Copies the example test file into a fresh folder (no conftest; the assistant is
``voxflow.examples.assistant``) and runs
``python -m pytest`` there ``--runs`` times (default 5) with this interpreter, then prints
the median of: the whole pytest process (interpreter start, plugin, model loading, both
tests) and each phase pytest times (``--durations``): the setup of the first test (the
session's models loading), the barge-in test's call on virtual audio time, and the
ScriptedLLM test's call (which includes importing litellm, on the first ScriptedLLM).
``--realtime`` runs the same tests on the wall clock.
Run: ``flock /tmp/voxflow-bench.lock uv run python benchmarks/testing_kit.py``.

Measured on the shared 2-core machine, load average 3.2 to 4.0, median of 5 runs: the
whole pytest process 12.38 s (10.27 to 12.76); the barge-in test's call 1.61 s (1.56 to
2.10); the models' loading 1.35 s; the ScriptedLLM test's call 4.35 s.
At load average 6.1 to 8.5, median of 7 runs: the
whole pytest process 23.3 s (15.3 to 37.2); the barge-in test's call 3.19 s (2.22 to
5.30); the models' loading (its setup) 2.55 s; the ScriptedLLM test's call 8.81 s, most
of it importing litellm (10 s alone at that load, ~3 s on a quiet machine).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _figures import figure

ROOT = Path(__file__).resolve().parents[1]


def one_run(project: Path, realtime: bool) -> tuple[float, dict[str, float]]:
    """(wall seconds of the pytest process, {"<phase> <test>": seconds})."""
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
               "--durations=0", "--durations-min=0", "test_assistant.py"]
    if realtime:
        command.append("--voxflow-realtime")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    start = time.perf_counter()
    result = subprocess.run(command, cwd=project, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if result.returncode != 0:
        raise SystemExit(f"the example test failed:\n{result.stdout}\n{result.stderr}")
    tests: dict[str, float] = {}
    for line in result.stdout.splitlines():  # "2.31s call     test_assistant.py::test_x"
        parts = line.split()
        if len(parts) == 3 and parts[0].endswith("s") and parts[1] in ("setup", "call"):
            try:
                tests[f"{parts[1]} {parts[2].split('::')[-1]}"] = float(parts[0][:-1])
            except ValueError:
                continue
    return wall, tests


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--realtime", action="store_true")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be >= 1")
    walls: list[float] = []
    per_test: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="voxflow-example-") as folder:
        project = Path(folder)
        shutil.copy(ROOT / "examples" / "test_assistant.py", project / "test_assistant.py")
        for _ in range(args.runs):
            wall, tests = one_run(project, args.realtime)
            walls.append(wall)
            for name, seconds in tests.items():
                per_test.setdefault(name, []).append(seconds)
    mode = "real time" if args.realtime else "virtual audio time"
    load = os.getloadavg()
    print(f"examples/test_assistant.py on {mode}, median of {args.runs} runs "
          f"(load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}):")
    print(f"  {'whole pytest process (models loaded included)':<52} "
          f"{statistics.median(walls):6.2f} s   (min {min(walls):.2f}, max {max(walls):.2f})")
    for name, times in sorted(per_test.items(), key=lambda kv: -statistics.median(kv[1])):
        if statistics.median(times) < 0.01:
            continue
        print(f"  {name:<52} {statistics.median(times):6.2f} s   "
              f"(min {min(times):.2f}, max {max(times):.2f})")
    suffix = "_realtime" if args.realtime else ""
    figure(f"example test, whole pytest run{suffix}", statistics.median(walls), "s")
    barge_in = per_test.get("call test_the_user_cuts_the_story_short")
    if barge_in:
        figure(f"example barge-in test{suffix}", statistics.median(barge_in), "s")


if __name__ == "__main__":
    main()
