"""TurnLedger: identities, the accept_event fence and interrupt, rule by rule."""

from __future__ import annotations

import json
import logging
import threading
from typing import Any

import pytest

from voxflow.clock import VirtualClock
from voxflow.errors import ConversationEndedError, TurnIdentityError, TurnInProgressError
from voxflow.ids import DeliveryId, SessionId, TurnId
from voxflow.jobs import JobRecord
from voxflow.turns import ActiveTurn, ReplyEvent, TurnLedger, TurnState


@pytest.fixture
def state() -> TurnState:
    return TurnState()


@pytest.fixture
def clock() -> VirtualClock:
    return VirtualClock()


@pytest.fixture
def ledger(state: TurnState, clock: VirtualClock) -> TurnLedger:
    return TurnLedger(lambda: state, clock=clock)


def hardcoded_turn(
    ledger: TurnLedger, text: str = "Request received.", **kw: Any
) -> list[ReplyEvent]:
    active = ledger.begin(**kw)
    try:
        return [
            ledger.issue(active, "started"),
            ledger.set_route(active, "acknowledge"),
            ledger.text(active, text),
            ledger.finish(active),
        ]
    finally:
        ledger.end(active)


def identity(event: ReplyEvent) -> dict[str, Any]:
    return {
        "session_id": event.session_id,
        "turn_id": event.turn_id,
        "input_revision": event.input_revision,
        "delivery_id": event.delivery_id,
    }


def test_a_hardcoded_reply_is_four_events_in_seq_order(ledger: TurnLedger) -> None:
    events = hardcoded_turn(ledger, turn_id=TurnId("turn-1"), kind="acknowledgment")
    assert [e.type for e in events] == ["started", "route_selected", "text", "completed"]
    assert [e.seq for e in events] == [1, 2, 3, 4]
    assert events[2].segment_id == 1 and events[2].text == "Request received."
    assert events[3].text == "Request received."
    assert {e.delivery_id for e in events} == {events[0].delivery_id}
    assert all(e.kind == "acknowledgment" and e.turn_id == "turn-1" for e in events)
    assert all(ledger.accept_event(e) for e in events)
    assert not ledger.accept_event(events[-1])  # duplicate
    turn = ledger.state.turns["turn-1"]
    reply = ledger.state.replies[events[0].delivery_id]
    assert (turn.status, turn.route, reply.status) == ("completed", "acknowledge", "completed")
    assert reply.last_accepted_seq == reply.last_event_seq == 4


async def test_elapsed_ms_comes_from_the_injected_clock(
    ledger: TurnLedger, clock: VirtualClock
) -> None:
    active = ledger.begin()
    first = ledger.issue(active, "started")
    await clock.advance(0.25)
    second = ledger.text(active, "hi")
    ledger.end(active)
    assert first.elapsed_ms == 0.0
    assert second.elapsed_ms == pytest.approx(250.0)
    assert second.clock == "server_monotonic"


def test_gaps_are_allowed_but_earlier_seqs_are_then_rejected(ledger: TurnLedger) -> None:
    events = hardcoded_turn(ledger)
    assert ledger.accept_event(events[2])
    assert not ledger.accept_event(events[0])
    assert not ledger.accept_event(events[1])
    assert ledger.accept_event(events[3])


def test_never_issued_seq_and_forged_identities_are_rejected(
    ledger: TurnLedger, state: TurnState
) -> None:
    events = hardcoded_turn(ledger)
    base = events[0]
    forged = [
        base.model_copy(update={"seq": 5}),  # never issued
        base.model_copy(update={"delivery_id": DeliveryId("unknown")}),
        base.model_copy(update={"session_id": SessionId("other")}),
        base.model_copy(update={"turn_id": TurnId("other")}),
        base.model_copy(update={"input_revision": 2}),
    ]
    assert not any(ledger.accept_event(e) for e in forged)
    assert state.replies[base.delivery_id].last_accepted_seq == 0
    with pytest.raises(TypeError, match="event must be a ReplyEvent"):
        ledger.accept_event(base.model_dump())  # type: ignore[arg-type]


