"""The parts of resuming a call without a call: the resume token, cutting an answer the
drop interrupted to what was saved as heard, and a lease heartbeat that speech work
cannot starve (real SQLite and PostgreSQL stores)."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest
from voxflow_adapters.hosting.ownership import SessionOwnership
from voxflow_adapters.hosting.resume import (
    DROPPED_MARK,
    check_resume_token,
    issue_resume_token,
    settle_dropped_replies,
)

from voxflow import persist
from voxflow.conversation import ConversationEvent
from voxflow.testing import Acknowledger
from voxflow.turns import TurnRunner, TurnState

pytestmark = pytest.mark.unit


def test_only_the_tokens_hash_is_stored_and_only_that_token_resumes() -> None:
    state, other = TurnState(id="s-1"), TurnState(id="s-2")
    token, other_token = issue_resume_token(state), issue_resume_token(other)
    stored = json.loads(state.model_dump_json())
    assert token not in json.dumps(stored) and len(token) >= 43
    assert check_resume_token(stored, token)
    assert not check_resume_token(stored, other_token)  # another session's token
    assert not check_resume_token(stored, token[:-1] + ("A" if token[-1] != "A" else "B"))
    assert not check_resume_token(None, token)  # no such session
    assert not check_resume_token(json.loads(TurnState(id="s-3").model_dump_json()), token)


async def answered(texts: list[str]) -> Any:
    flow = Acknowledger(state=TurnState(id="call"))
    runner = TurnRunner(flow)
    for text in texts:
        async for event in runner.astream_turn(text):
            runner.accept_event(event)
    return flow


async def test_an_answer_the_drop_cut_keeps_only_the_words_saved_as_heard() -> None:
    flow = await answered(["first", "second"])
    state = flow.state
    first, second = list(state.replies.values())
    full = second.text
    assert full and len(full.split()) >= 2
    heard = full.split()[0]
    state.events.append(ConversationEvent(type="reply_settled",
                                          payload={"delivery_id": first.delivery_id}))
    second.heard_text, second.heard_seconds = heard, 0.4  # the journal's mark
    before = [m.content for m in state.messages]
    assert settle_dropped_replies(state) == [second.delivery_id]
    after = [m.content for m in state.messages]
    assert after[:-1] == before[:-1]  # the settled answer and the questions are untouched
    assert after[-1] == f"{heard} {DROPPED_MARK}"
    message = state.messages[-1]
    assert message.metadata["generated_text"] == full and message.metadata["dropped"]
    assert state.replies[second.delivery_id].interrupted
    assert settle_dropped_replies(state) == []  # settled once: a second resume cuts nothing


async def test_a_session_saved_with_heard_events_is_cut_as_before() -> None:
    # marks saved as reply_heard events (before they were kept in the reply record)
    flow = await answered(["only"])
    state = flow.state
    (reply,) = state.replies.values()
    state.events.append(ConversationEvent(type="reply_heard", payload={
        "delivery_id": reply.delivery_id, "heard_text": "Request", "heard_seconds": 0.4}))
    assert settle_dropped_replies(state) == [reply.delivery_id]
    assert state.messages[-1].content == f"Request {DROPPED_MARK}"


class _Parts(Acknowledger):
    """Answers in content parts: its message's content is a list, not the reply's text."""

    def handle_acknowledge(self) -> str:
        self.append_assistant_message([{"type": "text", "text": "Once upon a time, "},
                                       {"type": "text", "text": "there was a fox."}])
        return ""


async def test_the_drop_cuts_the_answers_own_message_whatever_its_text() -> None:
    """The answer's message is found by the delivery id its turn wrote in it, not by
    comparing texts: a message whose content is not the reply's text is cut too."""
    flow = _Parts(state=TurnState(id="call"))
    runner = TurnRunner(flow)
    async for event in runner.astream_turn("a story"):
        runner.accept_event(event)
    state = flow.state
    (reply,) = state.replies.values()
    assert reply.text == "Once upon a time, there was a fox."
    message = state.messages[-1]
    assert message.content != reply.text  # content parts
    assert message.metadata["delivery_id"] == reply.delivery_id
    reply.heard_text = "Once upon a time,"
    assert settle_dropped_replies(state) == [reply.delivery_id]
    assert [m.role for m in state.messages] == ["user", "assistant"]
    assert state.messages[-1].content == f"Once upon a time, {DROPPED_MARK}"
    assert state.messages[-1].metadata["turn_id"] == reply.turn_id


