"""Flow runtime overhead: µs per sync kickoff(), import time of voxflow, peak RSS.

Run: ``uv run python benchmarks/flow_overhead.py``. Prints medians of several runs.
Targets on a 2-core machine: chain <= 200 µs, graph <= 500 µs, import <= 0.3 s.

Import times are medians over fresh interpreters (``sys.executable -c``), timed inside the
child around the import statement (interpreter start-up excluded), as wall and CPU time
(CPU time is the steadier figure on a loaded machine). Two conditions, alternated run by
run: "as run" inherits this environment (a sandbox with ``PYTHONDONTWRITEBYTECODE=1`` and
a venv without .pyc files recompiles pydantic and voxflow from source in every process);
".pyc" uses a private, pre-warmed bytecode cache (``PYTHONPYCACHEPREFIX``), as an
installed package normally runs. Three statements: the bare ``import voxflow`` (names load
lazily), the Flow core a flow author needs, and every name in ``voxflow.__all__``.
"""

from __future__ import annotations

import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

from _figures import figure

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


_IMPORTS = (
    ("import voxflow", "import voxflow"),
    ("from voxflow import Flow, start, listen", "from voxflow import Flow, start, listen"),
    (
        "every name in voxflow.__all__",
        "import voxflow\nfor n in voxflow.__all__: getattr(voxflow, n)",
    ),
)


def _import_once(statement: str, env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU seconds of ``statement`` in one fresh interpreter (start-up excluded)."""
    code = (
        "import time\nt, c = time.perf_counter(), time.process_time()\n"
        f"{statement}\nprint(time.perf_counter() - t, time.process_time() - c)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout
    wall, cpu = out.split()
    return float(wall), float(cpu)


def _import_rows(repeats: int) -> list[tuple[str, float, float, float, float]]:
    """Per statement: median wall and CPU seconds as run, then with a warm .pyc cache.

    The two conditions alternate run by run, so load from other processes on a shared
    machine spreads over both.
    """
    cache_dir = tempfile.mkdtemp(prefix="voxflow-pycache-")
    as_run = dict(os.environ)
    cached = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    cached["PYTHONPYCACHEPREFIX"] = cache_dir
    try:
        rows = []
        for name, statement in _IMPORTS:
            _import_once(statement, cached)  # writes the bytecode cache
            plain, warm = [], []
            for _ in range(repeats):
                plain.append(_import_once(statement, as_run))
                warm.append(_import_once(statement, cached))
            rows.append(
                (
                    name,
                    statistics.median(w for w, _ in plain),
                    statistics.median(c for _, c in plain),
                    statistics.median(w for w, _ in warm),
                    statistics.median(c for _, c in warm),
                )
            )
        return rows
    finally:
        shutil.rmtree(cache_dir, ignore_errors=True)


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
        figure(f"kickoff: {name}", value, "µs", target=f"<= {target}")
    async_us = _async_chain_us(calls // 4, repeats)
    print(f"{'3-step chain, kickoff_async (info)':36} {async_us:18.1f} {'-':>8}")
    print(
        f"\n{'import, fresh process (median of 7)':40} {'as run: wall':>12} {'cpu':>6}"
        f" {'.pyc: wall':>10} {'cpu':>6} {'target':>7}"
    )
    for name, wall, cpu, pyc_wall, pyc_cpu in _import_rows(7):
        print(f"{name:40} {wall:11.3f}s {cpu:5.3f}s {pyc_wall:9.3f}s {pyc_cpu:5.3f}s {0.3:6.1f}s")
        figure(f"import: {name}", wall, "s", target="<= 0.3")
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{'peak RSS of this process':36} {peak_mb:16.1f}MB")
    figure("peak RSS", peak_mb, "MB")


if __name__ == "__main__":
    main()
