"""Per-turn overhead of ``handle_turn`` over a long session (flaw 3 of the reference).

Runs 1,000 ``handle_turn`` calls in one session on the spec's rule-based ``SupportFlow``
(``examples/support.py``: no LLM, so this measures the runtime alone), in memory and with
class-level ``@persist()`` on the default backend (``SQLiteFlowPersistence`` in a temporary
``$VOXFLOW_HOME``; a conversation saves only the messages a save appends), and prints for
each, as wall-clock and CPU-time rows: the median and p95 microseconds per turn, the
median of turns 1-100 against turns 901-1,000 (flat means within 20%); then the peak RSS
of the process. Each figure is the
median over ``--runs`` runs.

Targets: median <= 300 us and flat in memory; <= 2 ms and flat persisted. The reference
measured 3.4 ms rising to 7-11 ms, and 10 ms rising to 40 ms persisted.

Measured (2-core shared machine under load, median of 5 runs, first 100 -> last 100
turns, wall clock; CPU within a few us of it):

* in memory: 96 us -> 95 us (median 95 us, p95 220 us), flat.
* ``@persist()`` default backend: 394 us -> 432 us (median 421 us; last/first 0.97-1.10
  over several runs). p95 wall ~4.5 ms, CPU 0.9 ms: preemption on the loaded machine,
  plus a WAL checkpoint every ~90 turns. Before the default backend stored conversations
  item by item it rewrote the whole snapshot on every save: 0.9 ms -> 31 ms (median
  12.5 ms).

    uv run python benchmarks/turn_overhead.py [--turns 1000] [--runs 5]
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MESSAGES = ("Where is my order?", "What about returns?", "Can you help me?", "My order again")


def _support_flow() -> type[Any]:
    path = ROOT / "examples" / "support.py"
    spec = importlib.util.spec_from_file_location("support_example", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    flow_class: type[Any] = module.SupportFlow
    return flow_class


def _one_run(flow_class: type[Any], turns: int) -> tuple[list[float], list[float]]:
    """Wall and CPU (process) seconds of each turn of one session."""
    flow = flow_class()
    session = f"bench-{time.monotonic_ns()}"
    wall: list[float] = []
    cpu: list[float] = []
    gc.collect()
    for i in range(turns):
        message = MESSAGES[i % len(MESSAGES)]
        start, start_cpu = time.perf_counter(), time.process_time()
        flow.handle_turn(message, session_id=session)
        wall.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    flow.finalize_session_traces()
    assert len(flow.state.messages) == 2 * turns
    return wall, cpu


def _summary(times: list[float]) -> dict[str, float]:
    us = [t * 1e6 for t in times]
    ordered = sorted(us)
    window = min(100, len(us) // 2)
    return {
        "median": statistics.median(us),
        "p95": ordered[int(0.95 * (len(ordered) - 1))],
        "first": statistics.median(us[:window]),
        "last": statistics.median(us[-window:]),
    }


def _bench(name: str, flow_class: type[Any], turns: int, runs: int) -> None:
    _one_run(flow_class, 20)  # warm-up: imports, pydantic schemas, SQLite file
    runs_ = [_one_run(flow_class, turns) for _ in range(runs)]
    window = min(100, turns // 2)
    for clock, index in (("wall", 0), ("CPU", 1)):
        results = [_summary(r[index]) for r in runs_]
        merged = {key: statistics.median(r[key] for r in results) for key in results[0]}
        print(
            f"{name:<10} {clock:<4} median {merged['median']:8.1f} us   "
            f"p95 {merged['p95']:8.1f} us   first {window} turns {merged['first']:8.1f} us   "
            f"last {window} turns {merged['last']:8.1f} us   "
            f"last/first {merged['last'] / merged['first']:5.2f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    if args.turns < 20 or args.runs < 1:
        parser.error("--turns must be >= 20 and --runs >= 1")

    from voxflow import persist

    support = _support_flow()
    print(f"{args.turns} handle_turn calls per session, median of {args.runs} runs")
    _bench("in-memory", support, args.turns, args.runs)
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["VOXFLOW_HOME"] = tmp  # the default backend: <tmp>/flow_states.db

        @persist()
        class PersistedSupport(support):  # type: ignore[misc, valid-type]
            pass

        _bench("persisted", PersistedSupport, args.turns, args.runs)
        from voxflow.flow.persistence import default_persistence

        default_persistence().close()
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(f"peak RSS {peak_kib / 1024:.1f} MiB")


if __name__ == "__main__":
    main()