async def test_an_answer_the_drop_cut_before_its_message_was_recorded_gets_one() -> None:
    """The worker died while the answer was still being generated (its first words
    played): the flow had not recorded it yet, so the heard words are added to the
    history, not lost from it."""
    flow = await answered(["first"])
    runner = TurnRunner(flow)
    active = runner.begin()
    runner.text(active, "Once upon a time, there was")  # streamed and playing, no message
    active.reply.heard_text, active.reply.heard_seconds = "Once upon", 0.6
    before = len(flow.state.messages)
    assert active.reply.delivery_id in settle_dropped_replies(flow.state)
    added = flow.state.messages[before:]
    assert [(m.role, m.content) for m in added] == [("assistant", f"Once upon {DROPPED_MARK}")]
    assert added[0].metadata["delivery_id"] == active.reply.delivery_id
    assert added[0].metadata["generated_text"] == "Once upon a time, there was"


async def test_the_journal_keeps_one_mark_per_reply_however_long_it_plays(
    make_store: Any,
) -> None:
    """A long answer heard word by word: the session's events do not grow with it (one
    mark, in the reply's record, updated), and the mark is what a resume cuts to."""
    from voxflow_adapters.hosting.resume import HeardJournal
    from voxflow_voice.events import ReplyTextStreamed
    from voxflow_voice.speak.heard import HeardReply

    from voxflow.ids import SessionId

    store = make_store("journal_bounded")
    saved = persist(type("Saved", (Acknowledger,), {}))  # (@persist marks the class)
    flow = saved(persistence=store, state=TurnState(id="call-b"))
    runner = TurnRunner(flow)
    async for event in runner.astream_turn("tell me a long story"):
        runner.accept_event(event)
    (reply,) = flow.state.replies.values()
    words = [f"word{i}" for i in range(40)]
    said = {"count": 0}

    def heard(delivery_id: Any) -> HeardReply:
        return HeardReply(delivery_id=delivery_id, text=" ".join(words[:said["count"]]),
                          full_text=" ".join(words), heard_seconds=said["count"] * 0.3,
                          complete=False)

    journal = HeardJournal(flow, asyncio.Lock(), heard, interval=0.001)
    journal.on_event(ReplyTextStreamed(session_id=SessionId("call-b"), at=0.0,
                                       delivery_id=reply.delivery_id, segment_id=1,
                                       text=" ".join(words)))
    events_before = len(flow.state.events)
    for count in range(1, 31):  # 30 marks, each with one more word
        said["count"] = count
        await journal.flush()
    await journal.flush()  # nothing more heard: nothing saved
    assert journal.saves == 30
    assert len(flow.state.events) == events_before  # nothing appended per mark
    stored = store.load_state("call-b")
    assert stored is not None and len(stored["events"]) == events_before
    mark = stored["replies"][reply.delivery_id]
    assert (mark["heard_text"], mark["heard_seconds"]) == (" ".join(words[:30]), 9.0)
    restored = TurnState.model_validate(stored)
    assert settle_dropped_replies(restored) == [reply.delivery_id]
    assert restored.messages[-1].content == f"{mark['heard_text']} {DROPPED_MARK}"


async def test_an_answer_with_nothing_saved_as_heard_keeps_no_word_of_it() -> None:
    flow = await answered(["only"])
    (reply,) = flow.state.replies.values()
    assert settle_dropped_replies(flow.state) == [reply.delivery_id]
    assert flow.state.messages[-1].content == DROPPED_MARK


