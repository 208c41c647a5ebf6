"""A query of the job worker or its inbox that PostgreSQL rolls back for a conflict with
another transaction (a serialization failure, 40001; a deadlock, 40P01) is run again
(issue 29): it stopped the worker with one ``error:`` line, the job it was finishing left
``doing`` in the queue, although such a conflict wrote nothing and is transient by
definition. One that recurs on every try is still refused, naming its SQLSTATE.

A real PostgreSQL, real conflicts: another connection updates the job's row while the
worker (its sessions serializable, the URL's options) finishes it, or holds the events
table the finish writes to and then asks for the job's row (a deadlock whose victim is
the worker's finish).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest

from tests.conftest import PG_URL
from tests.jobs.queue_kit import all_rows, wait_for, wait_for_update
from voxflow import pg_retry
from voxflow.errors import DatabaseRefusedError
from voxflow.jobs import (
    BackgroundJob,
    JobContext,
    JobInbox,
    JobUpdate,
    PostgresJobQueue,
    add_job,
    apply_inbox,
    background_job,
)
from voxflow.wiring import AssistantState

pytestmark = pytest.mark.unit

_GATES: dict[str, tuple[asyncio.Event, asyncio.Event]] = {}


@background_job(kind="worker_conflict_tests.finishes_when_told")
async def finishes_when_told(job: JobContext, gate: str) -> str:
    started, finish = _GATES[gate]
    started.set()
    await finish.wait()
    return "Your table for two is booked."


def _url(schema: str, *settings: str) -> str:
    options = "%20".join([f"-csearch_path%3D{schema}", *settings])
    return f"{PG_URL}?options={options}"


@contextlib.asynccontextmanager
async def _a_pending_row(schema: str) -> AsyncIterator[tuple[JobInbox, str, Any]]:
    """An inbox whose sessions are serializable, holding one pending update (job j1
    started) of a session: the inbox, the session id and the update's row; closed after."""
    inbox = JobInbox(_url(schema, "-cdefault_transaction_isolation%3Dserializable"))
    state = AssistantState()
    try:
        await inbox.write(JobUpdate(session_id=state.id, job_id="j1", revision=1, attempt=1,
                                    seq=1, kind="started"))
        (row,) = await inbox.pending(state.id)
        yield inbox, state.id, row
    finally:
        await inbox.close()


async def _waiting(conn: psycopg.AsyncConnection[Any], text: str) -> bool:
    """Some backend of the database waits for a lock in a statement holding ``text``."""
    cursor = await conn.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND "
        "wait_event_type = 'Lock' AND query LIKE %s AND pid <> pg_backend_pid()",
        (f"%{text}%",))
    row = await cursor.fetchone()
    return row is not None and row[0] > 0


