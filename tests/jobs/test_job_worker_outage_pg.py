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
import logging
import signal
import subprocess
from pathlib import Path

import pytest

from tests.conftest import PgFaults
from tests.jobs.queue_kit import all_rows, owner_state, wait_for, wait_for_marker, wait_for_update
from tests.jobs.worker_kit import WorkerProcess, books, queue_job, reported, running_worker
from voxflow.jobs import PostgresJobQueue, apply_inbox

pytestmark = pytest.mark.unit

PATIENCE = 1.0


def _messages(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if text in r.getMessage()]


async def test_a_worker_rides_out_an_outage_past_twice_its_patience(
    pg_faults: PgFaults, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="voxflow.jobs")
    async with running_worker(pg_faults.url, report_patience=PATIENCE) as worker:
        queue, run = worker.queue, worker.task
        with pg_faults.down():
            # the worker finds its database away (its heartbeat, its fetches) and says
            # so on /ready; the outage then lasts many patiences and heartbeats
            await wait_for(worker.not_ready, 60, "the worker to find its database away")
            for _ in range(8):
                await asyncio.sleep(PATIENCE)
                assert not run.done(), run
        await wait_for(worker.is_ready, 60, "the worker to take jobs again")
        assert not run.done(), run  # it never stopped
        state, job, _ = await queue_job(queue, books.kind)  # queued after the outage
        await wait_for_update(queue.inbox, state.id, "failed|completed", 60,
                              "the job queued after the outage to run")
        apply_inbox(state, await all_rows(queue.inbox, state.id))
        assert (state.jobs[job.job_id].status, state.jobs[job.job_id].announcement) == (
            "completed", "Your table for two is booked.")
        assert not run.done(), run
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
    sibling = PostgresJobQueue(pg_faults.url)
    try:
        async with running_worker(pg_faults.url, report_patience=PATIENCE) as worker:
            queue = worker.queue
            with pg_faults.down():
                await wait_for(worker.not_ready, 60, "the worker to find its database away")
                await asyncio.sleep(3 * PATIENCE)
            # a sibling's sweep as the database is back: every row older than its
            # statement (the survivor's among them) is taken for a dead worker's
            gone = await sibling.forget_dead_workers(0.0)
            assert gone, "no worker row to remove"
            state, job, _ = await queue_job(queue, books.kind)
            await wait_for(reported(queue, state.id, worker), 60,
                           "the job queued after the sweep to run")
            apply_inbox(state, await all_rows(queue.inbox, state.id))
            assert state.jobs[job.job_id].status == "completed", state.jobs[job.job_id]
            rows = await sibling.inbox._execute("SELECT id FROM procrastinate_workers")
            assert {r[0] for r in rows} == {worker_id for worker_id, _ in gone}  # back
            assert not worker.task.done(), worker.task
    finally:
        await sibling.inbox.close()
    assert _messages(caplog, "registered again"), _messages(caplog, "row")


async def test_a_job_worker_process_is_not_ready_through_an_outage_and_never_exits(
    pg_faults: PgFaults, tmp_path: Path,
) -> None:
    """``voxflow jobs worker``: its ``/ready`` says the database is unreachable while it
    is, the process keeps running past many patiences, says the outage once (not per
    try, psycopg's pool's lines included), takes jobs again, and SIGTERM still stops it."""
    worker = WorkerProcess(pg_faults.url, tmp_path / "worker.log", report_patience=PATIENCE)
    process = worker.process
    queue = PostgresJobQueue(pg_faults.url)
    try:
        await wait_for(worker.ready, 60, "the job worker to be ready")
        with pg_faults.down():
            await wait_for(worker.says("database is unreachable"), 60,
                           "/ready to say the database is unreachable")
            for _ in range(8):
                await asyncio.sleep(PATIENCE)
                assert process.poll() is None, worker.text()
        await wait_for(worker.ready, 60, "the job worker to be ready again")
        state, job = owner_state(flight="IB 6")
        await queue.enqueue_async(job)
        await wait_for_update(queue.inbox, state.id, "completed", 60,
                              "the job queued after the outage to run")
        assert process.poll() is None, worker.text()
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        try:
            code = await asyncio.to_thread(process.wait, 60)
        except subprocess.TimeoutExpired:
            process.kill()
            code = await asyncio.to_thread(process.wait)
        queue.close()
        await queue.inbox.close()
    text = worker.text()
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
    worker = WorkerProcess(pg_faults.url, tmp_path / "worker.log", report_patience=PATIENCE)
    process = worker.process
    try:
        await wait_for(worker.ready, 60, "the job worker to be ready")
        with pg_faults.down():
            await wait_for(worker.says("database is unreachable"), 60,
                           "/ready to say the database is unreachable")
            process.send_signal(signal.SIGTERM)
            try:
                code = await asyncio.to_thread(process.wait, 60)
            except subprocess.TimeoutExpired:
                raise AssertionError("SIGTERM did not stop the worker within 60 s: "
                                     + worker.text()) from None
    finally:
        if process.poll() is None:
            process.kill()
            await asyncio.to_thread(process.wait)
    text = worker.text()
    assert code == 0, text
    assert "Traceback" not in text, text
    assert "could not remove its row" in text, text


async def test_a_job_worker_stopping_during_an_outage_says_stopping_on_ready(
    pg_faults: PgFaults, tmp_path: Path,
) -> None:
    """SIGTERM during an outage, a job still running (the stop waits for it): ``/ready``
    says the worker is stopping, not that the database is unreachable (which it said,
    as if the worker would take jobs again once it answers)."""
    marker = str(tmp_path / "long")
    worker = WorkerProcess(pg_faults.url, tmp_path / "worker.log", report_patience=PATIENCE)
    process = worker.process
    queue = PostgresJobQueue(pg_faults.url)
    try:
        await wait_for(worker.ready, 60, "the job worker to be ready")
        _, job = owner_state(flight="IB 8", seconds=600, marker=marker)
        await queue.enqueue_async(job)
        await wait_for_marker(marker, 1, 60, "the long job to start")
        with pg_faults.down():
            await wait_for(worker.says("database is unreachable"), 60,
                           "/ready to say the database is unreachable")
            process.send_signal(signal.SIGTERM)
            await wait_for(worker.says("stopping"), 30, "/ready to say the worker is stopping")
            assert process.poll() is None, worker.text()  # (the job still runs)
    finally:
        if process.poll() is None:
            process.kill()
        await asyncio.to_thread(process.wait)
        queue.close()
        await queue.inbox.close()
