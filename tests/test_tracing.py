"""Traces of a text turn through the OpenTelemetry SDK (in-memory exporter): its turn
span, the flow's handler span, its agent, LLM calls (GenAI semantic conventions) and
tool calls, parent by parent, on real litellm (``mock_response``); no message content
unless opted in."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.otel import Collector, by_name, children, spans
from voxflow import LLM, Agent, Flow, listen, telemetry
from voxflow.conversation import RouterContext
from voxflow.logs import configure_logging, log_scope
from voxflow.turns import TurnState

pytestmark = pytest.mark.unit

__all__ = ["spans"]

SECRET = "my card is 4111"


def order_status(order_id: str) -> str:
    """The shipping status of an order."""
    return {"417": "shipped on Monday"}.get(order_id, "unknown")


def logged_order_status(order_id: str) -> str:
    """The shipping status of an order."""
    logging.getLogger("shop").info("looking up order")
    return order_status(order_id)


def _shop(*, log: bool = False) -> Flow[TurnState]:
    tool = logged_order_status if log else order_status
    tool.__name__ = "order_status"
    clerk = Agent(
        "Shipping clerk", "Tell customers where their orders are", tools=[tool],
        llm=LLM("openai/gpt-4o-mini", temperature=0.2, mock_response=[
            {"tool_calls": [{"name": "order_status", "arguments": {"order_id": "417"}}]},
            "Order 417 shipped on Monday.",
        ]),
    )

    class Shop(Flow[TurnState]):
        conversational = True

        def route_turn(self, context: RouterContext) -> Literal["order"]:
            return "order"

        @listen("order")
        async def handle_order(self) -> str:
            result = await clerk.akickoff(self.conversation_messages)
            return result.raw

    return Shop()


@pytest.fixture
def content() -> Iterator[None]:
    telemetry.set_capture_content(True)
    try:
        yield
    finally:
        telemetry.set_capture_content(False)


def test_a_text_turn_is_a_handler_span_with_its_agent_llm_and_tool_calls(
    spans: InMemorySpanExporter,
) -> None:
    assert _shop().handle_turn(f"Where is order 417? {SECRET}") == "Order 417 shipped on Monday."
    finished = spans.get_finished_spans()
    (turn,) = by_name(finished, "voxflow.turn")
    (handler,) = children(finished, turn)
    assert turn.parent is None  # a text turn: its turn span is the root
    assert handler.name == "voxflow.handler"
    assert handler.attributes["voxflow.flow"] == "Shop"
    assert handler.attributes["voxflow.turn_index"] == 1
    assert handler.attributes["voxflow.route"] == "order"
    (agent,) = children(finished, handler)
    assert agent.name == "invoke_agent Shipping clerk"
    assert agent.attributes["gen_ai.operation.name"] == "invoke_agent"
    first, tool, second = children(finished, agent)
    assert [first.name, tool.name, second.name] == [
        "chat openai/gpt-4o-mini", "execute_tool order_status", "chat openai/gpt-4o-mini"]
    for llm in (first, second):
        a = llm.attributes
        assert llm.kind.name == "CLIENT"
        assert a["gen_ai.operation.name"] == "chat"
        assert a["gen_ai.provider.name"] == "openai"
        assert a["gen_ai.request.model"] == "openai/gpt-4o-mini"
        assert a["gen_ai.request.temperature"] == 0.2
        assert a["gen_ai.agent.name"] == "Shipping clerk"
        assert a["gen_ai.response.id"]
    # litellm's mock answer in text reports its usage (its mock tool call does not)
    assert second.attributes["gen_ai.usage.input_tokens"] > 0
    assert second.attributes["gen_ai.usage.output_tokens"] > 0
    assert second.attributes["gen_ai.response.model"]
    assert first.attributes["gen_ai.response.finish_reasons"] == ("tool_calls",)
    assert second.attributes["gen_ai.response.finish_reasons"] == ("stop",)
    assert tool.attributes["gen_ai.tool.name"] == "order_status"
    assert tool.attributes["gen_ai.tool.call.id"]
    assert tool.attributes["gen_ai.operation.name"] == "execute_tool"
    # all in one trace, each child inside its parent's time
    assert {s.context.trace_id for s in finished} == {handler.context.trace_id}
    for span in finished:
        if span.parent is not None:
            (parent,) = [p for p in finished if p.context.span_id == span.parent.span_id]
            assert parent.start_time <= span.start_time <= span.end_time <= parent.end_time
    # no message content by default: not the user's words, not the answer, not the tool's
    dump = json.dumps([dict(s.attributes) for s in finished])
    for text in (SECRET, "4111", "Order 417 shipped", "shipped on Monday", '"order_id"'):
        assert text not in dump


@pytest.mark.usefixtures("content")
def test_message_content_only_when_opted_in(spans: InMemorySpanExporter) -> None:
    _shop().handle_turn(f"Where is order 417? {SECRET}")
    finished = spans.get_finished_spans()
    first, second = by_name(finished, "chat openai/gpt-4o-mini")
    (tool,) = by_name(finished, "execute_tool order_status")
    assert SECRET in first.attributes["gen_ai.input.messages"]
    assert json.loads(second.attributes["gen_ai.output.messages"])[0]["content"] == (
        "Order 417 shipped on Monday.")
    assert json.loads(first.attributes["gen_ai.output.messages"])[0]["tool_calls"][0][
        "name"] == "order_status"
    assert tool.attributes["gen_ai.tool.call.result"] == "shipped on Monday"


def test_no_spans_and_no_tracer_when_tracing_is_off() -> None:
    assert not telemetry.tracing_enabled()
    assert telemetry.start_span("x") is None
    with telemetry.trace_span("x") as span:
        assert span is None
    assert telemetry.inject_context({}) == {}
    assert _shop().handle_turn("Where is order 417?") == "Order 417 shipped on Monday."


def test_configure_tracing_sets_up_nothing_without_an_exporter_variable() -> None:
    assert telemetry.configure_tracing({}) is False
    assert telemetry.configure_tracing({"OTEL_TRACES_EXPORTER": "none"}) is False
    assert telemetry.configure_tracing({"OTEL_SDK_DISABLED": "true",
                                        "OTEL_TRACES_EXPORTER": "otlp"}) is False
    assert not telemetry.tracing_enabled()
    assert telemetry.capture_content() is False
    telemetry.configure_tracing({"VOXFLOW_TRACE_CONTENT": "true"})
    assert telemetry.capture_content() is True
    telemetry.set_capture_content(False)


def test_a_command_run_in_process_leaves_no_tracing_behind() -> None:
    """What a CLI test (``main([...])`` in the test process) meets: the command's
    configure_tracing ran, and tracing is still off (as the next test needs it)."""
    from voxflow.cli import main

    assert main(["chat", "no_such_flow.py:Flow"]) == 2  # configure_tracing ran first
    assert not telemetry.tracing_enabled()
    assert not telemetry.capture_content()


def test_the_tests_ignore_the_otel_variables_of_their_environment() -> None:
    """A CI that exports OTEL_EXPORTER_OTLP_ENDPOINT (and content capture): the in-process
    command above must not set up tracing from it for the rest of the run, so the test
    that needs tracing off still passes after it."""
    here = Path(__file__)
    env = {**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9",
           "OTEL_BSP_EXPORT_TIMEOUT": "100", "OTEL_EXPORTER_OTLP_TIMEOUT": "1",
           "VOXFLOW_TRACE_CONTENT": "true"}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         f"{here}::test_a_command_run_in_process_leaves_no_tracing_behind",
         f"{here}::test_no_spans_and_no_tracer_when_tracing_is_off"],
        env=env, cwd=here.parents[1], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-4000:]
    assert "2 passed" in done.stdout


_OTLP_SCRIPT = '''
import sys
from opentelemetry import trace
from voxflow.telemetry import configure_tracing
sys.path.insert(0, {root!r})
from tests.test_tracing import _shop
assert configure_tracing() is True
assert _shop().handle_turn("Where is order 417?") == "Order 417 shipped on Monday."
trace.get_tracer_provider().shutdown()  # flushes the batch
'''


def test_the_otel_variables_send_spans_by_otlp_to_the_configured_collector(
    tmp_path: Path,
) -> None:
    """The set-up every ``voxflow`` command makes (configure_tracing), in a process of its
    own: OTLP over HTTP to a collector on loopback, named by OTEL_SERVICE_NAME."""
    collector = Collector()
    try:
        env = {**os.environ, **collector.env("shop")}
        script = _OTLP_SCRIPT.format(root=str(Path(__file__).parents[1]))
        done = subprocess.run([sys.executable, "-c", script], env=env, cwd=tmp_path,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
    finally:
        collector.close()
    received = collector.spans()
    services = {service for service, _ in received}
    names = [span.name for _, span in received]
    assert services == {"shop"}
    assert sorted(names) == sorted([
        "voxflow.turn", "voxflow.handler", "invoke_agent Shipping clerk",
        "chat openai/gpt-4o-mini", "execute_tool order_status", "chat openai/gpt-4o-mini"])


def test_a_turns_log_lines_carry_its_session_and_span(
    spans: InMemorySpanExporter,
) -> None:
    """Item 3: a line logged while a turn runs (here by a tool) names the session, and,
    tracing on, the trace and span it was logged in: the tool's."""
    stream = io.StringIO()
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    configure_logging("INFO", "json", stream=stream)
    try:
        flow = _shop(log=True)
        flow.handle_turn("Where is order 417?")
    finally:
        for handler in list(root.handlers):
            if handler not in handlers:
                root.removeHandler(handler)
        root.setLevel(level)
    (line,) = [json.loads(x) for x in stream.getvalue().splitlines()
               if "looking up order" in x]
    (tool,) = by_name(spans.get_finished_spans(), "execute_tool order_status")
    assert line["session_id"] == str(flow.state.id)
    assert line["trace_id"] == f"{tool.context.trace_id:032x}"
    assert line["span_id"] == f"{tool.context.span_id:016x}"


