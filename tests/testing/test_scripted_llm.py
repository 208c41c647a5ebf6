"""ScriptedLLM: scripted replies through the real LLM code and a litellm custom provider."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from voxflow import ConversationConfig, Flow
from voxflow.agent import Agent
from voxflow.clock import VirtualClock
from voxflow.errors import ProviderError
from voxflow.llm import LLM, LLMEvent, observe_llm
from voxflow.testing import ScriptedLLM, ScriptedReply, fail, hang, reply, tool_call
from voxflow.turns import TurnState

pytestmark = pytest.mark.unit


async def test_a_reply_streams_token_by_token_through_the_real_llm() -> None:
    llm = ScriptedLLM("Once upon a time.", "Okay.")
    assert isinstance(llm, LLM) and llm.model.startswith("voxflow-scripted/")
    events: list[LLMEvent] = []
    with observe_llm(events.append):
        first = await llm.acall("Tell me a story.", stream=True)
    assert first.content == "Once upon a time."
    chunks = [e.content for e in events if e.type == "llm_stream_chunk"]
    assert chunks == ["Once ", "upon ", "a ", "time."]
    assert [e.type for e in events][0::5] == ["llm_call_started", "llm_call_completed"]
    # One reply per call, in order; the last one repeats.
    assert [(await llm.acall("again")).content for _ in range(2)] == ["Okay.", "Okay."]
    log = llm.calls[0]
    assert (log.stream, log.produced, log.total, log.closed_early, log.finished) == (
        True, 4, 4, False, True
    )
    assert log.messages[-1] == {"role": "user", "content": "Tell me a story."}
    assert [c.stream for c in llm.calls] == [True, False, False]


async def test_the_pace_is_the_scripted_one() -> None:
    # On a virtual clock the pace is exact: each token arrives at its scripted time
    # (no wall-clock timing in the test).
    clock = VirtualClock(autojump=True)
    llm = ScriptedLLM(reply("a b c d e", tokens_per_second=20, first_token_delay=0.15),
                      clock=clock)
    arrivals: list[tuple[str, float]] = []
    async with clock, llm.astream("go") as stream:
        async for chunk in stream:
            arrivals.append((chunk, round(clock.now(), 6)))
    assert arrivals == [("a ", 0.15), ("b ", 0.2), ("c ", 0.25), ("d ", 0.3), ("e", 0.35)]
    assert llm.calls[-1].waits == [0.15, 0.05, 0.05, 0.05, 0.05]


async def test_a_failure_is_a_provider_error_retryable_by_its_status() -> None:
    llm = ScriptedLLM(fail(status=503), fail(status=400, partial="I was saying"), "Back.",
                      retries=0)  # each failure surfaces (voxflow.llm.policy retries 2 by default)
    events: list[LLMEvent] = []
    with observe_llm(events.append), pytest.raises(ProviderError) as down:
        await llm.acall("hi", stream=True)
    assert down.value.retryable is True
    assert "llm_call_failed" in [e.type for e in events]
    with pytest.raises(ProviderError) as bad:
        await llm.acall("hi", stream=True)
    assert bad.value.retryable is False
    # The partial answer was streamed before the failure.
    assert llm.calls[1].produced == 3 and llm.calls[1].finished
    assert (await llm.acall("hi")).content == "Back."


async def test_a_hung_provider_waits_until_cancelled_and_its_stream_is_closed() -> None:
    llm = ScriptedLLM(hang(partial="Let me think"))
    events: list[LLMEvent] = []
    with observe_llm(events.append), pytest.raises(TimeoutError):
        await asyncio.wait_for(llm.acall("hi", stream=True), timeout=0.3)
    assert [e.content for e in events if e.type == "llm_stream_chunk"] == ["Let ", "me ", "think"]
    (call,) = llm.calls
    assert call.closed_early and not call.finished and call.produced == 3


async def test_leaving_a_stream_early_closes_the_provider_stream() -> None:
    llm = ScriptedLLM(reply("one two three four five six", tokens_per_second=50))
    async with llm.astream("go") as stream:
        async for piece in stream:
            if piece.startswith("two"):
                break
    (call,) = llm.calls
    assert call.closed_early and not call.finished
    assert 0 < call.produced < call.total == 6


def test_a_conversational_flow_answers_with_the_scripted_llm() -> None:
    llm = ScriptedLLM("Hello! How can I help?")

    @ConversationConfig(llm=llm, system_prompt="Be brief.")
    class Chat(Flow[TurnState]):
        pass

    flow = Chat()
    assert flow.handle_turn("Hi there") == "Hello! How can I help?"
    assert [(m.role, m.content) for m in flow.state.messages] == [
        ("user", "Hi there"), ("assistant", "Hello! How can I help?")
    ]
    prompt = llm.calls[0].messages
    assert prompt[0]["role"] == "system" and "Be brief." in prompt[0]["content"]


async def lookup_order(order_id: str) -> dict[str, str]:
    """Look up an order's status."""
    return {"order_id": order_id, "status": "shipped"}


