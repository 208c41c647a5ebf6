"""A job worker rides out a database outage of any length (issue 29): it stopped after
about twice its ``report_patience`` (its heartbeat waited that long for a connection
and failed, which stops a Procrastinate worker; unregistering waited as long again and
failed), so a supervisor had to start it again.

A real PostgreSQL: a database of the test's own (``pg_faults``) refusing connections,
its open ones reset, while a job worker waits for jobs (in-process, and a
``voxflow jobs worker`` process with its ``/ready``). The figure (the
worker's restarts through a 40 s outage) is ``benchmarks/faults.py --only jobs``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from tests.conftest import PgFaults
from tests.jobs.queue_kit import (
    FLOW,
    ROOT,
    all_rows,
    owner_state,
    wait_for,
    wait_for_marker,
    wait_for_update,
)
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


async def test_a_worker_whose_row_was_swept_during_an_outage_keeps_taking_jobs(
    pg_faults: PgFaults, caplog: pytest.LogCaptureFixture,
) -> None:
    """Another job worker starting after an outage (Procrastinate prunes the rows silent
    for its stalled_after), or a sibling's sweep, removes the survivor's row: its
    heartbeat puts the row back and its next fetch takes the job. It stopped at that
    fetch (``procrastinate_jobs_worker_id_fkey``) with a PersistenceUnavailableError
    saying the server was unreachable."""
    caplog.set_level(logging.INFO, logger="voxflow.jobs")
    queue = PostgresJobQueue(pg_faults.url)
    await queue.migrate()
    ready: list[bool] = []
    run = asyncio.create_task(queue.run_worker(
        heartbeat=0.2, stalled_after=2.0, report_patience=PATIENCE, running=ready.append))
    sibling = PostgresJobQueue(pg_faults.url)
    try:
        async def is_ready() -> bool:
            if run.done():
                raise AssertionError(f"the worker stopped: {run!r}")
            return bool(ready) and ready[-1]

        async def not_ready() -> bool:
            return bool(ready) and not ready[-1]

        await wait_for(is_ready, 60, "the worker to take jobs")
        with pg_faults.down():
            await wait_for(not_ready, 60, "the worker to find its database away")
            await asyncio.sleep(3 * PATIENCE)
        # a sibling's sweep as the database is back: every row older than its statement
        # (the survivor's among them) is taken for a dead worker's
        gone = await sibling.forget_dead_workers(0.0)
        assert gone, "no worker row to remove"
        state = AssistantState()
        job = BackgroundJob(session_id=state.id, kind=books.kind)
        assert add_job(state, job)
        await queue.enqueue_async(job)

        async def reported() -> bool:
            if run.done():
                raise AssertionError(f"the worker stopped: {run!r}")
            return any(r.update is not None and r.update.kind in ("failed", "completed")
                       for r in await all_rows(queue.inbox, state.id))

        await wait_for(reported, 60, "the job queued after the sweep to run")
        apply_inbox(state, await all_rows(queue.inbox, state.id))
        assert state.jobs[job.job_id].status == "completed", state.jobs[job.job_id]
        rows = await sibling.inbox._execute("SELECT id FROM procrastinate_workers")
        assert {r[0] for r in rows} == {worker_id for worker_id, _ in gone}  # back
        assert not run.done(), run
    finally:
        run.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await run
        queue.close()
        await queue.inbox.close()
        await sibling.inbox.close()
    assert _messages(caplog, "registered again"), _messages(caplog, "row")


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except urllib.error.URLError:
        return 0, ""  # not listening (yet)


def _start_worker(url: str, port: int, log: Path) -> subprocess.Popen[bytes]:
    """``voxflow jobs worker`` on ``url``, its metrics on ``port``, its lines in ``log``."""
    env = {**os.environ, "VOXFLOW_DATABASE_URL": url, "PYTHONPATH": str(ROOT)}
    with open(log, "wb") as err:
        return subprocess.Popen(
            [sys.executable, "-m", "voxflow.cli", "jobs", "worker", FLOW, "--heartbeat",
             "0.2", "--stalled-after", "2", "--report-patience", str(PATIENCE),
             "--metrics-port", str(port), "--log-level", "INFO"],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=err)


async def test_a_job_worker_process_is_not_ready_through_an_outage_and_never_exits(
    pg_faults: PgFaults, tmp_path: Path,
) -> None:
    """``voxflow jobs worker``: its ``/ready`` says the database is unreachable while it
    is, the process keeps running past many patiences, says the outage once (not per
    try, psycopg's pool's lines included), takes jobs again, and SIGTERM still stops it."""
    from voxflow_adapters.testkit.flows import free_port

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log = tmp_path / "worker.log"
    worker = _start_worker(pg_faults.url, port, log)
    queue = PostgresJobQueue(pg_faults.url)
    try:
        async def ready() -> bool:
            return (await asyncio.to_thread(_get, f"{base}/ready"))[0] == 200

        async def away() -> bool:
            status, body = await asyncio.to_thread(_get, f"{base}/ready")
            return status == 503 and "database is unreachable" in body

        await wait_for(ready, 60, "the job worker to be ready")
        with pg_faults.down():
            await wait_for(away, 60, "/ready to say the database is unreachable")
            for _ in range(8):
                await asyncio.sleep(PATIENCE)
                assert worker.poll() is None, log.read_text()
        await wait_for(ready, 60, "the job worker to be ready again")
        state, job = owner_state(flight="IB 6")
        await queue.enqueue_async(job)
        await wait_for_update(queue.inbox, state.id, "completed", 60,
                              "the job queued after the outage to run")
        assert worker.poll() is None, log.read_text()
    finally:
        if worker.poll() is None:
            worker.send_signal(signal.SIGTERM)
        try:
            code = await asyncio.to_thread(worker.wait, 60)
        except subprocess.TimeoutExpired:
            worker.kill()
            code = await asyncio.to_thread(worker.wait)
        queue.close()
        await queue.inbox.close()
    text = log.read_text()
    assert code == 0, text
    assert "Traceback" not in text, text
    lines = text.splitlines()
    assert len([line for line in lines if "lost its database" in line]) == 1, text
    assert len([line for line in lines if "reaches its database again" in line]) == 1, text
    assert not [line for line in lines if "psycopg" in line], text


async def test_a_job_worker_process_stops_on_sigterm_during_an_outage(
    pg_faults: PgFaults, tmp_path: Path,
) -> None:
    """Waiting for its database does not keep a stopped worker: SIGTERM during the outage
    ends it, exit 0, its row left to another worker's sweep (said)."""
    from voxflow_adapters.testkit.flows import free_port

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log = tmp_path / "worker.log"
    worker = _start_worker(pg_faults.url, port, log)
    try:
        async def ready() -> bool:
            return (await asyncio.to_thread(_get, f"{base}/ready"))[0] == 200

        async def away() -> bool:
            status, body = await asyncio.to_thread(_get, f"{base}/ready")
            return status == 503 and "database is unreachable" in body

        await wait_for(ready, 60, "the job worker to be ready")
        with pg_faults.down():
            await wait_for(away, 60, "/ready to say the database is unreachable")
            worker.send_signal(signal.SIGTERM)
            try:
                code = await asyncio.to_thread(worker.wait, 60)
            except subprocess.TimeoutExpired:
                raise AssertionError("SIGTERM did not stop the worker within 60 s: "
                                     + log.read_text()) from None
    finally:
        if worker.poll() is None:
            worker.kill()
            await asyncio.to_thread(worker.wait)
    text = log.read_text()
    assert code == 0, text
    assert "Traceback" not in text, text
    assert "could not remove its row" in text, text


