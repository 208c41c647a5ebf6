"""A job worker rides out a database outage of any length (issue 29): it stopped after
about twice its ``report_patience`` (its heartbeat waited that long for a connection
and failed, which stops a Procrastinate worker; unregistering waited as long again and
failed), so a supervisor had to start it again.

A real PostgreSQL: a database of the test's own (``pg_faults``) refusing connections,
its open ones reset, while an in-process job worker waits for jobs. The figure (the
worker's restarts through a 40 s outage) is ``benchmarks/faults.py --only jobs``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import pytest

from tests.conftest import PgFaults
from tests.jobs.queue_kit import all_rows, wait_for, wait_for_update
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

PATIENCE = 1.0


@background_job(kind="worker_outage_tests.books")
async def books(job: JobContext) -> str:
    return "Your table for two is booked."


def _messages(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if text in r.getMessage()]


async def test_a_worker_rides_out_an_outage_past_twice_its_patience(
    pg_faults: PgFaults, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="voxflow.jobs")
    queue = PostgresJobQueue(pg_faults.url)
    await queue.migrate()
    ready: list[bool] = []
    run = asyncio.create_task(queue.run_worker(
        heartbeat=0.2, stalled_after=2.0, report_patience=PATIENCE, running=ready.append))
    try:
        async def is_ready() -> bool:
            return bool(ready) and ready[-1]

        async def not_ready() -> bool:
            return bool(ready) and not ready[-1]

        await wait_for(is_ready, 60, "the worker to take jobs")
        with pg_faults.down():
            # the worker finds its database away (its heartbeat, its fetches) and says
            # so on /ready; the outage then lasts many patiences and heartbeats
            await wait_for(not_ready, 60, "the worker to find its database away")
            for _ in range(8):
                await asyncio.sleep(PATIENCE)
                assert not run.done(), run
        await wait_for(is_ready, 60, "the worker to take jobs again")
        assert not run.done(), run  # it never stopped
        state = AssistantState()
        job = BackgroundJob(session_id=state.id, kind=books.kind)
        assert add_job(state, job)
        await queue.enqueue_async(job)  # queued after the outage
        await wait_for_update(queue.inbox, state.id, "failed|completed", 60,
                              "the job queued after the outage to run")
        apply_inbox(state, await all_rows(queue.inbox, state.id))
        assert (state.jobs[job.job_id].status, state.jobs[job.job_id].announcement) == (
            "completed", "Your table for two is booked.")
        assert not run.done(), run
    finally:
        run.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await run
        queue.close()
        await queue.inbox.close()
    # said once for the outage, and once when it is over, not at every try
    assert len(_messages(caplog, "lost its database")) == 1, _messages(caplog, "database")
    assert len(_messages(caplog, "reaches its database again")) == 1, _messages(
        caplog, "database")