async def test_an_agent_runs_a_scripted_tool_call() -> None:
    llm = ScriptedLLM(tool_call("lookup_order", order_id="A1"), "Order A1 has shipped.")
    agent = Agent("Support", "Answer order questions", llm=llm, tools=[lookup_order])
    result = await agent.akickoff("Where is order A1?")
    assert result.raw == "Order A1 has shipped."
    assert result.tool_calls == 1
    tool_message = llm.calls[1].messages[-1]
    assert tool_message["role"] == "tool"
    assert tool_message["content"] == '{"order_id": "A1", "status": "shipped"}'


async def test_a_streamed_tool_call_arrives_whole() -> None:
    llm = ScriptedLLM(tool_call("lookup_order", order_id="A1"))
    spec: dict[str, Any] = {"type": "function", "function": {"name": "lookup_order"}}
    response = await llm.acall("where?", tools=[spec], stream=True)
    (call,) = response.tool_calls
    assert (call.name, call.parsed_arguments()) == ("lookup_order", {"order_id": "A1"})


@pytest.mark.parametrize(
    ("make", "error", "match"),
    [
        (lambda: reply(""), ValueError, "blank"),
        (lambda: reply(3), TypeError, "text must be a str"),
        (lambda: reply("x", tokens_per_second=0), ValueError, "tokens_per_second"),
        (lambda: reply("x", tokens_per_second=float("nan")), ValueError, "tokens_per_second"),
        (lambda: reply("x", first_token_delay=-1), ValueError, "first_token_delay"),
        (lambda: reply("x", first_token_delay=True), ValueError, "first_token_delay"),
        (lambda: fail(status=200), ValueError, "400-599"),
        (lambda: fail(partial=None), TypeError, "partial"),
        (lambda: hang(partial=1), TypeError, "partial"),
        (lambda: tool_call("not a name"), ValueError, "identifier"),
        (lambda: tool_call("f", x=object()), TypeError, "JSON-serializable"),
        (lambda: ScriptedLLM(), ValueError, "at least one reply"),
        (lambda: ScriptedLLM(3), TypeError, r"replies\[0\]"),
        (lambda: ScriptedLLM("x", name="a/b"), ValueError, "name"),
        (lambda: ScriptedLLM("x", mock_response="y"), ValueError, "mock_response"),
    ],
)
def test_bad_scripts_are_refused_with_a_typed_error(make: Any, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        make()


def test_two_live_scripted_llms_cannot_share_a_name() -> None:
    first = ScriptedLLM("x", name="shared")
    with pytest.raises(ValueError, match="exists already"):
        ScriptedLLM("y", name="shared")
    assert first.model == "voxflow-scripted/shared"
    assert isinstance(first.calls, list) and isinstance(reply("a"), ScriptedReply)
