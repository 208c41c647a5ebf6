"""A simulated call's OpenTelemetry trace, span by span and parent by parent: the call,
each turn, and in a turn the end of turn, STT, the flow's handler and its LLM call, TTS,
playout and a barge-in; through the SDK's in-memory exporter, on the real models and
real litellm (``mock_response``), on virtual time. No words in any span by default.
"""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Callable, Sequence
from typing import Literal

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from voxflow_adapters.testkit.flows import STORY
from voxflow_adapters.testkit.scenario import run_call
from voxflow_adapters.testkit.script import CallScript
from voxflow_voice.engines import VoiceEngines

from voxflow import LLM, ConversationConfig, Flow, listen, telemetry
from voxflow.conversation import RouterContext
from voxflow.logs import bind_log_context, configure_logging
from voxflow.turns import TurnState

pytestmark = pytest.mark.models


def _teller() -> Flow[TurnState]:
    @ConversationConfig(llm=LLM("openai/gpt-4o-mini", mock_response=STORY))
    class StoryTeller(Flow[TurnState]):
        pass

    return StoryTeller()


async def _call(engines: VoiceEngines) -> None:
    bind_log_context(call_id="call-7")  # what a server binds for a call
    script = CallScript().user_says(0.3, "Tell me a story.").user_says(8.0, "Stop, please.")
    await run_call(_teller(), script, engines)


async def test_a_call_is_a_tree_of_turns_and_their_parts(
    engines: VoiceEngines, spans: InMemorySpanExporter,
    span_children: Callable[[Sequence[ReadableSpan], ReadableSpan], list[ReadableSpan]],
) -> None:
    _children = span_children
    await _call(engines)
    finished = spans.get_finished_spans()
    (call,) = [s for s in finished if s.name == "voxflow.call"]
    assert call.parent is None and call.kind.name == "SERVER"
    assert call.attributes["voxflow.call_id"] == "call-7"
    session_id = call.attributes["voxflow.session_id"]
    assert {s.context.trace_id for s in finished} == {call.context.trace_id}
    turns = _children(finished, call)
    assert [t.name for t in turns] == ["voxflow.turn", "voxflow.turn"]
    story, stop = turns
    for turn in turns:
        assert turn.attributes["voxflow.session_id"] == session_id
        assert turn.attributes["voxflow.turn_id"]
        assert turn.attributes["voxflow.voice_to_voice_ms"] > 0
    assert story.attributes["voxflow.interrupted"] is True
    assert stop.attributes["voxflow.interrupted"] is False
    names = sorted(s.name for s in _children(finished, story))
    assert names == ["voxflow.barge_in", "voxflow.end_of_turn", "voxflow.handler",
                     "voxflow.playout", "voxflow.stt", "voxflow.tts"], names
    parts = {s.name: s for s in _children(finished, story)}
    # the story was answered in the user's pause (a speculative reply), before the end
    # of the turn was decided; heard, then cut by the barge-in
    assert story.attributes["voxflow.speculative"] is True
    assert parts["voxflow.handler"].start_time < parts["voxflow.end_of_turn"].end_time
    assert (parts["voxflow.end_of_turn"].end_time <= parts["voxflow.playout"].start_time
            <= parts["voxflow.barge_in"].start_time <= parts["voxflow.playout"].end_time)
    assert parts["voxflow.barge_in"].attributes["voxflow.outcome"] == "interrupted"
    assert parts["voxflow.barge_in"].attributes["voxflow.stop_latency_ms"] > 0
    assert parts["voxflow.playout"].attributes["voxflow.interrupted"] is True
    (llm,) = _children(finished, parts["voxflow.handler"])
    assert llm.name == "chat openai/gpt-4o-mini"
    assert llm.attributes["gen_ai.request.model"] == "openai/gpt-4o-mini"
    assert llm.attributes["gen_ai.operation.name"] == "chat"
    ordered = _children(finished, stop)
    assert sorted(s.name for s in ordered) == [
        "voxflow.end_of_turn", "voxflow.handler", "voxflow.playout", "voxflow.stt",
        "voxflow.tts"]
    at = {s.name: s for s in ordered}  # answered after the end of the turn, in order
    assert (at["voxflow.end_of_turn"].end_time <= at["voxflow.stt"].start_time
            <= at["voxflow.stt"].end_time <= at["voxflow.handler"].start_time
            <= at["voxflow.tts"].end_time <= at["voxflow.playout"].start_time)
    assert stop.attributes["voxflow.speculative"] is False
    # the parts in order, inside their turn, the turns inside the call
    for turn in turns:
        assert call.start_time <= turn.start_time <= turn.end_time <= call.end_time
        for part in _children(finished, turn):
            assert part.start_time <= part.end_time
            assert turn.start_time <= part.start_time and part.end_time <= turn.end_time, (
                part.name)
    # the voice to voice of the trace is the call's: the end of turn, STT, LLM, TTS
    v2v = story.attributes["voxflow.voice_to_voice_ms"] * 1e6
    assert parts["voxflow.tts"].end_time - story.start_time == pytest.approx(v2v, abs=2e5)
    # no words by default: neither the user's nor the story's
    dump = json.dumps([dict(s.attributes) for s in finished])
    for text in ("story", "Stop", "lighthouse", "Once upon"):
        assert text not in dump, text


