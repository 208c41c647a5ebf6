"""TurnRunner over real conversational flows and real litellm (``mock_response=``)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from voxflow import Flow
from voxflow.conversation import ConversationConfig, ConversationState
from voxflow.errors import (
    ConversationEndedError,
    ConversationModeError,
    ProviderError,
    TurnIdentityError,
    TurnInProgressError,
    TurnRestoreError,
)
from voxflow.flow import listen
from voxflow.llm import LLM, LLMEvent, agent_scope, observe_llm
from voxflow.testing import Acknowledger
from voxflow.turns import ReplyEvent, TurnRunner, TurnState

pytestmark = pytest.mark.unit

MODEL = "openai/gpt-4o-mini"
LONG = "x" * 300  # litellm mocks stream 3 characters per chunk: 100 chunks


Chat = Acknowledger  # every turn: "Request received."


def talk_flow(reply: Any) -> Flow[TurnState]:
    @ConversationConfig(llm=LLM(MODEL, mock_response=reply))
    class Talk(Flow[TurnState]):
        pass

    return Talk(suppress_flow_events=True)


class Research(Flow[TurnState]):
    """Private model work, then a public agent's answer, in one handler."""

    conversational = True

    def route_turn(self, context: Any) -> str:
        return "research"

    @listen("research")
    async def handle_research(self) -> str:
        await LLM(MODEL, mock_response="private notes").acall("notes", stream=True)
        with agent_scope("scratchpad"):
            await LLM(MODEL, mock_response="scratch work").acall("think", stream=True)
        with agent_scope("narrator"):
            answer = await LLM(MODEL, mock_response="Public answer.").acall("say", stream=True)
        return answer.content or ""


def identity(event: ReplyEvent) -> dict[str, Any]:
    return {
        "session_id": event.session_id,
        "turn_id": event.turn_id,
        "input_revision": event.input_revision,
        "delivery_id": event.delivery_id,
    }


async def collect(runner: TurnRunner, message: str = "Hello", **kw: Any) -> list[ReplyEvent]:
    return [event async for event in runner.astream_turn(message, **kw)]


# -- the event contract ---------------------------------------------------------------


async def test_a_hardcoded_reply_gives_exactly_four_events() -> None:
    flow = Chat(suppress_flow_events=True)
    runner = TurnRunner(flow)
    events = await collect(runner, turn_id="turn-1", kind="acknowledgment")
    assert [e.type for e in events] == ["started", "route_selected", "text", "completed"]
    assert [e.seq for e in events] == [1, 2, 3, 4]
    assert events[1].route == "acknowledge"
    assert events[2].text == events[3].text == "Request received."
    assert all(runner.accept_event(e) for e in events)
    assert not runner.accept_event(events[0])
    assert [m.role for m in flow.state.messages] == ["user", "assistant"]
    snapshot = runner.snapshot()
    assert snapshot["turns"][0]["route"] == "acknowledge"
    assert snapshot["replies"][0]["status"] == "completed"
    assert snapshot["replies"][0]["kind"] == "acknowledgment"


def test_the_spec_sync_example() -> None:
    flow = Chat(suppress_flow_events=True)
    runner = TurnRunner(flow)
    sent: list[str] = []
    events = runner.stream_turn("Hello", turn_id="turn-1", kind="acknowledgment")
    try:
        for event in events:
            if runner.accept_event(event):
                sent.append(event.model_dump_json())
    finally:
        events.close()  # type: ignore[attr-defined]
    assert len(sent) == 4
    reply = runner.snapshot()["replies"][0]
    assert runner.interrupt(
        session_id=reply["session_id"],
        turn_id=reply["turn_id"],
        input_revision=reply["input_revision"],
        delivery_id=reply["delivery_id"],
    )
    assert flow.state.replies[reply["delivery_id"]].status == "completed"  # fence only
    second = list(runner.stream_turn("Again"))
    assert second[-1].type == "completed"


