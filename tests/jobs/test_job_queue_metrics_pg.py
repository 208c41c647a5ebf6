"""The job queue's figures (``PostgresJobQueue.statistics``) and a real ``voxflow jobs
worker --metrics-port`` serving them with ``/health`` and ``/ready`` (real PostgreSQL)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import PG_URL
from tests.jobs.queue_kit import owner_state, start_job_worker, stop, wait_for
from tests.jobs.worker_kit import http_get
from voxflow.errors import PersistenceUnavailableError
from voxflow.jobs import PostgresJobQueue


def figures(body: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(body) for s in family.samples}


async def test_statistics_count_the_jobs_by_state(queue: PostgresJobQueue) -> None:
    empty = await asyncio.to_thread(queue.statistics)
    assert set(empty.jobs) == {"queued", "running", "succeeded", "failed", "cancelled",
                               "aborted"}
    assert sum(empty.jobs.values()) == 0 and empty.retried == 0
    assert empty.oldest_queued_seconds is None and empty.oldest_running_seconds is None
    for flight in ("AF 1", "AF 2"):
        await queue.enqueue_async(owner_state(flight=flight)[1])
    await asyncio.sleep(0.3)
    queued = await asyncio.to_thread(queue.statistics)
    assert queued.jobs["queued"] == 2 and queued.jobs["running"] == 0
    assert queued.oldest_queued_seconds is not None and queued.oldest_queued_seconds >= 0.25


def test_statistics_of_an_unreachable_database_is_a_typed_error() -> None:
    queue = PostgresJobQueue("postgresql://voxflow:hunter2@127.0.0.1:1/none",
                             connect_timeout=2)
    with pytest.raises(PersistenceUnavailableError) as refused:
        queue.statistics()
    assert "hunter2" not in str(refused.value)


async def test_a_job_worker_serves_the_queues_metrics_health_and_readiness(
    schema: str, queue: PostgresJobQueue, tmp_path: Path
) -> None:
    from voxflow_adapters.testkit.flows import free_port

    port = free_port()
    marker = str(tmp_path / "started")
    _, slow = owner_state(flight="IB 4", seconds=6.0, marker=marker)
    _, waiting = owner_state(flight="IB 5")
    for job in (slow, waiting):
        await queue.enqueue_async(job)
    worker = start_job_worker(schema, "--concurrency", "1", "--metrics-port", str(port),
                              "--log-level", "INFO")
    base = f"http://127.0.0.1:{port}"
    try:
        async def started() -> bool:
            return await asyncio.to_thread(os.path.exists, f"{marker}-1")

        await wait_for(started, 60, "the slow job to start")

        async def ready() -> bool:
            return (await asyncio.to_thread(http_get, f"{base}/ready"))[0] == 200

        await wait_for(ready, 30, "the job worker to be ready")
        assert (await asyncio.to_thread(http_get, f"{base}/health"))[0] == 200
        # the slow job's worker heartbeats; a sweep that finds it 0.01 s late re-queues
        # it as attempt 2 (what a worker that died leaves behind)
        await asyncio.sleep(0.3)
        assert await queue.retry_stalled(0.01)
        status, body = await asyncio.to_thread(http_get, f"{base}/metrics")
        assert status == 200
        got = figures(body)
        assert got[("voxflow_process_info", (("role", "jobs-worker"),
                                             ("version", got_version(got))))] == 1
        assert got[("voxflow_job_queue_up", ())] == 1
        assert got[("voxflow_jobs", (("state", "queued"),))] == 2  # IB 5, IB 4 again
        assert got[("voxflow_jobs_retried", ())] == 1
        assert got[("voxflow_job_oldest_age_seconds", (("state", "queued"),))] > 0.3
        assert got[("voxflow_job_workers", ())] == 1
        assert got[("voxflow_event_loop_lag_seconds_count", ())] > 0
    finally:
        code, err = await asyncio.to_thread(stop, worker)
    assert code == 0, err
    assert "Traceback" not in err
    # a line per job's start, with its ids; never its inputs (Procrastinate's INFO lines
    # printed them: flight='IB 4')
    started = [line for line in err.splitlines() if " job started " in line]
    assert any(f"session_id={slow.session_id}" in line and f"job_id={slow.job_id}" in line
               and "attempt=1" in line for line in started), err
    assert "IB 4" not in err and "IB 5" not in err


def got_version(got: dict[tuple[str, tuple[tuple[str, str], ...]], float]) -> str:
    """The ``version`` label of ``voxflow_process_info`` (the installed voxflow's)."""
    [labels] = [dict(labels) for name, labels in got if name == "voxflow_process_info"]
    return labels["version"]


async def test_a_public_metrics_port_without_a_token_is_refused_naming_the_fix(
    schema: str,
) -> None:
    worker = start_job_worker(schema, "--metrics-port", "0", "--metrics-host", "0.0.0.0")
    try:
        _, raw = await asyncio.to_thread(worker.communicate, timeout=60)
    finally:
        stop(worker)
    code, err = worker.returncode, raw.decode()
    assert code == 2
    assert "VOXFLOW_METRICS_TOKEN" in err and "Traceback" not in err
    assert PG_URL not in err


async def test_each_line_of_a_job_says_whose_job_it_is(queue: PostgresJobQueue) -> None:
    import contextlib
    import io
    import json

    import tests.jobs.queue_flow  # noqa: F401  # declares the job functions
    from tests.jobs.queue_kit import wait_for_update
    from voxflow.logs import configure_logging

    out = io.StringIO()
    configure_logging("INFO", "json", stream=out)  # (undone by the root conftest)
    state, job = owner_state(flight="IB 6")
    _, failing = owner_state(flight="IB 7", seconds="not a number")
    for queued in (job, failing):
        await queue.enqueue_async(queued)
    run = asyncio.create_task(queue.run_worker(heartbeat=0.5, stalled_after=5.0))
    try:
        await wait_for_update(queue.inbox, state.id, "completed", 60, "the job to complete")
        await wait_for_update(queue.inbox, failing.session_id, "failed", 60, "the other to fail")
    finally:
        run.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await run
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    # (Procrastinate's own lines of the job carry them too)
    mine = [line for line in lines
            if line.get("job_id") == job.job_id and line["logger"] == "voxflow.jobs"]
    assert mine[0]["message"] == "job started"
    assert mine[-1]["message"].startswith("job completed")
    assert all(line["session_id"] == str(state.id) for line in mine)
    [failed] = [line for line in lines if line.get("job_id") == failing.job_id
                and line["level"] == "WARNING"]
    assert failed["message"] == "job failed (TypeError)"
    assert failed["session_id"] == str(failing.session_id)
    assert not any("not a number" in json.dumps(line) for line in lines
                   if line["logger"].startswith("voxflow"))
