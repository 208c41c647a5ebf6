"""A continuation merges into its turn (issue 32, item 2), through the product's path: a
simulated call (``run_call``, the default voice settings with the 0.6 s silence timer
instead of the end-of-turn model, which would not commit at that pause at all, and
speculative replies) on the real models (Silero VAD, Whisper, Piper), the caller an
espeak-ng voice saying "I want to reserve a table for" *(0.7 s)* "four people at eight tonight."

The timer commits the first half at the pause and its reply starts playing; the user
goes on. The turn was unfinished (its words end on "for"), so the speech continues it:
the reply is cut as a barge-in cuts it (its heard part kept, marked interrupted), the two
halves are one user message, and the turn is answered once, as the same turn's second
input revision. Before, it was two user messages, two answers, the first one cut.
A turn that was finished ("I want to reserve a table.") is continued the same way
(``TurnDetection.continue_complete``, the default: speech that starts within
``continue_within`` of a commit is the user going on, too soon to answer the reply); with
``continue_complete`` off it stands, and the speech after it is a new turn, a barge-in
over its reply.
"""

from __future__ import annotations

import dataclasses
import runpy
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from voxflow_adapters.hosting.calls import Call, CallSession, flow_call_factory
from voxflow_adapters.hosting.metrics import CallMetrics
from voxflow_adapters.testkit.flows import SHORT_STORY, Teller, words
from voxflow_adapters.testkit.scenario import CallResult, run_call
from voxflow_adapters.testkit.script import CallScript
from voxflow_adapters.testkit.simulated import SimulatedClient
from voxflow_adapters.testkit.timeline import call_timeline
from voxflow_voice.audio import STT_SAMPLE_RATE, AudioChunk, resample
from voxflow_voice.engines import VoiceEngines
from voxflow_voice.events import ReplyInterrupted, ReplyStarted, TurnCommitted
from voxflow_voice.listen.barge_in import BargeInSettings
from voxflow_voice.listen.turn_detector import TurnDetection
from voxflow_voice.session import VoiceSettings

from voxflow import Flow, listen
from voxflow.clock import VirtualClock
from voxflow.ids import SessionId
from voxflow.jobs import JobContext, background_job
from voxflow.turns import TurnRunner
from voxflow.wiring import AssistantState, AssistantWiring

pytestmark = [
    pytest.mark.models,
    pytest.mark.skipif(shutil.which("espeak-ng") is None,
                       reason="espeak-ng is missing: apt-get install espeak-ng (.ci/run does)"),
]

# a caller in an espeak-ng voice: benchmarks/_espeak.py, one helper for the benchmarks and tests
espeak = runpy.run_path(str(Path(__file__).parents[2] / "benchmarks" / "_espeak.py"))["espeak"]

FIRST, SECOND = "I want to reserve a table for", "four people at eight tonight."
ANSWER = "Of course. Let me see which tables are free then."
# The defaults, without the echo gate: the script plays no echo, and the gate's estimate
# over the caller's speech made the cut land at different samples from run to run.
SETTINGS = VoiceSettings(echo_gate=False)


@pytest.fixture
def engines(voice_engines: VoiceEngines) -> VoiceEngines:
    """The real engines with the silence timer: it commits the first half at the pause."""
    return dataclasses.replace(voice_engines, end_of_turn=None)


def sentence(tmp_path: Path, first: str, pause: float, second: str = SECOND) -> AudioChunk:
    gap = np.zeros(round(pause * STT_SAMPLE_RATE), np.float32)
    speech = np.concatenate([espeak(tmp_path, first), gap, espeak(tmp_path, second)])
    return AudioChunk.from_float(speech.astype(np.float32), STT_SAMPLE_RATE)


def booking_teller() -> Teller:
    return Teller(story=ANSWER, trigger=None)  # every turn gets the (short) answer


def heard_of(call: CallResult, delivery_id: str) -> int:
    return sum(r.num_samples for r in call.tape.receipts if r.delivery_id == delivery_id)


