"""ReplyQueue: background announcements and the speaking floor.

Completed jobs are *enqueued* as pending deliveries; when the floor is free the delivery
task *claims* one, *prepares* its reply, re-checks ``accepts_output`` and
``accept_event`` before every handoff, and *settles* it once the client reported the
whole message played (or on interruption).

Lock model: hold ``JobRunner.state_lock`` around every queue operation, job commit and
foreground turn, so a job result cannot change between a check and a handoff; never
across an ``await`` of the transport. Each method also takes the queue's own
``threading.RLock``, so two claims never both get the floor even if a caller forgets.
The pattern, end to end::

    async def try_delivery() -> None:
        async with jobs.state_lock:
            delivery = replies.claim()
            if delivery is None:
                return
            events = replies.prepare(delivery.delivery_id, build_text)
        for event in events:
            async with jobs.state_lock:
                if not replies.accepts_output(delivery.delivery_id):
                    replies.settle(delivery.delivery_id, "skipped")
                    return
                if not turns.accept_event(event):
                    continue
            await send_public_event(event)
        # Settle "completed" only after the client reported the whole message played.

Every rejection returns the documented ``None``/``False``/``[]`` and logs its reason at
DEBUG on ``voxflow.replies``. Whether a delivery may still speak is
:mod:`voxflow.replies.eligibility`; its status transitions and the floor's lifecycle
(close, reopen, snapshot, restore, takeover) are :mod:`voxflow.replies.floor`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any, Literal

from voxflow.errors import ClientActivityError
from voxflow.ids import DeliveryId
from voxflow.jobs.records import JobRecord, JobState, job_copy
from voxflow.replies import floor as floors
from voxflow.replies.eligibility import eligible, is_covered, is_current, jobs_of
from voxflow.replies.records import (
    MAX_CLIENT_SEQ_STEP,
    ClientActivity,
    CoveredUpdate,
    DeliveryIndex,
    DeliveryRecord,
    DeliveryStatus,
    ReplyQueueState,
    ReplyQueueStatistics,
    SettleStatus,
)
from voxflow.turns.ledger import TurnLedger
from voxflow.turns.records import ReplyEvent, ReplyRecord

__all__ = ["ReplyQueue", "ReplyQueueStatistics"]

logger = logging.getLogger("voxflow.replies")

_SETTLE = floors.TERMINAL


def _check_id(delivery_id: object) -> None:
    if not isinstance(delivery_id, str):
        raise TypeError(f"delivery_id must be a str, got {type(delivery_id).__name__}")


def _reject(action: str, reason: str, **fields: object) -> Literal[False]:
    if logger.isEnabledFor(logging.DEBUG):
        logger.debug("%s rejected: %s", action, reason, extra={"voxflow": fields})
    return False


class ReplyQueue:
    """Queue completed-job announcements and lease the speaking floor to one at a time.

    Args:
        turns: the session's TurnLedger (a ``TurnRunner`` is one); its state must be a
            ``ReplyQueueState`` *and* a ``JobState``.
        is_relevant: optional side-effect-free policy; a job copy for which it returns
            False is never announced (e.g. the user cancelled it).

    Raises:
        TypeError: the state is not both a ReplyQueueState and a JobState.
    """

    def __init__(
        self, turns: TurnLedger, is_relevant: Callable[[JobRecord], bool] | None = None
    ) -> None:
        if not isinstance(turns, TurnLedger):
            raise TypeError(f"turns must be a TurnRunner/TurnLedger, got {type(turns).__name__}")
        if is_relevant is not None and not callable(is_relevant):
            raise TypeError("is_relevant must be callable or None")
        self._turns = turns
        self._is_relevant = is_relevant
        self._lock = threading.RLock()
        self._idx: DeliveryIndex | None = None
        self._state()

    # -- helpers ------------------------------------------------------------------

    def _state(self) -> ReplyQueueState:
        state = self._turns.state
        if not isinstance(state, ReplyQueueState) or not isinstance(state, JobState):
            raise TypeError(
                "ReplyQueue needs a state that is both a ReplyQueueState and a JobState, e.g. "
                "class WorkChatState(ReplyQueueState, JobState[MyJob])"
            )
        return state

    def _index(self, state: ReplyQueueState) -> DeliveryIndex:
        idx = self._idx
        if (
            idx is None
            or idx.deliveries is not state.deliveries
            or idx.count != len(state.deliveries)
        ):
            idx = self._idx = DeliveryIndex.build(state.deliveries)
        return idx

    def _pending(self, state: ReplyQueueState) -> list[DeliveryRecord]:
        """Pending records in FIFO order (the index drops anything no longer pending)."""
        idx = self._index(state)
        out: list[DeliveryRecord] = []
        for delivery_id in list(idx.pending):
            rec = state.deliveries.get(delivery_id)
            if rec is None or rec.status != "pending":
                idx.pending.pop(delivery_id, None)
            else:
                out.append(rec)
        return out

    def _is_current(self, state: ReplyQueueState, cov: CoveredUpdate) -> bool:
        return is_current(state, cov, self._is_relevant)

    def _eligible(self, state: ReplyQueueState, rec: DeliveryRecord) -> bool:
        return eligible(state, rec, self._is_relevant)

    def _set_status(
        self, state: ReplyQueueState, rec: DeliveryRecord, status: DeliveryStatus, reason: str
    ) -> None:
        floors.set_status(state, self._idx, rec, status, reason)

    def _fence(self, state: ReplyQueueState, rec: DeliveryRecord) -> None:
        reply = state.replies.get(rec.delivery_id)
        if reply is not None:
            self._turns.interrupt(
                session_id=reply.session_id,
                turn_id=reply.turn_id,
                input_revision=reply.input_revision,
                delivery_id=reply.delivery_id,
            )

    def _skip_ineligible_pending(self, state: ReplyQueueState, reason: str) -> None:
        for rec in self._pending(state):
            if not self._eligible(state, rec):
                self._set_status(state, rec, "skipped", reason)

    # -- enqueue / claim / prepare ----------------------------------------------------

    def enqueue(self, job: JobRecord) -> DeliveryId | None:
        """Queue an announcement of ``job``'s current completed version.

        Returns:
            The delivery id (an existing one when a delivery already holds this exact
            version: duplicates coalesce, even onto a skipped or failed delivery), or
            None when the session ended or closed, the job is foreign, not completed,
            not current, already covered, or its origin turn is missing or foreign.
        """
        if not isinstance(job, JobRecord):
            raise TypeError(f"job must be a JobRecord, got {type(job).__name__}")
        ids = {"job_id": job.job_id}
        with self._lock:
            state = self._state()
            if state.ended or state.delivery_floor.closed:
                _reject("enqueue", "session ended or closed", **ids)
                return None
            if job.session_id != state.id:
                _reject("enqueue", "foreign session", **ids)
                return None
            cov = CoveredUpdate.from_job(job)
            if not self._is_current(state, cov):
                _reject("enqueue", "not a current completed version", **ids)
                return None
            turn = state.turns.get(job.origin_turn_id) if job.origin_turn_id else None
            if turn is None or turn.session_id != state.id:
                _reject("enqueue", "origin turn missing or foreign", **ids)
                return None
            if is_covered(state, cov):
                _reject("enqueue", "version already covered", **ids)
                return None
            idx = self._index(state)
            existing = idx.coverage.get(cov)
            if existing is not None:
                return existing
            rec = DeliveryRecord(
                session_id=state.id,
                turn_id=turn.turn_id,
                input_revision=turn.input_revision,
                covered_updates=[cov],
            )
            state.deliveries[rec.delivery_id] = rec
            idx.count += 1
            idx.pending[rec.delivery_id] = None
            idx.coverage[cov] = rec.delivery_id
            state.delivery_sequence += 1
            return rec.delivery_id

    def claim(self) -> DeliveryRecord | None:
        """Atomically lease the floor to the first eligible pending delivery.

        Ineligible pending deliveries are skipped first. Returns a deep copy of the now
        ``scheduled`` record, or None when the floor is closed, foreground, recording,
        playing, muted, already leased, or a turn is running.
        """
        with self._lock:
            state = self._state()
            self._skip_ineligible_pending(state, "No longer relevant or already covered.")
            floor = state.delivery_floor
            busy = floor.busy_reason()
            if busy is not None:
                _reject("claim", busy)
                return None
            if floor.held:
                _reject("claim", "another delivery holds the floor")
                return None
            if self._turns.running_turn_id() is not None:
                _reject("claim", "a turn is running")
                return None
            for rec in self._pending(state):
                self._set_status(state, rec, "scheduled", "")
                # A copy: coverages are frozen, so a new list makes it independent.
                return rec.model_copy(update={"covered_updates": list(rec.covered_updates)})
            return None

    def prepare(
        self, delivery_id: DeliveryId, build_text: Callable[[list[JobRecord]], str]
    ) -> list[ReplyEvent]:
        """Build the claimed delivery's public reply: ``started``, ``text``, ``completed``.

        ``build_text`` gets deep copies of the covered jobs' current records and must
        return non-empty text. Single use per delivery. No LLM, no history append.

        Returns:
            The three events (still to pass ``accept_event``), or [] when the reply
            exists already, the delivery is not the scheduled active one or is no longer
            eligible (it becomes ``skipped``), or the floor became busy (``interrupted``).

        Raises:
            ValueError: ``build_text`` returned no text (the delivery becomes ``failed``).
            Exception: whatever ``build_text`` raised (the delivery becomes ``failed``).
        """
        _check_id(delivery_id)
        if not callable(build_text):
            raise TypeError("build_text must be callable")
        ids = {"delivery_id": delivery_id}
        with self._lock:
            state = self._state()
            if delivery_id in state.replies:
                _reject("prepare", "reply already prepared", **ids)
                return []
            rec = state.deliveries.get(delivery_id)
            if rec is None:
                _reject("prepare", "unknown delivery", **ids)
                return []
            floor = state.delivery_floor
            if (
                rec.status != "scheduled"
                or floor.active_delivery_id != delivery_id
                or not self._eligible(state, rec)
            ):
                if rec.status == "scheduled":
                    self._set_status(state, rec, "skipped", "Invalidated before preparation.")
                _reject("prepare", "not the eligible scheduled delivery", **ids)
                return []
            busy = floor.busy_reason()
            if busy is not None:
                self._set_status(state, rec, "interrupted", "The speaking floor became busy.")
                _reject("prepare", busy, **ids)
                return []
            started_at = self._turns.clock.now()
            jobs = jobs_of(state)
            copies = [job_copy(jobs[c.job_id]) for c in rec.covered_updates]
            try:
                text = build_text(copies)
                if not isinstance(text, str) or not text.strip():
                    raise ValueError("build_text must return non-empty text")
            except Exception as exc:
                self._set_status(state, rec, "failed", f"build_text failed: {type(exc).__name__}")
                raise
            first = rec.covered_updates[0]
            reply = ReplyRecord(
                session_id=rec.session_id,
                turn_id=rec.turn_id,
                input_revision=rec.input_revision,
                delivery_id=rec.delivery_id,
                kind="progress",
                status="completed",
                segments=[text],
                text=text,
                job_id=first.job_id,
                job_revision=first.revision,
                job_attempt=first.attempt,
            )
            self._turns.record_reply(reply)
            issue = self._turns.issue_for
            return [
                issue(reply, "started", started_at=started_at),
                issue(reply, "text", started_at=started_at, segment_id=1, text=text),
                issue(reply, "completed", started_at=started_at, text=text),
            ]

    def accepts_output(self, delivery_id: DeliveryId) -> bool:
        """Re-check, immediately before a handoff, that the delivery may still speak.

        True only for the scheduled active delivery whose reply exists and is neither
        interrupted nor failed, on an open floor that is not foreground, recording or
        muted, and that is still eligible. Playback is not checked: the delivery's own
        playback must not stop it.
        """
        _check_id(delivery_id)
        ids = {"delivery_id": delivery_id}
        with self._lock:
            state = self._state()
            rec = state.deliveries.get(delivery_id)
            reply = state.replies.get(delivery_id)
            if rec is None or reply is None:
                return _reject("accepts_output", "unknown delivery or reply", **ids)
            if reply.interrupted or reply.status == "failed":
                return _reject("accepts_output", "reply interrupted or failed", **ids)
            floor = state.delivery_floor
            if rec.status != "scheduled" or floor.active_delivery_id != delivery_id:
                return _reject("accepts_output", "not the active delivery", **ids)
            busy = floor.busy_reason(check_playback=False)
            if busy is not None:
                return _reject("accepts_output", busy, **ids)
            if not self._eligible(state, rec):
                return _reject("accepts_output", "no longer eligible", **ids)
            return True

    # -- settle / coverage / observations -------------------------------------------------

    def settle(self, delivery_id: DeliveryId, status: SettleStatus, reason: str = "") -> bool:
        """Release the floor held by the active delivery, once, with a terminal status.

        ``completed`` is downgraded to ``interrupted`` when the reply was interrupted,
        and to ``skipped`` when the delivery is no longer eligible or was never
        prepared; a completed delivery records its versions as covered. Any other
        status fences the reply's remaining events.

        Returns:
            False when the delivery is unknown, not scheduled or not the active one
            (e.g. a second settle).

        Raises:
            ValueError: ``status`` is not a settle status.
        """
        _check_id(delivery_id)
        if status not in _SETTLE:
            raise ValueError(f"status must be one of {sorted(_SETTLE)}, got {status!r}")
        if not isinstance(reason, str):
            raise TypeError("reason must be a str")
        ids = {"delivery_id": delivery_id, "status": status}
        with self._lock:
            state = self._state()
            rec = state.deliveries.get(delivery_id)
            if rec is None:
                return _reject("settle", "unknown delivery", **ids)
            if rec.status != "scheduled" or state.delivery_floor.active_delivery_id != delivery_id:
                return _reject("settle", f"delivery is {rec.status}, not active", **ids)
            final: SettleStatus = status
            if status == "completed":
                reply = state.replies.get(delivery_id)
                if reply is None:
                    final, reason = "skipped", reason or "Settled before it was prepared."
                elif reply.interrupted:
                    final = "interrupted"
                elif not self._eligible(state, rec):
                    final, reason = "skipped", reason or "No longer relevant or already covered."
            if final == "completed":
                for cov in rec.covered_updates:
                    state.covered_updates[cov.job_id] = cov
            else:
                self._fence(state, rec)
            self._set_status(state, rec, final, reason)
            return True

    def mark_covered(self, coverage: CoveredUpdate) -> bool:
        """Record that an explicit summary of this job version was actually delivered.

        Pending deliveries it covers become ``skipped``. False when the floor is closed
        or the version is not current. A later version of the job stays eligible.
        """
        if not isinstance(coverage, CoveredUpdate):
            raise TypeError(f"coverage must be a CoveredUpdate, got {type(coverage).__name__}")
        with self._lock:
            state = self._state()
            if state.delivery_floor.closed:
                return _reject("mark_covered", "floor closed", job_id=coverage.job_id)
            if not self._is_current(state, coverage):
                return _reject("mark_covered", "not current", job_id=coverage.job_id)
            state.covered_updates[coverage.job_id] = coverage
            state.delivery_sequence += 1
            for rec in self._pending(state):
                if any(is_covered(state, c) for c in rec.covered_updates):
                    self._set_status(
                        state, rec, "skipped", "Already covered by a requested summary."
                    )
            return True

    def observe_client(self, update: ClientActivity) -> bool:
        """Accept one client observation (recording, playback, mute) if it is valid.

        Rejected (False): a closed floor, a foreign session, ``seq <= client_seq``, a
        ``delivery_id`` that is not a reply of this session, and a stop (playback False)
        while the floor plays a different delivery: a stale stop never releases newer
        playback, and a null-id stop never releases identified playback.

        Raises:
            ClientActivityError: ``seq`` jumps more than :data:`MAX_CLIENT_SEQ_STEP` past
                ``client_seq`` (a broken or hostile client); nothing changed.
        """
        if not isinstance(update, ClientActivity):
            raise TypeError(f"update must be a ClientActivity, got {type(update).__name__}")
        ids = {"seq": update.seq, "delivery_id": update.delivery_id}
        with self._lock:
            state = self._state()
            floor = state.delivery_floor
            if floor.closed:
                return _reject("observe_client", "floor closed", **ids)
            if update.session_id != state.id:
                return _reject("observe_client", "foreign session", **ids)
            if update.seq <= floor.client_seq:
                return _reject("observe_client", "stale client seq", **ids)
            if update.seq - floor.client_seq > MAX_CLIENT_SEQ_STEP:
                raise ClientActivityError(
                    f"client seq {update.seq} jumps more than {MAX_CLIENT_SEQ_STEP} past the "
                    f"last accepted {floor.client_seq}; number observations consecutively",
                    seq=update.seq,
                    last_seq=floor.client_seq,
                )
            if update.delivery_id is not None:
                reply = state.replies.get(update.delivery_id)
                if reply is None or reply.session_id != state.id:
                    return _reject("observe_client", "unknown delivery", **ids)
            if (
                not update.playback
                and floor.playback
                and floor.playback_delivery_id != update.delivery_id
            ):
                return _reject("observe_client", "stop for other playback", **ids)
            floor.recording = update.recording
            floor.playback = update.playback
            floor.muted = update.muted
            floor.client_seq = update.seq
            floor.playback_delivery_id = (
                DeliveryId(update.delivery_id)
                if update.playback and update.delivery_id is not None
                else None
            )
            state.delivery_sequence += 1
            return True

    def set_foreground(self, busy: bool) -> None:
        """Hold (True) or release (False) the floor for foreground work.

        Keep it true through foreground generation and draining, including pending
        user requests; release it when that work has settled.
        """
        if not isinstance(busy, bool):
            raise TypeError(f"busy must be a bool, got {type(busy).__name__}")
        with self._lock:
            state = self._state()
            state.delivery_floor.foreground = busy
            state.delivery_sequence += 1

    def close(self) -> None:
        """Close the floor: the active delivery ends ``interrupted``, pending ones ``skipped``.

        Idempotent. Job results are untouched. Call it before cancelling and draining
        the application's delivery tasks.
        """
        with self._lock:
            floors.close(self._state(), self._idx, self._fence)

    def reopen(self) -> None:
        """Open a closed floor for the next client of the same conversation (a reconnect):
        a fresh floor, whose client reports from seq 1; settled deliveries are kept, and
        those :meth:`close` skipped unsaid are pending again (the new client hears them,
        if still eligible). Nothing happens once the conversation ended or while a
        delivery holds it."""
        with self._lock:
            state = self._state()
            floors.reopen(state, self._index(state))

    # -- snapshots ------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """The session, sequence, deliveries, coverage and floor as JSON-compatible data."""
        with self._lock:
            return floors.snapshot(self._state())

    def restore(self, snapshot: Mapping[str, Any]) -> None:
        """Load a :meth:`snapshot` without restarting or replaying any delivery.

        A delivery that was scheduled becomes ``interrupted`` (its lease died with the
        old process); pending ones stay pending. Client observations are not carried
        over (a new client reports its own, from seq 1); ``closed`` is.

        Raises:
            TurnIdentityError: the snapshot belongs to another session.
        """
        with self._lock:
            state = self._state()
            floors.restore(state, snapshot, self._fence)
            self._idx = None

    def take_over(self) -> list[DeliveryId]:
        """Release the floor a session's previous process held when it died (a session
        loaded from its store by the worker that resumes its call).

        The saved floor is that process's: its foreground turn (the reply its death cut,
        settled interrupted at what was heard by the resume) and its client's
        observations (playback, recording, mute, and a ``client_seq`` the new client's
        reports, from 1, would never pass) hold nothing any more. The floor becomes a
        fresh one (``closed`` is kept: :meth:`reopen` opens it); the delivery that held
        it ends ``interrupted`` (its lease died with the process) and is offered again:
        a new pending delivery of the same job versions, after the pending ones, said
        whole once (the user did not cut it; an announcement they barged into is not
        offered again, nor is one a :meth:`restore` cut). Pending deliveries stay
        pending and may now be claimed.

        Returns:
            The deliveries it interrupted (each queued again as a new delivery).
        """
        with self._lock:
            return floors.take_over(self._state(), self._idx, self._fence)

    def statistics(self) -> ReplyQueueStatistics:
        """Pending count, floor holder and why the floor is busy (if it is)."""
        with self._lock:
            state = self._state()
            floor = state.delivery_floor
            busy = floor.busy_reason()
            if busy is None and self._turns.running_turn_id() is not None:
                busy = "a turn is running"
            return ReplyQueueStatistics(
                pending=len(self._pending(state)),
                active_delivery_id=floor.active_delivery_id,
                busy_reason=busy,
                delivery_sequence=state.delivery_sequence,
                closed=floor.closed,
            )

    def __repr__(self) -> str:
        s = self.statistics()
        return f"ReplyQueue(pending={s.pending}, active={s.active_delivery_id!r}, busy={s.busy_reason!r})"  # noqa: E501
