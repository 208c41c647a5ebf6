"""A job that finishes while its database is away reports its result when the database
returns (issue 29): the report was tried for about 30 s and, whatever the outage, the
job settled ``failed`` ("its report could not be stored"), its result lost, or stayed
``running`` for good when the outage outlasted the retries.

A real PostgreSQL: a database of the test's own (``pg_faults``) that refuses connections
and has its open ones reset (``ALTER DATABASE ... ALLOW_CONNECTIONS false``), as a
restarted server does, while an in-process job worker runs the job. The long outage
(past the old 30 s) is in ``benchmarks/faults.py --only jobs``.
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
from tests.jobs.worker_kit import queue_job, running_worker
from voxflow.jobs import BackgroundJob, JobContext, PostgresJobQueue, apply_inbox, background_job
from voxflow.wiring import AssistantState

pytestmark = pytest.mark.unit

class _Gate:
    """When the job started, and when it may return (new events for each test's loop)."""

    started = asyncio.Event()
    finish = asyncio.Event()

    @classmethod
    def reset(cls) -> None:
        cls.started, cls.finish = asyncio.Event(), asyncio.Event()


@background_job(kind="outage_tests.finishes_when_told")
async def finishes_when_told(job: JobContext) -> str:
    _Gate.started.set()
    await _Gate.finish.wait()
    return "Your table for two is booked."


@contextlib.asynccontextmanager
async def a_running_job(
    pg_faults: PgFaults, *, heartbeat: float, stalled_after: float, **options: Any,
) -> AsyncIterator[tuple[PostgresJobQueue, AssistantState, BackgroundJob, asyncio.Task[Any]]]:
    """A job queued and running on a worker of the test's own database (it finishes when
    ``_Gate.finish`` is set): the queue, the session's state, the job, the worker's task."""
    _Gate.reset()
    async with running_worker(pg_faults.url, heartbeat=heartbeat, stalled_after=stalled_after,
                              wait=False, **options) as worker:
        state, job, _ = await queue_job(worker.queue, finishes_when_told.kind)
        async with asyncio.timeout(60):
            await _Gate.started.wait()
        await wait_for_update(worker.queue.inbox, state.id, "stage_started", 30,
                              "the job to run")
        yield worker.queue, state, job, worker.task


async def test_a_result_finished_during_an_outage_is_reported_when_the_database_returns(
    pg_faults: PgFaults, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="voxflow.jobs")
    async with a_running_job(pg_faults, heartbeat=0.5, stalled_after=30.0) as (queue, state,
                                                                            job, run):
        def waiting() -> list[str]:
            return [r.getMessage() for r in caplog.records
                    if "waits for the job inbox" in r.getMessage()]

        with pg_faults.down():
            _Gate.finish.set()  # the job returns while its database is away

            async def the_report_waits() -> bool:
                return bool(waiting())

            await wait_for(the_report_waits, 30, "the report to find the inbox away")
            await asyncio.sleep(2.0)  # away a while: its report is tried again meanwhile
        await wait_for_update(queue.inbox, state.id, "failed|completed", 60,
                              "the job's report once the database is back")
        apply_inbox(state, await all_rows(queue.inbox, state.id))
        assert not run.done(), run  # the worker rode the outage out
    settled = state.jobs[job.job_id]
    assert (settled.status, settled.error) == ("completed", None)
    assert settled.announcement == "Your table for two is booked."
    assert len(waiting()) == 1, waiting()  # said once for the outage, not per try
    assert any("stored after" in r.getMessage() for r in caplog.records)


async def test_no_job_is_run_again_for_a_heartbeat_the_outage_stopped(
    pg_faults: PgFaults, caplog: pytest.LogCaptureFixture,
) -> None:
    """An outage longer than ``stalled_after`` leaves every worker's heartbeat that old:
    the first sweep after it took the live worker's own running job for stalled and ran
    it again (the finished attempt's report refused). Sweeps wait ``stalled_after``
    after the database is back, and the heartbeats resume meanwhile."""
    caplog.set_level(logging.INFO, logger="voxflow.jobs")
    async with a_running_job(pg_faults, heartbeat=0.2, stalled_after=1.0) as (queue, state,
                                                                           job, _):
        with pg_faults.down():
            _Gate.finish.set()

            async def the_report_waits() -> bool:
                return any("waits for the job inbox" in r.getMessage()
                           for r in caplog.records)

            await wait_for(the_report_waits, 30, "the report to find the inbox away")
            await asyncio.sleep(2.0)  # twice stalled_after without a heartbeat
        await wait_for_update(queue.inbox, state.id, "failed|completed", 60,
                              "the job's report once the database is back")
        await asyncio.sleep(1.5)  # past the sweeps' wait: nothing is re-run after it
        rows = await all_rows(queue.inbox, state.id)
    apply_inbox(state, rows)
    assert state.jobs[job.job_id].status == "completed"
    assert {r.attempt for r in rows} == {1}, sorted({r.attempt for r in rows})
    assert not [r for r in caplog.records if "re-queued" in r.getMessage()]


async def test_a_report_past_the_patience_runs_the_job_again_once_the_database_answers(
    pg_faults: PgFaults, caplog: pytest.LogCaptureFixture,
) -> None:
    """(issue 29) The job returned while its database was away, for longer than the
    worker's report patience: the report was given up with an error, the queue job
    failed, and the session saw the job running for good. Now the attempt is queued
    again and runs once the database answers: the session gets the true result."""
    caplog.set_level(logging.INFO, logger="voxflow.jobs")
    async with a_running_job(pg_faults, heartbeat=0.5, stalled_after=30.0,
                             report_patience=3.0) as (queue, state, job, run):
        async def given_up() -> bool:
            return any("could not be stored" in r.getMessage() for r in caplog.records)

        with pg_faults.down():
            _Gate.finish.set()  # the job returns while its database is away
            await wait_for(given_up, 30, "the report to wait its whole patience")
        await wait_for_update(queue.inbox, state.id, "failed|completed", 60,
                              "the job's report once the database is back")
        apply_inbox(state, await all_rows(queue.inbox, state.id))
        assert not run.done(), run  # the worker rode the outage out
    settled = state.jobs[job.job_id]
    assert (settled.status, settled.error, settled.attempt) == ("completed", None, 2)
    assert settled.announcement == "Your table for two is booked."
