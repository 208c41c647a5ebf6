"""A job queued during a traced turn continues that turn's trace in the job worker
process: the W3C traceparent travels in the queued payload, and the worker's
``voxflow.job <kind>`` span (exported by OTLP to a collector on loopback, as the OTEL_*
variables configure it) is a child of the span that queued it. Real PostgreSQL, a real
``voxflow jobs worker`` process."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.jobs.queue_kit import start_job_worker, stop, wait_for_update
from tests.otel import Collector, spans
from voxflow import telemetry
from voxflow.jobs import BackgroundJob, PostgresJobQueue, add_job
from voxflow.wiring import AssistantState

pytestmark = pytest.mark.unit

__all__ = ["spans"]

KIND = "queue_tests.with_progress"


async def test_a_queued_job_continues_the_trace_that_queued_it(
    schema: str, queue: PostgresJobQueue, spans: InMemorySpanExporter,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    state = AssistantState()
    job = BackgroundJob(session_id=state.id, kind=KIND)
    assert add_job(state, job)
    with telemetry.trace_span("a turn") as turn:
        assert turn is not None
        await queue.enqueue_async(job)
    collector = Collector()
    for name, value in collector.env("jobs").items():
        monkeypatch.setenv(name, value)
    worker = start_job_worker(schema)
    try:
        await wait_for_update(queue.inbox, state.id, "completed", 60, "the job to complete")
    finally:
        code, err = stop(worker)  # SIGTERM: the worker's spans are flushed as it exits
        collector.close()
    assert code == 0, err
    (ran,) = [s for service, s in collector.spans() if s.name == f"voxflow.job {KIND}"]
    assert ran.trace_id.hex() == f"{turn.get_span_context().trace_id:032x}"
    assert ran.parent_span_id.hex() == f"{turn.get_span_context().span_id:016x}"
    attributes = {a.key: a.value for a in ran.attributes}
    assert attributes["voxflow.job_id"].string_value == job.job_id
    assert attributes["voxflow.session_id"].string_value == str(state.id)
    assert ran.kind == 5  # SPAN_KIND_CONSUMER
    assert {service for service, _ in collector.spans()} == {"jobs"}  # the worker's name


def test_a_job_queued_without_tracing_carries_no_trace_context(
    queue: PostgresJobQueue,
) -> None:
    state = AssistantState()
    job = BackgroundJob(session_id=state.id, kind=KIND)
    assert "traceparent" not in queue._defer_args(job, None)