def test_interrupt_during_generation_fences_and_stops(
    state: TurnState, clock: VirtualClock
) -> None:
    calls: list[str] = []
    ledger = TurnLedger(lambda: state, clock=clock, on_interrupt=lambda: calls.append("hook"))
    active = ledger.begin()
    active.cancel = lambda: calls.append("cancel")
    started = ledger.issue(active, "started")
    text = ledger.text(active, "Once upon")
    assert ledger.accept_event(started)
    assert ledger.interrupt(**identity(started))
    assert calls == ["cancel", "hook"]
    assert (active.turn.status, active.reply.status) == ("interrupted", "interrupted")
    assert ledger.running_turn_id() is None
    assert not ledger.accept_event(text)  # issued before the interrupt, fenced now
    terminal = ledger.finish(active, text="ignored")
    ledger.end(active)
    assert terminal.type == "interrupted"
    assert ledger.accept_event(terminal)
    assert ledger.interrupt(**identity(started))  # idempotent
    assert calls == ["cancel", "hook"]  # ... and does not abort twice


def test_interrupt_after_completion_keeps_the_status_and_sets_the_fence(
    ledger: TurnLedger, state: TurnState
) -> None:
    events = hardcoded_turn(ledger)
    assert ledger.accept_event(events[0])
    assert ledger.interrupt(**identity(events[0]))
    reply = state.replies[events[0].delivery_id]
    assert (reply.status, reply.interrupted) == ("completed", True)
    assert state.turns[reply.turn_id].status == "completed"
    assert not any(ledger.accept_event(e) for e in events[1:])


def test_interrupt_rejects_bad_or_foreign_identities(ledger: TurnLedger, state: TurnState) -> None:
    events = hardcoded_turn(ledger)
    ident = identity(events[0])
    for revision in (0, True, 1.0, "1", None):
        assert not ledger.interrupt(**{**ident, "input_revision": revision})
    assert not ledger.interrupt(**{**ident, "delivery_id": DeliveryId("nope")})
    assert not ledger.interrupt(**{**ident, "turn_id": TurnId("other")})
    assert not ledger.interrupt(**{**ident, "input_revision": 2})
    assert not ledger.interrupt(**{**ident, "session_id": SessionId("other")})
    assert not state.replies[events[0].delivery_id].interrupted
    assert all(ledger.accept_event(e) for e in events)  # nothing changed


def test_an_interrupt_for_another_reply_changes_nothing(ledger: TurnLedger) -> None:
    old = hardcoded_turn(ledger)
    active = ledger.begin()
    cancelled: list[bool] = []
    active.cancel = lambda: cancelled.append(True)
    assert ledger.interrupt(**identity(old[0]))
    assert cancelled == [] and active.reply.status == "generating"
    ledger.end(active)


def test_failure_events(ledger: TurnLedger, state: TurnState) -> None:
    active = ledger.begin()
    started = ledger.issue(active, "started")
    text = ledger.text(active, "partial")
    forged_failed = started.model_copy(update={"type": "failed", "seq": 2})
    assert not ledger.accept_event(forged_failed)  # the reply did not fail
    failed = ledger.finish(active, error=RuntimeError("boom"))
    ledger.end(active)
    assert failed.type == "failed"
    assert (active.reply.status, active.turn.status) == ("failed", "failed")
    assert not ledger.accept_event(text)  # non-failed events after failure
    assert ledger.interrupt(**identity(started))  # interrupt after failure ...
    assert state.replies[started.delivery_id].status == "failed"
    assert ledger.accept_event(failed)  # ... failure stays an acceptable terminal signal


def test_interrupted_reply_accepts_only_its_interrupted_event(ledger: TurnLedger) -> None:
    active = ledger.begin()
    started = ledger.issue(active, "started")
    assert ledger.interrupt(**identity(started))
    late_text = ledger.text(active, "late")
    assert not ledger.accept_event(late_text)
    terminal = ledger.finish(active)
    ledger.end(active)
    assert ledger.accept_event(terminal)


def test_begin_rules(ledger: TurnLedger, state: TurnState) -> None:
    active = ledger.begin(turn_id=TurnId("t1"))
    with pytest.raises(TurnInProgressError, match="Drain the active turn"):
        ledger.begin()
    assert isinstance(TurnInProgressError("x"), RuntimeError)
    ledger.finish(active)
    ledger.end(active)
    with pytest.raises(TurnIdentityError, match="already been used"):
        ledger.begin(turn_id=TurnId("t1"))
    with pytest.raises(TurnIdentityError, match="session_id"):
        ledger.begin(session_id=SessionId("other"))
    with pytest.raises(TypeError, match="input_revision"):
        ledger.begin(input_revision=True)
    with pytest.raises(ValueError, match="input_revision"):
        ledger.begin(input_revision=0)
    with pytest.raises(ValueError, match="kind"):
        ledger.begin(kind="speech")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="turn_id"):
        ledger.begin(turn_id=TurnId(""))
    assert list(state.turns) == ["t1"]  # no failed attempt left a record
    state.ended = True
    with pytest.raises(ConversationEndedError):
        ledger.begin()
    state.ended = False
    assert ledger.begin(session_id=state.id).reply.kind == "answer"  # own session: fine


