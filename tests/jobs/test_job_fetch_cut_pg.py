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
import logging

import pytest

from tests.conftest import PgFaults
from tests.flow.test_postgres_faults import CommitCut
from tests.jobs.queue_kit import all_rows, wait_for
from tests.jobs.worker_kit import books, reported, running_worker, session_job
from voxflow.jobs import PostgresJobQueue, apply_inbox

pytestmark = pytest.mark.unit


async def test_a_job_whose_fetch_answer_was_lost_runs(
    pg_faults: PgFaults, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="voxflow.jobs")
    queue = PostgresJobQueue(pg_faults.url)
    await queue.migrate()
    try:
        with CommitCut(pg_faults.url) as cut:
            async with running_worker(cut.url, migrate=False, report_patience=1.0) as worker:
                state, job = session_job(books.kind)
                # the fetch that takes this job (its answer holds the job): the answer of
                # its COMMIT is dropped, its connection cut
                cut.arm_after_answer(job.job_id.encode(), b"SELECT 1\x00")
                await queue.enqueue_async(job)
                assert await asyncio.to_thread(cut.wait_cut, 30), "no fetch answer was cut"
                await wait_for(reported(queue, state.id, worker), 30,
                               "the job whose fetch answer was lost to run")
                apply_inbox(state, await all_rows(queue.inbox, state.id))
                assert state.jobs[job.job_id].status == "completed", state.jobs[job.job_id]
                assert not worker.task.done(), worker.task
    finally:
        queue.close()
        await queue.inbox.close()
    said = [r.getMessage() for r in caplog.records if "answer was lost" in r.getMessage()]
    assert len(said) == 1, said
