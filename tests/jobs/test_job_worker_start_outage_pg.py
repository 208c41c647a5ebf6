"""A job worker whose database goes away while it starts, after it reached it (issue 29):
the queries of its start, before Procrastinate registered the worker (the removal of
dead workers' rows, Procrastinate's pruning, its registration), were tried once, so the
worker stopped (``test_a_worker_rides_out_an_outage_past_twice_its_patience`` failed
once in 5 under load when its outage began there; its readiness was said before the
registration). They now ride out an outage for up to the worker's report patience, and
the worker says it is ready once it is registered.

A real PostgreSQL: a database of the test's own (``pg_faults``). A trigger of the test's
makes the start's statement wait for an advisory lock the test holds, so the outage
begins exactly while that statement runs (its connection reset, new ones refused).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import psycopg
import pytest

from tests.conftest import PgFaults
from tests.jobs.queue_kit import all_rows, wait_for, wait_for_update
from voxflow.errors import PersistenceUnavailableError
from voxflow.jobs import (
    BackgroundJob,
    JobContext,
    PostgresJobQueue,
    add_job,
    apply_inbox,
    background_job,
)
from voxflow.wiring import AssistantState

pytestmark = pytest.mark.unit

_LOCK = 2929


@background_job(kind="worker_start_outage_tests.books")
async def books(job: JobContext) -> str:
    return "Your table for two is booked."


def _hold(url: str, event: str) -> psycopg.Connection[tuple[object, ...]]:
    """Make every ``event`` (INSERT, DELETE) on ``procrastinate_workers`` wait for the
    advisory lock the returned connection holds (until it is reset with the others)."""
    conn = psycopg.connect(url, autocommit=True)
    conn.execute("CREATE OR REPLACE FUNCTION vx_test_hold() RETURNS trigger LANGUAGE plpgsql "
                 f"AS $$ BEGIN PERFORM pg_advisory_xact_lock({_LOCK}); RETURN NULL; END $$")
    conn.execute(f"CREATE TRIGGER vx_test_hold BEFORE {event} ON procrastinate_workers "
                 "FOR EACH STATEMENT EXECUTE FUNCTION vx_test_hold()")
    conn.execute("SELECT pg_advisory_lock(%s)", (_LOCK,))
    return conn


def _waits(conn: psycopg.Connection[tuple[object, ...]], text: str) -> bool:
    row = conn.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND "
        "wait_event = 'advisory' AND query LIKE %s", (f"%{text}%",)).fetchone()
    return row is not None and row[0] > 0


async def _stop(run: asyncio.Task[Any], holder: Any, queue: Any) -> None:
    """The worker stopped, the lock holder's connection and the queue closed."""
    run.cancel()
    with contextlib.suppress(asyncio.CancelledError, PersistenceUnavailableError):
        await run
    with contextlib.suppress(psycopg.Error):
        holder.close()
    queue.close()
    await queue.inbox.close()


@pytest.mark.parametrize(("event", "statement"), [
    ("DELETE", "DELETE FROM procrastinate_workers"),  # the removal of dead workers' rows
    ("INSERT", "procrastinate_register_worker"),  # Procrastinate's registration
])
async def test_a_worker_rides_out_an_outage_as_it_starts(
    pg_faults: PgFaults, caplog: pytest.LogCaptureFixture, event: str, statement: str,
) -> None:
    caplog.set_level(logging.INFO, logger="voxflow.jobs")
    queue = PostgresJobQueue(pg_faults.url)
    await queue.migrate()
    holder = _hold(pg_faults.url, event)
    ready: list[bool] = []
    run = asyncio.create_task(queue.run_worker(
        heartbeat=0.2, stalled_after=2.0, report_patience=120.0, running=ready.append))
    try:
        async def held() -> bool:
            if run.done():
                raise AssertionError(f"the worker stopped: {run!r}")
            return await asyncio.to_thread(_waits, holder, statement)

        await wait_for(held, 60, f"the worker's start to wait in {statement}")
        assert not ready  # (not registered yet: not ready)

        async def lost() -> bool:
            return run.done() or any("lost its database" in r.getMessage()
                                     for r in caplog.records)

        with pg_faults.down():  # (its statement's connection reset, the lock's too)
            await wait_for(lost, 60, "the worker to find its database away")
            assert not run.done(), run

        async def is_ready() -> bool:
            if run.done():
                raise AssertionError(f"the worker stopped: {run!r}")
            return bool(ready) and ready[-1]

        await wait_for(is_ready, 60, "the worker to start once the database is back")
        state = AssistantState()
        job = BackgroundJob(session_id=state.id, kind=books.kind)
        assert add_job(state, job)
        await queue.enqueue_async(job)
        await wait_for_update(queue.inbox, state.id, "failed|completed", 60,
                              "the job queued after the outage to run")
        apply_inbox(state, await all_rows(queue.inbox, state.id))
        assert state.jobs[job.job_id].status == "completed"
        assert not run.done(), run
    finally:
        await _stop(run, holder, queue)


async def test_an_outage_as_it_starts_past_its_patience_fails_the_worker(
    pg_faults: PgFaults,
) -> None:
    """Bounded: a worker whose database stays away through its start longer than its
    report patience fails, as one that cannot reach it at all (a typed error)."""
    queue = PostgresJobQueue(pg_faults.url)
    await queue.migrate()
    holder = _hold(pg_faults.url, "INSERT")
    ready: list[bool] = []
    run = asyncio.create_task(queue.run_worker(
        heartbeat=0.2, stalled_after=2.0, report_patience=1.0, running=ready.append))
    try:
        async def held() -> bool:
            if run.done():
                raise AssertionError(f"the worker stopped: {run!r}")
            return await asyncio.to_thread(_waits, holder, "procrastinate_register_worker")

        await wait_for(held, 60, "the worker's start to wait in its registration")
        with pg_faults.down():
            async def stopped() -> bool:
                return run.done()

            await wait_for(stopped, 120, "the worker to give up its start")
        with pytest.raises(PersistenceUnavailableError):
            await run
        assert True not in ready
    finally:
        await _stop(run, holder, queue)