async def test_model_text_streams_live_with_first_text_timing() -> None:
    flow = talk_flow("Hello there, how can I help you today?")
    runner = TurnRunner(flow)
    order: list[str] = []

    def observe(event: LLMEvent) -> None:
        order.append(f"llm:{event.type}")

    events: list[ReplyEvent] = []
    with observe_llm(observe):
        async for event in runner.astream_turn("Hi"):
            order.append(f"reply:{event.type}")
            events.append(event)
    types = [e.type for e in events]
    assert types[:4] == ["started", "route_selected", "generation_started", "first_model_text"]
    assert types[-1] == "completed" and set(types[4:-1]) == {"text"}
    texts = [e for e in events if e.type == "text"]
    assert [e.segment_id for e in texts] == list(range(1, len(texts) + 1))
    assert "".join(e.text or "" for e in texts) == events[-1].text
    assert events[-1].text == "Hello there, how can I help you today?"
    first = events[3]
    assert first.model_first_text_ms is not None and first.model_first_text_ms >= 0
    assert first.call_id == events[2].call_id == texts[0].call_id
    # Live: the first text event reached us before the provider call completed.
    assert order.index("reply:text") < order.index("llm:llm_call_completed")
    assert all(runner.accept_event(e) for e in events)
    assert flow.state.messages[-1].content == events[-1].text


async def test_only_public_agents_speak_live() -> None:
    flow = Research(suppress_flow_events=True)
    quiet = TurnRunner(flow)
    events = await collect(quiet)
    assert [e.type for e in events] == ["started", "route_selected", "text", "completed"]
    assert events[2].text == "Public answer."  # the final message, as one segment

    flow = Research(suppress_flow_events=True)
    runner = TurnRunner(flow, public_agent_ids=lambda: {"narrator"})
    events = await collect(runner)
    assert [e.type for e in events].count("generation_started") == 1
    streamed = "".join(e.text or "" for e in events if e.type == "text")
    assert streamed == "Public answer."  # private notes and scratch work never leak


# -- interruption -----------------------------------------------------------------------


async def test_interrupt_during_generation_aborts_the_provider_stream() -> None:
    hooks: list[str] = []
    flow = talk_flow(LONG)
    runner = TurnRunner(flow, on_interrupt=lambda: hooks.append("on_interrupt"))
    seen: list[LLMEvent] = []
    events: list[ReplyEvent] = []
    with observe_llm(seen.append):
        async for event in runner.astream_turn("Tell me a long story"):
            events.append(event)
            if event.type == "text":
                assert runner.interrupt(**identity(event))
                assert runner.interrupt(**identity(event))  # idempotent
    chunks = [e for e in seen if e.type == "llm_stream_chunk"]
    assert len(chunks) <= 2  # of 100: the stream was closed, not drained
    assert not any(e.type == "llm_call_completed" for e in seen)
    assert events[-1].type == "interrupted"
    assert [e.type for e in events].count("text") == 1
    assert hooks == ["on_interrupt"]
    reply = flow.state.replies[events[0].delivery_id]
    assert (reply.status, reply.interrupted) == ("interrupted", True)
    assert flow.state.turns[reply.turn_id].status == "interrupted"
    # Only the terminal event may still be handed off.
    assert [runner.accept_event(e) for e in events][-2:] == [False, True]
    assert runner.running_turn_id() is None
    assert (await collect(runner, "next"))[-1].type == "completed"  # the flow is usable


async def test_interrupt_from_another_thread_aborts_too() -> None:
    flow = talk_flow(LONG)
    runner = TurnRunner(flow)
    chunks = 0

    def observe(event: LLMEvent) -> None:
        nonlocal chunks
        if event.type == "llm_stream_chunk":
            chunks += 1
            if chunks == 1:
                reply = runner.active.reply if runner.active else None
                assert reply is not None
                worker = threading.Thread(
                    target=runner.interrupt,
                    kwargs={
                        "session_id": reply.session_id,
                        "turn_id": reply.turn_id,
                        "input_revision": reply.input_revision,
                        "delivery_id": reply.delivery_id,
                    },
                )
                worker.start()
                worker.join()

    with observe_llm(observe):
        events = await collect(runner, "story")
    assert events[-1].type == "interrupted"
    assert chunks <= 2


async def test_an_interrupt_for_another_identity_changes_nothing() -> None:
    flow = talk_flow("A short answer.")
    runner = TurnRunner(flow)
    old = await collect(runner, "first")
    events: list[ReplyEvent] = []
    async for event in runner.astream_turn("second"):
        events.append(event)
        if event.type == "generation_started":
            assert runner.interrupt(**identity(old[0]))  # the old reply: fence only
            assert not runner.interrupt(**{**identity(event), "turn_id": "other"})
            assert not runner.interrupt(**{**identity(event), "input_revision": 2})
    assert events[-1].type == "completed"
    assert all(runner.accept_event(e) for e in events)


