"""A job whose fetch committed but whose COMMIT's answer the worker never got (the
connection broke between the two) is not stranded: the worker fetched again, and the first job
stayed running under that live worker for good (its heartbeat went on, so no sweep took
it for stalled).

A real PostgreSQL behind a proxy on loopback (``benchmarks/_pg_cut.py``) that lets the
fetch's answer through, then drops the answer of its transaction's COMMIT and cuts the
connection: the job is taken and the worker does not know.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import pytest

from tests.conftest import PgFaults
from tests.flow.test_postgres_faults import CommitCut
from tests.jobs.queue_kit import all_rows, wait_for
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


@background_job(kind="fetch_cut_tests.books")
async def books(job: JobContext) -> str:
    return "Your table for two is booked."


async def test_a_job_whose_fetch_answer_was_lost_runs(
    pg_faults: PgFaults, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="voxflow.jobs")
    queue = PostgresJobQueue(pg_faults.url)
    await queue.migrate()
    with CommitCut(pg_faults.url) as cut:
        worker_queue = PostgresJobQueue(cut.url)
        ready: list[bool] = []
        run = asyncio.create_task(worker_queue.run_worker(
            heartbeat=0.2, stalled_after=2.0, report_patience=1.0, running=ready.append))
        try:
            async def is_ready() -> bool:
                return bool(ready) and ready[-1]

            await wait_for(is_ready, 60, "the worker to take jobs")
            state = AssistantState()
            job = BackgroundJob(session_id=state.id, kind=books.kind)
            assert add_job(state, job)
            # the fetch that takes this job (its answer holds the job): the answer of its
            # COMMIT is dropped, its connection cut
            cut.arm_after_answer(job.job_id.encode(), b"SELECT 1\x00")
            await queue.enqueue_async(job)
            assert await asyncio.to_thread(cut.wait_cut, 30), "no fetch answer was cut"

            async def reported() -> bool:
                if run.done():
                    raise AssertionError(f"the worker stopped: {run!r}")
                return any(r.update is not None and r.update.kind in ("failed", "completed")
                           for r in await all_rows(queue.inbox, state.id))

            await wait_for(reported, 30, "the job whose fetch answer was lost to run")
            apply_inbox(state, await all_rows(queue.inbox, state.id))
            assert state.jobs[job.job_id].status == "completed", state.jobs[job.job_id]
            assert not run.done(), run
        finally:
            run.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await run
            worker_queue.close()
            await worker_queue.inbox.close()
            queue.close()
            await queue.inbox.close()
    said = [r.getMessage() for r in caplog.records if "answer was lost" in r.getMessage()]
    assert len(said) == 1, said
