"""The speaking floor's lifecycle: status transitions, close and reopen, snapshots,
restore and takeover.

:func:`set_status` is the one place a delivery changes status: ``scheduled`` leases it
the floor, a terminal status (:data:`TERMINAL`) releases it, and every change bumps the
session's ``delivery_sequence``. The rest is what happens to the floor as a whole when
its client goes (:func:`close`), comes back (:func:`reopen`), or its process dies
(:func:`restore`, :func:`take_over`): a delivery that held the floor then ends
``interrupted``. After a takeover (a call resumed on another process) it is offered
again, once: nobody chose to cut it, and its user never heard it whole.

Functions over a :class:`~voxflow.replies.records.ReplyQueueState`, called by
:class:`~voxflow.replies.queue.ReplyQueue` under its lock (its methods document the
behaviour); ``idx`` is the queue's :class:`~voxflow.replies.records.DeliveryIndex` (None
before it was built), ``fence`` stops the remaining events of a delivery's reply.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, get_args

from voxflow.conversation._record_marks import RecordDict
from voxflow.errors import TurnIdentityError
from voxflow.ids import DeliveryId
from voxflow.jobs.records import utc_now
from voxflow.replies.records import (
    CoveredUpdate,
    DeliveryFloor,
    DeliveryIndex,
    DeliveryRecord,
    DeliveryStatus,
    ReplyQueueState,
    SettleStatus,
)

__all__ = [
    "CLOSED",
    "TAKEN_OVER",
    "TERMINAL",
    "Fence",
    "close",
    "interrupt_scheduled",
    "reopen",
    "restore",
    "set_status",
    "snapshot",
    "take_over",
]

TERMINAL: frozenset[str] = frozenset(get_args(SettleStatus))
"""The settle statuses: a delivery in one of them has released the floor for good."""
CLOSED = "Session closed."  # the reason close() gives the deliveries it skips
TAKEN_OVER = "Its call's process died before it was heard whole; offered again."
"""The reason of a delivery a takeover cut (and queued again as a new delivery)."""

Fence = Callable[[ReplyQueueState, DeliveryRecord], None]
"""Stops the remaining events of a delivery's reply (the turn ledger's interrupt)."""


def set_status(
    state: ReplyQueueState,
    idx: DeliveryIndex | None,
    rec: DeliveryRecord,
    status: DeliveryStatus,
    reason: str,
) -> None:
    """Move ``rec`` to ``status``: taking the floor (scheduled) or releasing it (terminal)."""
    if idx is not None:
        idx.pending.pop(rec.delivery_id, None)
    now = utc_now()
    rec.status = status
    rec.reason = reason
    rec.updated_at = now
    if status == "scheduled":
        rec.scheduled_at = now
        state.delivery_floor.active_delivery_id = rec.delivery_id
    elif status in TERMINAL:
        rec.settled_at = now
        if state.delivery_floor.active_delivery_id == rec.delivery_id:
            state.delivery_floor.active_delivery_id = None
    state.delivery_sequence += 1


def interrupt_scheduled(
    state: ReplyQueueState, idx: DeliveryIndex | None, fence: Fence, reason: str
) -> list[DeliveryId]:
    """End the delivery holding the floor ``interrupted`` (fenced); its id, if any."""
    cut: list[DeliveryId] = []
    for rec in state.deliveries.values():
        if rec.status == "scheduled":
            fence(state, rec)
            set_status(state, idx, rec, "interrupted", reason)
            cut.append(rec.delivery_id)
    return cut


def close(state: ReplyQueueState, idx: DeliveryIndex | None, fence: Fence) -> None:
    """Close the floor: the active delivery ``interrupted``, the pending ones ``skipped``."""
    state.delivery_floor.closed = True
    for rec in state.deliveries.values():
        if rec.status == "scheduled":
            fence(state, rec)
            set_status(state, idx, rec, "interrupted", CLOSED)
        elif rec.status == "pending":
            set_status(state, idx, rec, "skipped", CLOSED)


def reopen(state: ReplyQueueState, idx: DeliveryIndex) -> None:
    """A fresh floor for the next client; what :func:`close` skipped is pending again."""
    floor = state.delivery_floor
    if floor.closed and not state.ended and not floor.held:
        state.delivery_floor = DeliveryFloor()
        for rec in state.deliveries.values():
            if rec.status == "skipped" and rec.reason == CLOSED:
                rec.status, rec.reason, rec.settled_at = "pending", "", None
                rec.updated_at = utc_now()
                idx.pending[rec.delivery_id] = None
        state.delivery_sequence += 1


def snapshot(state: ReplyQueueState) -> dict[str, Any]:
    """The session, sequence, deliveries, coverage and floor as JSON-compatible data."""
    return {
        "session_id": state.id,
        "delivery_sequence": state.delivery_sequence,
        "deliveries": [d.model_dump(mode="json") for d in state.deliveries.values()],
        "covered_updates": [c.model_dump(mode="json") for c in state.covered_updates.values()],
        "floor": state.delivery_floor.model_dump(mode="json"),
    }


def restore(state: ReplyQueueState, data: Mapping[str, Any], fence: Fence) -> None:
    """Load a :func:`snapshot` (validated before anything changes); the delivery that
    was scheduled ends ``interrupted``.

    Raises:
        TurnIdentityError: the snapshot belongs to another session.
    """
    if not isinstance(data, Mapping):
        raise TypeError("snapshot must be a mapping returned by snapshot()")
    deliveries = [DeliveryRecord.model_validate(d) for d in data.get("deliveries", [])]
    covered = [CoveredUpdate.model_validate(c) for c in data.get("covered_updates", [])]
    floor = DeliveryFloor.model_validate(data.get("floor", {}))
    if data.get("session_id") != state.id or any(d.session_id != state.id for d in deliveries):
        raise TurnIdentityError(
            "snapshot belongs to another session; restore the turn state first."
        )
    state.deliveries = RecordDict((d.delivery_id, d) for d in deliveries)
    state.covered_updates = RecordDict((c.job_id, c) for c in covered)
    state.delivery_floor = DeliveryFloor(closed=floor.closed)
    state.delivery_sequence = max(state.delivery_sequence, int(data.get("delivery_sequence", 0)))
    interrupt_scheduled(state, None, fence, "Restored from a snapshot; not replayed.")


def take_over(state: ReplyQueueState, idx: DeliveryIndex | None, fence: Fence) -> list[DeliveryId]:
    """A fresh floor (``closed`` kept); the delivery that held it ends ``interrupted``
    and a new pending delivery of the same versions is queued in its place: the dead
    process cut it, not its user. One pending copy per cut (a second death cuts the
    copy, which is queued again in turn); whichever copy is heard whole covers the
    versions, and the others are then skipped: said whole once."""
    state.delivery_floor = DeliveryFloor(closed=state.delivery_floor.closed)
    state.delivery_sequence += 1
    cut = interrupt_scheduled(state, idx, fence, TAKEN_OVER)
    for delivery_id in cut:
        rec = state.deliveries[delivery_id]
        again = DeliveryRecord(session_id=rec.session_id, turn_id=rec.turn_id,
                               input_revision=rec.input_revision,
                               covered_updates=list(rec.covered_updates))
        state.deliveries[again.delivery_id] = again
        if idx is not None:
            idx.count += 1
            idx.pending[again.delivery_id] = None
        state.delivery_sequence += 1
    return cut
