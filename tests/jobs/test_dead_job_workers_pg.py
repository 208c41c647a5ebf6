"""A killed job worker's ``procrastinate_workers`` row is removed by the job workers that
live on, and its death logged once (the probe found rows 400-500 s old kept for good:
Procrastinate removes rows only when a worker starts, and no process said a worker
died)."""

from __future__ import annotations

import asyncio
import contextlib
import logging

import pytest

from voxflow.jobs import PostgresJobQueue
from voxflow.jobs.queue import forget_workers_after


async def _worker_ids(queue: PostgresJobQueue) -> set[int]:
    return {int(r[0]) for r in await queue.inbox._execute("SELECT id FROM procrastinate_workers")}


async def _add_worker(queue: PostgresJobQueue, silent_for: float) -> int:
    """A row as a job worker killed ``silent_for`` seconds ago leaves it."""
    [(worker_id,)] = await queue.inbox._execute(
        "INSERT INTO procrastinate_workers (last_heartbeat) VALUES "
        "(now() - make_interval(secs => %s)) RETURNING id", (silent_for,))
    return int(worker_id)


async def test_a_killed_job_workers_row_is_removed_by_a_live_one_and_its_death_logged_once(
    queue: PostgresJobQueue, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="voxflow.jobs")
    assert forget_workers_after(1.0) == 120.0 and forget_workers_after(30.0) == 360.0
    early = await _add_worker(queue, silent_for=450)  # the probe's: 400-500 s old
    runs = [asyncio.create_task(queue.run_worker(heartbeat=0.2, stalled_after=1.0))
            for _ in range(2)]  # two live workers sweep at once: one removes a row
    try:
        async with asyncio.timeout(30):  # removed as they start (Procrastinate does it
            while len(await _worker_ids(queue) - {early}) < 2:  # noqa: ASYNC110
                await asyncio.sleep(0.1)  # silently), and said
        assert early not in await _worker_ids(queue)
        dead = await _add_worker(queue, silent_for=450)  # killed while they run
        paused = await _add_worker(queue, silent_for=60)  # stalled, not yet forgotten
        async with asyncio.timeout(30):
            while dead in await _worker_ids(queue):  # noqa: ASYNC110  # a table
                await asyncio.sleep(0.1)
        await asyncio.sleep(0.5)  # more sweeps by both: nothing more to say
    finally:
        for run in runs:
            run.cancel()
        for run in runs:
            with contextlib.suppress(asyncio.CancelledError):
                await run
    remaining = await _worker_ids(queue)
    assert paused in remaining and dead not in remaining
    deaths = [r for r in caplog.records if "is gone" in r.getMessage()]
    assert [r.levelname for r in deaths] == ["WARNING", "WARNING"]
    assert deaths[0].getMessage().startswith(f"job worker {early} is gone: no heartbeat for 45")
    assert deaths[1].getMessage().startswith(f"job worker {dead} is gone: no heartbeat for 45")
