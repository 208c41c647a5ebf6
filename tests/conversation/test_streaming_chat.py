"""stream_turn / astream_turn frames, chat(), events and the session trace lifecycle."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from voxflow import Agent, ConversationConfig, ConversationState, Flow, listen
from voxflow.clock import VirtualClock
from voxflow.conversation import (
    InMemoryTraceRecorder,
    JsonlTraceExporter,
    RouterContext,
    add_trace_exporter,
    remove_trace_exporter,
)
from voxflow.flow import FlowEventBus
from voxflow.llm import LLM, LLMEvent, observe_llm
from voxflow.testing import EventRecorder
from voxflow.turns import TurnState

pytestmark = pytest.mark.unit


def test_stream_turn_frames_of_a_rule_based_turn(support_module: Any) -> None:
    flow = support_module.SupportFlow(suppress_flow_events=True)
    types: list[list[str]] = []
    for message in ("Where is my order?", "thanks"):
        stream = flow.stream_turn(message, session_id="s")
        with stream:
            types.append([f.type for f in stream.events])
    assert types[0] == [
        "conversation_turn_started",
        "flow_started",
        "conversation_message_added",
        "conversation_route_selected",
        "conversation_message_added",
        "conversation_turn_completed",
    ]
    assert types[1] == [t for t in types[0] if t != "flow_started"]  # deferred session
    assert stream.result == "How can I help?"


def test_stream_frames_are_ordered_and_carry_message_data(support_module: Any) -> None:
    flow = support_module.SupportFlow(suppress_flow_events=True)
    with flow.stream_turn("my order", session_id="s") as stream:
        frames = list(stream.events)
    assert [f.seq for f in frames] == list(range(1, len(frames) + 1))
    added = [f for f in frames if f.type == "conversation_message_added"]
    assert [(f.channel, f.data["role"], f.data["content"]) for f in added] == [
        ("conversation", "user", "my order"),
        ("conversation", "assistant", "Your order is on the way."),
    ]
    route = next(f for f in frames if f.type == "conversation_route_selected")
    assert route.data["route"] == "order"


@ConversationConfig(llm=LLM("openai/gpt-4o-mini", mock_response="Streaming is fun to watch."))
class Streamed(Flow[ConversationState]):
    pass


def test_stream_turn_streams_converse_llm_chunks_in_order() -> None:
    flow = Streamed(suppress_flow_events=True)
    stream = flow.stream_turn("tell me something", session_id="s")
    with stream:
        frames = list(stream.events)
    kinds = [f.type for f in frames]
    chunks = [f for f in frames if f.type == "llm_stream_chunk"]
    assert len(chunks) > 1
    assert all(f.channel == "llm" and f.data["method"] == "converse_turn" for f in chunks)
    assert "".join(f.data["content"] for f in chunks) == "Streaming is fun to watch."
    route = kinds.index("conversation_route_selected")
    started = kinds.index("llm_call_started")
    completed = kinds.index("llm_call_completed")
    reply = max(i for i, k in enumerate(kinds) if k == "conversation_message_added")
    assert route < started < kinds.index("llm_stream_chunk") < completed < reply
    assert kinds[-1] == "conversation_turn_completed"
    assert stream.result == "Streaming is fun to watch."
    assert flow.state.messages[-1].content == "Streaming is fun to watch."


def test_stream_turn_includes_method_frames_unless_suppressed(support_module: Any) -> None:
    flow = support_module.SupportFlow()
    with flow.stream_turn("order?") as stream:
        methods = [f.data["method_name"] for f in stream.events if f.type == "method_started"]
    assert methods == ["route_conversation", "handle_order"]


async def test_astream_turn_async_iteration() -> None:
    flow = Streamed(suppress_flow_events=True)
    stream = await flow.astream_turn("hi")
    async with stream:
        kinds = [f.type async for f in stream]
    assert "llm_stream_chunk" in kinds
    assert await stream.aresult() == "Streaming is fun to watch."


async def test_leaving_astream_turn_early_cancels_the_turn_and_the_llm_stream() -> None:
    @ConversationConfig(llm=LLM("openai/gpt-4o-mini", mock_response="word " * 200))
    class Slow(Flow[ConversationState]):
        pass

    flow = Slow(suppress_flow_events=True)
    events: list[LLMEvent] = []
    chunks = 0
    with observe_llm(events.append):  # the turn's task inherits this context
        stream = await flow.astream_turn("long answer please")
    async with stream:
        async for frame in stream:
            if frame.type == "llm_stream_chunk":
                chunks += 1
                if chunks == 2:
                    break
    assert stream.done
    with pytest.raises(asyncio.CancelledError):
        stream.result  # noqa: B018
    provider_chunks = sum(e.type == "llm_stream_chunk" for e in events)
    assert 2 <= provider_chunks < 300  # about 334 were available: closed, not drained
    assert not any(e.type == "llm_call_completed" for e in events)
    # The cancelled turn recorded no reply: the user line only.
    assert [m.role for m in flow.state.messages] == ["user"]


def test_stream_turn_reports_agent_tool_activity() -> None:
    def lookup(order_id: str) -> str:
        """Look an order up."""
        return f"order {order_id} shipped"

    class WithAgent(Flow[ConversationState]):
        conversational = True

        def route_turn(self, context: Any) -> str | None:
            return "order"

        @listen("order")
        async def handle_order(self) -> str:
            agent = Agent(
                "Clerk",
                "Look orders up",
                llm=LLM(
                    "openai/gpt-4o-mini",
                    mock_response=[
                        {
                            "tool_calls": [
                                {"id": "t1", "name": "lookup", "arguments": {"order_id": "9"}}
                            ]
                        },
                        "Order 9 shipped.",
                    ],
                ),
                tools=[lookup],
            )
            return (await agent.akickoff("order 9?")).raw

    flow = WithAgent(suppress_flow_events=True)
    with flow.stream_turn("where is order 9") as stream:
        frames = list(stream.events)
    tools = [f for f in frames if f.channel == "tool"]
    assert [(f.type, f.data["tool_name"]) for f in tools] == [
        ("tool_call_started", "lookup"),
        ("tool_call_completed", "lookup"),
    ]
    assert tools[1].data["content"] == "order 9 shipped"
    llm_calls = [f for f in frames if f.type == "llm_call_started"]
    assert len(llm_calls) == 2 and all(f.data["has_tools"] for f in llm_calls)
    assert all(f.data["agent_name"] == "Clerk" for f in llm_calls)
    assert stream.result == "Order 9 shipped."


def scripted(*lines: Any) -> Any:
    it: Iterator[Any] = iter(lines)

    def read(prompt: str) -> str:
        value = next(it)
        if isinstance(value, BaseException):
            raise value
        return str(value)

    return read


@pytest.mark.parametrize(
    "ending",
    [["exit"], ["QUIT"], ["  Exit  "], [EOFError()], [KeyboardInterrupt()]],
)
def test_chat_loop_exits_and_finalizes(support_module: Any, ending: list[Any]) -> None:
    bus = FlowEventBus()
    flow = support_module.SupportFlow(event_bus=bus)
    out: list[str] = []
    prompts: list[str] = []

    def read(prompt: str) -> str:
        prompts.append(prompt)
        return reader(prompt)  # type: ignore[no-any-return]

    reader = scripted("  where is my order  ", "", "   ", "hello", *ending)
    with EventRecorder(bus) as rec:
        flow.chat(session_id="demo", input_fn=read, output_fn=out.append)
    assert out == ["Assistant: Your order is on the way.", "Assistant: How can I help?"]
    assert prompts[0] == "You: "
    assert flow.state.id == "demo"
    assert rec.kinds().count("flow_finished") == 1  # finalize_session_traces()
    assert rec.kinds()[-1] == "session_traces_finalized"
    assert [m.content for m in flow.state.messages][:1] == ["where is my order"]


def test_chat_options_and_ended_conversation(support_module: Any) -> None:
    flow = support_module.SupportFlow()
    out: list[str] = []
    flow.defer_trace_finalization = None
    flow.chat(
        prompt="> ",
        assistant_prefix="Bot: ",
        exit_commands=("stop",),
        input_fn=scripted("exit is not an exit here", "goodbye", "never read"),
        output_fn=out.append,
        defer_trace_finalization=False,
    )
    assert out == ["Bot: How can I help?", "Bot: Goodbye!"]  # stopped: state.ended
    assert flow.defer_trace_finalization is None  # restored
    with pytest.raises(TypeError, match="exit_commands"):
        flow.chat(exit_commands="quit", input_fn=scripted("x"), output_fn=out.append)


class Failing(Flow[ConversationState]):
    conversational = True

    def route_turn(self, context: Any) -> str | None:
        return "boom" if "boom" in (self.state.current_user_message or "") else "ok"

    @listen("boom")
    def handle_boom(self) -> str:
        raise RuntimeError("handler failed")

    @listen("ok")
    def handle_ok(self) -> str:
        return "fine"


def test_events_suppression_deferral_and_failures() -> None:
    bus = FlowEventBus()
    flow = Failing(event_bus=bus, suppress_flow_events=True)
    with EventRecorder(bus) as rec:
        flow.handle_turn("hello")
        with pytest.raises(RuntimeError, match="handler failed"):
            flow.handle_turn("boom")
        flow.handle_turn("again")
        flow.finalize_session_traces()
        flow.finalize_session_traces()  # idempotent
    kinds = rec.kinds()
    assert not [k for k in kinds if k.startswith("method_")]
    assert kinds.count("flow_started") == 1
    assert kinds.count("flow_finished") == 1
    assert "flow_failed" not in kinds  # deferred turns report failure per turn
    assert kinds.count("conversation_turn_failed") == 1
    assert kinds.count("conversation_turn_completed") == 2
    failed = rec.of_kind("conversation_turn_failed")[0]
    assert (failed.turn_index, failed.error_type) == (2, "RuntimeError")
    assert rec.of_kind("flow_finished")[0].result == "fine"


def test_without_deferral_every_turn_finishes_the_flow() -> None:
    @ConversationConfig(defer_trace_finalization=False)
    class PerTurn(Failing):
        pass

    bus = FlowEventBus()
    flow = PerTurn(event_bus=bus)
    with EventRecorder(bus) as rec:
        flow.handle_turn("a")
        flow.handle_turn("b")
        with pytest.raises(RuntimeError):
            flow.handle_turn("boom")
    kinds = rec.kinds()
    assert kinds.count("flow_started") == 3
    assert kinds.count("flow_finished") == 2
    assert kinds.count("flow_failed") == 1
    assert "method_started" in kinds


def test_a_blocked_subscriber_never_blocks_the_turn(support_module: Any) -> None:
    bus = FlowEventBus()
    release = threading.Event()
    seen: list[str] = []

    def slow(event: Any) -> None:
        release.wait()
        seen.append(event.kind)

    sub = bus.subscribe(slow)
    flow = support_module.SupportFlow(event_bus=bus)
    try:
        for _ in range(3):  # would deadlock if delivery waited for the subscriber
            assert flow.handle_turn("order") == "Your order is on the way."
    finally:
        release.set()
        assert bus.flush(timeout=30)
        sub.close()
    assert seen.count("conversation_turn_completed") == 3


def test_one_trace_batch_per_session_with_llm_spans(tmp_path: Path) -> None:
    recorder = add_trace_exporter(InMemoryTraceRecorder())
    jsonl = add_trace_exporter(JsonlTraceExporter(tmp_path / "traces.jsonl"))
    try:
        flow = Streamed()
        flow.handle_turn("one", session_id="t")
        flow.handle_turn("two", session_id="t")
        assert recorder.batches == []  # deferred until the session ends
        flow.finalize_session_traces()
        flow.finalize_session_traces()
        flow.handle_turn("three", session_id="t")  # a new batch
        flow.finalize_session_traces()
    finally:
        remove_trace_exporter(recorder)
        remove_trace_exporter(jsonl)
    assert [b.turns for b in recorder.batches] == [2, 1]
    batch = recorder.batches[0]
    assert batch.session_id == "t" and batch.flow_name == "Streamed"
    turns = [s for s in batch.spans if s.kind == "turn"]
    llms = [s for s in batch.spans if s.kind == "llm"]
    assert [s.attributes["route"] for s in turns] == ["converse", "converse"]
    assert len(llms) == 2 and all(s.parent_id in {t.span_id for t in turns} for s in llms)
    assert all(s.end is not None and s.end >= s.start for s in batch.spans)
    stored = JsonlTraceExporter.read(tmp_path / "traces.jsonl")
    assert [b.batch_id for b in stored] == [b.batch_id for b in recorder.batches]


def test_per_turn_batches_without_deferral(support_module: Any) -> None:
    recorder = add_trace_exporter(InMemoryTraceRecorder())
    try:
        flow = support_module.SupportFlow()
        flow.defer_trace_finalization = False
        flow.handle_turn("order")
        flow.handle_turn("hi")
    finally:
        remove_trace_exporter(recorder)
    assert [b.turns for b in recorder.batches] == [1, 1]


class _OnTheClock(Flow[TurnState]):
    conversational = True

    def route_turn(self, context: RouterContext) -> str | None:
        return "slow"

    @listen("slow")
    async def answer(self) -> str:
        await self.clock.sleep(1.5)
        return "done"


async def test_trace_times_are_read_on_the_flow_clock() -> None:
    """A span lasts what the flow's clock says (a VirtualClock here), in Unix seconds."""
    clock = VirtualClock(start=100.0, autojump=True)
    recorder = add_trace_exporter(InMemoryTraceRecorder())
    try:
        flow = _OnTheClock(clock=clock)
        async with clock:
            assert await flow.ahandle_turn("hi", session_id="s") == "done"
            await clock.advance(0.25)
        flow.finalize_session_traces()
    finally:
        remove_trace_exporter(recorder)
    [batch] = recorder.batches
    [turn] = batch.spans
    assert turn.end is not None and batch.finished_at is not None
    assert turn.end - turn.start == pytest.approx(1.5, abs=1e-6)
    assert batch.finished_at - turn.end == pytest.approx(0.25, abs=1e-6)
    assert abs(turn.start - time.time()) < 3600  # Unix seconds, as OpenTelemetry takes


