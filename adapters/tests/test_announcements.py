"""Background jobs announced through the ReplyQueue only when the floor is free."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import threading
from collections.abc import Callable
from typing import Any, ClassVar

import pytest
from voxflow_adapters.testkit.assertions import (
    AnnouncementWait,
    CallAssertionError,
    assert_announcement_waited,
    assert_floor_held,
    assert_history_is_heard,
)
from voxflow_adapters.testkit.scenario import CallResult, run_call
from voxflow_adapters.testkit.script import CallScript
from voxflow_adapters.testkit.timeline import call_timeline
from voxflow_voice.engines import VoiceEngines
from voxflow_voice.events import SessionEvent
from voxflow_voice.listen.turn_detector import TurnDetection
from voxflow_voice.session import VoiceSession, VoiceSettings

from voxflow import ConversationConfig, Flow, listen, start
from voxflow.clock import MonotonicClock, VirtualClock
from voxflow.conversation import RouterContext
from voxflow.jobs import (
    JobContext,
    JobRecord,
    JobRunner,
    JobState,
    JobWorkFlow,
    JobWorkState,
    add_job,
    background_job,
)
from voxflow.replies import ReplyQueue, ReplyQueueState
from voxflow.turns import TurnRunner
from voxflow.wiring import AssistantState

pytestmark = pytest.mark.models

ANSWER = "Your parcel arrives on Thursday."


class Lookup(JobRecord):
    output_fields: ClassVar[frozenset[str]] = frozenset({"answer"})
    answer: str = ""


class ShopState(ReplyQueueState, JobState[Lookup]):
    pass


class LookupWork(JobWorkFlow[JobWorkState[Lookup]]):
    pause: Callable[[float], None] = staticmethod(lambda s: None)
    seconds: ClassVar[float] = 2.0

    @start()
    def look_up(self) -> None:
        self.publish_update("started")
        self.publish_update("stage_started", stage="lookup")
        self.pause(self.seconds)
        self.publish_update("stage_completed", stage="lookup", outputs={"answer": ANSWER})
        self.publish_update("completed")


@ConversationConfig(system_prompt="")
class Shop(Flow[ShopState]):
    start_job: Callable[[Lookup], None] | None = None

    def route_turn(self, context: RouterContext) -> str | None:
        return "order" if "order" in (self.state.current_user_message or "").lower() else "chat"

    @listen("order")
    def handle_order(self) -> str:
        running = [t for t in self.state.turns.values() if t.status == "running"]
        job = Lookup(session_id=self.state.id, origin_turn_id=running[-1].turn_id)
        assert add_job(self.state, job) and self.start_job is not None
        self.start_job(job)
        return "I'm checking your order."

    @listen("chat")
    def handle_chat(self) -> str:
        return "Sure, let me think about that for a little while longer."


async def call_with_jobs(
    engines: VoiceEngines, script: CallScript, settings: VoiceSettings | None = None,
    *, finish_into_speech: int | None = None,
) -> CallResult:
    """One call; the job pauses ``LookupWork.seconds`` on the call's clock, or, with
    ``finish_into_speech=n``, until 1 s into the user's n-th utterance (so its result is
    queued while they speak, whatever the job thread's start took on the virtual clock)."""
    flow = Shop()
    turns = TurnRunner(flow)
    replies = ReplyQueue(turns)
    clock = VirtualClock(autojump=True)
    loop = asyncio.get_running_loop()
    holder: dict[str, VoiceSession] = {}
    speech: list[float] = []  # when each utterance started (its speech_started)

    def on_event(event: SessionEvent) -> None:
        if event.kind == "speech_started":
            speech.append(event.at)

    async def wait(seconds: float) -> None:
        if finish_into_speech is None:
            await clock.sleep(seconds)
            return
        while len(speech) < finish_into_speech:
            await clock.sleep(0.02)
        await clock.sleep(1.0)

    def pause(seconds: float) -> None:  # the worker thread waits on the call's clock
        asyncio.run_coroutine_threadsafe(wait(seconds), loop).result()

    def make_work(job: Lookup, inputs: Any, publish: Any) -> LookupWork:
        work = LookupWork(state=JobWorkState[Lookup](job=job), publish=publish,
                          suppress_flow_events=True)
        work.pause = pause
        return work

    async def on_update(snapshot: dict[str, Any]) -> None:
        await holder["session"].on_job_update(snapshot)

    jobs = JobRunner(flow.state, make_work, on_update=on_update)
    flow.start_job = lambda job: jobs.submit(job, {})
    try:
        return await run_call(
            turns, script, engines, clock=clock, settings=settings, replies=replies, jobs=jobs,
            on_session=lambda s: holder.__setitem__("session", s), on_event=on_event,
        )
    finally:
        await jobs.aclose()


