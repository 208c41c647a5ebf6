"""A restored session's ``queued`` job that is not in the queue (its process never got
it there, or the queue lost it) is queued again when a call worker takes the session
over, exactly once: the queue keeps one job per job id and revision. Real PostgreSQL
(a fresh schema per test; skipped with the reason where none answers), a real job-worker
subprocess."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tests.jobs.queue_kit import FLOW, owner_state, start_job_worker, stop, wait_for
from voxflow import persist
from voxflow.flow.persistence import SQLiteFlowPersistence
from voxflow.jobs import BackgroundJob, PostgresJobQueue, add_job
from voxflow.jobs.queue import TASK_NAME
from voxflow.loader import load_flow_class
from voxflow.wiring import AssistantWiring

pytestmark = pytest.mark.unit


async def queue_rows(queue: PostgresJobQueue, job_id: str) -> list[tuple[Any, ...]]:
    """The queue's jobs for voxflow job ``job_id`` (id, status, attempts)."""
    return await queue.inbox._execute(
        "SELECT id, status, attempts FROM procrastinate_jobs WHERE task_name = %s "
        "AND args->>'job_id' = %s ORDER BY id", (TASK_NAME, job_id))


async def test_enqueue_is_idempotent_by_job_id_and_revision(queue: PostgresJobQueue) -> None:
    _, job = owner_state(flight="KL 1")
    first = await queue.enqueue_async(job)
    assert await queue.enqueue_async(job) == first  # the same queue job, not a second
    assert await asyncio.gather(*(queue.enqueue_async(job) for _ in range(4))) == [first] * 4
    assert [r[0] for r in await queue_rows(queue, job.job_id)] == [first]
    job.revision = 2  # a new version of the job is a new queue job
    second = await queue.enqueue_async(job)
    assert second != first
    assert [r[0] for r in await queue_rows(queue, job.job_id)] == [first, second]


async def test_a_restored_queued_job_never_enqueued_runs_once_and_is_announced_once(
    schema: str, queue: PostgresJobQueue, tmp_path: Path
) -> None:
    """The stored session records a ``queued`` job its process died before queueing (or
    the queue lost): the call worker restoring it queues it again, a job worker runs it,
    it is announced once; the next owner's takeover queues nothing more."""
    store = SQLiteFlowPersistence(tmp_path / "calls.db")
    saved = persist(store)(type("SavedTravel", (load_flow_class(FLOW),), {}))
    dead = saved()
    async with AssistantWiring(dead) as wiring:  # a turn, so the job has its origin turn
        await wiring.text_turn("hello")
    turn_id = next(iter(dead.state.turns))
    job = BackgroundJob(session_id=dead.state.id, origin_turn_id=turn_id,
                        kind="queue_tests.check_flight", inputs={"flight": "LX 8"})
    assert add_job(dead.state, job)
    await dead.asave_state("died")  # stored queued; the queue never saw it
    assert await queue_rows(queue, job.job_id) == []
    session_id = dead.state.id
    worker = start_job_worker(schema)
    try:
        flow = saved()
        assert await flow.aload_session(session_id)
        assert flow.state.jobs[job.job_id].status == "queued"
        async with AssistantWiring(flow, job_queue=queue) as call:
            assert await call.wait_for_jobs(60), "the restored job never ran"
            assert await call.announce_ready() == ["Flight LX 8 is on time (attempt 1)."]
            assert await call.announce_ready() == []
            await flow.asave_state("announced")
        # the job worker reports the update before procrastinate marks its queue job
        # finished: wait for the final state (under load the row reads 'doing' a while)
        async def finished() -> bool:
            rows = await queue_rows(queue, job.job_id)
            return bool(rows) and all(r[1] not in ("todo", "doing") for r in rows)

        await wait_for(finished, 60, "the queue job's final state")
        assert [r[1] for r in await queue_rows(queue, job.job_id)] == ["succeeded"]

        # a later owner (its state still says queued: a save lost after the run) queues
        # nothing again: the queue job is there, finished
        stale = saved()
        assert await stale.aload_session(session_id)
        stale.state.jobs[job.job_id] = job.model_copy()
        async with AssistantWiring(stale, job_queue=queue):
            pass  # closing drains the takeover's enqueue
        assert len(await queue_rows(queue, job.job_id)) == 1
    finally:
        code, err = stop(worker)
        store.close()
    assert code == 0, err