async def test_the_heartbeat_renews_while_speech_work_fills_the_default_executor(
    make_store: Any,
) -> None:
    store = make_store("heartbeat")
    lost: list[Any] = []
    owner = await SessionOwnership.acquire(store, "call", "worker-a", ttl=0.9,
                                           on_lost=lost.append)  # renewed from here on
    # What STT/TTS do: blocking work on the default executor (asyncio.to_thread), more of
    # it than the executor has threads, for longer than the lease lasts.
    busy = [asyncio.create_task(asyncio.to_thread(time.sleep, 2.5)) for _ in range(24)]
    try:
        await asyncio.sleep(2.0)
        assert not lost and owner.lost is None
        held = store.lease_of("call")
        assert held is not None and held.owner == "worker-a" and held.epoch == owner.lease.epoch
        flow = persist(Acknowledger)(persistence=owner.persistence, state=TurnState(id="call"))
        await flow.asave_state("check")  # still the writer: a fenced save goes through
    finally:
        await asyncio.gather(*busy, return_exceptions=True)
        await owner.release()
    released = store.lease_of("call")
    assert released is not None and released.owner == ""


async def test_a_dead_owners_live_lease_is_taken_over_at_once_and_a_live_ones_waited_for(
    make_store: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """``owner_dead`` judges the holder (a call worker by its heartbeat): a dead one's
    lease is taken at once, live as it still is (nothing waited out), its call's next
    renewal and save refused; a live holder's lease is waited for, never taken."""
    from voxflow_adapters.hosting.ownership import SessionBusyError

    from voxflow.errors import FencedWriteError

    store = make_store("dead_owner")
    lost: list[FencedWriteError] = []
    old = await SessionOwnership.acquire(store, "call", "worker-a/call-1", ttl=3,
                                         on_lost=lost.append)  # renewed from here on
    asked: list[str] = []

    async def dead(holder: str) -> bool:
        asked.append(holder)
        return holder.startswith("worker-a/")

    with pytest.raises(SessionBusyError):  # a live holder: waited for, not taken
        await SessionOwnership.acquire(store, "call", "worker-c/call-1", ttl=60, wait=0.3,
                                       owner_dead=lambda holder: _false(holder, asked))
    held = store.lease_of("call")
    assert held is not None and (held.owner, held.epoch) == ("worker-a/call-1", old.lease.epoch)
    with caplog.at_level("WARNING", logger="voxflow_adapters.hosting.ownership"):
        new = await SessionOwnership.acquire(store, "call", "worker-b/call-1", ttl=60,
                                             wait=30.0, owner_dead=dead)
    assert asked[-1] == "worker-a/call-1"
    assert (new.lease.owner, new.lease.epoch) == ("worker-b/call-1", old.lease.epoch + 1)
    assert any("took over the session of a dead owner" in r.getMessage()
               and r.holder == "worker-a/call-1"  # type: ignore[attr-defined]
               for r in caplog.records)
    async with asyncio.timeout(60):  # the old owner's next renewal is refused
        while not lost:  # noqa: ASYNC110  # (a callback's list)
            await asyncio.sleep(0.05)
    assert old.lost is not None and old.lost.reason == "taken over" and len(lost) == 1
    flow = persist(Acknowledger)(persistence=old.persistence, state=TurnState(id="call"))
    with pytest.raises(FencedWriteError, match="taken over"):
        await flow.asave_state("late")
    assert store.load_state("call") is None  # nothing of the old owner's was stored
    await old.release()
    await new.release()


async def _false(holder: str, asked: list[str]) -> bool:
    asked.append(holder)
    return False


REFUSED = "refused a write of the session (taken over)"


async def test_a_lost_lease_is_reported_once_and_refuses_the_calls_saves(
    make_store: Any, caplog: pytest.LogCaptureFixture
) -> None:
    from voxflow.errors import FencedWriteError

    store = make_store("lost")
    lost: list[FencedWriteError] = []
    owner = await SessionOwnership.acquire(store, "call", "worker-a", ttl=30,
                                           on_lost=lost.append)
    store.release_lease(owner.lease)
    store.acquire_lease("call", "worker-b", ttl=30)  # taken over
    flow = persist(Acknowledger)(persistence=owner.persistence, state=TurnState(id="call"))
    with caplog.at_level("WARNING", logger="voxflow_adapters.hosting.ownership"):
        with pytest.raises(FencedWriteError):
            await flow.asave_state("late")
        with pytest.raises(FencedWriteError):
            await flow.asave_state("later")
        await asyncio.sleep(0)  # (reported on the loop: the save ran in a thread)
    assert len(lost) == 1 and lost[0].reason == "taken over"
    assert store.load_state("call") is None  # nothing written
    # every refused write has its own line, naming the operation; the loss is logged once
    refused = [r for r in caplog.records if r.getMessage().startswith(REFUSED)]
    assert [r.getMessage() for r in refused] == [
        f"{REFUSED}: save_full_state stored nothing"] * 2
    assert all(r.session_id == "call" and (r.epoch, r.current_epoch) == (1, 2)  # type: ignore[attr-defined]
               for r in refused)
    assert sum("lost its session" in r.getMessage() for r in caplog.records) == 1


async def test_a_lease_lost_at_its_renewal_logs_no_refused_write(
    make_store: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # What a zombie's log shows when only its heartbeat found the lease gone: the loss,
    # and no refused write (it tried none).
    store = make_store("renewal")
    refused = asyncio.Event()
    with caplog.at_level("WARNING", logger="voxflow_adapters.hosting.ownership"):
        owner = await SessionOwnership.acquire(store, "call", "worker-a", ttl=0.3,
                                               on_lost=lambda _: refused.set())
        store.release_lease(owner.lease)
        store.acquire_lease("call", "worker-b", ttl=30)
        await asyncio.wait_for(refused.wait(), 10)  # its renewal (started by acquire)
    assert owner.lost is not None and owner.lost.reason == "taken over"
    messages = [r.getMessage() for r in caplog.records]
    assert ("the call lost its session (taken over): another worker took it over (the "
            "caller resumed it there); nothing more is saved") in messages
    assert not any(m.startswith("refused a write") for m in messages)


async def test_a_settlement_the_call_end_cancelled_mid_save_is_still_saved_by_the_flush(
    make_store: Any,
) -> None:
    """The call's end cancels the journal wherever it is (here: waiting for the state
    lock a turn holds, with the settlement already taken from its queue); the flush that
    follows must still save it, or a resume cuts an answer that was played out."""
    from voxflow_adapters.hosting.resume import HeardJournal
    from voxflow_voice.events import TurnMetrics

    from voxflow.ids import DeliveryId, SessionId, TurnId

    store = make_store("journal")
    flow = persist(Acknowledger)(persistence=store, state=TurnState(id="call-j"))
    await flow.asave_state("start")
    lock = asyncio.Lock()
    nothing_heard: Any = lambda _delivery: None  # noqa: E731 (no answer plays here)
    journal = HeardJournal(flow, lock, nothing_heard, interval=0.05)
    task = asyncio.create_task(journal.run())
    await lock.acquire()  # a turn holds the state lock
    journal.on_event(TurnMetrics(
        session_id=SessionId("call-j"), at=0.0, turn_id=TurnId("t-1"),
        delivery_id=DeliveryId("d-1"), speech_end=0.0, transcript_final=0.0,
        first_text=None, first_audio=None, playback_end=None, interrupted=False,
        fenced_chunks=0))
    for _ in range(1000):  # until the journal took it (it then waits for the lock)
        if not journal._settles.qsize():
            break
        await asyncio.sleep(0.01)
    assert not journal._settles.qsize()
    task.cancel()  # the call ends
    with pytest.raises(asyncio.CancelledError):
        await task
    lock.release()
    await journal.flush()
    stored = store.load_state("call-j")
    assert stored is not None
    settled = [e["payload"].get("delivery_id") for e in stored["events"]
               if e["type"] == "reply_settled"]
    assert settled == ["d-1"]


async def test_take_over_frees_the_floor_and_offers_the_cut_announcement_again_once(
) -> None:
    """The dead owner held the floor for an announcement (scheduled, never settled: its
    user never heard it whole). The session's next owner (a wiring on the stored state)
    frees the floor (its client's observations are gone: a new client reports from seq
    1), ends that delivery interrupted, and says the announcement again, once: in the
    history once, and never a third time."""
    from voxflow.examples.assistant import assistant_class
    from voxflow.replies import ClientActivity
    from voxflow.wiring import AssistantWiring

    flow_class = assistant_class(None, lookup_seconds=0.01)
    flow = flow_class()
    wiring = AssistantWiring(flow)
    replies = wiring.replies
    assert replies is not None
    await wiring.text_turn("Where is my order?")
    assert await wiring.wait_for_jobs(10)
    async with wiring.state_lock:
        [job] = flow.state.jobs.values()
        assert replies.enqueue(job) is not None
        delivery = replies.claim()  # speaking it when the process died
        assert delivery is not None
        assert replies.prepare(delivery.delivery_id, wiring.announcer)
        assert replies.observe_client(ClientActivity(
            session_id=flow.state.id, seq=9, recording=True, playback=False, muted=True))
    stored = flow.state.model_dump_json()
    await wiring.aclose()

    heir = flow_class(state=type(flow.state).model_validate_json(stored))
    resumed = AssistantWiring(heir)  # the resumed call's wiring: it takes the floor over
    assert heir.state.deliveries[delivery.delivery_id].status == "interrupted"
    heard = await resumed.announce_ready()
    assert len(heard) == 1 and "shipped" in heard[0]
    assert await resumed.announce_ready() == []
    said = [m for m in heir.state.messages if m.metadata.get("announcement")]
    assert [m.content for m in said] == heard  # in the history once
    assert resumed.replies is not None
    stats = resumed.replies.statistics()
    assert stats.active_delivery_id is None and stats.busy_reason is None
    assert resumed.replies.observe_client(ClientActivity(  # the new client, from seq 1
        session_id=heir.state.id, seq=1, recording=False, playback=False, muted=False))
    async with resumed.state_lock:
        assert resumed.replies.take_over() == []  # nothing held the floor since
    await resumed.aclose()


async def test_the_journal_saves_an_announcements_settlement_and_its_history(
    make_store: Any,
) -> None:
    """An announcement is no turn (no ``TurnMetrics``): its ``DeliverySettled`` makes the
    journal save, so its coverage and the history it was heard into are stored and the
    session's next owner does not announce it again."""
    from voxflow_adapters.hosting.resume import HeardJournal
    from voxflow_voice.events import DeliverySettled

    from voxflow.examples.assistant import assistant_class
    from voxflow.ids import SessionId
    from voxflow.wiring import AssistantWiring

    store = make_store("journal_announce")
    flow_class = assistant_class(None, lookup_seconds=0.01)
    flow = flow_class(persistence=store)
    wiring = AssistantWiring(flow)
    await wiring.text_turn("Where is my order?")
    assert await wiring.wait_for_jobs(10)
    await flow.asave_state("job")
    nothing_heard: Any = lambda _delivery: None  # noqa: E731 (no answer plays here)
    journal = HeardJournal(flow, wiring.state_lock, nothing_heard, interval=0.05)
    task = asyncio.create_task(journal.run())
    [spoken] = await wiring.announce_ready()  # settled and recorded in the history
    [delivery_id] = [d for d, r in flow.state.deliveries.items() if r.status == "completed"]
    journal.on_event(DeliverySettled(session_id=SessionId(flow.state.id), at=0.0,
                                     delivery_id=delivery_id, status="completed"))
    for _ in range(1000):
        if journal.saves:
            break
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await wiring.aclose()
    heir = flow_class(persistence=store)
    assert await heir.aload_session(flow.state.id)
    assert [m.content for m in heir.state.messages if m.role == "assistant"][-1] == spoken
    again = AssistantWiring(heir)
    assert again.replies is not None
    assert await again.announce_ready() == []
    await again.aclose()
