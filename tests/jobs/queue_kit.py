"""What the PostgreSQL job-queue tests share: job-worker and call-worker subprocesses
as a user starts them, and waits on the session's inbox (real PostgreSQL; the ``schema``
and ``queue`` fixtures are in this folder's ``conftest.py``)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from tests.conftest import PG_URL, schema_url
from voxflow.jobs import BackgroundJob, JobInbox, JobUpdate, add_job
from voxflow.jobs.inbox import _entry
from voxflow.wiring import AssistantState

FLOW = str(Path(__file__).with_name("queue_flow.py")) + ":Travel"
ROOT = Path(__file__).resolve().parents[2]
KIND = "queue_tests.check_flight"
HEARTBEAT, STALLED_AFTER = 0.5, 5.0  # 10 heartbeats: a loaded machine delays some


def start_job_worker(schema: str, *extra: str, url: str | None = None
                     ) -> subprocess.Popen[bytes]:
    """A job-worker process, as a user starts it: its queue in ``schema``, the first of
    its URL's search_path (``url``: one that says so, with options of its own)."""
    env = {**os.environ, "VOXFLOW_DATABASE_URL": url or schema_url(schema),
           "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-m", "voxflow.cli", "jobs", "worker", FLOW,
         "--heartbeat", str(HEARTBEAT), "--stalled-after", str(STALLED_AFTER),
         "--log-level", "WARNING", *extra],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def start_call_worker(schema: str) -> subprocess.Popen[bytes]:
    """A call worker that starts one job, then waits to be killed (queue_call_worker.py)."""
    return subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("queue_call_worker.py")), PG_URL, schema,
         FLOW], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def stop(process: subprocess.Popen[bytes]) -> tuple[int, str]:
    """SIGTERM (a graceful stop), then the exit code and stderr (killed after 30 s)."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        _, err = process.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        _, err = process.communicate()
    return process.returncode, err.decode(errors="replace")


def owner_state(**inputs: Any) -> tuple[AssistantState, BackgroundJob]:
    """A session state holding one ``check_flight`` job with ``inputs``."""
    state = AssistantState()
    job = BackgroundJob(session_id=state.id, kind=KIND, inputs=inputs)
    assert add_job(state, job)
    return state, job


async def all_rows(inbox: JobInbox, session_id: str) -> list[Any]:
    """Every inbox row of the session, acknowledged or not."""
    rows = await inbox._execute(
        "SELECT id, session_id, job_id, revision, attempt, seq, body FROM voxflow_job_inbox "
        "WHERE session_id = %s ORDER BY id", (session_id,))
    return [_entry(r) for r in rows]


async def wait_for(predicate: Callable[[], Awaitable[bool]], seconds: float, what: str
                   ) -> None:
    """Poll ``predicate`` until it is true; an AssertionError naming ``what`` after
    ``seconds``."""
    deadline = time.monotonic() + seconds
    while not await predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {seconds} s waiting for {what}")
        await asyncio.sleep(0.1)


async def wait_for_update(inbox: JobInbox, session_id: str, kind: str, seconds: float,
                          what: str, *, attempt: int | None = None) -> None:
    """Wait until the session's inbox holds an update of ``kind`` (of ``attempt`` if
    given; ``"failed|completed"``: of either kind): a job worker reported it."""
    async def arrived() -> bool:
        return any(r.update is not None and r.update.kind in kind.split("|")
                   and (attempt is None or r.attempt == attempt)
                   for r in await all_rows(inbox, session_id))

    await wait_for(arrived, seconds, what)


async def wait_for_marker(marker: str, attempt: int, seconds: float, what: str) -> None:
    """Wait until a job's attempt touched ``marker``-<attempt> (it started)."""
    path = Path(f"{marker}-{attempt}")
    await wait_for(lambda: asyncio.to_thread(path.exists), seconds, what)


async def write_completed_run(inbox: JobInbox, job: BackgroundJob, announcement: str) -> None:
    """Write attempt 1 of ``job`` to the inbox as a job worker reports it: started, its
    stage, its ``announcement``, completed."""
    updates: list[tuple[Any, str | None, dict[str, Any]]] = [
        ("started", None, {}), ("stage_started", "run", {}),
        ("stage_completed", "run", {"announcement": announcement}), ("completed", None, {})]
    for seq, (kind, stage, outputs) in enumerate(updates, 1):
        await inbox.write(JobUpdate(session_id=job.session_id, job_id=job.job_id, revision=1,
                                    attempt=1, seq=seq, kind=kind, stage=stage, outputs=outputs))
