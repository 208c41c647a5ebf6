"""Hypothesis: any interleaving of issuing, handing off (in any order, duplicated),
interrupting and failing keeps the transport fence sound."""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from voxflow.turns import ActiveTurn, ReplyEvent, TurnLedger, TurnState


class FenceMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.state = TurnState()
        self.ledger = TurnLedger(lambda: self.state)
        self.active: ActiveTurn | None = None
        self.issued: list[ReplyEvent] = []
        self.accepted: dict[str, list[ReplyEvent]] = {}
        self.fenced_at: dict[str, int] = {}  # delivery → len(accepted) when interrupted

    @precondition(lambda self: self.active is None)
    @rule()
    def begin(self) -> None:
        self.active = self.ledger.begin()
        self.issued.append(self.ledger.issue(self.active, "started"))

    @precondition(lambda self: self.active is not None)
    @rule(text=st.text(min_size=1, max_size=3))
    def generate(self, text: str) -> None:
        assert self.active is not None
        self.issued.append(self.ledger.text(self.active, text))

    @precondition(lambda self: self.active is not None)
    @rule(fail=st.booleans())
    def finish(self, fail: bool) -> None:
        active = self.active
        assert active is not None
        error = RuntimeError("boom") if fail else None
        terminal = self.ledger.finish(active, error=error)
        self.issued.append(terminal)
        if active.reply.status == "interrupted":
            assert terminal.type == "interrupted"
        self.ledger.end(active)
        self.active = None

    @rule(pick=st.integers(min_value=0, max_value=500))
    def hand_off(self, pick: int) -> None:
        if not self.issued:
            return
        event = self.issued[pick % len(self.issued)]
        if self.ledger.accept_event(event):
            self.accepted.setdefault(event.delivery_id, []).append(event)

    @rule(pick=st.integers(min_value=0, max_value=500), forge=st.booleans())
    def interrupt(self, pick: int, forge: bool) -> None:
        if not self.issued:
            return
        event = self.issued[pick % len(self.issued)]
        revision = 2 if forge else event.input_revision
        ok = self.ledger.interrupt(
            session_id=event.session_id,
            turn_id=event.turn_id,
            input_revision=revision,
            delivery_id=event.delivery_id,
        )
        assert ok != forge
        if ok:
            self.fenced_at.setdefault(
                event.delivery_id, len(self.accepted.get(event.delivery_id, []))
            )

    @invariant()
    def accepted_seqs_strictly_increase(self) -> None:
        for events in self.accepted.values():
            seqs = [e.seq for e in events]
            assert seqs == sorted(set(seqs))

    @invariant()
    def nothing_but_a_terminal_signal_after_an_interrupt(self) -> None:
        for delivery_id, at in self.fenced_at.items():
            late = self.accepted.get(delivery_id, [])[at:]
            assert all(e.type in {"interrupted", "failed"} for e in late)

    @invariant()
    def failed_events_only_for_failed_replies(self) -> None:
        for delivery_id, events in self.accepted.items():
            reply = self.state.replies[delivery_id]
            if any(e.type == "failed" for e in events):
                assert reply.status == "failed"
            assert reply.last_accepted_seq <= reply.last_event_seq

    @invariant()
    def at_most_one_running_turn(self) -> None:
        running = [t for t in self.state.turns.values() if t.status == "running"]
        assert len(running) <= 1
        assert (running[0].turn_id if running else None) == self.ledger.running_turn_id()


FenceMachine.TestCase.settings = settings(
    max_examples=150, stateful_step_count=40, deadline=None, database=None
)
TestFenceInvariants = FenceMachine.TestCase