@pytest.mark.parametrize("conflict", ["serialization", "deadlock"])
async def test_a_conflict_at_a_jobs_finish_is_run_again(
    schema: str, conflict: str, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="voxflow.jobs")
    # serializable: the finish of a row another transaction updated since is refused
    # (40001); the deadlock: the worker checks for one 5 s into a wait (the test's
    # connection never within a minute), by when the test closed the cycle: the
    # worker's finish is its victim, whatever the load
    setting = ("-cdefault_transaction_isolation%3Dserializable" if conflict == "serialization"
               else "-cdeadlock_timeout%3D5s")
    queue = PostgresJobQueue(_url(schema, setting))
    await queue.migrate()
    gate = f"{schema}-{conflict}"
    started, finish = _GATES[gate] = asyncio.Event(), asyncio.Event()
    run = asyncio.create_task(queue.run_worker(heartbeat=0.5, stalled_after=5.0))
    state = AssistantState()
    job = BackgroundJob(session_id=state.id, kind=finishes_when_told.kind,
                        inputs={"gate": gate})
    assert add_job(state, job)
    try:
        queue_id = await queue.enqueue_async(job)

        async def job_started() -> bool:
            if run.done():
                raise AssertionError(f"the worker stopped: {run!r}")
            return started.is_set()

        await wait_for(job_started, 60, "the job to start")
        async with await psycopg.AsyncConnection.connect(
                _url(schema)) as other, await psycopg.AsyncConnection.connect(
                PG_URL, autocommit=True) as watch:
            await other.execute("SET deadlock_timeout = '60s'")
            if conflict == "serialization":
                await other.execute("UPDATE procrastinate_jobs SET priority = priority "
                                    "WHERE id = %s", (queue_id,))
            else:
                await other.execute("LOCK TABLE procrastinate_events IN SHARE MODE")
            finish.set()  # the job returns: the worker finishes it, and waits for `other`
            await wait_for(lambda: _waiting(watch, "procrastinate_finish_job"), 60,
                           "the job's finish to wait for the other transaction")
            if conflict == "deadlock":  # (the job's row, which the waiting finish holds)
                await other.execute("SELECT 1 FROM procrastinate_jobs WHERE id = %s "
                                    "FOR UPDATE", (queue_id,))
            await other.commit()

        async def finished() -> bool:
            if run.done():
                raise AssertionError(f"the worker stopped: {run!r}")
            with psycopg.connect(PG_URL, autocommit=True) as conn:
                row = conn.execute(f'SELECT status::text FROM "{schema}".procrastinate_jobs '
                                   "WHERE id = %s", (queue_id,)).fetchone()
            return row is not None and row[0] == "succeeded"

        await wait_for(finished, 60, "the job to be finished in the queue")
        await wait_for_update(queue.inbox, state.id, "completed", 60, "the job's report")
        apply_inbox(state, await all_rows(queue.inbox, state.id))
        assert (state.jobs[job.job_id].status, state.jobs[job.job_id].announcement) == (
            "completed", "Your table for two is booked.")
        assert not run.done(), run
    finally:
        finish.set()
        run.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await run
        queue.close()
        await queue.inbox.close()
        _GATES.pop(gate, None)
    state_code = "40001" if conflict == "serialization" else "40P01"
    retried = [r.getMessage() for r in caplog.records if "conflict with another" in
               r.getMessage()]
    assert any(state_code in line and "a job's finish" in line for line in retried), retried


async def test_an_inbox_write_rolled_back_for_a_conflict_is_run_again(schema: str) -> None:
    """The inbox (and the sweep and the call dispatch, through the same transaction
    helper) ran a statement once: a serialization failure was a DatabaseRefusedError.
    Here an ack on a serializable connection waits for another transaction that updates
    its row, which then commits."""
    async with _a_pending_row(schema) as (inbox, session, row):
        async with await psycopg.AsyncConnection.connect(
                _url(schema)) as other, await psycopg.AsyncConnection.connect(
                PG_URL, autocommit=True) as watch:
            await other.execute("UPDATE voxflow_job_inbox SET body = body WHERE id = %s",
                                (row.id,))
            ack = asyncio.create_task(inbox.ack(session, [row.id]))
            await wait_for(lambda: _waiting(watch, "acked_at"), 60,
                           "the ack to wait for the other transaction")
            await other.commit()
            assert await ack == 1
        assert await inbox.pending(session) == []


