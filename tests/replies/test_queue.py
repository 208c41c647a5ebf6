"""ReplyQueue: every accept/reject rule of enqueue, claim, prepare, accepts_output,
settle, mark_covered, observe_client, set_foreground, close, snapshot/restore."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from pydantic import ValidationError

from voxflow.errors import ClientActivityError
from voxflow.ids import DeliveryId, SessionId, TurnId
from voxflow.replies import (
    MAX_CLIENT_SEQ,
    MAX_CLIENT_SEQ_STEP,
    ClientActivity,
    CoveredUpdate,
    ReplyQueue,
    ReplyQueueState,
)
from voxflow.turns import TurnLedger, TurnState

from .conftest import AnswerJob, Session, WorkChatState, join_answers


def activity(session: Session, seq: int, **kw: Any) -> ClientActivity:
    fields = {"recording": False, "playback": False, "muted": False, **kw}
    return ClientActivity(session_id=session.state.id, seq=seq, **fields)


def claimed(session: Session, answer: str = "42") -> tuple[AnswerJob, DeliveryId]:
    job = session.job(answer=answer)
    delivery_id = session.queue.enqueue(job)
    assert delivery_id is not None
    delivery = session.queue.claim()
    assert delivery is not None and delivery.delivery_id == delivery_id
    return job, delivery_id


# -- construction ----------------------------------------------------------------------


def test_the_state_must_be_a_reply_queue_state_and_a_job_state() -> None:
    with pytest.raises(TypeError, match="ReplyQueueState and a JobState"):
        ReplyQueue(TurnLedger(lambda: ReplyQueueState()))
    with pytest.raises(TypeError, match="ReplyQueueState and a JobState"):
        ReplyQueue(TurnLedger(lambda: TurnState()))
    with pytest.raises(TypeError, match="turns must be"):
        ReplyQueue(object())  # type: ignore[arg-type]


# -- enqueue -------------------------------------------------------------------------


def test_enqueue_creates_one_pending_delivery_per_job_and_coalesces(session: Session) -> None:
    turn = session.turn()
    first, second = session.job(turn), session.job(turn)
    a = session.queue.enqueue(first)
    assert a is not None
    assert session.queue.enqueue(first) == a  # duplicate notification coalesces
    b = session.queue.enqueue(second)
    assert b is not None and b != a
    record = session.state.deliveries[a]
    assert record.status == "pending"
    assert (record.turn_id, record.input_revision) == (turn.turn_id, turn.input_revision)
    assert record.covered_updates == [CoveredUpdate.from_job(first)]
    assert list(session.state.deliveries) == [a, b]  # FIFO


def test_enqueue_rejects_unfinished_stale_foreign_and_orphan_jobs(session: Session) -> None:
    turn = session.turn()
    running = AnswerJob(session_id=session.state.id, origin_turn_id=turn.turn_id)
    from voxflow.jobs import add_job

    assert add_job(session.state, running)
    assert session.queue.enqueue(running) is None  # queued: stage progress never queues
    session.commit(running, "started")
    session.commit(running, "stage_completed", stage="research", outputs={"answer": "x"})
    assert session.queue.enqueue(running) is None  # running
    done = session.job(turn)
    stale = done.model_copy(update={"last_update_seq": done.last_update_seq - 1})
    assert session.queue.enqueue(stale) is None  # not the accepted version
    foreign = done.model_copy(update={"session_id": SessionId("other")})
    assert session.queue.enqueue(foreign) is None
    unregistered = done.model_copy(update={"job_id": "unregistered"})
    assert session.queue.enqueue(unregistered) is None
    orphan = session.job(turn)
    orphan.origin_turn_id = TurnId("missing")
    assert session.queue.enqueue(orphan) is None
    orphan.origin_turn_id = None
    assert session.queue.enqueue(orphan) is None
    assert session.state.deliveries == {}
    with pytest.raises(TypeError, match="job must be a JobRecord"):
        session.queue.enqueue({"job_id": "x"})  # type: ignore[arg-type]


def test_enqueue_rejects_after_end_close_irrelevance_and_coverage(session: Session) -> None:
    covered = session.job()
    assert session.queue.mark_covered(CoveredUpdate.from_job(covered))
    assert session.queue.enqueue(covered) is None
    irrelevant = session.job()
    session.irrelevant.add(irrelevant.job_id)
    assert session.queue.enqueue(irrelevant) is None
    job = session.job()
    session.state.ended = True
    assert session.queue.enqueue(job) is None
    session.state.ended = False
    session.queue.close()
    assert session.queue.enqueue(job) is None
    assert session.state.deliveries == {}


def test_enqueue_rejects_a_job_whose_origin_turn_is_foreign(session: Session) -> None:
    turn = session.turn()
    job = session.job(turn)
    session.state.turns[turn.turn_id] = turn.model_copy(update={"session_id": "other"})
    assert session.queue.enqueue(job) is None


def test_coalescing_holds_even_for_a_skipped_delivery(session: Session) -> None:
    job = session.job()
    delivery_id = session.queue.enqueue(job)
    assert delivery_id is not None
    session.irrelevant.add(job.job_id)
    assert session.queue.claim() is None  # swept: skipped
    assert session.state.deliveries[delivery_id].status == "skipped"
    session.irrelevant.clear()
    assert session.queue.enqueue(job) == delivery_id  # no retry
    assert session.state.deliveries[delivery_id].status == "skipped"


# -- claim -------------------------------------------------------------------------


def test_claim_schedules_the_first_pending_and_returns_a_copy(session: Session) -> None:
    a = session.queue.enqueue(session.job())
    b = session.queue.enqueue(session.job())
    delivery = session.queue.claim()
    assert delivery is not None and delivery.delivery_id == a
    assert delivery.status == "scheduled" and delivery.scheduled_at is not None
    delivery.status = "completed"  # a copy: the queue is not affected
    assert session.state.deliveries[a].status == "scheduled"
    assert session.state.delivery_floor.active_delivery_id == a
    assert session.state.delivery_floor.held
    assert session.queue.claim() is None  # one delivery owns the floor
    assert session.state.deliveries[b].status == "pending"


@pytest.mark.parametrize("busy", ["recording", "playback", "muted"])
def test_claim_waits_for_the_client(session: Session, busy: str) -> None:
    session.queue.enqueue(session.job())
    assert session.queue.observe_client(activity(session, 1, **{busy: True}))
    assert session.queue.claim() is None
    assert session.queue.observe_client(activity(session, 2))
    assert session.queue.claim() is not None


def test_claim_waits_for_foreground_running_turns_and_close(session: Session) -> None:
    session.queue.enqueue(session.job())
    session.queue.set_foreground(True)
    assert session.queue.claim() is None
    session.queue.set_foreground(False)
    active = session.ledger.begin()
    assert session.queue.claim() is None  # a turn is running
    session.ledger.finish(active)
    session.ledger.end(active)
    assert session.queue.statistics().busy_reason is None
    assert session.queue.statistics().pending == 1
    session.queue.close()
    assert session.queue.claim() is None


def test_claim_sweeps_ineligible_pending_deliveries(session: Session) -> None:
    stale = session.job()
    fresh = session.job()
    a = session.queue.enqueue(stale)
    b = session.queue.enqueue(fresh)
    assert a is not None and b is not None
    session.irrelevant.add(stale.job_id)
    delivery = session.queue.claim()
    assert delivery is not None and delivery.delivery_id == b
    assert session.state.deliveries[a].status == "skipped"
    assert session.state.deliveries[a].reason == "No longer relevant or already covered."


def test_a_delivery_whose_origin_turn_changed_revision_is_ineligible(session: Session) -> None:
    job = session.job()
    delivery_id = session.queue.enqueue(job)
    assert delivery_id is not None
    assert job.origin_turn_id is not None
    session.state.turns[job.origin_turn_id].input_revision = 2
    assert session.queue.claim() is None
    assert session.state.deliveries[delivery_id].status == "skipped"


# -- prepare -------------------------------------------------------------------------


def test_prepare_issues_started_text_completed_through_the_fence(session: Session) -> None:
    job, delivery_id = claimed(session, answer="The report is ready.")
    events = session.queue.prepare(delivery_id, join_answers)
    assert [(e.type, e.seq) for e in events] == [("started", 1), ("text", 2), ("completed", 3)]
    assert events[1].segment_id == 1 and events[1].text == "The report is ready."
    assert all(e.delivery_id == delivery_id and e.kind == "progress" for e in events)
    assert all((e.job_id, e.job_revision, e.job_attempt) == (job.job_id, 1, 1) for e in events)
    assert all(e.turn_id == job.origin_turn_id for e in events)
    assert session.accept_all(events) == [True, True, True]
    reply = session.state.replies[delivery_id]
    assert (reply.status, reply.text, reply.last_event_seq) == ("completed", events[1].text, 3)
    assert session.queue.prepare(delivery_id, join_answers) == []  # single use
    assert len(session.state.messages) == 0  # nothing appended to history


def test_prepare_reads_the_current_job_copies(session: Session) -> None:
    seen: list[AnswerJob] = []
    job, delivery_id = claimed(session)

    def build(jobs: list[AnswerJob]) -> str:
        seen.extend(jobs)
        jobs[0].answer = "mutated"
        return "text"

    assert session.queue.prepare(delivery_id, build)
    assert seen[0].job_id == job.job_id and seen[0] is not job
    assert job.answer == "42"


def test_prepare_rejects_unclaimed_and_unknown_deliveries(session: Session) -> None:
    pending = session.queue.enqueue(session.job())
    assert pending is not None
    assert session.queue.prepare(pending, join_answers) == []
    assert session.state.deliveries[pending].status == "pending"  # not scheduled: untouched
    assert session.queue.prepare(DeliveryId("unknown"), join_answers) == []
    with pytest.raises(TypeError, match="build_text"):
        session.queue.prepare(pending, "text")  # type: ignore[arg-type]


def test_prepare_skips_a_delivery_invalidated_after_the_claim(session: Session) -> None:
    job, delivery_id = claimed(session)
    session.irrelevant.add(job.job_id)
    assert session.queue.prepare(delivery_id, join_answers) == []
    record = session.state.deliveries[delivery_id]
    assert (record.status, record.reason) == ("skipped", "Invalidated before preparation.")
    assert not session.state.delivery_floor.held


@pytest.mark.parametrize("busy", ["recording", "playback", "muted", "foreground"])
def test_prepare_interrupts_when_the_floor_became_busy(session: Session, busy: str) -> None:
    _, delivery_id = claimed(session)
    if busy == "foreground":
        session.queue.set_foreground(True)
    else:
        assert session.queue.observe_client(activity(session, 1, **{busy: True}))
    assert session.queue.prepare(delivery_id, join_answers) == []
    record = session.state.deliveries[delivery_id]
    assert (record.status, record.reason) == ("interrupted", "The speaking floor became busy.")
    assert session.state.delivery_floor.active_delivery_id is None
    assert delivery_id not in session.state.replies


def test_prepare_fails_the_delivery_when_build_text_fails(session: Session) -> None:
    _, delivery_id = claimed(session)

    def broken(jobs: list[AnswerJob]) -> str:
        raise KeyError("answer")

    with pytest.raises(KeyError):
        session.queue.prepare(delivery_id, broken)
    assert session.state.deliveries[delivery_id].status == "failed"
    assert session.state.delivery_floor.active_delivery_id is None
    _, second = claimed(session)
    with pytest.raises(ValueError, match="non-empty text"):
        session.queue.prepare(second, lambda jobs: "  ")
    assert session.state.deliveries[second].status == "failed"


# -- accepts_output --------------------------------------------------------------------


def test_accepts_output_rechecks_everything_but_own_playback(session: Session) -> None:
    _, delivery_id = claimed(session)
    assert not session.queue.accepts_output(delivery_id)  # no reply yet
    session.queue.prepare(delivery_id, join_answers)
    assert session.queue.accepts_output(delivery_id)
    assert session.queue.observe_client(
        activity(session, 1, playback=True, delivery_id=delivery_id)
    )
    assert session.queue.accepts_output(delivery_id)  # its own playback does not block it
    assert session.queue.observe_client(
        activity(session, 2, playback=True, recording=True, delivery_id=delivery_id)
    )
    assert not session.queue.accepts_output(delivery_id)
    assert session.queue.observe_client(
        activity(session, 3, playback=True, delivery_id=delivery_id)
    )
    session.queue.set_foreground(True)
    assert not session.queue.accepts_output(delivery_id)
    session.queue.set_foreground(False)
    assert session.queue.observe_client(activity(session, 4, muted=True, delivery_id=delivery_id))
    assert not session.queue.accepts_output(delivery_id)
    assert session.queue.observe_client(activity(session, 5))
    assert session.queue.accepts_output(delivery_id)
    assert not session.queue.accepts_output(DeliveryId("unknown"))


def test_accepts_output_is_false_once_the_reply_is_fenced_or_the_job_irrelevant(
    session: Session,
) -> None:
    job, delivery_id = claimed(session)
    events = session.queue.prepare(delivery_id, join_answers)
    session.irrelevant.add(job.job_id)
    assert not session.queue.accepts_output(delivery_id)
    session.irrelevant.clear()
    assert session.ledger.interrupt(
        session_id=events[0].session_id,
        turn_id=events[0].turn_id,
        input_revision=1,
        delivery_id=delivery_id,
    )
    assert not session.queue.accepts_output(delivery_id)
    assert session.accept_all(events) == [False, False, False]


# -- settle -------------------------------------------------------------------------


def test_settle_completed_covers_the_version_once(session: Session) -> None:
    job, delivery_id = claimed(session)
    session.accept_all(session.queue.prepare(delivery_id, join_answers))
    assert session.queue.settle(delivery_id, "completed")
    record = session.state.deliveries[delivery_id]
    assert record.status == "completed" and record.settled_at is not None
    assert session.state.covered_updates[job.job_id] == CoveredUpdate.from_job(job)
    assert session.state.delivery_floor.active_delivery_id is None
    assert not session.queue.settle(delivery_id, "completed")  # second settle
    assert not session.queue.settle(delivery_id, "failed")
    assert session.queue.enqueue(job) is None  # covered now


def test_settle_only_the_active_scheduled_delivery(session: Session) -> None:
    pending = session.queue.enqueue(session.job())
    assert pending is not None
    assert not session.queue.settle(pending, "completed")
    assert not session.queue.settle(DeliveryId("unknown"), "skipped")
    with pytest.raises(ValueError, match="status must be one of"):
        session.queue.settle(pending, "done")  # type: ignore[arg-type]
    assert session.state.deliveries[pending].status == "pending"


def test_settle_completed_downgrades(session: Session) -> None:
    job, delivery_id = claimed(session)
    events = session.queue.prepare(delivery_id, join_answers)
    assert session.ledger.interrupt(
        session_id=session.state.id,
        turn_id=events[0].turn_id,
        input_revision=1,
        delivery_id=delivery_id,
    )
    assert session.queue.settle(delivery_id, "completed")
    assert session.state.deliveries[delivery_id].status == "interrupted"
    assert job.job_id not in session.state.covered_updates

    job2, second = claimed(session)
    session.queue.prepare(second, join_answers)
    session.irrelevant.add(job2.job_id)
    assert session.queue.settle(second, "completed")
    assert session.state.deliveries[second].status == "skipped"
    assert job2.job_id not in session.state.covered_updates

    _, third = claimed(session)
    assert session.queue.settle(third, "completed")  # never prepared: nothing was said
    assert session.state.deliveries[third].status == "skipped"


@pytest.mark.parametrize("status", ["interrupted", "skipped", "failed"])
def test_settle_other_statuses_fence_the_reply(session: Session, status: Any) -> None:
    job, delivery_id = claimed(session)
    events = session.queue.prepare(delivery_id, join_answers)
    assert session.ledger.accept_event(events[0])
    assert session.queue.settle(delivery_id, status, reason="barge-in")
    record = session.state.deliveries[delivery_id]
    assert (record.status, record.reason) == (status, "barge-in")
    assert session.state.replies[delivery_id].interrupted
    assert session.accept_all(events[1:]) == [False, False]
    assert job.job_id not in session.state.covered_updates
    assert session.queue.claim() is None  # not replayed automatically


# -- mark_covered ---------------------------------------------------------------------


def test_mark_covered_skips_matching_pending_deliveries(session: Session) -> None:
    job = session.job()
    delivery_id = session.queue.enqueue(job)
    assert delivery_id is not None
    assert session.queue.mark_covered(CoveredUpdate.from_job(job))
    record = session.state.deliveries[delivery_id]
    assert (record.status, record.reason) == ("skipped", "Already covered by a requested summary.")
    assert session.queue.claim() is None


def test_mark_covered_rejects_stale_versions_and_a_closed_floor(session: Session) -> None:
    job = session.job()
    stale = CoveredUpdate.from_job(job).model_copy(update={"seq": 1})
    assert not session.queue.mark_covered(stale)
    session.queue.close()
    assert not session.queue.mark_covered(CoveredUpdate.from_job(job))
    assert session.state.covered_updates == {}
    with pytest.raises(TypeError, match="CoveredUpdate"):
        session.queue.mark_covered(job)  # type: ignore[arg-type]


def test_a_later_job_version_stays_eligible_after_coverage(session: Session) -> None:
    job = session.job(answer="first")
    assert session.queue.mark_covered(CoveredUpdate.from_job(job))
    retried = job.model_copy(update={"attempt": 2})
    session.state.jobs[job.job_id] = retried  # the application re-ran it
    delivery_id = session.queue.enqueue(retried)
    assert delivery_id is not None
    delivery = session.queue.claim()
    assert delivery is not None and delivery.delivery_id == delivery_id


# -- observe_client -------------------------------------------------------------------


def test_observe_client_rules(session: Session) -> None:
    events = session.queue.prepare(claimed(session)[1], join_answers)
    mine = events[0].delivery_id
    q = session.queue
    floor = session.state.delivery_floor
    assert q.observe_client(activity(session, 1, playback=True, delivery_id=mine))
    assert (floor.playback, floor.playback_delivery_id, floor.client_seq) == (True, mine, 1)
    assert not q.observe_client(activity(session, 1))  # seq must increase
    assert not q.observe_client(
        ClientActivity(session_id="other", seq=5, recording=False, playback=False, muted=False)
    )
    assert not q.observe_client(activity(session, 6, playback=True, delivery_id="unknown"))
    assert not q.observe_client(activity(session, 7, delivery_id=None))  # null stop
    assert floor.playback and floor.playback_delivery_id == mine
    assert q.observe_client(activity(session, 8, delivery_id=mine))
    assert (floor.playback, floor.playback_delivery_id, floor.client_seq) == (False, None, 8)


def test_one_observation_cannot_wedge_the_floor(session: Session) -> None:
    q, floor = session.queue, session.state.delivery_floor
    assert q.observe_client(activity(session, 1))
    before = (floor.model_dump(), session.state.delivery_sequence)
    for seq in (2**80, MAX_CLIENT_SEQ + 1):  # not even a ClientActivity
        with pytest.raises(ValidationError):
            activity(session, seq, recording=True)
    for seq in (MAX_CLIENT_SEQ, 2 + MAX_CLIENT_SEQ_STEP):  # valid, but too far ahead
        with pytest.raises(ClientActivityError) as info:
            q.observe_client(activity(session, seq, recording=True))
        assert (info.value.seq, info.value.last_seq) == (seq, 1)
        assert isinstance(info.value, ValueError)
    assert (floor.model_dump(), session.state.delivery_sequence) == before  # nothing changed
    assert q.observe_client(activity(session, 2, recording=True))  # the next real one
    assert q.observe_client(activity(session, 2 + MAX_CLIENT_SEQ_STEP))  # the largest step
    assert (floor.client_seq, floor.recording) == (2 + MAX_CLIENT_SEQ_STEP, False)


@pytest.mark.parametrize(
    "fields",
    [
        {"seq": True},
        {"seq": 1.0},
        {"seq": "1"},
        {"seq": 0},
        {"seq": -1},
        {"recording": 1},
        {"muted": "yes"},
        {"playback": None},
        {"session_id": 7},
        {"session_id": ""},
        {"session_id": "s" * 257},
        {"delivery_id": 5},
        {"delivery_id": ""},
        {"extra": 1},
    ],
)
def test_client_activity_fields_are_strictly_typed(fields: dict[str, Any]) -> None:
    base: dict[str, Any] = {
        "session_id": "s", "seq": 1, "recording": False, "playback": False, "muted": False,
    }
    with pytest.raises(ValidationError):
        ClientActivity(**{**base, **fields})


def test_a_stale_stop_never_releases_newer_playback(session: Session) -> None:
    old = session.turn()
    new = session.turn()
    old_reply = next(r for r in session.state.replies.values() if r.turn_id == old.turn_id)
    new_reply = next(r for r in session.state.replies.values() if r.turn_id == new.turn_id)
    q, floor = session.queue, session.state.delivery_floor
    assert q.observe_client(activity(session, 1, playback=True, delivery_id=old_reply.delivery_id))
    assert q.observe_client(activity(session, 2, playback=True, delivery_id=new_reply.delivery_id))
    assert not q.observe_client(activity(session, 3, delivery_id=old_reply.delivery_id))
    assert floor.playback and floor.playback_delivery_id == new_reply.delivery_id
    assert q.observe_client(activity(session, 4, delivery_id=new_reply.delivery_id))
    assert not floor.playback


def test_a_null_delivery_id_is_local_cached_audio(session: Session) -> None:
    q, floor = session.queue, session.state.delivery_floor
    session.queue.enqueue(session.job())
    assert q.observe_client(activity(session, 1, playback=True))  # cached acknowledgment
    assert (floor.playback, floor.playback_delivery_id) == (True, None)
    assert q.claim() is None
    identified = next(iter(session.state.replies))
    assert not q.observe_client(activity(session, 2, delivery_id=identified))  # not its stop
    assert q.observe_client(activity(session, 3))  # the cached audio's own stop
    assert q.claim() is not None


def test_client_activity_is_strictly_typed(session: Session) -> None:
    with pytest.raises(ValueError):
        activity(session, 1, recording=1)
    with pytest.raises(ValueError):
        activity(session, 0)
    with pytest.raises(ValueError):
        activity(session, True)
    with pytest.raises(TypeError, match="ClientActivity"):
        session.queue.observe_client({"seq": 1})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="busy must be a bool"):
        session.queue.set_foreground(1)  # type: ignore[arg-type]


# -- close, snapshot, restore ---------------------------------------------------------


def test_close_with_pending_and_active_deliveries(session: Session) -> None:
    job, active_id = claimed(session)
    events = session.queue.prepare(active_id, join_answers)
    pending = session.queue.enqueue(session.job())
    assert pending is not None
    session.queue.close()
    active, waiting = session.state.deliveries[active_id], session.state.deliveries[pending]
    assert (active.status, active.reason) == ("interrupted", "Session closed.")
    assert (waiting.status, waiting.reason) == ("skipped", "Session closed.")
    assert session.accept_all(events) == [False, False, False]
    assert session.state.jobs[job.job_id].answer == "42"  # results untouched
    assert session.queue.enqueue(session.job()) is None
    assert not session.queue.observe_client(activity(session, 1))
    session.queue.close()  # idempotent
    assert session.queue.statistics().closed


def test_take_over_offers_the_cut_announcement_again_and_it_is_said_whole_once(
    session: Session,
) -> None:
    """The dead process held the floor for an announcement (the user heard some of it,
    or none): a takeover ends it interrupted and queues the same versions again, after
    the pending ones; once that copy is heard whole, nothing of it is offered again."""
    job, cut = claimed(session)
    session.queue.prepare(cut, join_answers)
    waiting = session.queue.enqueue(session.job(answer="7"))
    assert session.queue.take_over() == [cut]
    assert session.state.deliveries[cut].status == "interrupted"
    assert "offered again" in session.state.deliveries[cut].reason
    assert session.state.replies[cut].interrupted  # its old reply is fenced
    again = [d for d in session.state.deliveries.values()
             if d.delivery_id not in (cut, waiting)]
    assert len(again) == 1 and again[0].status == "pending"
    assert again[0].covered_updates == session.state.deliveries[cut].covered_updates
    assert session.queue.enqueue(job) == cut  # a late notification adds no third copy
    first = session.queue.claim()
    assert first is not None and first.delivery_id == waiting  # FIFO: it came first
    assert session.queue.settle(waiting, "skipped")
    # a second death, during the copy: cut again, queued again (one pending copy)
    copy = session.queue.claim()
    assert copy is not None and copy.delivery_id == again[0].delivery_id
    assert session.queue.take_over() == [copy.delivery_id]
    pending = [d for d in session.state.deliveries.values() if d.status == "pending"]
    assert len(pending) == 1
    last = session.queue.claim()
    assert last is not None and last.delivery_id == pending[0].delivery_id
    events = session.queue.prepare(last.delivery_id, join_answers)
    assert events and all(session.accept_all(events))
    assert session.queue.settle(last.delivery_id, "completed")  # heard whole: covered
    assert CoveredUpdate.from_job(job) == session.state.covered_updates[job.job_id]
    assert session.queue.take_over() == []  # nothing holds the floor: nothing queued
    assert session.queue.claim() is None
    assert session.queue.enqueue(job) is None  # covered


def test_snapshot_round_trips_and_restore_replays_nothing(session: Session) -> None:
    _, active_id = claimed(session)
    session.queue.prepare(active_id, join_answers)
    pending = session.queue.enqueue(session.job())
    session.queue.observe_client(activity(session, 3, recording=True))
    data = json.loads(json.dumps(session.queue.snapshot()))
    assert data["floor"]["active_delivery_id"] == active_id
    assert [d["status"] for d in data["deliveries"]] == ["scheduled", "pending"]

    # A new process: the whole state comes back from JSON, then the queue snapshot.
    state = WorkChatState.model_validate_json(session.state.model_dump_json())
    ledger = TurnLedger(lambda: state)
    queue = ReplyQueue(ledger)
    queue.restore(data)
    assert state.deliveries[active_id].status == "interrupted"  # not replayed
    assert state.replies[active_id].interrupted
    assert state.delivery_floor.active_delivery_id is None
    assert not state.delivery_floor.recording  # the old client's observations are gone
    assert queue.observe_client(
        ClientActivity(session_id=state.id, seq=1, recording=False, playback=False, muted=False)
    )
    delivery = queue.claim()
    assert delivery is not None and delivery.delivery_id == pending
    with pytest.raises(Exception, match="another session"):
        ReplyQueue(TurnLedger(lambda: WorkChatState())).restore(data)


def test_delivery_ids_are_type_checked(session: Session) -> None:
    for call in (
        lambda: session.queue.prepare(["x"], join_answers),  # type: ignore[arg-type]
        lambda: session.queue.accepts_output(None),  # type: ignore[arg-type]
        lambda: session.queue.settle(1, "completed"),  # type: ignore[arg-type]
    ):
        with pytest.raises(TypeError, match="delivery_id must be a str"):
            call()


def test_statistics_and_repr(session: Session) -> None:
    session.queue.enqueue(session.job())
    stats = session.queue.statistics()
    assert (stats.pending, stats.active_delivery_id, stats.busy_reason) == (1, None, None)
    assert "pending=1" in repr(session.queue)


def test_rejections_log_their_reason(session: Session, caplog: pytest.LogCaptureFixture) -> None:
    session.queue.set_foreground(True)
    with caplog.at_level(logging.DEBUG, logger="voxflow.replies"):
        assert session.queue.claim() is None
        assert not session.queue.settle(DeliveryId("x"), "completed")
    assert "claim rejected: foreground turn" in caplog.text
    assert "settle rejected: unknown delivery" in caplog.text