def announcement_start(call: CallResult) -> tuple[str, float]:
    started = [e for e in call.events if e.kind == "reply_started" and e.reply_kind == "progress"]
    assert len(started) == 1
    delivery = started[0].delivery_id
    audio = [e.at for e in call.events if e.kind == "audio_started" and e.delivery_id == delivery]
    assert audio, "the announcement was never heard"
    return delivery, audio[0]


async def test_job_result_is_announced_once_the_floor_is_free(engines: VoiceEngines) -> None:
    script = (CallScript().user_says(0.3, "Where is my order?")
              .user_says(3.0, "And can you tell me something else?").until(14.0))
    call = await call_with_jobs(engines, script)
    delivery, heard_at = announcement_start(call)
    # Never over the user, never over another reply: it starts after the second answer
    # finished playing, although the job completed while that answer was playing.
    finished = [e.at for e in call.events if e.kind == "reply_finished"]
    assert len(finished) >= 2 and heard_at >= finished[1]
    for e in call.events:
        if e.kind == "speech_started":
            assert not (heard_at <= e.onset_at <= heard_at + 0.5)
    settled = [e for e in call.events if e.kind == "delivery_settled"]
    assert [(s.delivery_id, s.status) for s in settled] == [(delivery, "completed")]
    assert call.of_kind("reply_text")[-1].text == ANSWER
    assert call.stale_samples() == 0
    # The same, as the testing kit says it: the job's result was queued while the floor
    # was taken (the user's second question, then its answer), and held back until free.
    waited = assert_announcement_waited(call, text=ANSWER)
    print(call_timeline(call), "\n", waited)
    assert waited.delivery_id == delivery and waited.text == ANSWER
    [queued] = call.of_kind("announcement_queued")
    [job] = call.session.turns.flow.state.jobs.values()
    assert (queued.delivery_id, queued.job_ids) == (delivery, (job.job_id,))
    assert waited.held_by, "the job was meant to finish while the floor was taken"
    assert waited.queued_at < waited.floor_free_at <= waited.started_at
    assert waited.queued_at == queued.at - call.tape.start
    assert f"announcement queued: reply 3 (job {job.job_id}, for turn 1)" in call_timeline(call)
    assert_floor_held(call)
    assert_history_is_heard(call)  # the announcement, heard whole, is in the history
    messages = call.session.turns.flow.state.messages
    [said] = [m for m in messages if m.metadata.get("delivery_id") == delivery]
    messages.remove(said)  # as if the heard announcement had not entered the history
    with pytest.raises(CallAssertionError) as forgotten:
        assert_history_is_heard(call)
    assert forgotten.value.reason.startswith(
        f'the history has no message for reply 3; expected "{ANSWER}"'
    )


def with_events(call: CallResult, events: list[SessionEvent]) -> CallResult:
    """The same call with an edited copy of its events (the recording is untouched):
    the assertions are pure functions of the events and the client's tape."""
    session = copy.copy(call.session)
    session.events = events
    return CallResult(session, call.client)