async def test_should_interrupt_is_polled_per_frame() -> None:
    stop = False
    flow = talk_flow(LONG)
    runner = TurnRunner(flow, should_interrupt=lambda: stop)
    events: list[ReplyEvent] = []
    async for event in runner.astream_turn("story"):
        events.append(event)
        stop = stop or event.type == "first_model_text"
    assert events[-1].type == "interrupted"
    assert len([e for e in events if e.type == "text"]) <= 2


async def test_closing_the_iterator_early_interrupts_the_reply() -> None:
    flow = talk_flow(LONG)
    runner = TurnRunner(flow)
    events = runner.astream_turn("story")
    first = await anext(events)
    await events.aclose()  # type: ignore[attr-defined]
    reply = flow.state.replies[first.delivery_id]
    assert (reply.status, reply.interrupted) == ("interrupted", True)
    assert runner.active is None
    assert (await collect(runner, "again"))[-1].type == "completed"


async def test_a_stream_names_the_identities_of_every_event_before_the_first() -> None:
    flow = talk_flow("A short answer.")
    runner = TurnRunner(flow)
    stream = runner.astream_turn("Hello", turn_id="turn-1")
    assert (stream.turn_id, stream.input_revision) == ("turn-1", 1)
    assert stream.delivery_id not in flow.state.replies  # the turn begins at the first event
    assert repr(stream) == (
        f"ReplyStream(turn_id='turn-1', input_revision=1, delivery_id={stream.delivery_id!r})"
    )
    events = [event async for event in stream]
    assert events[-1].type == "completed" and len(events) > 2
    assert {(e.turn_id, e.input_revision, e.delivery_id) for e in events} == {
        ("turn-1", 1, stream.delivery_id)
    }
    assert flow.state.replies[stream.delivery_id].status == "completed"


async def test_closing_the_stream_before_its_first_event_interrupts_the_reply() -> None:
    hooks: list[str] = []
    flow = talk_flow(LONG)
    runner = TurnRunner(flow, on_interrupt=lambda: hooks.append("on_interrupt"))
    seen: list[LLMEvent] = []
    with observe_llm(seen.append):
        stream = runner.astream_turn("story", turn_id="turn-1")
        await stream.aclose()
        await stream.aclose()  # idempotent
    reply = flow.state.replies[stream.delivery_id]
    assert (reply.turn_id, reply.status, reply.interrupted) == ("turn-1", "interrupted", True)
    assert flow.state.turns["turn-1"].status == "interrupted"
    assert reply.last_accepted_seq == 0 and not reply.text  # nothing was handed out
    assert seen == [] and hooks == ["on_interrupt"]  # the flow never ran
    assert runner.active is None and runner.is_fenced(stream.delivery_id)
    with pytest.raises(StopAsyncIteration):
        await anext(stream)
    with pytest.raises(TurnIdentityError):  # its turn_id was used
        runner.astream_turn("story", turn_id="turn-1")
    assert (await collect(runner, "again"))[-1].type == "completed"


async def test_closing_an_unread_stream_while_another_turn_runs_records_nothing() -> None:
    flow = talk_flow("A short answer.")
    runner = TurnRunner(flow)
    unread = runner.astream_turn("first")
    running = runner.astream_turn("second")
    first = await anext(running)
    await unread.aclose()  # its turn cannot begin now: no record, and no error
    assert unread.delivery_id not in flow.state.replies
    assert runner.is_fenced(unread.delivery_id)
    assert [first.type, *[e.type async for e in running]][-1] == "completed"


def test_closing_the_sync_iterator_after_the_terminal_event_keeps_completion() -> None:
    flow = Chat(suppress_flow_events=True)
    runner = TurnRunner(flow)
    events = runner.stream_turn("Hello")
    got = list(events)
    events.close()  # type: ignore[attr-defined]
    assert flow.state.replies[got[0].delivery_id].status == "completed"
    assert not flow.state.replies[got[0].delivery_id].interrupted


# -- failures and misuse ---------------------------------------------------------------


async def test_a_provider_failure_fails_the_reply_and_is_reraised() -> None:
    flow = talk_flow(RuntimeError("provider exploded"))
    runner = TurnRunner(flow)
    events: list[ReplyEvent] = []
    with pytest.raises(ProviderError):
        async for event in runner.astream_turn("hi"):
            events.append(event)
    assert events[-1].type == "failed"
    reply = flow.state.replies[events[0].delivery_id]
    assert reply.status == "failed" and flow.state.turns[reply.turn_id].status == "failed"
    assert not runner.accept_event(events[0])  # nothing but `failed` after a failure
    assert runner.accept_event(events[-1])
    assert runner.active is None