_BREAKS_OUT = """
import sys
from voxflow import ConversationConfig, ConversationState, Flow, persist
from voxflow.llm import LLM

REPLY = "Hello there, this is a streamed answer in several chunks."

@persist
@ConversationConfig(llm=LLM("openai/gpt-4o-mini", mock_response=REPLY, mock_delay=0.3))
class Chatty(Flow[ConversationState]):
    pass

for leave_at in sys.argv[1:]:
    stream = Chatty().stream_turn("hi", session_id=f"left-at-{leave_at}")
    for frame in stream:
        if frame.type == leave_at:
            break  # no close(), no wait(): the script ends after the last one
    print("left the loop", flush=True)
"""

LEAVE_AT = ["conversation_turn_started", "llm_call_started", "llm_stream_chunk"]


def test_a_sync_stream_left_without_close_still_stores_its_turn_and_prints_nothing(
    default_store: Any
) -> None:
    # The turn's thread was a daemon: the interpreter froze it at exit mid-turn, so
    # nothing was stored, a frozen thread holding the import lock hung the exit
    # forever, or "Event loop is closed" was printed. The process now waits for the turn.
    import subprocess
    import sys

    from tests.stores import default_env

    root = Path(__file__).resolve().parents[2]
    result = subprocess.run(
        [sys.executable, "-c", _BREAKS_OUT, *LEAVE_AT], cwd=root, capture_output=True,
        text=True, timeout=300, env={**default_env(default_store), "PYTHONPATH": str(root)})
    assert result.returncode == 0, result.stderr
    assert result.stdout == "left the loop\n" * 3
    assert result.stderr == ""
    for leave_at in LEAVE_AT:
        stored = default_store.load_state(f"left-at-{leave_at}")
        assert stored is not None, leave_at
        assert [(m["role"], m["content"]) for m in stored["messages"]] == [
            ("user", "hi"),
            ("assistant", "Hello there, this is a streamed answer in several chunks.")]