async def test_an_announcement_that_did_not_wait_is_caught(engines: VoiceEngines) -> None:
    # The job finishes 1 s into the user's long second question: its result is queued
    # while they speak, and the queue holds it back.
    script = (CallScript().user_says(0.3, "Check my order please.")
              .user_says(2.6, "And while you are at it, tell me about the weather tomorrow.")
              .until(16.0))
    call = await call_with_jobs(engines, script, finish_into_speech=2)
    waited = assert_announcement_waited(call, text=ANSWER)
    print(call_timeline(call), "\n", waited)
    assert isinstance(waited, AnnouncementWait)
    assert any(h.startswith("the user was speaking") for h in waited.held_by), waited
    assert waited.started_at >= waited.floor_free_at > waited.queued_at
    assert_floor_held(call)

    # The failing cases are built from this call's events, edited in a copy (the
    # assertion reads only the events and the tape): as if the session had started the
    # announcement's audio the moment it was queued, while the user was speaking.
    delivery = waited.delivery_id
    events = list(call.events)
    [queued] = [e for e in events if e.kind == "announcement_queued"]
    audio = next(e for e in events if e.kind == "audio_started" and e.delivery_id == delivery)
    events[events.index(audio)] = audio.model_copy(update={"at": queued.at})
    with pytest.raises(CallAssertionError) as over_user:
        assert_announcement_waited(with_events(call, events), text=ANSWER)
    at = queued.at - call.tape.start
    assert over_user.value.reason.startswith(
        f'announcement reply 3 ("{ANSWER}") did not wait for the floor: it was queued at '
        f"{at:.2f} s while the user was speaking ("
    ), over_user.value.reason
    assert f"and started at {at:.2f} s while the user was speaking (" in over_user.value.reason
    assert "announcement queued: reply 3" in over_user.value.timeline
    with pytest.raises(CallAssertionError):
        assert_floor_held(with_events(call, events))
    # Started before it was queued: the queued fact moved after the audio.
    late = [e.model_copy(update={"at": audio.at + 1.0}) if e is queued else e
            for e in call.events]
    with pytest.raises(CallAssertionError, match=r"started at [\d.]+ s, before it was queued"):
        assert_announcement_waited(with_events(call, late))
    # No record of when it was queued: nothing to prove the wait with.
    unqueued = [e for e in call.events if e is not queued]
    with pytest.raises(CallAssertionError, match="no record of when it was queued"):
        assert_announcement_waited(with_events(call, unqueued))
    assert assert_announcement_waited(call) == waited  # the recording itself is untouched


async def test_mute_holds_announcements_until_unmuted(engines: VoiceEngines) -> None:
    script = CallScript().user_says(0.3, "Check my order please.").mute(2.5, 8.0).until(14.0)
    call = await call_with_jobs(engines, script)
    _, heard_at = announcement_start(call)
    mutes = [(e.at, e.muted) for e in call.events if e.kind == "mute"]
    assert [m for _, m in mutes] == [True, False]
    assert heard_at >= mutes[1][0]  # nothing was announced while muted
    assert_floor_held(call)
    waited = assert_announcement_waited(call, text="arrives on Thursday")
    assert any(h.startswith("the microphone was muted") for h in waited.held_by), waited
    assert waited.started_at >= waited.floor_free_at == mutes[1][0] - call.tape.start
    # The kit's floor check catches an announcement over a mute (here: a later mute
    # moved to cover the announcement's start, as if the queue had ignored it).
    mute = next(e for e in call.events if e.kind == "mute" and e.muted)
    index = call.events.index(mute)
    call.events[index] = mute.model_copy(update={"at": heard_at - 0.5})
    unmute = next(e for e in call.events if e.kind == "mute" and not e.muted)
    call.events[call.events.index(unmute)] = unmute.model_copy(update={"at": heard_at + 0.5})
    with pytest.raises(CallAssertionError) as over_mute:
        assert_floor_held(call)
    assert over_mute.value.reason.startswith(
        f'announcement reply 2 ("{ANSWER}") started at {heard_at - call.tape.start:.2f} s '
        "while the microphone was muted ("
    )
    with pytest.raises(CallAssertionError, match="did not wait for the floor"):
        assert_announcement_waited(call)
    with pytest.raises(CallAssertionError, match='expected an announcement saying "Hello"'):
        assert_announcement_waited(call, text="Hello")


async def test_a_job_asked_for_in_a_discarded_speculative_reply_never_starts(
    engines: VoiceEngines,
) -> None:
    # "Check my order" [pause] "number twelve, please.": the reply prepared in the pause
    # asked for a lookup; the user spoke on, so it was rolled back, and the job it
    # submitted is refused at admission (it waits for the state lock, held until then).
    first = "Check my order"
    seconds = sum(s.samples.size for s in engines.tts.synthesize(first)) / engines.tts.sample_rate
    script = (CallScript().user_says(0.3, first)
              .user_says(0.3 + seconds + 0.35, "number twelve, please.").until(12.0))
    patient = VoiceSettings(turn_detection=TurnDetection(end_of_turn_silence=1.2))
    timer = dataclasses.replace(engines, end_of_turn=None)  # the pause is not a turn's end
    call = await call_with_jobs(timer, script, settings=patient)
    discarded = {d.turn_id for d in call.of_kind("speculative_reply_discarded")}
    [committed] = call.of_kind("turn_committed")
    assert "number" in committed.text.lower()  # the whole sentence is the turn
    state = call.session.turns.flow.state
    [job] = state.jobs.values()  # one lookup: the committed turn's
    assert discarded and job.origin_turn_id == committed.turn_id
    assert committed.turn_id not in discarded
    assert job.status == "completed"
    [settled] = call.of_kind("delivery_settled")
    assert settled.status == "completed"


