"""Hypothesis: random interleavings of client observations, claims, preparation,
handoffs, settles, interrupts and foreground turns never break the floor invariants."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from voxflow.ids import DeliveryId
from voxflow.replies import ClientActivity, ReplyQueue
from voxflow.turns import ActiveTurn, ReplyEvent, TurnLedger

from .conftest import Session, WorkChatState, join_answers

SETTLE = st.sampled_from(["completed", "interrupted", "skipped", "failed"])
# One busy reason at a time (mostly), so every single reason meets a free floor otherwise.
CLIENT = ["quiet", "recording", "playback", "muted", "recording+playback", "muted+recording"]


class FloorMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        state = WorkChatState()
        ledger = TurnLedger(lambda: state)
        self.irrelevant: set[str] = set()
        queue = ReplyQueue(ledger, is_relevant=lambda job: job.job_id not in self.irrelevant)
        self.s = Session(state=state, ledger=ledger, queue=queue, irrelevant=self.irrelevant)
        self.seq = 0
        self.issued: list[ReplyEvent] = []
        self.fenced: set[str] = set()  # delivery ids interrupted (or settled non-completed)
        self.foreground_turn: ActiveTurn | None = None
        self.origin = self.s.turn()  # the turn that asked for the background work

    # -- helpers -------------------------------------------------------------------

    def _reply_ids(self) -> list[str]:
        return list(self.s.state.replies)

    def _floor_free(self) -> bool:
        floor = self.s.state.delivery_floor
        turns = self.s.state.turns.values()
        return not (
            floor.closed
            or floor.foreground
            or floor.recording
            or floor.playback
            or floor.muted
            or floor.active_delivery_id is not None
            or any(t.status == "running" for t in turns)
        )

    # -- rules -------------------------------------------------------------------------

    @rule(relevant=st.sampled_from([True, True, True, False]))
    def job_completes(self, relevant: bool) -> None:
        job = self.s.job(self.origin)
        if not relevant:
            self.irrelevant.add(job.job_id)
        self.s.queue.enqueue(job)

    @rule(
        what=st.sampled_from(CLIENT),
        pick=st.integers(min_value=-1, max_value=50),
        stale=st.sampled_from([False, False, False, True]),
    )
    def client_observes(self, what: str, pick: int, stale: bool) -> None:
        recording, playback, muted = ("recording" in what, "playback" in what, "muted" in what)
        ids = self._reply_ids()
        delivery_id = ids[pick % len(ids)] if ids and pick >= 0 else None
        seq = self.seq if stale and self.seq > 0 else self.seq + 1
        floor = self.s.state.delivery_floor
        before_playing = (floor.playback, floor.playback_delivery_id)
        accepted = self.s.queue.observe_client(
            ClientActivity(
                session_id=self.s.state.id,
                seq=seq,
                recording=recording,
                playback=playback,
                muted=muted,
                delivery_id=delivery_id,
            )
        )
        if accepted:
            self.seq = seq
            # A stop never releases playback of another identity.
            if before_playing[0] and not playback:
                assert before_playing[1] == delivery_id
        elif seq == self.seq + 1 and not floor.closed:
            assert not playback and before_playing[0] and before_playing[1] != delivery_id

    @rule(busy=st.booleans())
    def foreground(self, busy: bool) -> None:
        self.s.queue.set_foreground(busy)

    @precondition(lambda self: self.foreground_turn is None)
    @rule()
    def user_turn_starts(self) -> None:
        if self.s.state.ended:
            return
        self.foreground_turn = self.s.ledger.begin()
        self.issued.append(self.s.ledger.issue(self.foreground_turn, "started"))

    @precondition(lambda self: self.foreground_turn is not None)
    @rule(text=st.text(min_size=1, max_size=5))
    def user_turn_generates(self, text: str) -> None:
        assert self.foreground_turn is not None
        self.issued.append(self.s.ledger.text(self.foreground_turn, text))

    @precondition(lambda self: self.foreground_turn is not None)
    @rule()
    def user_turn_finishes(self) -> None:
        active = self.foreground_turn
        assert active is not None
        self.issued.append(self.s.ledger.finish(active))
        self.s.ledger.end(active)
        self.foreground_turn = None

    @rule()
    def claim(self) -> None:
        free_before = self._floor_free()
        delivery = self.s.queue.claim()
        if delivery is not None:
            assert free_before, "claimed while the floor was busy"
            assert delivery.status == "scheduled"

    @rule(status=SETTLE)
    def try_delivery(self, status: Any) -> None:
        """The whole pattern: claim, prepare, hand off what passes the fences, settle."""
        free_before = self._floor_free()
        delivery = self.s.queue.claim()
        if delivery is None:
            return
        assert free_before, "claimed while the floor was busy"
        for event in self.s.queue.prepare(delivery.delivery_id, join_answers):
            self.issued.append(event)
            if self.s.queue.accepts_output(delivery.delivery_id):
                self.hand_off_event(event)
        self.settle_delivery(delivery.delivery_id, status)

    @rule(pick=st.integers(min_value=0, max_value=50))
    def client_plays(self, pick: int) -> None:
        ids = self._reply_ids()
        self.seq += 1
        accepted = self.s.queue.observe_client(
            ClientActivity(
                session_id=self.s.state.id,
                seq=self.seq,
                recording=False,
                playback=True,
                muted=False,
                delivery_id=ids[pick % len(ids)] if ids else None,
            )
        )
        assert accepted or self.s.state.delivery_floor.closed

    @rule()
    def client_goes_quiet(self) -> None:
        self.seq += 1
        accepted = self.s.queue.observe_client(
            ClientActivity(
                session_id=self.s.state.id,
                seq=self.seq,
                recording=False,
                playback=False,
                muted=False,
                delivery_id=self.s.state.delivery_floor.playback_delivery_id,
            )
        )
        assert accepted or self.s.state.delivery_floor.closed
        self.s.queue.set_foreground(False)

    @rule()
    def prepare(self) -> None:
        active = self.s.state.delivery_floor.active_delivery_id
        if active is not None:
            self.issued.extend(self.s.queue.prepare(active, join_answers))

    @rule(pick=st.integers(min_value=0, max_value=200))
    def hand_off(self, pick: int) -> None:
        if not self.issued:
            return
        self.hand_off_event(self.issued[pick % len(self.issued)])

    def hand_off_event(self, event: ReplyEvent) -> None:
        if self.s.ledger.accept_event(event) and event.delivery_id in self.fenced:
            assert event.type in {"interrupted", "failed"}, "accepted after interruption"

    @rule(pick=st.integers(min_value=0, max_value=50), status=SETTLE, use_active=st.booleans())
    def settle(self, pick: int, status: Any, use_active: bool) -> None:
        active = self.s.state.delivery_floor.active_delivery_id
        ids = list(self.s.state.deliveries)
        if use_active and active is not None:
            target: str | None = active
        else:
            target = ids[pick % len(ids)] if ids else None
        if target is None:
            return
        self.settle_delivery(target, status, was_active=target == active)

    def settle_delivery(self, target: str, status: Any, was_active: bool = True) -> None:
        if self.s.queue.settle(DeliveryId(target), status):
            assert was_active
            final = self.s.state.deliveries[target].status
            if final != "completed" and target in self.s.state.replies:
                self.fenced.add(target)
            assert self.s.state.delivery_floor.active_delivery_id is None

    @rule(pick=st.integers(min_value=0, max_value=50))
    def interrupt(self, pick: int) -> None:
        ids = self._reply_ids()
        if not ids:
            return
        reply = self.s.state.replies[ids[pick % len(ids)]]
        assert self.s.ledger.interrupt(
            session_id=reply.session_id,
            turn_id=reply.turn_id,
            input_revision=reply.input_revision,
            delivery_id=reply.delivery_id,
        )
        self.fenced.add(reply.delivery_id)

    @rule(flip=st.integers(min_value=0, max_value=20))
    def relevance_changes(self, flip: int) -> None:
        jobs = list(self.s.state.jobs)
        if jobs:
            job_id = jobs[flip % len(jobs)]
            self.irrelevant.symmetric_difference_update({job_id})

    @precondition(lambda self: self.foreground_turn is None)
    @rule(close=st.integers(min_value=0, max_value=40))
    def maybe_close(self, close: int) -> None:
        if close == 0:
            self.s.queue.close()

    # -- invariants --------------------------------------------------------------------

    @invariant()
    def at_most_one_active_delivery(self) -> None:
        scheduled = [d for d in self.s.state.deliveries.values() if d.status == "scheduled"]
        assert len(scheduled) <= 1
        active = self.s.state.delivery_floor.active_delivery_id
        assert [d.delivery_id for d in scheduled] == ([active] if active else [])

    @invariant()
    def closed_floor_holds_nothing(self) -> None:
        state = self.s.state
        if state.delivery_floor.closed:
            assert state.delivery_floor.active_delivery_id is None
            assert all(d.status != "pending" for d in state.deliveries.values())

    @invariant()
    def interrupted_replies_stay_fenced(self) -> None:
        for delivery_id in self.fenced:
            assert self.s.state.replies[delivery_id].interrupted


FloorMachine.TestCase.settings = settings(
    max_examples=150,
    stateful_step_count=50,
    deadline=None,
    database=None,  # no .hypothesis folder in the work tree
    suppress_health_check=[HealthCheck.too_slow],
)
TestFloorInvariants = FloorMachine.TestCase