async def test_the_words_are_in_the_turn_only_when_opted_in(
    engines: VoiceEngines, spans: InMemorySpanExporter,
) -> None:
    telemetry.set_capture_content(True)
    try:
        await _call(engines)
    finally:
        telemetry.set_capture_content(False)
    story = next(s for s in spans.get_finished_spans() if s.name == "voxflow.turn")
    assert "story" in story.attributes["voxflow.transcript"].lower()
    assert story.attributes["voxflow.heard_text"]


async def test_a_calls_log_lines_carry_its_call_session_turn_and_span(
    engines: VoiceEngines, spans: InMemorySpanExporter,
) -> None:
    """Item 3: a line the flow logs while it answers names the call, the session, the
    turn, and the trace and span it was logged in (the turn's handler), in JSON lines."""

    class Logged(Flow[TurnState]):
        conversational = True

        def route_turn(self, context: RouterContext) -> Literal["answer"]:
            return "answer"

        @listen("answer")
        def handle_answer(self) -> str:
            logging.getLogger("shop").info("answering")
            return "Two teas, coming up."

    stream = io.StringIO()
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    configure_logging("INFO", "json", stream=stream)
    try:
        bind_log_context(call_id="call-9")
        flow = Logged()
        await run_call(flow, CallScript().user_says(0.3, "Two teas, please."), engines)
    finally:
        for handler in list(root.handlers):
            if handler not in handlers:
                root.removeHandler(handler)
        root.setLevel(level)
    lines = [json.loads(x) for x in stream.getvalue().splitlines() if "answering" in x]
    assert lines  # (a reply prepared in a pause and dropped when the user went on: two)
    finished = spans.get_finished_spans()
    by_id = {f"{s.context.span_id:016x}": s for s in finished}
    for line in lines:
        handler = by_id[line["span_id"]]
        assert handler.name == "voxflow.handler"
        assert line["trace_id"] == f"{handler.context.trace_id:032x}"
        assert handler.parent is not None
        turn = by_id[f"{handler.parent.span_id:016x}"]
        assert turn.name == "voxflow.turn"
        assert line["call_id"] == "call-9"
        assert line["session_id"] == turn.attributes["voxflow.session_id"]
        assert line["turn_id"] == turn.attributes["voxflow.turn_id"]


async def test_a_job_and_its_announcements_are_spans_of_the_call(
    engines: VoiceEngines, spans: InMemorySpanExporter,
) -> None:
    """A job started by a turn is a span of that turn's handler; what it announces
    (its progress, its result) are ``voxflow.announcement`` spans of the call, naming
    the turn that asked and their delivery."""
    from voxflow.jobs import JobContext, background_job
    from voxflow.wiring import AssistantState

    @background_job(kind="tracing_tests.book_table")
    async def book_table(job: JobContext) -> str:
        await job.sleep(1.0)
        await job.progress("Still waiting for the restaurant.")
        await job.sleep(2.0)
        return "Your table for two is booked."

    class Restaurant(Flow[AssistantState]):
        conversational = True

        def route_turn(self, context: RouterContext) -> Literal["book"]:
            return "book"

        @listen("book")
        def handle_book(self) -> str:
            book_table.start(self)
            return "Sure."

    await run_call(Restaurant(), CallScript().user_says(0.3, "Book a table for two."),
                   engines)
    finished = spans.get_finished_spans()
    by_id = {s.context.span_id: s for s in finished}
    (call,) = [s for s in finished if s.name == "voxflow.call"]
    (job,) = [s for s in finished if s.name == "voxflow.job tracing_tests.book_table"]
    assert job.parent is not None and by_id[job.parent.span_id].name == "voxflow.handler"
    turn = by_id[by_id[job.parent.span_id].parent.span_id]  # type: ignore[union-attr]
    said = [s for s in finished if s.name == "voxflow.announcement"]
    assert len(said) == 2
    for span in said:
        assert span.parent is not None and span.parent.span_id == call.context.span_id
        assert span.attributes["voxflow.turn_id"] == turn.attributes["voxflow.turn_id"]
        assert span.attributes["voxflow.delivery_id"]
        assert call.start_time <= span.start_time <= span.end_time <= call.end_time