async def test_a_job_worker_stopping_during_an_outage_says_stopping_on_ready(
    pg_faults: PgFaults, tmp_path: Path,
) -> None:
    """SIGTERM during an outage, a job still running (the stop waits for it): ``/ready``
    says the worker is stopping, not that the database is unreachable (which it said,
    as if the worker would take jobs again once it answers)."""
    from voxflow_adapters.testkit.flows import free_port

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log = tmp_path / "worker.log"
    marker = str(tmp_path / "long")
    worker = _start_worker(pg_faults.url, port, log)
    queue = PostgresJobQueue(pg_faults.url)
    try:
        async def ready() -> bool:
            return (await asyncio.to_thread(_get, f"{base}/ready"))[0] == 200

        def says(text: str) -> Callable[[], Awaitable[bool]]:
            async def answer() -> bool:
                status, body = await asyncio.to_thread(_get, f"{base}/ready")
                return status == 503 and text in body
            return answer

        await wait_for(ready, 60, "the job worker to be ready")
        _, job = owner_state(flight="IB 8", seconds=600, marker=marker)
        await queue.enqueue_async(job)
        await wait_for_marker(marker, 1, 60, "the long job to start")
        with pg_faults.down():
            await wait_for(says("database is unreachable"), 60,
                           "/ready to say the database is unreachable")
            worker.send_signal(signal.SIGTERM)
            await wait_for(says("stopping"), 30, "/ready to say the worker is stopping")
            assert worker.poll() is None, log.read_text()  # (the job still runs)
    finally:
        if worker.poll() is None:
            worker.kill()
        await asyncio.to_thread(worker.wait)
        queue.close()
        await queue.inbox.close()