async def test_misuse_raises_typed_errors_that_say_what_to_do() -> None:
    flow = Chat(suppress_flow_events=True)
    runner = TurnRunner(flow)
    running = runner.astream_turn("one", turn_id="t1")
    await anext(running)
    with pytest.raises(TurnInProgressError, match="Drain the active turn"):
        runner.astream_turn("two")
    assert [e.type async for e in running][-1] == "completed"
    with pytest.raises(TurnIdentityError, match="already been used"):
        runner.astream_turn("again", turn_id="t1")
    with pytest.raises(TurnRestoreError, match="Restore state before starting a tracked"):
        runner.astream_turn("x", from_checkpoint=object())
    with pytest.raises(TurnRestoreError):
        runner.astream_turn("x", restore_from_state_id="abc")
    with pytest.raises(TurnIdentityError, match="session_id"):
        runner.astream_turn("x", session_id="someone-else")
    with pytest.raises(ValueError, match="message"):
        runner.astream_turn("  ")
    with pytest.raises(TypeError, match="message"):
        runner.astream_turn(None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="unexpected keyword"):
        runner.astream_turn("x", temperature=0)
    with pytest.raises(RuntimeError, match="astream_turn"):
        runner.stream_turn("sync inside a loop")
    flow.state.ended = True
    with pytest.raises(ConversationEndedError):
        runner.astream_turn("after the end")
    assert list(flow.state.turns) == ["t1"]  # rejected turns leave no record


def test_the_flow_must_be_conversational_with_a_turn_state() -> None:
    class Plain(Flow[TurnState]):
        @listen("x")
        def handle_x(self) -> None: ...

    with pytest.raises(ConversationModeError):
        TurnRunner(Plain())

    class Untracked(Flow[ConversationState]):
        conversational = True

    with pytest.raises(TypeError, match="TurnState"):
        TurnRunner(Untracked())


# -- state authority, snapshots -----------------------------------------------------------


async def test_tracked_turns_never_reload_a_persisted_snapshot(tmp_path: Any) -> None:
    from voxflow.flow import SQLiteFlowPersistence

    persistence = SQLiteFlowPersistence(tmp_path / "states.db")
    flow = Chat(suppress_flow_events=True, persistence=persistence)
    runner = TurnRunner(flow)
    live = flow.state
    for message in ("one", "two", "three"):
        assert (await collect(runner, message))[-1].type == "completed"
    assert flow.state is live  # never replaced by a stored snapshot
    assert len(flow.state.turns) == 3
    assert not flow.conversation.holds_state_live  # released after each turn
    assert not flow.conversation.skips_restore(flow.flow_id)


async def test_a_restored_session_starts_new_turns_and_replays_nothing() -> None:
    flow = talk_flow(LONG)
    runner = TurnRunner(flow)
    done = await collect(runner, "first", turn_id="a")
    events = runner.astream_turn("second", turn_id="b")
    await anext(events)
    saved_state = flow.state.model_dump_json()
    snapshot = runner.snapshot()
    await events.aclose()  # type: ignore[attr-defined]

    fresh = talk_flow("Back again.")
    fresh._state = type(fresh.state).model_validate_json(saved_state)  # restore the state
    restored = TurnRunner(fresh)
    restored.restore(snapshot)
    assert fresh.state.turns["a"].status == "completed"
    assert fresh.state.turns["b"].status == "interrupted"  # not restarted
    assert not any(restored.accept_event(e) for e in done)  # already handed off
    new = await collect(restored, "third", turn_id="c")
    assert new[-1].type == "completed" and new[-1].text == "Back again."
    with pytest.raises(TurnIdentityError):
        restored.astream_turn("again", turn_id="b")


async def test_cost_per_turn_does_not_copy_the_state() -> None:
    """Per-event work touches one reply; history and earlier records are never copied."""
    flow = Chat(suppress_flow_events=True)
    runner = TurnRunner(flow)
    for i in range(30):
        await collect(runner, f"m{i}")
    first_message = flow.state.messages[0]
    first_reply = next(iter(flow.state.replies.values()))
    await collect(runner, "last")
    assert flow.state.messages[0] is first_message
    assert next(iter(flow.state.replies.values())) is first_reply


async def test_turns_run_under_a_shared_state_lock() -> None:
    lock = asyncio.Lock()
    flow = Chat(suppress_flow_events=True)
    runner = TurnRunner(flow)
    async with lock:
        events = await collect(runner)
    assert events[-1].type == "completed"