async def test_a_conflict_on_every_try_is_run_conflict_tries_times_not_more(
    schema: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Review finding 4: the worker's start rode out its removal of dead workers' rows
    with a conflict loop of its own around the inbox's transaction, which has one: a
    conflict recurring on every try ran 6 x 6 = 36 times, saying "try n of 6" for both
    loops. Here a trigger refuses every such DELETE with 40001 (a sequence, which no
    rollback undoes, counts them): it is run CONFLICT_TRIES times, then the worker is
    refused, naming it."""
    monkeypatch.setattr(pg_retry, "_CONFLICT_BACKOFF", (0.001, 0.001))
    caplog.set_level(logging.INFO, logger="voxflow")
    queue = PostgresJobQueue(PG_URL, schema=schema)
    await queue.migrate()
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f'CREATE SEQUENCE "{schema}".vx_test_tries')
        conn.execute(
            f'CREATE FUNCTION "{schema}".vx_test_conflict() RETURNS trigger LANGUAGE plpgsql '
            f"AS $$ BEGIN PERFORM nextval('\"{schema}\".vx_test_tries'); RAISE EXCEPTION "
            "'a conflict of the test''s' USING ERRCODE = '40001'; END $$")
        conn.execute(f'CREATE TRIGGER vx_test_conflict BEFORE DELETE ON "{schema}".'
                     f'procrastinate_workers FOR EACH STATEMENT EXECUTE FUNCTION '
                     f'"{schema}".vx_test_conflict()')
    try:
        with pytest.raises(DatabaseRefusedError) as refused:
            await queue.run_worker(heartbeat=0.2, stalled_after=2.0, report_patience=5.0)
    finally:
        queue.close()
        await queue.inbox.close()
    assert refused.value.sqlstate == "40001"
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        row = conn.execute("SELECT CASE WHEN is_called THEN last_value ELSE 0 END "
                           f'FROM "{schema}".vx_test_tries').fetchone()
    assert row is not None and row[0] == pg_retry.CONFLICT_TRIES
    retried = [r.getMessage() for r in caplog.records
               if "conflict with another" in r.getMessage()]
    assert len(retried) == pg_retry.CONFLICT_TRIES - 1, retried
    assert retried[-1].endswith(f"(try {pg_retry.CONFLICT_TRIES} of {pg_retry.CONFLICT_TRIES})")


async def test_a_real_conflict_on_every_try_is_refused_naming_it_and_its_tries(
    schema: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A real serialization failure on each of the CONFLICT_TRIES tries (the trigger test
    above makes its own 40001): another transaction updates the inbox row, the ack waits
    for it and is refused when it commits, and the row is locked again before each try.
    The caller hears a DatabaseRefusedError naming the conflict and that it recurred on
    all tries (before: "a few times ... or is not transient"), and the ack wrote nothing."""
    monkeypatch.setattr(pg_retry, "_CONFLICT_BACKOFF", (0.3, 0.3))  # (the re-lock's head start)
    async with _a_pending_row(schema) as (inbox, session, row):
        conflicts = 0
        async with await psycopg.AsyncConnection.connect(
                _url(schema)) as other, await psycopg.AsyncConnection.connect(
                PG_URL, autocommit=True) as watch:
            lock = "UPDATE voxflow_job_inbox SET body = body WHERE id = %s"
            await other.execute(lock, (row.id,))
            ack = asyncio.create_task(inbox.ack(session, [row.id]))
            holder = other.info.backend_pid

            async def blocked() -> bool:  # (by `other`'s lock now, not a stale wait)
                if ack.done():
                    raise AssertionError(f"the ack ended after {conflicts} conflicts: {ack!r}")
                cursor = await watch.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE %s = ANY("
                    "pg_blocking_pids(pid)) AND query LIKE '%%acked_at%%'", (holder,))
                row = await cursor.fetchone()
                return row is not None and row[0] > 0

            while conflicts < pg_retry.CONFLICT_TRIES:
                await wait_for(blocked, 30, "the ack to wait for the other transaction")
                await other.commit()  # the ack's try is refused (40001)
                conflicts += 1
                await other.execute(lock, (row.id,))  # locked again before the next try
            with pytest.raises(DatabaseRefusedError) as refused:
                await asyncio.wait_for(ack, 30)
            await other.rollback()
        assert refused.value.sqlstate == "40001"
        assert "serialization_failure" in str(refused.value)
        assert f"recurred on all {pg_retry.CONFLICT_TRIES} tries" in str(refused.value)
        assert [r.id for r in await inbox.pending(session)] == [row.id]  # not acked
