"""Failover of the one-process shape: a ``voxflow serve`` killed (-9) mid-reply, its call
resumed on another ``voxflow serve`` on the same database (a SQLite file, or PostgreSQL).

Run: ``uv run python benchmarks/failover.py [--runs 3] [--database sqlite|postgres]
[--peer-timeout 3]`` (under ``flock /tmp/voxflow-bench.lock``: it is real time).

Each run starts two ``voxflow serve`` processes, A and B, on one store (a SQLite file in
a fresh ``VOXFLOW_HOME``, or the PostgreSQL at ``VOXFLOW_BENCH_DATABASE_URL`` /
``postgresql://postgres@127.0.0.1:5432/test``, a fresh schema first on the URL's
``search_path``, dropped after) with the example assistant on the real models; the caller
dials A, and when A is killed it is pointed at B (no front door here: the deployed
shape, a front door and call workers on PostgreSQL, is ``scale_out.py``'s failover
section; both use ``_failover.py``, whose docstring defines each mark: detection,
reconnect with its lease wait and state load, hello, and the resumed call's next commit
→ its first reply audio). Medians over ``--runs``; nothing is asserted (the machine is
shared: note the load average it prints).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
from pathlib import Path

from _failover import FailoverTiming, measure_failover, print_failover, print_run, serve_shape
from persistence import PG_URL, postgres_unreachable


async def main(runs: int, database: str, peer_timeout: float) -> None:
    from voxflow_voice.engines import VoiceEngines

    engines = await asyncio.to_thread(VoiceEngines.load)
    print(f"failover on {database}: kill -9 of a voxflow serve mid-reply → the call resumed "
          f"on another, caller peer_timeout {peer_timeout:g} s, lease 6 s; load average "
          f"{os.getloadavg()[0]:.1f} at the start", flush=True)
    timings: list[FailoverTiming] = []
    for run in range(1, runs + 1):
        with tempfile.TemporaryDirectory() as tmp, \
                serve_shape(database, PG_URL, Path(tmp)) as (shape, sessions):
            timings.append(await measure_failover(engines, shape, sessions,
                                                  peer_timeout=peer_timeout))
        print_run(run, timings[-1])
    print(f"medians of {runs} run(s), load average {os.getloadavg()[0]:.1f} at the end:")
    print_failover(timings, database)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="kills to time (default: 3)")
    parser.add_argument("--database", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--peer-timeout", type=float, default=3.0,
                        help="the caller's silence before it reconnects (the page: 3 s)")
    args = parser.parse_args()
    if args.runs < 1 or not 0 < args.peer_timeout <= 30:
        parser.error("--runs must be >= 1 and --peer-timeout in (0, 30]")
    if args.database == "postgres" and (reason := postgres_unreachable()) is not None:
        parser.exit(0, f"failover on postgres skipped: {reason}\n")
    asyncio.run(main(args.runs, args.database, args.peer_timeout))
