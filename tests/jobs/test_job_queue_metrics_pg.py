"""The job queue's figures (``PostgresJobQueue.statistics``) and a real ``voxflow jobs
worker --metrics-port`` serving them with ``/health`` and ``/ready`` (real PostgreSQL)."""

from __future__ import annotations

import asyncio
import os
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import PG_URL
from tests.jobs.queue_kit import owner_state, start_job_worker, stop, wait_for
from voxflow.errors import PersistenceUnavailableError
from voxflow.jobs import PostgresJobQueue


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except urllib.error.URLError:
        return 0, ""  # not listening (yet)


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
    worker = start_job_worker(schema, "--concurrency", "1", "--metrics-port", str(port))
    base = f"http://127.0.0.1:{port}"
    try:
        async def started() -> bool:
            return await asyncio.to_thread(os.path.exists, f"{marker}-1")

        await wait_for(started, 60, "the slow job to start")

        async def ready() -> bool:
            return (await asyncio.to_thread(get, f"{base}/ready"))[0] == 200

        await wait_for(ready, 30, "the job worker to be ready")
        assert (await asyncio.to_thread(get, f"{base}/health"))[0] == 200
        # the slow job's worker heartbeats; a sweep that finds it 0.01 s late re-queues
        # it as attempt 2 (what a worker that died leaves behind)
        await asyncio.sleep(0.3)
        assert await queue.retry_stalled(0.01)
        status, body = await asyncio.to_thread(get, f"{base}/metrics")
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
