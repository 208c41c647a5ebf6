"""Flow runtime overhead: µs per sync kickoff(), import time of voxflow, peak RSS.

Run: ``uv run python benchmarks/flow_overhead.py``. Prints medians of several runs.
Targets on a 2-core machine: chain <= 200 µs, graph <= 500 µs, import <= 0.3 s.
"""

from __future__ import annotations

import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

from voxflow import Flow, and_, listen, or_, router, start


class Chain(Flow):
    """Three sync steps."""

    @start()
    def one(self) -> int:
        return 1

    @listen(one)
    def two(self, value: int) -> int:
        return value + 1

    @listen(two)
    def three(self, value: int) -> int:
        return value + 1


class Graph(Flow):
    """Six methods: a router, two listeners, an or_ and an and_ join."""

    @start()
    def begin(self) -> str:
        return "begin"

    @router(begin)
    def decide(self) -> str:
        return "go"

    @listen("go")
    def a(self) -> str:
        return "a"

    @listen("go")
    def b(self) -> str:
        return "b"

    @listen(or_(a, "elsewhere"))
    def join_or(self) -> str:
        return "join_or"

    @listen(and_(a, b))
    def join_and(self) -> str:
        return "join_and"


def _per_call_us(fn: Callable[[], object], calls: int, repeats: int) -> float:
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(samples)


def _async_chain_us(calls: int, repeats: int) -> float:
    """kickoff_async() on a running loop: sync methods hop to the default executor."""
    import asyncio

    chain = Chain()

    async def run() -> float:
        samples = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            for _ in range(calls):
                await chain.kickoff_async()
            samples.append((time.perf_counter() - t0) / calls * 1e6)
        return statistics.median(samples)

    return asyncio.run(run())


def _import_seconds(repeats: int) -> float:
    code = "import time; t = time.perf_counter(); import voxflow; print(time.perf_counter() - t)"
    samples = []
    for _ in range(repeats):
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        ).stdout
        samples.append(float(out))
    return statistics.median(samples)


def main() -> None:
    calls, repeats = 2000, 7
    chain, graph = Chain(), Graph()
    assert chain.kickoff() == 3 and graph.kickoff() == "join_and"
    rows = [
        ("3-step chain, reused instance", _per_call_us(chain.kickoff, calls, repeats), 200),
        (
            "3-step chain, new instance",
            _per_call_us(lambda: Chain().kickoff(), calls, repeats),
            200,
        ),
        ("6-method graph, reused instance", _per_call_us(graph.kickoff, calls, repeats), 500),
        (
            "6-method graph, new instance",
            _per_call_us(lambda: Graph().kickoff(), calls, repeats),
            500,
        ),
    ]
    print(f"{'case':36} {'median µs/kickoff':>18} {'target':>8}")
    for name, value, target in rows:
        print(f"{name:36} {value:18.1f} {target:8d}")
    async_us = _async_chain_us(calls // 4, repeats)
    print(f"{'3-step chain, kickoff_async (info)':36} {async_us:18.1f} {'-':>8}")
    imp = _import_seconds(5)
    print(f"{'import voxflow (fresh process)':36} {imp:17.3f}s {0.3:7.1f}s")
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{'peak RSS of this process':36} {peak_mb:16.1f}MB")


if __name__ == "__main__":
    main()