RETURNED: list[float] = []  # when check_flight returned, on the call's clock
STARTED: list[float] = []  # when it started
FLIGHT = "Flight BA 117 is on time."


@background_job
async def check_flight(job: JobContext, until: float) -> str:
    """Returns at ``until`` on the call's clock (a moment chosen in the script)."""
    STARTED.append(job.clock.now())
    await job.sleep(until - job.clock.now())
    RETURNED.append(job.clock.now())
    return FLIGHT


class Travel(Flow[AssistantState]):
    conversational = True
    returns_at: ClassVar[float] = 0.0

    def route_turn(self, context: RouterContext) -> str | None:
        return "flight" if "flight" in (self.state.current_user_message or "").lower() else "chat"

    @listen("flight")
    def handle_flight(self) -> str:
        check_flight.start(self, until=self.returns_at)
        return "I'm checking your flight."

    @listen("chat")
    def handle_chat(self) -> str:
        return "Sure, let me think about that."


async def travel_call(
    engines: VoiceEngines, script: CallScript, returns_at: float,
    settings: VoiceSettings | None = None,
) -> tuple[CallResult, float]:
    """One call of ``Travel`` whose flight check returns at ``returns_at`` (call time);
    the call and when the job returned. A deadlock fails the test (not hangs it)."""
    RETURNED.clear()
    STARTED.clear()
    flow = type("TravelCall", (Travel,), {"returns_at": returns_at})()
    async with asyncio.timeout(120):  # wall clock: only a deadlock reaches it
        call = await run_call(flow, script, engines, settings=settings or VoiceSettings())
    [returned] = RETURNED
    return call, returned


async def test_a_result_ready_during_a_pause_answer_is_queued_at_once(
    engines: VoiceEngines,
) -> None:
    # (issue 30, item 2) The user asks something else; the flight check returns in the
    # end-of-turn silence of that question, while its answer, prepared in the pause,
    # waits for the verdict. That answer held the state lock until the turn was final,
    # so the result was queued only then; with the job's clock hold the call deadlocked.
    script = (CallScript().user_says(0.5, "Is my flight on time?")
              .user_says(4.6, "What about the weather?"))
    # (the silence timer: its 0.6 s pause leaves the job time to return in it)
    timer = dataclasses.replace(engines, end_of_turn=None)
    call, returned = await travel_call(timer, script, returns_at=5.9)
    start = call.tape.start
    second = call.of_kind("turn_committed")[1]
    paused = [e.end_at for e in call.of_kind("speech_ended")]
    assert paused[-1] < returned < second.at, call_timeline(call)  # in its pause
    assert [m.speculative for m in call.of_kind("turn_metrics")] == [True, True]
    [queued] = call.of_kind("announcement_queued")
    assert queued.at == returned, call_timeline(call)  # the moment the job returned
    waited = assert_announcement_waited(call, text=FLIGHT)
    assert waited.ready_at == returned - start
    assert waited.waited == waited.started_at - waited.ready_at
    assert_floor_held(call)
    assert_history_is_heard(call)
    # The kit counts the wait from when the result was ready, not from when it was
    # queued (here: as if it had been queued only when its audio started).
    late = [e.model_copy(update={"at": waited.started_at + start}) if e is queued else e
            for e in call.events]
    again = assert_announcement_waited(with_events(call, late), text=FLIGHT)
    assert (again.ready_at, again.waited) == (waited.ready_at, waited.waited)
    assert again.queued_at == waited.started_at
    assert f"ready at {waited.ready_at:.2f} s (queued at {waited.started_at:.2f} s)" in str(again)


