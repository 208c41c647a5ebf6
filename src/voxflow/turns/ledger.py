"""TurnLedger: the pure state machine of tracked turns and public replies.

The ledger owns every rule about identities: which turn may start, which ``seq`` an
event gets, which events may leave the process (:meth:`TurnLedger.accept_event`) and
what an interruption does (:meth:`TurnLedger.interrupt`). It drives no flow and calls
no LLM; :class:`~voxflow.turns.runner.TurnRunner` adds that on top, and
:class:`~voxflow.replies.ReplyQueue` uses the ledger for background replies.

Records live in the live ``TurnState`` (read through a getter on every operation, never
cached, because a restore may replace the state object). A private ``threading.RLock``
guards them, so :meth:`interrupt` may be called from any thread; it never blocks on the
application's ``JobRunner.state_lock``. Per-event work touches only the records of one
reply: the cost of a turn does not grow with the session.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, get_args

from voxflow.clock import Clock, MonotonicClock
from voxflow.conversation._record_marks import RecordDict
from voxflow.errors import ConversationEndedError, TurnIdentityError, TurnInProgressError
from voxflow.ids import DeliveryId, SessionId, TurnId, new_delivery_id, new_turn_id
from voxflow.jobs.records import JobRecord
from voxflow.turns.records import (
    ReplyEvent,
    ReplyEventType,
    ReplyKind,
    ReplyRecord,
    TurnRecord,
    TurnState,
)

__all__ = ["ActiveTurn", "TurnLedger"]

logger = logging.getLogger("voxflow.turns")

_KINDS: frozenset[str] = frozenset(get_args(ReplyKind))


def _reject(action: str, reason: str, **fields: object) -> bool:
    if logger.isEnabledFor(logging.DEBUG):
        logger.debug("%s rejected: %s", action, reason, extra={"voxflow": fields})
    return False


def check_revision(input_revision: object) -> int:
    """``input_revision`` if it is an exact ``int`` ≥ 1; raise otherwise."""
    if type(input_revision) is not int:
        raise TypeError(f"input_revision must be an int, got {type(input_revision).__name__}")
    if input_revision < 1:
        raise ValueError(f"input_revision must be >= 1, got {input_revision}")
    return input_revision


@dataclass(slots=True, eq=False)
class ActiveTurn:
    """The one tracked turn in flight: its records and how to abort its generation."""

    turn: TurnRecord
    reply: ReplyRecord
    started_at: float
    cancel: Callable[[], None] | None = None
    """Set by the runner: aborts the in-flight generation (e.g. cancels the LLM stream)."""
    segments: int = 0
    first_text_at: float | None = None
    final_text: str | None = None
    """The assistant message the flow recorded for this turn, once it did."""
    routes: list[str] = field(default_factory=list)


class TurnLedger:
    """Turn and reply records of one session, and the rules that change them.

    Args:
        state: returns the live ``TurnState`` (called on every operation).
        clock: the clock for ``elapsed_ms``; the monotonic clock by default.
        on_interrupt: called (outside the ledger lock) when the active reply is
            interrupted while still generating.
    """

    def __init__(
        self,
        state: Callable[[], TurnState],
        *,
        clock: Clock | None = None,
        on_interrupt: Callable[[], None] | None = None,
    ) -> None:
        if not callable(state):
            raise TypeError("state must be a callable returning the live TurnState")
        if clock is not None and not isinstance(clock, Clock):
            raise TypeError("clock must implement voxflow.clock.Clock (now() and sleep())")
        if on_interrupt is not None and not callable(on_interrupt):
            raise TypeError("on_interrupt must be callable or None")
        self._get_state = state
        self.clock: Clock = clock if clock is not None else MonotonicClock()
        self._on_interrupt = on_interrupt
        self._lock = threading.RLock()
        self._active: ActiveTurn | None = None
        self._seen: TurnState | None = None
        self.state  # noqa: B018  # validate and reconcile now, so misuse fails at construction

    # -- state ----------------------------------------------------------------------

    @property
    def state(self) -> TurnState:
        """The live state; a newly seen state object is reconciled first (see restore)."""
        with self._lock:
            current = self._get_state()
            if current is not self._seen:
                self._adopt(current)
            return current

    def _adopt(self, current: object) -> None:
        if not isinstance(current, TurnState):
            raise TypeError(
                f"the flow state must be a TurnState (or subclass), got {type(current).__name__}"
            )
        active = self._active
        if active is not None:
            # A reload must not drop the records of the turn in flight.
            current.turns[active.turn.turn_id] = active.turn
            current.replies[active.reply.delivery_id] = active.reply
        self._seen = current
        self._reconcile(current)

    def _reconcile(self, current: TurnState) -> None:
        """Nothing runs after a restore: unfinished records become interrupted, fenced."""
        active_turn = self._active.turn.turn_id if self._active else None
        active_reply = self._active.reply.delivery_id if self._active else None
        for turn in current.turns.values():
            if turn.status == "running" and turn.turn_id != active_turn:
                turn.status = "interrupted"
        for reply in current.replies.values():
            if reply.delivery_id == active_reply:
                continue
            if reply.status == "generating":
                reply.status = "interrupted"
                reply.interrupted = True
            elif reply.last_accepted_seq < reply.last_event_seq:
                reply.interrupted = True  # its unsent events are gone; never replay them

    @property
    def active(self) -> ActiveTurn | None:
        """The tracked turn in flight, if any."""
        return self._active

    def running_turn_id(self) -> TurnId | None:
        """The id of the turn still generating, or None (O(1), not a scan)."""
        active = self._active
        if active is not None and active.turn.status == "running":
            return active.turn.turn_id
        return None

    # -- starting and issuing ---------------------------------------------------------

    def check_can_begin(
        self,
        *,
        turn_id: TurnId | None = None,
        input_revision: int = 1,
        kind: ReplyKind = "answer",
        session_id: SessionId | None = None,
        delivery_id: DeliveryId | None = None,
    ) -> TurnState:
        """Raise the typed error :meth:`begin` would raise; return the state otherwise."""
        check_revision(input_revision)
        if kind not in _KINDS:
            raise ValueError(f"kind must be one of {sorted(_KINDS)}, got {kind!r}")
        if turn_id is not None and (not isinstance(turn_id, str) or not turn_id):
            raise TypeError("turn_id must be a non-empty str (or None for a fresh one)")
        if delivery_id is not None and (not isinstance(delivery_id, str) or not delivery_id):
            raise TypeError("delivery_id must be a non-empty str (or None for a fresh one)")
        if session_id is not None and not isinstance(session_id, str):
            raise TypeError("session_id must be a str")
        with self._lock:
            state = self.state
            if self._active is not None:
                raise TurnInProgressError(
                    "Drain the active turn before starting another: iterate its events to "
                    "the terminal one (or interrupt it and drain), then start the next turn."
                )
            if state.ended:
                raise ConversationEndedError(
                    "The conversation has ended (state.ended); start a new session instead."
                )
            if session_id is not None and session_id != state.id:
                raise TurnIdentityError(
                    "session_id does not match flow.state.id; restore that session's state "
                    "first, or omit session_id."
                )
            used = state.turns.get(turn_id) if turn_id is not None else None
            if used is not None and not (
                input_revision > used.input_revision and used.status != "running"
            ):
                raise TurnIdentityError(
                    "Turn identity has already been used; give every committed input (and "
                    "every correction) a new turn_id, or pass turn_id=None (a revision of a "
                    "settled input keeps its turn_id with a higher input_revision)."
                )
            if delivery_id is not None and delivery_id in state.replies:
                raise TurnIdentityError(
                    "delivery_id has already been used by another reply; give every reply a "
                    "new delivery_id, or pass delivery_id=None."
                )
            return state

    def begin(
        self,
        *,
        turn_id: TurnId | None = None,
        input_revision: int = 1,
        kind: ReplyKind = "answer",
        session_id: SessionId | None = None,
        delivery_id: DeliveryId | None = None,
    ) -> ActiveTurn:
        """Create a running turn and a generating reply and make them active.

        ``delivery_id`` is the reply's identity when the caller gave it out already
        (:meth:`TurnRunner.astream_turn`: a fresh one otherwise).

        A ``turn_id`` is used once, except by a revision of its input: the same
        ``turn_id`` with a higher ``input_revision``, once the earlier one settled (a
        voice turn the user went on with after its reply began).
        Its record then carries the new revision; the earlier revision's replies keep
        theirs.

        Raises:
            TurnInProgressError: another tracked turn is active.
            ConversationEndedError: ``state.ended`` is true.
            TurnIdentityError: ``turn_id`` or ``delivery_id`` was used before, or
                ``session_id`` is foreign.
            TypeError, ValueError: a malformed argument (named in the message).
        """
        with self._lock:
            state = self.check_can_begin(
                turn_id=turn_id, input_revision=input_revision, kind=kind,
                session_id=session_id, delivery_id=delivery_id,
            )
            tid = turn_id if turn_id is not None else new_turn_id()
            turn = TurnRecord(session_id=state.id, turn_id=tid, input_revision=input_revision)
            reply = ReplyRecord(
                session_id=state.id, turn_id=tid, input_revision=input_revision, kind=kind,
                delivery_id=delivery_id if delivery_id is not None else new_delivery_id(),
            )
            state.turns[tid] = turn
            state.replies[reply.delivery_id] = reply
            active = ActiveTurn(turn=turn, reply=reply, started_at=self.clock.now())
            self._active = active
            return active

    def issue(self, active: ActiveTurn, type_: ReplyEventType, **fields: Any) -> ReplyEvent:
        """Issue the next event of ``active``'s reply (``seq`` = last issued + 1)."""
        with self._lock:
            return self._issue(active, type_, fields)

    def _issue(
        self, active: ActiveTurn, type_: ReplyEventType, fields: dict[str, Any]
    ) -> ReplyEvent:
        return self._issue_reply(active.reply, active.started_at, type_, fields)

    def _issue_reply(
        self, reply: ReplyRecord, started_at: float, type_: ReplyEventType, fields: dict[str, Any]
    ) -> ReplyEvent:
        reply.last_event_seq += 1
        elapsed = max(0.0, (self.clock.now() - started_at) * 1000.0)
        return ReplyEvent(
            type=type_,
            session_id=reply.session_id,
            turn_id=reply.turn_id,
            input_revision=reply.input_revision,
            delivery_id=reply.delivery_id,
            kind=reply.kind,
            seq=reply.last_event_seq,
            elapsed_ms=elapsed,
            job_id=reply.job_id,
            job_revision=reply.job_revision,
            job_attempt=reply.job_attempt,
            **fields,
        )

    def text(self, active: ActiveTurn, chunk: str, *, call_id: str | None = None) -> ReplyEvent:
        """Record one public text delta and issue its ``text`` event."""
        with self._lock:
            active.reply.segments.append(chunk)
            active.segments += 1
            return self._issue(
                active, "text", {"segment_id": active.segments, "text": chunk, "call_id": call_id}
            )

    def set_route(self, active: ActiveTurn, route: str) -> ReplyEvent:
        """Record the selected route and issue ``route_selected``."""
        with self._lock:
            active.turn.route = route
            active.routes.append(route)
            return self._issue(active, "route_selected", {"route": route})

    def finish(
        self, active: ActiveTurn, *, text: str | None = None, error: BaseException | None = None
    ) -> ReplyEvent:
        """Settle ``active``'s generation and issue its terminal event.

        ``interrupted`` when the reply was interrupted while generating; else ``failed``
        when ``error`` is given; else ``completed`` carrying the full text.
        """
        with self._lock:
            turn, reply = active.turn, active.reply
            if reply.status == "interrupted":
                return self._issue(active, "interrupted", {})
            if error is not None:
                reply.status = "failed"
                turn.status = "failed"
                return self._issue(active, "failed", {})
            reply.text = text if text is not None else "".join(reply.segments)
            reply.status = "completed"
            turn.status = "completed"
            return self._issue(active, "completed", {"text": reply.text})

    def end(self, active: ActiveTurn) -> None:
        """Release the active slot (always, in the runner's ``finally``)."""
        with self._lock:
            if self._active is active:
                self._active = None
                if active.turn.status == "running":  # ended without a terminal event
                    active.turn.status = "interrupted"
                if active.reply.status == "generating":
                    active.reply.status = "interrupted"
                    active.reply.interrupted = True

    def record_reply(self, reply: ReplyRecord) -> bool:
        """Add a finished reply made outside a tracked turn (``ReplyQueue.prepare``)."""
        with self._lock:
            state = self.state
            if reply.delivery_id in state.replies:
                return _reject("record_reply", "delivery_id already used")
            state.replies[reply.delivery_id] = reply
            return True

    def issue_for(
        self, reply: ReplyRecord, type_: ReplyEventType, *, started_at: float, **fields: Any
    ) -> ReplyEvent:
        """Issue the next event of a reply that is not a tracked turn's (``prepare``)."""
        with self._lock:
            return self._issue_reply(reply, started_at, type_, fields)

    # -- the transport fence -------------------------------------------------------------

    def accept_event(self, event: ReplyEvent) -> bool:
        """Claim one issued event immediately before it is handed to the transport.

        Rejects an unknown delivery, a foreign (session, turn, revision), a ``seq`` not
        in ``(last_accepted_seq, last_event_seq]`` (duplicates, reordering, never issued),
        a ``failed`` event unless the reply failed, anything but ``interrupted`` once the
        reply is interrupted, and anything but ``failed`` once it failed. On acceptance
        ``last_accepted_seq`` advances (gaps allowed). Not a validator for untrusted
        client receipts.
        """
        if not isinstance(event, ReplyEvent):
            raise TypeError(f"event must be a ReplyEvent, got {type(event).__name__}")
        ids = {"delivery_id": event.delivery_id, "seq": event.seq, "type": event.type}
        with self._lock:
            state = self.state
            reply = state.replies.get(event.delivery_id)
            if reply is None:
                return _reject("accept_event", "unknown delivery", **ids)
            if event.session_id != state.id or reply.session_id != state.id:
                return _reject("accept_event", "foreign session", **ids)
            if (event.turn_id, event.input_revision) != (reply.turn_id, reply.input_revision):
                return _reject("accept_event", "turn/revision mismatch", **ids)
            if not reply.last_accepted_seq < event.seq <= reply.last_event_seq:
                return _reject("accept_event", "seq duplicate, reordered or never issued", **ids)
            if event.type == "failed":
                if reply.status != "failed":
                    return _reject("accept_event", "failed event, reply did not fail", **ids)
            elif reply.interrupted and event.type != "interrupted":
                return _reject("accept_event", "reply interrupted", **ids)
            elif reply.status == "failed":
                return _reject("accept_event", "reply failed", **ids)
            reply.last_accepted_seq = event.seq
            return True

    def interrupt(
        self,
        *,
        session_id: SessionId,
        turn_id: TurnId,
        input_revision: int,
        delivery_id: DeliveryId,
    ) -> bool:
        """Interrupt exactly one reply; idempotent; safe from any thread.

        Returns False for a bad ``input_revision`` (not an exact int ≥ 1), an unknown
        delivery, an identity that does not match the reply, or a foreign session.
        While the reply is generating it becomes ``interrupted`` (reply and turn), the
        in-flight generation is aborted and ``on_interrupt`` runs; after generation the
        status stays and only the fence is set, so no further event is accepted.
        """
        ids = {"delivery_id": delivery_id, "turn_id": turn_id}
        if type(input_revision) is not int or input_revision < 1:
            return _reject("interrupt", "input_revision must be an int >= 1", **ids)
        cancel: Callable[[], None] | None = None
        notify = False
        with self._lock:
            state = self.state
            reply = state.replies.get(delivery_id) if isinstance(delivery_id, str) else None
            if reply is None:
                return _reject("interrupt", "unknown delivery", **ids)
            if (reply.session_id, reply.turn_id, reply.input_revision) != (
                session_id,
                turn_id,
                input_revision,
            ):
                return _reject("interrupt", "identity does not match the reply", **ids)
            if session_id != state.id:
                return _reject("interrupt", "foreign session", **ids)
            if reply.interrupted:
                return True
            reply.interrupted = True
            if reply.status == "generating":
                reply.status = "interrupted"
                turn = state.turns.get(reply.turn_id)
                if turn is not None and turn.status == "running":
                    turn.status = "interrupted"
                active = self._active
                if active is not None and active.reply is reply:
                    cancel, notify = active.cancel, True
        if cancel is not None:
            cancel()
        if notify and self._on_interrupt is not None:
            self._on_interrupt()
        return True

    def is_fenced(self, delivery_id: DeliveryId) -> bool:
        """True when the reply is interrupted (or unknown): its output must not leave."""
        with self._lock:
            reply = self.state.replies.get(delivery_id)
            return reply is None or reply.interrupted

    # -- jobs, snapshots -------------------------------------------------------------

    def associate_job(self, job: JobRecord) -> bool:
        """Link an admitted job to the active reply (never admits or cancels work).

        Succeeds only if the job's (session, origin_turn_id) is the active reply's, the
        reply is not interrupted, and it has no job yet.
        """
        if not isinstance(job, JobRecord):
            raise TypeError(f"job must be a JobRecord, got {type(job).__name__}")
        ids = {"job_id": job.job_id}
        with self._lock:
            active = self._active
            if active is None:
                return _reject("associate_job", "no active reply", **ids)
            reply = active.reply
            if (job.session_id, job.origin_turn_id) != (reply.session_id, reply.turn_id):
                return _reject("associate_job", "job belongs to another turn", **ids)
            if reply.interrupted:
                return _reject("associate_job", "reply interrupted", **ids)
            if reply.job_id is not None:
                return _reject("associate_job", "reply already has a job", **ids)
            reply.job_id, reply.job_revision, reply.job_attempt = (
                job.job_id,
                job.revision,
                job.attempt,
            )
            active.turn.job_ids.append(job.job_id)
            return True

    def snapshot(self) -> dict[str, Any]:
        """JSON-compatible records of every turn and reply (no locks, no live work)."""
        with self._lock:
            state = self.state
            return {
                "session_id": state.id,
                "turns": [t.model_dump(mode="json") for t in state.turns.values()],
                "replies": [r.model_dump(mode="json") for r in state.replies.values()],
            }

    def restore(self, snapshot: Mapping[str, Any]) -> None:
        """Replace the turn and reply records with a :meth:`snapshot`'s.

        Nothing restarts and nothing is replayed: records that were running or
        generating become ``interrupted``, and replies with unsent events are fenced.

        Raises:
            TurnInProgressError: a tracked turn is active.
            TurnIdentityError: the snapshot belongs to another session.
            ValueError: the snapshot is malformed.
        """
        if not isinstance(snapshot, Mapping):
            raise TypeError("snapshot must be a mapping returned by snapshot()")
        turns = [TurnRecord.model_validate(t) for t in snapshot.get("turns", [])]
        replies = [ReplyRecord.model_validate(r) for r in snapshot.get("replies", [])]
        with self._lock:
            if self._active is not None:
                raise TurnInProgressError("Drain the active turn before restoring a snapshot.")
            state = self.state
            foreign = (
                snapshot.get("session_id") != state.id
                or any(t.session_id != state.id for t in turns)
                or any(r.session_id != state.id for r in replies)
            )
            if foreign:
                raise TurnIdentityError(
                    "snapshot belongs to another session; set flow.state.id (or restore the "
                    "whole state) first."
                )
            state.turns = RecordDict((t.turn_id, t) for t in turns)
            state.replies = RecordDict((r.delivery_id, r) for r in replies)
            self._reconcile(state)

    def __repr__(self) -> str:
        active = self._active
        return (
            f"{type(self).__name__}(active_turn={active.turn.turn_id if active else None!r}, "
            f"active_delivery={active.reply.delivery_id if active else None!r})"
        )