def check_merged(call: CallResult, state: object) -> None:
    """One user message, one answer; the first reply cut with its heard part kept."""
    first, merged = [e for e in call.events if isinstance(e, TurnCommitted)]
    assert "table" in words(first.text) and "people" not in words(first.text)
    assert merged.turn_id == first.turn_id  # the same turn ...
    assert (first.input_revision, merged.input_revision) == (1, 2)  # ... its input revised
    assert "table" in words(merged.text) and "people" in words(merged.text)
    cut, answer = [e for e in call.events if isinstance(e, ReplyStarted)]
    [interrupted] = [e for e in call.events if isinstance(e, ReplyInterrupted)]
    assert interrupted.delivery_id == cut.delivery_id  # the first reply, cut ...
    assert interrupted.heard_seconds > 0 and heard_of(call, cut.delivery_id) > 0  # ... heard
    assert call.settled(cut.delivery_id) == "interrupted"
    assert call.settled(answer.delivery_id) == "completed"  # the merged turn, answered once
    assert call.stale_samples() == 0
    messages = state.messages  # type: ignore[attr-defined]
    assert [m.role for m in messages] == ["user", "assistant"]
    assert messages[0].content == merged.text and messages[1].content == ANSWER
    turns = state.turns  # type: ignore[attr-defined]
    replies = state.replies  # type: ignore[attr-defined]
    assert list(turns) == [first.turn_id]
    assert turns[first.turn_id].input_revision == 2
    assert turns[first.turn_id].status == "completed"
    assert set(replies) == {cut.delivery_id, answer.delivery_id}  # no orphan, none lost
    old, new = replies[cut.delivery_id], replies[answer.delivery_id]
    assert (old.turn_id, old.input_revision, old.interrupted) == (first.turn_id, 1, True)
    assert old.heard_text == interrupted.heard_text.strip()
    assert old.heard_seconds == pytest.approx(interrupted.heard_seconds, abs=1e-3)
    assert (new.turn_id, new.input_revision, new.interrupted) == (first.turn_id, 2, False)
    assert new.text == ANSWER


async def test_speech_going_on_with_an_unfinished_turn_after_its_reply_began_merges(
    engines: VoiceEngines, tmp_path: Path
) -> None:
    turns = TurnRunner(booking_teller())
    script = CallScript().user_says(0.5, audio=sentence(tmp_path, FIRST, 0.7)).until(12.0)
    registry = CollectorRegistry()
    observe = CallMetrics(registry).call()
    call = await run_call(turns, script, engines, settings=SETTINGS, on_event=observe)
    check_merged(call, turns.flow.state)
    scraped = {s.name: s.value for family in text_string_to_metric_families(
        generate_latest(registry).decode()) for s in family.samples}
    assert scraped["voxflow_turns_continued_total"] == 1
    assert scraped["voxflow_turns_revoked_total"] == 0
    timeline = call_timeline(call)
    assert "turn 1 continued, committed again with all its words (revision 2)" in timeline
    assert "turn 2" not in timeline