def _json_lines(run: Callable[[], object]) -> list[dict[str, Any]]:
    """The JSON log lines ``run()`` writes (INFO and up)."""
    stream = io.StringIO()
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    configure_logging("INFO", "json", stream=stream)
    try:
        run()
    finally:
        for handler in list(root.handlers):
            if handler not in handlers:
                root.removeHandler(handler)
        root.setLevel(level)
    return [json.loads(x) for x in stream.getvalue().splitlines()]


def test_a_text_turn_is_a_turn_span_and_its_lines_carry_the_turn_id(
    spans: InMemorySpanExporter,
) -> None:
    """A text turn (``handle_turn``) carries the ids a voice turn does: a root
    ``voxflow.turn`` span with ``voxflow.turn_id``, the handler under it, and the
    turn_id on every line it logs; each turn its own."""
    flow = _shop(log=True)
    lines = _json_lines(lambda: flow.handle_turn("Where is order 417?"))
    finished = spans.get_finished_spans()
    (turn,) = by_name(finished, "voxflow.turn")
    (handler,) = by_name(finished, "voxflow.handler")
    assert turn.parent is None
    assert handler.parent is not None and handler.parent.span_id == turn.context.span_id
    turn_id = turn.attributes["voxflow.turn_id"]
    assert turn.attributes["voxflow.session_id"] == str(flow.state.id)
    assert handler.attributes["voxflow.turn_id"] == turn_id
    (line,) = [x for x in lines if x["message"] == "looking up order"]
    assert line["turn_id"] == turn_id
    assert line["session_id"] == str(flow.state.id)

    spans.clear()
    flow = _shop()
    flow.handle_turn("Where is order 417?")
    (again,) = by_name(spans.get_finished_spans(), "voxflow.turn")
    assert again.attributes["voxflow.turn_id"] != turn_id