def test_a_given_delivery_id_is_used_once(ledger: TurnLedger, state: TurnState) -> None:
    first = hardcoded_turn(ledger, turn_id=TurnId("t1"), delivery_id=DeliveryId("d1"))
    record = state.replies[DeliveryId("d1")]
    with pytest.raises(TurnIdentityError, match="delivery_id has already been used"):
        ledger.begin(turn_id=TurnId("t2"), delivery_id=DeliveryId("d1"))
    with pytest.raises(TurnIdentityError, match="delivery_id has already been used"):
        ledger.check_can_begin(delivery_id=DeliveryId("d1"))
    # The earlier reply keeps its record (and so its fence): nothing was replaced.
    assert state.replies[DeliveryId("d1")] is record
    assert (record.turn_id, record.status, record.text) == ("t1", "completed", first[-1].text)
    assert list(state.turns) == ["t1"] and ledger.active is None
    for bad in (7, b"d2", ""):
        with pytest.raises(TypeError, match="delivery_id"):
            ledger.begin(delivery_id=bad)  # type: ignore[arg-type]
    assert list(state.replies) == ["d1"]  # no failed attempt left a record
    assert ledger.begin(delivery_id=DeliveryId("d2")).reply.delivery_id == "d2"


def test_ending_without_a_terminal_event_interrupts(ledger: TurnLedger) -> None:
    active = ledger.begin()
    started = ledger.issue(active, "started")
    ledger.end(active)
    assert (active.turn.status, active.reply.status) == ("interrupted", "interrupted")
    assert not ledger.accept_event(started)
    assert ledger.begin().reply.status == "generating"  # the slot was released


def test_snapshot_round_trips_and_restore_replays_nothing(
    state: TurnState, clock: VirtualClock
) -> None:
    ledger = TurnLedger(lambda: state, clock=clock)
    done = hardcoded_turn(ledger, turn_id=TurnId("done"))
    assert all(ledger.accept_event(e) for e in done)
    unsent = hardcoded_turn(ledger, turn_id=TurnId("unsent"))
    active = ledger.begin(turn_id=TurnId("live"))
    live_started = ledger.issue(active, "started")
    snapshot = ledger.snapshot()
    ledger.end(active)
    data = json.loads(json.dumps(snapshot))
    fresh = TurnState(id=state.id)
    restored = TurnLedger(lambda: fresh, clock=clock)
    restored.restore(data)
    assert fresh.turns["done"].status == "completed"
    assert fresh.turns["live"].status == "interrupted"
    assert fresh.replies[live_started.delivery_id].status == "interrupted"
    assert not restored.accept_event(live_started)
    assert not any(restored.accept_event(e) for e in unsent)  # never replayed
    assert not fresh.replies[done[0].delivery_id].interrupted  # delivered: untouched
    events = hardcoded_turn(restored, turn_id=TurnId("next"))
    assert all(restored.accept_event(e) for e in events)
    with pytest.raises(TurnIdentityError):
        hardcoded_turn(restored, turn_id=TurnId("done"))  # restored ids stay used
    with pytest.raises(TurnIdentityError, match="another session"):
        TurnLedger(lambda: TurnState()).restore(data)


def test_restore_is_refused_while_a_turn_is_active(ledger: TurnLedger) -> None:
    snapshot = ledger.snapshot()
    active = ledger.begin()
    with pytest.raises(TurnInProgressError):
        ledger.restore(snapshot)
    ledger.end(active)


def test_a_replaced_state_object_is_reconciled(clock: VirtualClock) -> None:
    holder = {"state": TurnState()}
    ledger = TurnLedger(lambda: holder["state"], clock=clock)
    active = ledger.begin(turn_id=TurnId("a"))
    ledger.issue(active, "started")
    copy = TurnState.model_validate_json(holder["state"].model_dump_json())
    copy.turns["ghost"] = copy.turns["a"].model_copy(update={"turn_id": "ghost"})
    holder["state"] = copy
    # The active turn's records survive the reload; a stray running record is interrupted.
    assert ledger.state.turns["a"] is active.turn
    assert copy.turns["ghost"].status == "interrupted"
    assert ledger.running_turn_id() == "a"
    ledger.finish(active)
    ledger.end(active)


