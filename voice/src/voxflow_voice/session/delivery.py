"""Background announcements: completed jobs, spoken whenever the floor is free.

:class:`AnnouncementDelivery` is a voice session's *deliver* task. Completed jobs are
offered to the :class:`~voxflow.replies.ReplyQueue` (:meth:`~AnnouncementDelivery.offer_completed`,
idempotent: the queue coalesces a job version it already holds). Whenever the floor
may have changed (:attr:`voxflow_voice.session.floor.FloorReporter.changed`), the task checks the
session's local view of the floor (the user holds it, a reply is being spoken, or the
client is gone) and otherwise claims the next delivery, builds its text with an
:data:`Announcer` and hands the ready reply events to the session's answering path
(:class:`AnnouncementSpeaker`: :meth:`voxflow_voice.session.answering.Answering.announce`),
the same generate → drain → finish → settle path foreground answers use.

Each delivery is reported once, through the call's ``emit``, when the task first sees it
pending (:class:`~voxflow_voice.events.AnnouncementQueued`): after a job update offered
it, or at the next wake for one enqueued by other code. With its ``reply_started`` and
``audio_started`` that shows how long an announcement waited for the floor; its
``ready_at`` is when :meth:`AnnouncementDelivery.jobs_updated` first saw its jobs
completed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Protocol

from voxflow.ids import DeliveryId, TurnId
from voxflow.jobs import JobRecord
from voxflow.replies import DeliveryRecord
from voxflow.turns import ReplyEvent

from ..call import CallContext
from ..events import AnnouncementQueued
from .floor import FloorReporter
from .voice_settings import VoiceSettings

__all__ = ["AnnouncementDelivery", "AnnouncementSpeaker", "Announcer", "default_announcer"]

logger = logging.getLogger(__name__)

Announcer = Callable[[Sequence[JobRecord]], str]
"""Builds an announcement's text from the jobs it reports."""

class AnnouncementSpeaker(Protocol):
    """The session part that speaks a claimed announcement: its answering path."""

    async def announce(
        self, turn_id: TurnId, delivery_id: DeliveryId, events: Sequence[ReplyEvent]
    ) -> None:
        """Speak the announcement's ready reply events and settle it."""
        ...


def default_announcer(jobs: Sequence[JobRecord]) -> str:
    """Speak each job's ``answer``/``summary``/``result`` field, whichever it has."""
    parts: list[str] = []
    for job in jobs:
        for name in ("answer", "summary", "result"):
            value = getattr(job, name, None)
            if isinstance(value, str) and value.strip():
                parts.append(value.strip())
                break
    return " ".join(parts)


class AnnouncementDelivery:
    """Claims announcements from the ReplyQueue when the floor is free and speaks them.

    Args:
        call: the call: its ReplyQueue holds the announcements (``None``: nothing to
            deliver), its state lock serialises queue operations, its ``speaking`` lock
            is held while any reply is spoken, its flow state holds the jobs and delivery
            records (read under the lock, or between awaits), nothing is claimed once
            the client is ``gone``, and nothing at all unless its settings'
            ``announcements`` are on.
        floor: the session's client-floor state; its ``changed`` event wakes this task.
        speaker: speaks one claimed announcement (the session's answering path).
        announcer: builds announcement text from the jobs (the application's choice).
    """

    def __init__(
        self,
        call: CallContext[VoiceSettings],
        floor: FloorReporter,
        speaker: AnnouncementSpeaker,
        *,
        announcer: Announcer = default_announcer,
    ) -> None:
        self._call = call
        self._replies = call.replies
        self._lock = call.lock
        self._floor = floor
        self._speaking = call.speaking
        self._speaker = speaker
        self._announcer = announcer
        self._enabled = call.settings.announcements
        self._reported: set[DeliveryId] = set()
        self._ready: dict[str, float] = {}  # job id → when it was first seen completed

    def wake(self) -> None:
        """Look at the queue again (e.g. after a job result was enqueued)."""
        self._floor.changed.set()

    async def jobs_updated(self) -> None:
        """The JobRunner reported an update: offer the completed jobs (:meth:`offer_completed`).

        A job first seen completed here was ready now (the runner commits a result the
        moment its job returns): its announcement's ``ready_at``.
        """
        now = self._call.clock.now()
        for job in getattr(self._call.state, "jobs", {}).values():
            if job.status == "completed":
                self._ready.setdefault(str(job.job_id), now)
        await self.offer_completed()

    async def offer_completed(self) -> None:
        """Queue every completed job for announcement, then wake the task.

        Enqueueing is idempotent (the ReplyQueue coalesces a job version it already
        holds), so every job snapshot can simply offer every completed job.
        """
        if self._replies is None:
            return
        async with self._lock:
            for job in list(getattr(self._call.state, "jobs", {}).values()):
                if job.status == "completed":
                    self._replies.enqueue(job)
            self._note_queued()
        self.wake()

    def _note_queued(self) -> None:
        """Report each pending delivery not reported yet (once per delivery)."""
        for record in list(getattr(self._call.state, "deliveries", {}).values()):
            if record.status == "pending" and record.delivery_id not in self._reported:
                self._reported.add(record.delivery_id)
                self._report(record)

    def _report(self, record: DeliveryRecord) -> None:
        call = self._call
        jobs = [str(c.job_id) for c in record.covered_updates]
        logger.info("announcement queued", extra={
            "session_id": str(call.session_id), "delivery_id": str(record.delivery_id),
            "job_ids": ",".join(jobs)})
        ready = [self._ready.get(job) for job in jobs]
        call.emit(AnnouncementQueued(
            session_id=call.session_id, at=call.clock.now(), delivery_id=record.delivery_id,
            turn_id=record.turn_id, job_ids=tuple(c.job_id for c in record.covered_updates),
            ready_at=max(r for r in ready if r is not None) if ready and None not in ready
            else None,
        ))

    async def run(self) -> None:
        """Deliver announcements whenever the floor may be free (until cancelled)."""
        if self._replies is None or not self._enabled:
            return
        replies = self._replies
        changed = self._floor.changed
        await self.offer_completed()  # jobs that completed before this session started
        while True:
            await changed.wait()
            changed.clear()
            self._note_queued()  # one enqueued by other code, then woken
            # The local view is always current; the ReplyQueue's may lag a report behind.
            if self._floor.held or self._speaking.locked() or self._call.gone:
                continue
            async with self._speaking:
                async with self._lock:
                    delivery = replies.claim()
                    if delivery is None:
                        continue
                    try:
                        events = replies.prepare(delivery.delivery_id, self._announcer)
                    except Exception:
                        logger.exception("announcement text failed", extra={
                            "delivery_id": delivery.delivery_id})
                        continue
                if not events:
                    continue
                await self._speaker.announce(delivery.turn_id, delivery.delivery_id, events)
            changed.set()  # look again: another may be pending

    def __repr__(self) -> str:
        return (
            f"AnnouncementDelivery(enabled={self._enabled and self._replies is not None}, "
            f"speaking={self._speaking.locked()})"
        )
