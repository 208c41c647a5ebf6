"""Failover: a call worker's death → the call answering again on another worker, in each
shape; and a rolling restart of every call worker with calls running.

Run: ``uv run python benchmarks/failover.py [--runs 5]
[--shapes deployed,one-process-sqlite,one-process-postgres] [--peer-timeout 2]
[--calls 3] [--workers 2] [--skip failover,rolling] [--logs DIR]`` (under
``flock /tmp/voxflow-bench.lock``: it is real time).

* **failover** (each shape of ``--shapes``, ``--runs`` kills each): the process holding a
  call is killed (-9) mid-reply and the call resumes on another, with the example
  assistant on the real models. ``deployed``: a front door and two call workers
  (``voxflow serve --front-door`` / ``--worker`` processes) on PostgreSQL, the caller
  dialing the front door; ``one-process-sqlite`` / ``-postgres``: two one-process
  ``voxflow serve`` on one store (a SQLite file in a fresh ``VOXFLOW_HOME``, or
  PostgreSQL), the caller pointed at the other by hand. ``_failover.py``'s docstring
  defines each mark: detection, reconnect with its lease wait and state load, hello, and
  the resumed call's next commit → its first reply audio; the total is kill → that
  audio.
* **rolling** (``_failover.measure_rolling_restart``): a front door and ``--workers``
  call workers on PostgreSQL, ``--calls`` aiortc callers asking question after question
  (a story now and then) through it; every worker is restarted one at a time (SIGTERM,
  its exit, started again, ready). Printed: calls hung up, turns lost (unanswered, or not
  stored exactly once), answers cut, handovers vs reconnections after a silence, the
  handover → resumed ``hello`` gap, each drain's length.

PostgreSQL: ``VOXFLOW_BENCH_DATABASE_URL`` / ``postgresql://postgres@127.0.0.1:5432/test``
(a fresh schema first on the URL's ``search_path`` per run, dropped after); its shapes
are skipped with the reason when none answers. Medians over ``--runs``; nothing is
asserted (the machine is shared: note the load averages it prints).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from _failover import (
    PEER_TIMEOUT,
    FailoverTiming,
    front_door_shape,
    measure_failover,
    measure_rolling_restart,
    print_failover,
    print_rolling_restart,
    print_run,
    serve_shape,
)
from persistence import PG_URL, postgres_unreachable

SHAPES = ("deployed", "one-process-sqlite", "one-process-postgres")
SECTIONS = ("failover", "rolling")


@contextlib.contextmanager
def _shape(name: str, folder: Path) -> Iterator[tuple[Any, Any]]:
    if name == "deployed":
        with front_door_shape(PG_URL, folder) as made:
            yield made
    else:
        with serve_shape(name.removeprefix("one-process-"), PG_URL, folder) as made:
            yield made


async def failover(engines: Any, shapes: list[str], runs: int, peer_timeout: float) -> None:
    for name in shapes:
        label = {"deployed": "front door, postgres", "one-process-sqlite": "sqlite",
                 "one-process-postgres": "postgres"}[name]
        print(f"failover, {name}: kill -9 mid-reply → the call answering again on the other "
              f"process; caller peer_timeout {peer_timeout:g} s, lease 6 s, worker dead "
              f"after 2 s without a heartbeat (deployed); load average {os.getloadavg()[0]:.1f}",
              flush=True)
        timings: list[FailoverTiming] = []
        for run in range(1, runs + 1):
            with tempfile.TemporaryDirectory() as tmp, _shape(name, Path(tmp)) as (shape,
                                                                                sessions):
                timings.append(await measure_failover(engines, shape, sessions,
                                                      peer_timeout=peer_timeout))
            print_run(run, timings[-1])
        print(f"  medians of {runs} run(s), load average {os.getloadavg()[0]:.1f} at the end:")
        print_failover(timings, label)


async def rolling(engines: Any, calls: int, workers: int, peer_timeout: float,
                  logs: Path | None) -> None:
    print(f"rolling restart: {workers} call worker(s), {calls} call(s) talking, each worker "
          f"restarted in turn (SIGTERM, exit, start, ready); load average "
          f"{os.getloadavg()[0]:.1f}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        folder = logs if logs is not None else Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        result = await measure_rolling_restart(engines, PG_URL, folder, calls=calls,
                                               workers=workers, peer_timeout=peer_timeout)
    print_rolling_restart(result)
    print(f"  load average {os.getloadavg()[0]:.1f} at the end")


async def main(args: argparse.Namespace, shapes: list[str], skip: set[str]) -> None:
    from voxflow_voice.engines import VoiceEngines

    engines = await asyncio.to_thread(VoiceEngines.load)  # the callers' questions
    if "failover" not in skip:
        await failover(engines, shapes, args.runs, args.peer_timeout)
    if "rolling" not in skip:
        if (reason := postgres_unreachable()) is not None:
            print(f"rolling restart skipped: {reason}")
        else:
            await rolling(engines, args.calls, args.workers, args.peer_timeout,
                          None if args.logs is None else Path(args.logs))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="kills per shape (default: 5)")
    parser.add_argument("--shapes", default=",".join(SHAPES),
                        help=f"comma-separated, of {', '.join(SHAPES)} (default: all)")
    parser.add_argument("--peer-timeout", type=float, default=PEER_TIMEOUT,
                        help=f"the caller's silence before it reconnects (the page's: "
                             f"{PEER_TIMEOUT:g} s)")
    parser.add_argument("--calls", type=int, default=3, help="calls of the rolling restart")
    parser.add_argument("--workers", type=int, default=2,
                        help="call workers restarted one at a time (default: 2)")
    parser.add_argument("--skip", default="", help=f"sections to skip: {', '.join(SECTIONS)}")
    parser.add_argument("--logs", help="keep the rolling restart's process logs in this folder")
    args = parser.parse_args()
    chosen = [s.strip() for s in args.shapes.split(",") if s.strip()]
    skipped = {s.strip() for s in args.skip.split(",") if s.strip()}
    if unknown := [s for s in chosen if s not in SHAPES]:
        parser.error(f"--shapes: unknown {', '.join(unknown)}; choose from {', '.join(SHAPES)}")
    if unknown := sorted(skipped - set(SECTIONS)):
        parser.error(f"--skip: unknown {', '.join(unknown)}; choose from {', '.join(SECTIONS)}")
    if args.runs < 1 or not 0 < args.peer_timeout <= 30 or args.calls < 1 or args.workers < 2:
        parser.error("--runs and --calls must be >= 1, --workers >= 2, --peer-timeout in "
                     "(0, 30]")
    if (reason := postgres_unreachable()) is not None and any(s != "one-process-sqlite"
                                                              for s in chosen):
        print(f"PostgreSQL shapes skipped: {reason}")
        chosen = [s for s in chosen if s == "one-process-sqlite"]
    asyncio.run(main(args, chosen, skipped))