def test_the_state_must_be_a_turn_state() -> None:
    from voxflow.conversation import ConversationState

    with pytest.raises(TypeError, match="TurnState"):
        TurnLedger(lambda: ConversationState())  # type: ignore[arg-type, return-value]
    with pytest.raises(TypeError, match="callable"):
        TurnLedger(TurnState())  # type: ignore[arg-type]


def test_associate_job(ledger: TurnLedger, state: TurnState) -> None:
    job = JobRecord(session_id=state.id, origin_turn_id=TurnId("t"))
    assert not ledger.associate_job(job)  # no active reply
    active = ledger.begin(turn_id=TurnId("t"))
    assert not ledger.associate_job(JobRecord(session_id=state.id, origin_turn_id=TurnId("x")))
    assert not ledger.associate_job(
        JobRecord(session_id=SessionId("s"), origin_turn_id=TurnId("t"))
    )
    assert ledger.associate_job(job)
    assert not ledger.associate_job(JobRecord(session_id=state.id, origin_turn_id=TurnId("t")))
    assert active.turn.job_ids == [job.job_id]
    event = ledger.issue(active, "started")
    assert (event.job_id, event.job_revision, event.job_attempt) == (job.job_id, 1, 1)
    ledger.end(active)
    second = ledger.begin(turn_id=TurnId("u"))
    ledger.interrupt(**identity(ledger.issue(second, "started")))
    assert not ledger.associate_job(JobRecord(session_id=state.id, origin_turn_id=TurnId("u")))
    ledger.end(second)


def test_interrupt_from_another_thread(ledger: TurnLedger) -> None:
    active = ledger.begin()
    started = ledger.issue(active, "started")
    aborted = threading.Event()
    active.cancel = aborted.set
    results: list[bool] = []
    worker = threading.Thread(target=lambda: results.append(ledger.interrupt(**identity(started))))
    worker.start()
    worker.join()
    assert results == [True] and aborted.is_set()
    assert ledger.finish(active).type == "interrupted"
    ledger.end(active)


def test_rejections_log_their_reason(ledger: TurnLedger, caplog: pytest.LogCaptureFixture) -> None:
    events = hardcoded_turn(ledger)
    assert ledger.accept_event(events[0])
    with caplog.at_level(logging.DEBUG, logger="voxflow.turns"):
        assert not ledger.accept_event(events[0])
        assert not ledger.interrupt(**{**identity(events[0]), "input_revision": 0})
    assert "accept_event rejected: seq duplicate" in caplog.text
    assert "interrupt rejected: input_revision" in caplog.text


def test_active_turn_is_exposed_and_repr_names_it(ledger: TurnLedger) -> None:
    active = ledger.begin(turn_id=TurnId("shown"))
    assert isinstance(ledger.active, ActiveTurn)
    assert "shown" in repr(ledger)
    ledger.end(active)
    assert ledger.active is None


def test_a_settled_input_may_be_revised_under_its_turn_id(
    ledger: TurnLedger, state: TurnState
) -> None:
    """A turn the user went on with is answered again as a revision of its input: the same
    turn_id, a higher input_revision, once the earlier one settled; its earlier reply
    keeps its own revision (and its fence)."""
    first = ledger.begin(turn_id=TurnId("t1"))
    with pytest.raises(TurnInProgressError):
        ledger.begin(turn_id=TurnId("t1"), input_revision=2)
    ledger.finish(first)
    ledger.end(first)
    with pytest.raises(TurnIdentityError, match="already been used"):
        ledger.begin(turn_id=TurnId("t1"))
    assert ledger.interrupt(session_id=state.id, turn_id=TurnId("t1"), input_revision=1,
                            delivery_id=first.reply.delivery_id)
    second = ledger.begin(turn_id=TurnId("t1"), input_revision=2)
    assert state.turns["t1"] is second.turn and second.turn.input_revision == 2
    assert second.reply.delivery_id != first.reply.delivery_id
    assert state.replies[first.reply.delivery_id].input_revision == 1
    assert ledger.is_fenced(first.reply.delivery_id)
    assert not ledger.is_fenced(second.reply.delivery_id)
    # an event of the first revision never passes the fence
    stale = ledger.issue_for(first.reply, "text", started_at=0.0, text="late", segment_id=9)
    assert not ledger.accept_event(stale)
    ledger.finish(second)
    ledger.end(second)
    with pytest.raises(TurnIdentityError, match="already been used"):
        ledger.begin(turn_id=TurnId("t1"), input_revision=2)
