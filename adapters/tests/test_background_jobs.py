"""Background jobs in a voice call (real models, virtual clock), started from a handler
with ``@background_job``: progress and result announced when the floor is free, in order,
and each heard announcement kept in the history."""

from __future__ import annotations

import asyncio
from typing import Any

import litellm
import pytest
from litellm.integrations.custom_logger import CustomLogger
from voxflow_adapters.testkit.scenario import run_call
from voxflow_adapters.testkit.script import CallScript
from voxflow_voice.engines import VoiceEngines

from voxflow import LLM, ConversationConfig, Flow, listen
from voxflow.clock import VirtualClock
from voxflow.conversation import RouterContext
from voxflow.jobs import JobContext, background_job
from voxflow.wiring import AssistantState, AssistantWiring

pytestmark = pytest.mark.models


@background_job
async def book_table(job: JobContext, guests: int) -> str:
    await job.sleep(1.0)
    await job.progress("Still waiting for the restaurant.")
    await job.sleep(4.0)
    return f"Your table for {guests} is booked."


class Restaurant(Flow[AssistantState]):
    conversational = True

    def route_turn(self, context: RouterContext) -> str | None:
        return "book" if "table" in (self.state.current_user_message or "").lower() else None

    @listen("book")
    def handle_book(self) -> str:
        book_table.start(self, guests=2)
        return "Sure."


async def test_progress_then_result_are_announced_in_a_call(engines: VoiceEngines) -> None:
    flow = Restaurant()
    call = await run_call(flow, CallScript().user_says(0.3, "Book a table for two."), engines)
    texts = [e.text for e in call.events if e.kind == "reply_finished"]
    assert texts == ["Sure.", "Still waiting for the restaurant.",
                     "Your table for 2 is booked."]
    starts = [e.at for e in call.events if e.kind == "audio_started"]
    assert starts == sorted(starts)
    said = [m for m in flow.state.messages if m.metadata.get("announcement")]
    assert [m.content for m in said] == texts[1:]
    assert call.stale_samples() == 0


@background_job
async def confirm_table(job: JobContext) -> str:
    return "Your table is confirmed."


class QuickRestaurant(Restaurant):
    @listen("book")
    def handle_book(self) -> str:
        confirm_table.start(self)
        return "Sure."


async def test_a_job_that_completed_before_the_call_is_announced_in_it(
    engines: VoiceEngines,
) -> None:
    flow = QuickRestaurant()
    done = asyncio.Event()

    async def seen(snapshot: dict[str, Any]) -> None:
        if all(job["status"] == "completed" for job in snapshot["jobs"]):
            done.set()

    async with AssistantWiring(flow, clock=VirtualClock(autojump=True)) as wiring:
        wiring.subscribe(seen)
        assert await wiring.text_turn("A table, please.") == "Sure."  # typed, not spoken
        await asyncio.wait_for(done.wait(), 10)  # no clock sleeps in the job: wall time
        call = await run_call(wiring, CallScript().until(6.0), engines)  # then a call
    texts = [e.text for e in call.events if e.kind == "reply_finished"]
    assert texts == ["Your table is confirmed."]
    assert flow.state.messages[-1].content == texts[0]


class Sent(CustomLogger):
    """What litellm itself was asked to send."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[list[dict[str, Any]]] = []

    def log_pre_api_call(self, model: Any, messages: Any, kwargs: Any) -> None:
        self.calls.append(list(messages))


@background_job
async def track_parcel(job: JobContext) -> str:
    await job.sleep(1.0)
    return "Your parcel arrives on Thursday."


@ConversationConfig(system_prompt="Be brief.",
                    llm=LLM("openai/gpt-4o-mini", mock_response="Anything else?"))
class Parcels(Flow[AssistantState]):
    conversational = True

    def route_turn(self, context: RouterContext) -> str | None:
        return "track" if "parcel" in (self.state.current_user_message or "").lower() else None

    @listen("track")
    def handle_track(self) -> str:
        track_parcel.start(self)
        return "Let me check."


async def test_the_next_turns_llm_is_sent_the_announcement_the_caller_heard(
    engines: VoiceEngines,
) -> None:
    sent, saved = Sent(), list(litellm.callbacks)
    litellm.callbacks = [*saved, sent]
    try:
        script = (CallScript().user_says(0.3, "Where is my parcel?")
                  .then_mutes(0.1, after="reply_end", gap=0.1)  # (waits out "Let me check")
                  .then_says("And my refund?", after="reply_end", gap=0.5))
        flow = Parcels()
        call = await run_call(flow, script, engines)
    finally:
        litellm.callbacks = saved
    finished = [e.text for e in call.events if e.kind == "reply_finished"]
    assert finished == ["Let me check.", "Your parcel arrives on Thursday.", "Anything else?"]
    last = sent.calls[-1]  # the refund turn's request (a speculative one may precede it)
    assert [(m["role"], m["content"]) for m in last[1:3]] == [
        ("user", call.transcripts()[0]), ("assistant", "Let me check.")]
    assert last[3] == {"role": "assistant", "content": "Your parcel arrives on Thursday."}
    assert last[4]["role"] == "user" and "refund" in last[4]["content"].lower()


async def test_a_job_still_running_when_a_session_ends_is_announced_in_the_next(
    engines: VoiceEngines,
) -> None:
    # chat --voice after a lost device and `r`: a new session on the same conversation
    flow = Restaurant()
    async with AssistantWiring(flow, clock=VirtualClock(autojump=True)) as wiring:
        first = await run_call(wiring, CallScript().user_says(0.3, "A table for two."),
                               engines, tail=1.0)
        second = await run_call(wiring, CallScript().until(8.0), engines)
    heard = [[e.text for e in call.events if e.kind == "reply_finished"]
             for call in (first, second)]
    assert heard[0][0] == "Sure." and "Your table for 2 is booked." not in heard[0]
    assert heard[1][-1] == "Your table for 2 is booked."
    assert flow.state.messages[-1].content == "Your table for 2 is booked."


async def test_the_testing_kits_call_runner_wires_the_flow_like_every_entry_point(
    engines: VoiceEngines,
) -> None:
    from voxflow_adapters.testkit.call_runner import CallRunner

    from voxflow.examples.assistant import assistant_class

    flow = assistant_class(lookup_seconds=1.0)()
    call = await CallRunner(engines).arun(flow, CallScript().user_says(0.3, "Where is my order?"))
    heard = [e.text for e in call.events if e.kind == "reply_finished"]
    assert heard == ["Sure, I'm checking your order now.",
                     "Good news: order 417 has shipped. It arrives on Thursday."]
