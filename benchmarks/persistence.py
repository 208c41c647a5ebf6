"""Save latency of a persisted conversation: SQLite (embedded) vs PostgreSQL.

Each run drives ``--turns`` tracked turns (``voxflow.testing.Acknowledger``, a fixed
reply) on one session and, after each turn, times one save of the flow's state exactly
as ``@persist`` does it (``flow.conversation.prepare_state_save(backend, ...)``, then
the blocking write, on this thread): an incremental save of the turn's two messages, its turn and
reply records and the small snapshot, revision-checked, in one transaction. The first
save (a full one) is left out. Prints p50 and p99 in ms per backend, each the median
over ``--runs`` runs, and ``--fenced`` adds the same through ``store.fenced(lease)``
(the lease epoch, release and expiry at the database's clock checked in each save's
transaction; an unfenced save reads the lease row too, refusing a live-leased session).

PostgreSQL: ``VOXFLOW_BENCH_DATABASE_URL`` (default
``postgresql://postgres@127.0.0.1:5432/test``), a fresh schema per run, dropped after;
skipped with its reason when no server answers. Run:
``uv run python benchmarks/persistence.py [--turns 300] [--runs 5] [--fenced]``.

Measured on the shared 2-core machine (300 turns, median of 5 runs, load 4.6 to 7.8,
other engineers' suites and PostgreSQL tests running): SQLite p50 0.31 ms / p99 4.9 ms
(fenced 0.38 / 4.9); PostgreSQL 15 on 127.0.0.1 p50 5.9 ms / p99 12.1 ms (fenced 2.6 /
11.0: the fenced case does one more SELECT, so the gap between the two PostgreSQL rows
is the machine's noise, not fencing). PostgreSQL's commit waits for its WAL flush
(``synchronous_commit=on``); SQLite's WAL with ``synchronous=NORMAL`` does not fsync
each commit.

With expiry and the unfenced-writer check (one lease-row SELECT in every save, fenced or
not), at a504c38 against the code before it, 300 turns, median of 5, two interleaved
rounds each, load 2.9 to 4.4: SQLite p50 0.27-0.28 ms both before and after (fenced
0.27-0.29 vs 0.28-0.30); PostgreSQL p50 1.88-1.96 ms after vs 1.88-2.38 before (fenced
1.90-1.93 vs 1.55-1.92): within the machine's noise.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from _figures import figure

from voxflow.flow._row_store import RowStore
from voxflow.flow.persistence import SQLiteFlowPersistence
from voxflow.testing import Acknowledger
from voxflow.turns import TurnRunner

PG_URL = os.environ.get(
    "VOXFLOW_BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test"
)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def save_latencies(store: Any, turns: int) -> list[float]:
    """ms per save after each of ``turns`` tracked turns (the first, full save left out)."""
    flow = Acknowledger(suppress_flow_events=True)
    runner = TurnRunner(flow)
    latencies: list[float] = []
    for i in range(turns):
        async for event in runner.astream_turn(f"message {i}"):
            runner.accept_event(event)
        start = time.perf_counter()
        flow.conversation.prepare_state_save(store, "bench")()
        latencies.append((time.perf_counter() - start) * 1000.0)
    return latencies[1:]


def run_backend(make: Callable[[], tuple[RowStore, Callable[[], None]]], args: Any,
                fenced: bool) -> tuple[float, float]:  # fmt: skip
    p50s, p99s = [], []
    for _ in range(args.runs):
        store, cleanup = make()
        try:
            target: Any = _FencedForFlow(store) if fenced else store
            values = asyncio.run(save_latencies(target, args.turns))
        finally:
            cleanup()
        p50s.append(percentile(values, 0.50))
        p99s.append(percentile(values, 0.99))
    return statistics.median(p50s), statistics.median(p99s)


class _FencedForFlow:
    """``store.fenced(lease)`` for whichever session the flow saves (its id is fresh)."""

    def __init__(self, store: RowStore) -> None:
        self.store = store
        self.lease: Any = None

    def save_full_state(self, flow_uuid: str, *args: Any, **kwargs: Any) -> int:
        return self._view(flow_uuid).save_full_state(flow_uuid, *args, **kwargs)

    def save_state_changes(self, flow_uuid: str, *args: Any) -> int | None:
        return self._view(flow_uuid).save_state_changes(flow_uuid, *args)

    def save_state(self, flow_uuid: str, *args: Any) -> None:
        self._view(flow_uuid).save_state(flow_uuid, *args)

    def load_state(self, flow_uuid: str) -> Any:
        return self.store.load_state(flow_uuid)

    def _view(self, flow_uuid: str) -> Any:
        if self.lease is None or self.lease.session_id != flow_uuid:
            self.lease = self.store.acquire_lease(flow_uuid, "bench", ttl=600)
        return self.store.fenced(self.lease)


def sqlite_store() -> tuple[RowStore, Callable[[], None]]:
    home = tempfile.TemporaryDirectory()
    store = SQLiteFlowPersistence(Path(home.name) / "bench.db")

    def cleanup() -> None:
        store.close()
        home.cleanup()

    return store, cleanup


def postgres_store() -> tuple[RowStore, Callable[[], None]]:
    from voxflow.flow.postgres import PostgresFlowPersistence

    store = PostgresFlowPersistence(PG_URL, schema=f"vx_bench_{uuid.uuid4().hex[:12]}")
    store.check_writable()
    return store, store.drop_schema


def schema_url(schema: str, url: str = PG_URL) -> str:
    """``url`` with ``schema`` first on its ``search_path``: where every voxflow store (and
    process) given that URL keeps its tables."""
    return f"{url}{'&' if '?' in url else '?'}options=-csearch_path%3D{schema}"


@contextlib.contextmanager
def fresh_schema(prefix: str, url: str = PG_URL) -> Iterator[str]:
    """A new schema named ``prefix`` + random hex, dropped afterwards with everything in
    it; yields :func:`schema_url` of it."""
    import psycopg

    schema = f"{prefix}{uuid.uuid4().hex[:10]}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield schema_url(schema, url)
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def postgres_unreachable() -> str | None:
    try:
        import psycopg

        psycopg.connect(PG_URL, connect_timeout=3).close()
    except ImportError:
        return "psycopg is not installed (pip install 'voxflow[postgres]')"
    except Exception as exc:
        return f"PostgreSQL not reachable ({type(exc).__name__})"
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--fenced", action="store_true", help="also fenced saves (leases)")
    args = parser.parse_args()
    if args.turns < 20 or args.runs < 1:
        parser.error("--turns must be >= 20 and --runs >= 1")
    print(f"save after each of {args.turns} tracked turns, median of {args.runs} runs")
    print(f"  {'backend':28s} {'p50 ms':>8} {'p99 ms':>8}")
    backends: list[tuple[str, Callable[[], tuple[RowStore, Callable[[], None]]]]] = [
        ("SQLite (WAL, file)", sqlite_store)
    ]
    reason = postgres_unreachable()
    if reason is None:
        backends.append(("PostgreSQL 127.0.0.1", postgres_store))
    for label, make in backends:
        for fenced in (False, True) if args.fenced else (False,):
            p50, p99 = run_backend(make, args, fenced)
            name = label + (", fenced" if fenced else "")
            print(f"  {name:28s} {p50:8.2f} {p99:8.2f}")
            key = "sqlite" if make is sqlite_store else "postgres"
            suffix = " fenced" if fenced else ""
            figure(f"{key}{suffix} save p50", round(p50, 2), "ms")
            figure(f"{key}{suffix} save p99", round(p99, 2), "ms")
    if reason is not None:
        print(f"  PostgreSQL skipped: {reason}")


if __name__ == "__main__":
    main()
