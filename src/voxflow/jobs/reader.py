""":class:`InboxReader`: the call worker's side of the job inbox.

The worker that owns a session runs one reader for it. Woken by ``LISTEN/NOTIFY`` (one
listening connection per inbox, shared by every session it reads: :meth:`JobInbox.watch
<voxflow.jobs.inbox.JobInbox.watch>`) and on a timer, since the table, not the
notification, is the truth, it reads the
session's unacknowledged inbox rows and, in this order:

1. applies them under the session's state lock (:func:`~voxflow.jobs.inbox.apply_inbox`:
   duplicates, rows from a dead attempt and rows already in the state are refused);
2. saves the state, still under the lock (``save``, when a row was accepted; with a
   fenced store a worker that lost the session gets
   :class:`~voxflow.errors.FencedWriteError` here, and stops: nothing acknowledged, it
   announces nothing);
3. acknowledges the rows (:meth:`~voxflow.jobs.inbox.JobInbox.ack`);
4. tells the session (``on_update``): a completed job is announced through the reply
   queue, which never announces a version it already covered.

A reader that dies anywhere before 3 leaves the rows to the next owner, who applies
them to its restored state (one that dies after 3 but before 4 left a completed job in
the saved state: a started reader tells the session once, whatever it read, so it is
announced then): at-least-once delivery, idempotent application, so each
result is applied, and announced, once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from voxflow.errors import FencedWriteError
from voxflow.jobs.inbox import JobInbox, apply_inbox
from voxflow.jobs.records import JobState

__all__ = ["InboxReader"]

logger = logging.getLogger("voxflow.jobs")


class InboxReader:
    """Read one session's job inbox into its state.

    Args:
        inbox: the inbox (:attr:`voxflow.jobs.queue.PostgresJobQueue.inbox`).
        state: the session's state (a ``JobState``).
        lock: the session's state lock (``AssistantWiring.state_lock``).
        on_update: awaited after rows were applied and acknowledged (the session
            announces what completed).
        save: awaited under ``lock`` after applying, before acknowledging, when a row
            was accepted (persist the state; fenced when the session is leased). None:
            rows are acknowledged once applied.
        poll: seconds between two reads when no notification comes (a missed one).

    Raises:
        TypeError: ``state`` is not a JobState, or a callback is not callable.
    """

    def __init__(
        self,
        inbox: JobInbox,
        state: JobState[Any],
        *,
        lock: asyncio.Lock,
        on_update: Callable[[], Awaitable[Any]] | None = None,
        save: Callable[[], Awaitable[Any]] | None = None,
        poll: float = 5.0,
    ) -> None:
        if not isinstance(state, JobState):
            raise TypeError(f"state must be a JobState, got {type(state).__name__}")
        for name, fn in (("on_update", on_update), ("save", save)):
            if fn is not None and not callable(fn):
                raise TypeError(f"{name} must be an async callable or None")
        if isinstance(poll, bool) or not isinstance(poll, int | float) or poll <= 0:
            raise ValueError("poll must be a positive number of seconds")
        self.inbox = inbox
        self.state = state
        self.lock = lock
        self.on_update = on_update
        self.save = save
        self.poll = float(poll)
        self.applied = 0
        """How many rows this reader applied (accepted by the job rules)."""
        self._unsaved = False  # rows applied in memory whose save failed
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._closing = False  # set by aclose: the loop ends even if a cancel is lost

    async def read_once(self) -> int:
        """Apply, save, acknowledge and announce the pending rows once; returns how many
        were accepted.

        Raises:
            FencedWriteError: ``save`` found the session taken over (nothing acknowledged).
            PersistenceUnavailableError: the database is unreachable.
        """
        entries = await self.inbox.pending(self.state.id)
        if not entries:
            return 0
        async with self.lock:  # saves of a session are serialised with its turns
            results = apply_inbox(self.state, entries)
            # rows applied by a read whose save failed are refused now (already in the
            # state) but still unsaved: save them before acknowledging, and tell the
            # session (it was not told then)
            unsaved = self._unsaved
            if self.save is not None and (any(results) or unsaved):
                self._unsaved = True
                await self.save()
            self._unsaved = False
        await self.inbox.ack(self.state.id, [e.id for e in entries])
        accepted = sum(results)
        self.applied += accepted
        if (accepted or unsaved) and self.on_update is not None:
            await self.on_update()
        return accepted

    def start(self) -> None:
        """Read in the background: now, on every notification for this session and every
        ``poll`` seconds (idempotent; call on the session's event loop)."""
        if self._task is None:
            self._closing = False
            self._wake = self.inbox.watch(self.state.id)
            self._task = asyncio.create_task(self._run(self._wake), name="job inbox read")

    async def _run(self, wake: asyncio.Event) -> None:
        first = True
        while not self._closing:
            wake.clear()
            try:
                accepted = await self.read_once()
                if first and not accepted and self.on_update is not None:
                    # a restored session may hold a job its last owner applied (rows
                    # acknowledged) but never announced: offer it once
                    await self.on_update()
                first = False
            except Exception as exc:
                if isinstance(exc, FencedWriteError):
                    logger.warning("job inbox reader stopped: %s", exc)
                    return
                logger.warning("job inbox read failed (%s); retrying", exc)
            if self._closing:
                return
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for drops a cancellation
            # that comes beside the wake-up (the close would wait for this loop forever)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.poll):
                    await wake.wait()

    async def aclose(self) -> None:
        """Stop reading (idempotent)."""
        task, self._task = self._task, None
        self._closing = True
        if self._wake is not None:
            self.inbox.unwatch(self.state.id, self._wake)
            self._wake = None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def __repr__(self) -> str:
        return f"InboxReader(session={self.state.id!r}, applied={self.applied})"
