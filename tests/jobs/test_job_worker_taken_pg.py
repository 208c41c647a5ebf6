"""Jobs of a job worker that was away while they ran (issue 29): a sweep of another worker
removed its row (the jobs' worker cleared), or queued its jobs again (its heartbeat was
old). Before, a worker that came back and wrote its row again left its jobs without a
worker, so the next sweep queued them again and the function ran twice; and a job
queued again went on running here to its end, its finish refused.

Now a worker putting its row back takes back, in the same statement, the jobs it runs that
no sweep queued again, and a worker whose job was queued again cancels its run here. A
real PostgreSQL (a database of the test's own, refusing connections for a while), a job
worker in-process, a second queue object as the other worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.conftest import PgFaults
from tests.jobs.queue_kit import all_rows, wait_for, wait_for_update
from tests.jobs.worker_kit import WorkerRun, queue_job, running_worker
from voxflow.jobs import BackgroundJob, JobContext, PostgresJobQueue, apply_inbox, background_job
from voxflow.wiring import AssistantState

pytestmark = pytest.mark.unit

_RUNS: dict[str, Any] = {}


@background_job(kind="worker_taken_tests.slow")
async def slow(job: JobContext) -> str:
    """Runs until the test releases it; says each attempt's start and cancellation."""
    _RUNS["started"].append(job.job.attempt)
    try:
        await _RUNS["release"].wait()
    except asyncio.CancelledError:
        _RUNS["cancelled"].append(job.job.attempt)
        raise
    return f"Done on attempt {job.job.attempt}."


@contextlib.asynccontextmanager
async def _slow_job(url: str
                    ) -> AsyncIterator[tuple[WorkerRun, AssistantState, BackgroundJob, int]]:
    """A worker running a :func:`slow` job: the worker, the session's state, the job and
    its queue id."""
    _RUNS.update(started=[], cancelled=[], release=asyncio.Event())
    async with running_worker(url, report_patience=60.0) as worker:
        try:
            state, job, queue_id = await queue_job(worker.queue, slow.kind)

            async def started() -> bool:
                return bool(_RUNS["started"])

            await wait_for(started, 60, "the job to start")
            yield worker, state, job, queue_id
        finally:
            _RUNS["release"].set()  # (a stop waits for the running jobs)


async def test_a_worker_whose_row_was_removed_takes_its_running_jobs_back(
    pg_faults: PgFaults, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="voxflow.jobs")
    sibling = PostgresJobQueue(pg_faults.url)
    async with _slow_job(pg_faults.url) as (worker, state, job, _):
        queue = worker.queue
        with pg_faults.down():
            await asyncio.sleep(3.0)  # (longer than stalled_after)
        # another worker takes the survivor's row for a dead worker's (a job worker
        # starting, or a sweep): the running job loses its worker
        gone = await sibling.forget_dead_workers(0.0)
        assert gone, "no worker row to remove"

        async def back() -> bool:
            rows = await sibling.inbox._execute("SELECT id FROM procrastinate_workers")
            return {r[0] for r in rows} >= {worker_id for worker_id, _ in gone}

        await wait_for(back, 60, "the worker to put its row back")
        await wait_for(worker.is_ready, 60, "the worker to take jobs again")
        # the next sweep: the job is run by a live worker that heartbeats
        assert await sibling.retry_stalled(2.0) == []
        _RUNS["release"].set()
        await wait_for_update(queue.inbox, state.id, "completed|failed", 60,
                              "the job to settle")
        apply_inbox(state, await all_rows(queue.inbox, state.id))
        assert (state.jobs[job.job_id].status, state.jobs[job.job_id].announcement) == (
            "completed", "Done on attempt 1.")
    await sibling.inbox.close()
    assert _RUNS["started"] == [1], _RUNS  # (run once)


async def test_a_worker_whose_job_was_queued_again_cancels_its_run(
    pg_faults: PgFaults, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="voxflow.jobs")
    sibling = PostgresJobQueue(pg_faults.url)
    async with _slow_job(pg_faults.url) as (worker, state, job, queue_id):
        queue = worker.queue
        # a sweep that judged the worker dead (it was away longer than its
        # stalled_after, as a partitioned worker is): the job is queued again
        assert await sibling.retry_stalled(0.0) == [queue_id]

        async def cancelled() -> bool:
            return bool(_RUNS["cancelled"])

        await wait_for(cancelled, 60, "the first attempt's run here to be cancelled")
        assert _RUNS["cancelled"] == [1], _RUNS

        async def second() -> bool:
            return 2 in _RUNS["started"]

        await wait_for(second, 60, "the next attempt to start")
        _RUNS["release"].set()
        await wait_for_update(queue.inbox, state.id, "completed|failed", 60,
                              "the job to settle", attempt=2)
        apply_inbox(state, await all_rows(queue.inbox, state.id))
        assert (state.jobs[job.job_id].status, state.jobs[job.job_id].announcement) == (
            "completed", "Done on attempt 2.")
    await sibling.inbox.close()
    said = [r.getMessage() for r in caplog.records if "queued again by another" in
            r.getMessage()]
    assert len(said) == 1, said


async def test_a_beat_waiting_for_the_rows_removal_takes_back_what_it_cleared(
    schema: str, queue: PostgresJobQueue,
) -> None:
    """The worker's row removed by a transaction still open when its beat runs: the beat
    waits for it, then puts the row back; the job the removal cleared after the beat's
    snapshot is taken back in the same statement (it stayed without a worker, so a sweep
    before the next beat ran it a second time: seen under load)."""
    import threading

    import psycopg

    from tests.conftest import schema_url
    from voxflow.jobs.worker_app import _BEAT

    url = schema_url(schema)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("INSERT INTO procrastinate_workers (id, last_heartbeat) "
                     "OVERRIDING SYSTEM VALUE VALUES (1, now())")
        row = conn.execute(
            "INSERT INTO procrastinate_jobs (queue_name, task_name, args, status, "
            "worker_id, attempts) VALUES ('voxflow', 't', '{}', 'doing', 1, 0) "
            "RETURNING id").fetchone()
    assert row is not None
    job_id = row[0]
    found: list[tuple[int, str]] = []

    def beat() -> None:
        with psycopg.connect(url, autocommit=True) as conn:
            found.extend(conn.execute(_BEAT, {"ids": [1], "jobs": [job_id],
                                              "attempts": [0]}).fetchall())

    with psycopg.connect(url) as removal:  # (one transaction until the block ends)
        removal.execute("DELETE FROM procrastinate_workers WHERE id = 1")
        beating = threading.Thread(target=beat)
        beating.start()

        async def waits() -> bool:
            with psycopg.connect(url, autocommit=True) as conn:
                waiting = conn.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                    "AND query LIKE '%%procrastinate_workers%%'").fetchone()
            return waiting is not None and waiting[0] > 0

        await wait_for(waits, 30, "the beat to wait for the removal")
    await asyncio.to_thread(beating.join, 30)
    assert sorted(found) == [(1, "job"), (1, "row")], found
    with psycopg.connect(url, autocommit=True) as conn:
        worker = conn.execute("SELECT worker_id FROM procrastinate_jobs WHERE id = %s",
                              (job_id,)).fetchone()
    assert worker == (1,), worker
