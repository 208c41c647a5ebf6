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


@pytest.mark.parametrize("flow_class", ["Travel", "AsyncTravel"])
async def test_a_job_a_handler_queues_carries_its_turns_trace(
    queue: PostgresJobQueue, spans: InMemorySpanExporter, flow_class: str,
) -> None:
    """The real path of a call's job (a handler's ``background_job`` start, handed to the
    queue by the call's wiring): the queued row's traceparent names the handler's span, so
    the job worker's span joins the call's trace (as above), from a sync handler (its
    thread) and from an async one (the submission runs in an executor thread)."""
    from opentelemetry.sdk.trace import ReadableSpan

    from tests.jobs.queue_kit import FLOW
    from voxflow.loader import load_flow_class
    from voxflow.wiring import AssistantWiring

    flow = load_flow_class(FLOW.replace(":Travel", f":{flow_class}"))()
    async with AssistantWiring(flow, job_queue=queue) as wiring:
        assert await wiring.text_turn("is my flight on time?") == "I'm checking your flight."
    (job,) = flow.state.jobs.values()
    rows = await queue.inbox._execute(
        "SELECT args->>'traceparent' FROM procrastinate_jobs WHERE args->>'job_id' = %s",
        (job.job_id,))
    (handler,) = [s for s in spans.get_finished_spans() if s.name == "voxflow.handler"]
    assert isinstance(handler, ReadableSpan) and handler.context is not None
    ctx = handler.context
    ((traceparent,),) = rows
    assert traceparent is not None, "the job was queued untraced"
    assert traceparent.split("-")[1:3] == [f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}"]