class CountedStt:
    """The real Whisper, each transcription's audio span (start, end sample) noted."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.spans = inner, []  # type: list[tuple[int, int]]

    async def transcribe(self, audio: AudioChunk) -> Any:
        start = audio.start_sample or 0
        self.spans.append((start, start + audio.num_samples))
        return await self.inner.transcribe(audio)


async def test_a_continuations_words_are_decoded_once(
    voice_engines: VoiceEngines, tmp_path: Path
) -> None:
    """A short "Stop." just after the reply began is judged on its words (too short for a
    barge-in), read from the transcript of all the words from the turn's onset, which
    the turn needs anyway: no audio ending at the same sample is transcribed twice
    (before: the continuation's own speech, then the whole utterance)."""
    stt = CountedStt(voice_engines.stt)
    turns = TurnRunner(Teller(story=SHORT_STORY))

    def said(text: str) -> AudioChunk:
        return AudioChunk.from_float(espeak(tmp_path, text), STT_SAMPLE_RATE)

    script = CallScript().user_says(0.3, audio=said("Tell me a story."))
    script.then_says(audio=said("Stop."), after="reply_start", gap=0.3)
    call = await run_call(turns, script, dataclasses.replace(voice_engines, stt=stt),
                          settings=SETTINGS)
    first, again = call.of_kind("turn_committed")
    assert again.turn_id == first.turn_id and again.input_revision == 2, call_timeline(call)
    assert "stop" in words(again.text) and "story" in words(again.text)
    ends = [end for start, end in stt.spans if end - start > STT_SAMPLE_RATE // 2]
    assert len(ends) == len(set(ends)), stt.spans


async def test_a_turn_answered_after_its_end_merges_too(
    engines: VoiceEngines, tmp_path: Path
) -> None:
    """Without speculative replies the first half is answered after the turn ended, the
    usual way; unfinished, it is kept open all the same and the continuation merges."""
    turns = TurnRunner(booking_teller())
    script = CallScript().user_says(0.5, audio=sentence(tmp_path, FIRST, 0.7)).until(12.0)
    late = SETTINGS.model_copy(update={"speculative_replies": False})
    call = await run_call(turns, script, engines, settings=late)
    check_merged(call, turns.flow.state)
    assert not any(m.speculative for m in call.session.metrics)


async def test_a_finished_turn_is_continued_too(
    engines: VoiceEngines, tmp_path: Path
) -> None:
    turns = TurnRunner(booking_teller())
    audio = sentence(tmp_path, "I want to reserve a table.", 0.7, "Four people at eight.")
    call = await run_call(turns, CallScript().user_says(0.5, audio=audio).until(12.0),
                          engines, settings=SETTINGS)
    check_merged(call, turns.flow.state)


async def test_without_continue_complete_a_finished_turn_stands(
    engines: VoiceEngines, tmp_path: Path
) -> None:
    turns = TurnRunner(booking_teller())
    audio = sentence(tmp_path, "I want to reserve a table.", 0.7, "Four people at eight.")
    rules = SETTINGS.turn_detection.model_copy(update={"continue_complete": False})
    call = await run_call(turns, CallScript().user_says(0.5, audio=audio).until(12.0),
                          engines, settings=SETTINGS.model_copy(
                              update={"turn_detection": rules}))
    first, second = [e for e in call.events if isinstance(e, TurnCommitted)]
    assert first.turn_id != second.turn_id
    assert (first.input_revision, second.input_revision) == (1, 1)
    assert [m.role for m in turns.flow.state.messages] == ["user", "assistant"] * 2
    assert call.stale_samples() == 0


async def table_then_people(turns: TurnRunner, engines: VoiceEngines, tmp_path: Path, *,
                            pause: float) -> CallResult:
    """"I want to reserve a table." (``pause``) "Four people at eight.", committed after
    0.3 s of silence, a continuation allowed within 2 s of the commit."""
    quick = SETTINGS.turn_detection.model_copy(update={"end_of_turn_silence": 0.3,
                                                       "continue_within": 2.0})
    audio = sentence(tmp_path, "I want to reserve a table.", pause, "Four people at eight.")
    return await run_call(turns, CallScript().user_says(0.5, audio=audio).until(12.0),
                          engines, settings=SETTINGS.model_copy(
                              update={"turn_detection": quick}))


async def test_a_complete_turn_is_continued_even_after_its_short_reply_was_heard_whole(
    engines: VoiceEngines, tmp_path: Path
) -> None:
    """"Okay." is played to its end before the user goes on (within continue_within of
    the commit): an acknowledgment, and the user goes on with the turn; the reply that was
    heard is never taken back as unheard (no TurnRevoked; its record kept, heard whole).
    (Letting a complete turn stand once its reply was heard whole split 7 of the 128
    paused utterances of eot_session.py's tune half, whose replies are that "Okay.".)"""
    turns = TurnRunner(Teller(story="Okay.", trigger=None))
    call = await table_then_people(turns, engines, tmp_path, pause=1.6)
    first, merged = [e for e in call.events if isinstance(e, TurnCommitted)]
    assert merged.turn_id == first.turn_id and merged.input_revision == 2
    assert "people" in words(merged.text) and "table" in words(merged.text)
    heard, answer = [e for e in call.events if isinstance(e, ReplyStarted)]
    assert not call.of_kind("turn_revoked") and not call.of_kind("speculative_reply_discarded")
    # heard whole before the user went on: it settles completed, not interrupted, and
    # nothing of it was paused or cut
    assert not call.of_kind("reply_interrupted") and not call.of_kind("barge_in_paused")
    assert call.settled(heard.delivery_id) == "completed"
    assert call.settled(answer.delivery_id) == "completed"
    state = turns.flow.state
    assert [m.role for m in state.messages] == ["user", "assistant"]
    assert state.messages[0].content == merged.text
    record = state.replies[heard.delivery_id]
    assert (record.input_revision, record.text, record.interrupted) == (1, "Okay.", False)
    assert call.stale_samples() == 0


async def test_a_complete_turn_is_continued_while_its_reply_still_plays(
    engines: VoiceEngines, tmp_path: Path
) -> None:
    """The same turn, its reply longer: the user goes on 1.0 s after the commit, over the
    reply's first words (too soon to answer it): one turn, answered once."""
    turns = TurnRunner(booking_teller())
    call = await table_then_people(turns, engines, tmp_path, pause=1.3)
    check_merged(call, turns.flow.state)


class Booking(Teller):
    """The booking answer, as a class a call factory makes (for every persisted call)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(story=ANSWER, trigger=None, **kwargs)


async def persisted_call(store: Any, session_id: str, script: CallScript,
                         engines: VoiceEngines, *, resume: bool) -> tuple[Call, CallResult]:
    """One call as ``voxflow serve`` answers it with a store (its session saved, the
    heard journal on; resumed: the stored session loaded and its dropped answers cut)."""
    clock = VirtualClock(autojump=True)
    client = SimulatedClient(script, clock=clock, tail=3.0)
    await client.render(engines.tts)
    make = flow_call_factory(Booking, settings=SETTINGS)
    async with clock:
        call = await make(client, engines, clock, lambda _event: None,
                          session=CallSession(SessionId(session_id), persistence=store,
                                              resume=resume))
        try:
            async with client:
                await call.session.run()
        finally:
            await call.aclose()
    return call, CallResult(session=call.session, client=client)


async def test_a_restored_session_holds_the_merged_turn_once_and_answers_nothing_twice(
    engines: VoiceEngines, tmp_path: Path, make_store: Any
) -> None:
    """SQLite and PostgreSQL: the merged turn as stored is one user message, its two
    replies (the cut one, its heard part kept, and the answer), one turn at revision 2; a
    call resuming the session cuts nothing again (no reply left unsettled) and answers
    only what is said in it."""
    store = make_store("calls")
    first = CallScript().user_says(0.5, audio=sentence(tmp_path, FIRST, 0.7)).until(12.0)
    call, result = await persisted_call(store, "call-merge", first, engines, resume=False)
    check_merged(result, call.flow.state)
    stored = store.load_state("call-merge")
    assert stored is not None
    live = call.flow.state
    assert [m["content"] for m in stored["messages"]] == [m.content for m in live.messages]
    assert {k: (v["input_revision"], v["status"]) for k, v in stored["turns"].items()} == {
        k: (v.input_revision, v.status) for k, v in live.turns.items()}
    assert {k: (v["turn_id"], v["input_revision"], v["interrupted"], v["heard_text"])
            for k, v in stored["replies"].items()} == {
        k: (v.turn_id, v.input_revision, v.interrupted, v.heard_text)
        for k, v in live.replies.items()}
    # Resumed: nothing is cut again, nothing said again; only the new words are answered.
    thanks = CallScript().user_says(0.5, audio=AudioChunk.from_float(
        espeak(tmp_path, "Thank you very much."), STT_SAMPLE_RATE)).until(8.0)
    again, later = await persisted_call(store, "call-merge", thanks, engines, resume=True)
    assert again.dropped == ()
    assert len(later.of_kind("turn_committed")) == 1
    assert len(later.of_kind("reply_started")) == 1
    state = again.flow.state
    assert [m.role for m in state.messages] == ["user", "assistant", "user", "assistant"]
    assert state.messages[0].content == live.messages[0].content
    assert "thank" in words(state.messages[2].content)
    assert len(state.replies) == 3 and len(state.turns) == 2


@background_job(kind="continuation_tests.hold_table")
async def hold_table(job: JobContext, party: str) -> str:
    """Holds a table (the turn acts on the world)."""
    return f"A table is held for {party}."


class HoldingBooking(Flow[AssistantState]):
    """Every turn starts a job holding a table, and answers."""

    conversational = True

    def route_turn(self, context: Any) -> str:
        return "book"

    @listen("book")
    def handle_book(self) -> str:
        hold_table.start(self, party="you")
        return ANSWER


async def test_a_turn_that_started_a_job_stands_and_its_job_is_kept(
    engines: VoiceEngines, tmp_path: Path
) -> None:
    # Merging rolls the first half back; a job it started would run on with its record
    # rolled away (never announced, not in the state). Such a turn stands: the speech
    # after it is a new turn, and both turns' jobs are recorded and complete.
    flow = HoldingBooking()
    async with AssistantWiring(flow, clock=VirtualClock(autojump=True)) as wiring:
        script = CallScript().user_says(0.5, audio=sentence(tmp_path, FIRST, 0.7)).until(14.0)
        call = await run_call(wiring, script, engines, settings=SETTINGS)
        assert await wiring.wait_for_jobs(30)
    first, second = [e for e in call.events if isinstance(e, TurnCommitted)]
    assert first.turn_id != second.turn_id and second.input_revision == 1
    jobs = list(flow.state.jobs.values())
    assert sorted(str(j.origin_turn_id) for j in jobs) == sorted(
        [str(first.turn_id), str(second.turn_id)])
    assert all(j.status == "completed" for j in jobs)
    assert call.stale_samples() == 0


def hah(engines: VoiceEngines, seconds: float = 0.3) -> AudioChunk:
    """A cough: the bundled voice's "Hah!" cut to ``seconds`` with a fast decay (long
    enough for the detector to hear speech start, too short for words)."""
    parts = [np.asarray(s.samples, np.float32) for s in engines.tts.synthesize("Hah!")]
    audio = resample(np.concatenate(parts) * 0.5, engines.tts.sample_rate, STT_SAMPLE_RATE)
    start = int(np.argmax(np.abs(audio) > 0.01))
    burst = audio[start : start + round(seconds * STT_SAMPLE_RATE)]
    burst = burst * np.exp(-np.arange(burst.size) / (0.2 * STT_SAMPLE_RATE))
    return AudioChunk.from_float(burst.astype(np.float32), STT_SAMPLE_RATE)


@pytest.mark.parametrize(("sound", "gap"), [("cough", 0.0), ("cough", 0.1), ("cough", 0.6),
                                            ("uh-huh", 0.6)])
async def test_a_sound_just_after_a_commit_neither_cuts_nor_continues_the_turn(
    voice_engines: VoiceEngines, sound: str, gap: float
) -> None:
    """At the defaults (Smart Turn), a cough or an "Uh-huh." 0.6 s after the reply began
    (within continue_within of the commit, while the reply's first words play; a cough at
    once too, its words judged without the turn's) is a sound over the reply, judged by
    the barge-in rules: the reply pauses and resumes from the exact sample; the turn
    stands (one commit, revision 1, one answer). Before, any speech within
    continue_within of a commit cut the reply and answered the turn again."""
    turns = TurnRunner(Teller(story=SHORT_STORY))
    script = CallScript().user_says(0.3, "Tell me a story.")
    if sound == "cough":
        script.then_says(audio=hah(voice_engines), after="reply_start", gap=gap)
    else:
        script.then_says("Uh-huh.", after="reply_start", gap=gap)
    call = await run_call(turns, script, voice_engines, settings=SETTINGS)
    timeline = call_timeline(call)
    [committed] = call.of_kind("turn_committed")
    [reply] = call.of_kind("reply_started")
    [fired] = [at for at, _, _ in call.client.step_log()]
    window = SETTINGS.turn_detection.continue_within
    assert fired - committed.at < window - 0.2, timeline  # the sound began in the window
    assert call.of_kind("barge_in_paused") and call.of_kind("barge_in_resumed"), timeline
    assert not call.of_kind("reply_interrupted") and not call.of_kind("turn_revoked")
    assert call.settled(reply.delivery_id) == "completed", timeline
    [finished] = call.of_kind("reply_finished")  # every word of it heard ...
    assert finished.text == SHORT_STORY and call.tape.flushes == []
    position: dict[int | None, int] = {}  # ... and no sample of it lost or played twice
    for receipt in (r for r in call.tape.receipts if r.delivery_id == reply.delivery_id):
        assert receipt.start_sample == position.get(receipt.segment_id, 0), receipt
        position[receipt.segment_id] = receipt.start_sample + receipt.num_samples
    state = turns.flow.state
    assert [m.role for m in state.messages] == ["user", "assistant"], timeline
    assert state.turns[committed.turn_id].input_revision == 1
    assert call.stale_samples() == 0


async def test_a_request_just_after_a_commit_goes_on_with_the_turn(
    voice_engines: VoiceEngines,
) -> None:
    """At the defaults, "Wait, stop." 0.3 s after the reply began goes on with the turn:
    the reply cut as a barge-in cuts it, the turn answered once more with all its words."""
    turns = TurnRunner(Teller(story=SHORT_STORY))
    script = CallScript().user_says(0.3, "Tell me a story.")
    script.then_says("Wait, stop.", after="reply_start", gap=0.3)
    call = await run_call(turns, script, voice_engines, settings=SETTINGS)
    timeline = call_timeline(call)
    first, again = call.of_kind("turn_committed")
    assert again.turn_id == first.turn_id and again.input_revision == 2, timeline
    assert "stop" in words(again.text) and "story" in words(again.text)
    cut, answer = call.of_kind("reply_started")
    assert call.settled(cut.delivery_id) == "interrupted"
    assert call.settled(answer.delivery_id) == "completed"
    assert [m.role for m in turns.flow.state.messages] == ["user", "assistant"]
    assert call.stale_samples() == 0


class Dtx:
    """The client's input with no frame at all for ``seconds`` after each commit (a
    transport with discontinuous transmission, or a call put on hold)."""

    def __init__(self, transport: Any, clock: VirtualClock, seconds: float) -> None:
        self._transport, self._clock, self._seconds = transport, clock, seconds
        self.silent_until = 0.0

    def committed(self, event: object) -> None:
        if isinstance(event, TurnCommitted):
            self.silent_until = self._clock.now() + self._seconds

    async def audio_input(self) -> Any:
        async for chunk in self._transport.audio_input():
            if self._clock.now() >= self.silent_until:
                yield chunk

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


async def test_a_turn_is_final_on_the_clock_when_the_input_stops(
    voice_engines: VoiceEngines,
) -> None:
    """No frame comes for 4 s after the commit: the turn is final continue_within after
    its commit all the same (counted on the session clock once input stalls), so its short
    reply settles then, not when the input comes back."""
    clock = VirtualClock(autojump=True)
    dtx: Dtx | None = None

    def wrap(session: Any) -> None:
        nonlocal dtx
        dtx = Dtx(session.transport, clock, 4.0)
        session.transport = dtx

    def observe(event: object) -> None:
        if dtx is not None:
            dtx.committed(event)

    turns = TurnRunner(Teller(story="Okay.", trigger=None))
    script = CallScript().user_says(0.5, "Is my table ready?").until(9.0)
    call = await run_call(turns, script, voice_engines, clock=clock, settings=SETTINGS,
                          on_session=wrap, on_event=observe)
    timeline = call_timeline(call)
    [committed] = call.of_kind("turn_committed")
    [finished] = call.of_kind("reply_finished")
    assert dtx is not None and finished.at < dtx.silent_until, timeline
    window = SETTINGS.turn_detection.continue_within
    assert finished.at <= committed.at + window + 0.5, timeline


@pytest.mark.parametrize("rule", ["interruptions off", "must_finish"])
async def test_a_request_that_may_not_cut_the_reply_still_goes_on_with_the_turn(
    engines: VoiceEngines, rule: str
) -> None:
    """The silence timer without early utterances (no pause event: the words are judged
    at the utterance's end), and a reply that may not be cut: a request just after the
    commit goes on with the turn all the same. The reply plays out whole, then the turn
    is answered again with all its words (revision 2). It was dropped: no turn, nothing
    answered."""
    rules = TurnDetection(early_utterance=False)
    if rule == "interruptions off":
        settings = SETTINGS.model_copy(update={"turn_detection": rules,
                                               "interruptions": False})
    else:
        settings = SETTINGS.model_copy(update={
            "turn_detection": rules, "barge_in": BargeInSettings(policy="must_finish")})
    turns = TurnRunner(Teller(story=SHORT_STORY))
    script = CallScript().user_says(0.3, "Tell me a story.")
    script.then_says("And what about the dragon?", after="reply_start", gap=0.2)
    call = await run_call(turns, script.until(25.0), engines, settings=settings)
    timeline = call_timeline(call)
    first, again = call.of_kind("turn_committed")
    assert again.turn_id == first.turn_id and again.input_revision == 2, timeline
    assert "dragon" in words(again.text) and "story" in words(again.text)
    story, answer = call.of_kind("reply_started")
    assert call.settled(story.delivery_id) == "completed"  # not cut
    assert call.settled(answer.delivery_id) == "completed"
    assert [m.role for m in turns.flow.state.messages] == ["user", "assistant"]
    assert call.stale_samples() == 0