def test_a_chat_turn_is_traced_under_the_turn_id_its_records_keep(
    spans: InMemorySpanExporter,
) -> None:
    """``voxflow chat`` without --voice (a TurnRunner's text turn): the span and the lines
    name the turn the session's records keep, not one of their own."""
    from tests.jobs.test_background import scripted
    from voxflow.wiring import chat_text

    flow, out = _shop(log=True), list[str]()
    lines = _json_lines(lambda: asyncio.run(chat_text(
        flow, read=scripted(["Where is order 417?"]), write=out.append)))
    assert out == ["Assistant: Order 417 shipped on Monday."]
    (turn_id,) = flow.state.turns
    (turn,) = by_name(spans.get_finished_spans(), "voxflow.turn")
    assert turn.attributes["voxflow.turn_id"] == turn_id
    (line,) = [x for x in lines if x["message"] == "looking up order"]
    assert line["turn_id"] == turn_id


async def test_a_turn_its_caller_opened_gets_no_second_turn_span(
    spans: InMemorySpanExporter,
) -> None:
    """A caller that opened the turn itself (a voice session: the turn's id bound to its
    lines and its ``voxflow.turn`` span from the user's speech end) keeps it: the flow's
    handler goes under it, with no second turn span."""
    from voxflow.turns import TurnRunner

    flow = _shop()
    runner = TurnRunner(flow)
    with log_scope(turn_id="turn-1"), telemetry.trace_span(
            "voxflow.turn", {"voxflow.turn_id": "turn-1"}) as opened:
        async for _ in runner.astream_turn("Where is order 417?", turn_id="turn-1"):
            pass
    finished = spans.get_finished_spans()
    (turn,) = by_name(finished, "voxflow.turn")
    (handler,) = by_name(finished, "voxflow.handler")
    assert opened is not None and turn.context.span_id == opened.get_span_context().span_id
    assert handler.parent is not None and handler.parent.span_id == turn.context.span_id
    assert handler.attributes["voxflow.turn_id"] == "turn-1"


async def test_an_in_process_job_is_a_span_of_the_turn_that_started_it(
    spans: InMemorySpanExporter,
) -> None:
    from tests.jobs.test_background import Travel, scripted
    from voxflow.wiring import chat_text

    flow, out = Travel(), list[str]()
    await chat_text(flow, read=scripted(["is my flight on time?"]), write=out.append)
    assert out[-1] == "Assistant: Flight BA 117 is on time."
    finished = spans.get_finished_spans()
    (job,) = [s for s in finished if s.name.startswith("voxflow.job ")]
    (handler,) = by_name(finished, "voxflow.handler")
    assert job.name.endswith("check_flight")
    assert job.parent is not None and job.parent.span_id == handler.context.span_id
    assert job.attributes["voxflow.job_id"] == next(iter(flow.state.jobs))
