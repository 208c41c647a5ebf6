"""What the job-worker tests over a real PostgreSQL share (``test_job_*_pg.py``): a worker
run in-process until the test ends (:func:`running_worker`), a ``voxflow jobs worker``
process asked on its ``/ready`` (:class:`WorkerProcess`), a job queued for a session
(:func:`queue_job`) and the error a query gets (:func:`pg_error`); each test file keeps
only its scenario."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.conftest import PG_URL
from tests.jobs.queue_kit import FLOW, ROOT, all_rows, wait_for
from voxflow.jobs import BackgroundJob, JobContext, PostgresJobQueue, add_job, background_job
from voxflow.wiring import AssistantState

__all__ = ["WorkerProcess", "WorkerRun", "books", "http_get", "pg_error", "queue_job", "reported",
           "running_worker", "session_job"]


@background_job(kind="worker_kit.books")
async def books(job: JobContext) -> str:
    return "Your table for two is booked."


@dataclass(slots=True)
class WorkerRun:
    """A job worker running in-process: its queue, its task and what it said of being
    ready to take jobs (``running=``, as ``/ready`` hears it)."""

    queue: PostgresJobQueue
    task: asyncio.Task[Any]
    ready: list[bool]

    async def is_ready(self) -> bool:
        """Taking jobs (an AssertionError if the worker stopped)."""
        if self.task.done():
            raise AssertionError(f"the worker stopped: {self.task!r}")
        return bool(self.ready) and self.ready[-1]

    async def not_ready(self) -> bool:
        """It said it cannot take jobs (its database is away)."""
        return bool(self.ready) and not self.ready[-1]


@contextlib.asynccontextmanager
async def running_worker(url: str, *, heartbeat: float = 0.2, stalled_after: float = 2.0,
                         migrate: bool = True, wait: bool = True, **options: Any,
                         ) -> AsyncIterator[WorkerRun]:
    """A job worker on ``url`` (its queue migrated first unless not ``migrate``), taking
    jobs (``wait``) when the block starts, stopped and closed when it ends; ``options``
    go to :meth:`PostgresJobQueue.run_worker` (``report_patience``)."""
    queue = PostgresJobQueue(url)
    if migrate:
        await queue.migrate()
    ready: list[bool] = []
    task = asyncio.create_task(queue.run_worker(
        heartbeat=heartbeat, stalled_after=stalled_after, running=ready.append, **options))
    worker = WorkerRun(queue, task, ready)
    try:
        if wait:
            await wait_for(worker.is_ready, 60, "the worker to take jobs")
        yield worker
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        queue.close()
        await queue.inbox.close()


def session_job(kind: str) -> tuple[AssistantState, BackgroundJob]:
    """A new session's state and a job of ``kind`` added to it (not queued yet)."""
    state = AssistantState()
    job = BackgroundJob(session_id=state.id, kind=kind)
    assert add_job(state, job)
    return state, job


async def queue_job(queue: PostgresJobQueue, kind: str
                    ) -> tuple[AssistantState, BackgroundJob, int]:
    """:func:`session_job`, queued: the state, the job and its queue id."""
    state, job = session_job(kind)
    return state, job, await queue.enqueue_async(job)


def reported(queue: PostgresJobQueue, session_id: str, worker: WorkerRun | None = None
             ) -> Callable[[], Awaitable[bool]]:
    """A :func:`~tests.jobs.queue_kit.wait_for` predicate: a job of the session settled
    (its report is in the inbox); an AssertionError if ``worker`` stopped meanwhile."""
    async def settled() -> bool:
        if worker is not None and worker.task.done():
            raise AssertionError(f"the worker stopped: {worker.task!r}")
        return any(r.update is not None and r.update.kind in ("failed", "completed")
                   for r in await all_rows(queue.inbox, session_id))

    return settled


def http_get(url: str) -> tuple[int, str]:
    """The status and body ``url`` answers (0 and nothing: not listening yet)."""
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except urllib.error.URLError:
        return 0, ""  # not listening (yet)


class WorkerProcess:
    """``voxflow jobs worker`` on ``url`` as a user starts it, its metrics (``/ready``) on
    a free port, its lines in ``log``."""

    def __init__(self, url: str, log: Path, *, report_patience: float) -> None:
        from voxflow_adapters.testkit.flows import free_port  # (the adapters' test kit)

        port = free_port()
        self.base = f"http://127.0.0.1:{port}"
        self.log = log
        env = {**os.environ, "VOXFLOW_DATABASE_URL": url, "PYTHONPATH": str(ROOT)}
        with open(log, "wb") as err:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "voxflow.cli", "jobs", "worker", FLOW, "--heartbeat",
                 "0.2", "--stalled-after", "2", "--report-patience", str(report_patience),
                 "--metrics-port", str(port), "--log-level", "INFO"],
                cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=err)

    def text(self) -> str:
        """What it has said so far."""
        return self.log.read_text()

    async def ready(self) -> bool:
        """``/ready`` answers 200."""
        return (await asyncio.to_thread(http_get, f"{self.base}/ready"))[0] == 200

    def says(self, text: str) -> Callable[[], Awaitable[bool]]:
        """A :func:`~tests.jobs.queue_kit.wait_for` predicate: ``/ready`` answers 503
        saying ``text``."""
        async def answer() -> bool:
            status, body = await asyncio.to_thread(http_get, f"{self.base}/ready")
            return status == 503 and text in body

        return answer


def pg_error(sql: str, *setup: str) -> psycopg.Error:
    """The error PostgreSQL gives ``sql`` on a connection after ``setup``."""
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        for statement in setup:
            conn.execute(statement)
        with pytest.raises(psycopg.Error) as raised:
            conn.execute(sql)
    return raised.value