async def test_a_result_ready_during_a_discarded_pause_answer_is_kept(
    engines: VoiceEngines,
) -> None:
    # "What about" [pause] "the weather tomorrow?": the flight check returns in the
    # pause, while the answer prepared there waits for its verdict; the user speaks on,
    # so that answer is rolled back, and the rollback keeps the job's result (and its
    # queued announcement): it is announced once, after the whole question's answer.
    first = "What about"
    seconds = sum(s.samples.size for s in engines.tts.synthesize(first)) / engines.tts.sample_rate
    resume = 4.6 + seconds + 0.35
    script = (CallScript().user_says(0.5, "Is my flight on time?")
              .user_says(4.6, first).user_says(resume, "the weather tomorrow?"))
    patient = VoiceSettings(turn_detection=TurnDetection(end_of_turn_silence=1.2))
    call, returned = await travel_call(engines, script, returns_at=resume, settings=patient)
    [discarded] = call.of_kind("speculative_reply_discarded")
    assert returned < discarded.at, call_timeline(call)  # while it waited for its verdict
    [queued] = call.of_kind("announcement_queued")
    assert queued.at == returned, call_timeline(call)
    state = call.session.turns.flow.state
    [job] = state.jobs.values()
    assert job.status == "completed" and job.announcement == FLIGHT
    assert [d.status for d in state.deliveries.values()] == ["completed"]
    assert_announcement_waited(call, text=FLIGHT)
    assert "weather tomorrow" in call.of_kind("turn_committed")[1].text.lower()


async def test_the_job_a_pause_answer_asked_for_starts_at_its_turns_commit(
    engines: VoiceEngines,
) -> None:
    # (issue 30, item 2) The flight check started 0.62 s after its turn's commit: the
    # jobs of a turn answered in the pause waited until that answer's held audio had
    # been handed to playback, although the turn was final at its commit.
    script = CallScript().user_says(0.5, "Is my flight on time?").until(9.0)
    call, returned = await travel_call(engines, script, returns_at=6.0)
    [committed] = call.of_kind("turn_committed")
    assert call.of_kind("turn_metrics")[0].speculative, call_timeline(call)  # in the pause
    [started] = STARTED
    assert started == committed.at, call_timeline(call)
    [queued] = call.of_kind("announcement_queued")
    assert queued.at == returned


ASKED: list[float] = []  # when the slow answer asked for its job


class SlowTravel(Travel):
    """Its answer asks for the flight check once its turn was committed (an LLM's tool
    call comes after the end-of-turn verdict, not with it)."""

    clock: ClassVar[MonotonicClock]
    committed: ClassVar[threading.Event]

    @listen("flight")
    def handle_flight(self) -> str:  # (in its thread)
        # (not a fixed 0.5 s: on a loaded machine the verdict may come later than that)
        assert self.committed.wait(60), "the turn was never committed"
        ASKED.append(self.clock.now())
        check_flight.start(self, until=self.clock.now() + 1.0)
        return "I'm checking your flight."


async def test_a_job_asked_for_after_the_verdict_starts_when_asked(
    voice_engines: VoiceEngines,
) -> None:
    # In real time, at the defaults (Smart Turn) with continue_within 5 s: a turn that
    # asks for a job stands (it is never continued), so once its answer asks for one the
    # turn is final and the job starts there, before its reply ends. Before, only a job
    # asked for before the verdict did; this one waited until the turn was sealed at the
    # end of continue_within, after its reply had finished (in virtual time a flow's
    # answer takes no time: this needs the real clock). The order alone tells them
    # apart: no wall-clock bound, which a loaded machine could break.
    STARTED.clear()
    RETURNED.clear()
    ASKED.clear()
    clock = MonotonicClock()
    committed_now = threading.Event()
    flow = type("SlowTravelCall", (SlowTravel,),
                {"clock": clock, "committed": committed_now})()

    def on_event(event: SessionEvent) -> None:
        if event.kind == "turn_committed":
            committed_now.set()

    rules = TurnDetection(continue_within=5.0)  # (its maximum)
    script = CallScript().user_says(0.5, "Is my flight on time?").until(8.0)
    async with asyncio.timeout(120):  # only a deadlock reaches it
        call = await run_call(flow, script, voice_engines, clock=clock, on_event=on_event,
                              settings=VoiceSettings(turn_detection=rules))
    timeline = call_timeline(call)
    [committed] = call.of_kind("turn_committed")
    [asked], [started] = ASKED, STARTED
    answer = call.of_kind("reply_started")[0]
    [finished] = [e for e in call.of_kind("reply_finished")
                  if e.delivery_id == answer.delivery_id]
    assert committed.at < asked <= started < finished.at, timeline
    assert flow.state.turns[committed.turn_id].input_revision == 1
    [job] = flow.state.jobs.values()
    assert job.status == "completed"
