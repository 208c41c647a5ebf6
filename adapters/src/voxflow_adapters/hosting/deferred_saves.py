"""A call whose session store is unreachable keeps talking, and saves once it is back.

:class:`DeferredSaves` is registered on the call's flow
(:func:`~voxflow.flow.saving.set_save_deferral`): a save of a turn, of what was heard,
of the call's end that fails with :class:`~voxflow.errors.PersistenceUnavailableError`
(a restarted database, a network cut longer than the store's own retry on a fresh
connection) no longer fails the turn: the reply is spoken, and :meth:`DeferredSaves.run`
saves the state again (``flow.asave_state``) every ``retry`` seconds (doubling up to
``max_retry``) until the store takes it. The failed write left no incremental marks, so
that save writes everything the outage held back, checked against the revision the call
last stored. Meanwhile the lease is renewed as soon as the store answers, reclaimed if it
ran out while nobody took the session (:mod:`~voxflow_adapters.hosting.ownership`).

Not deferred (the error is raised as before): ``job_update``, whose caller acknowledges
the job inbox's rows once it returns, so a deferred one could lose a job's update; a
conflict or a refused (fenced) write, which no retry can fix.

:func:`saves_deferred` is the deferral's life for one call (registered, its retries
running, what is still pending saved at the end), the same for a hosted call
(:mod:`~voxflow_adapters.hosting.calls`) and a simulated one
(:func:`~voxflow_adapters.testkit.scenario.run_call` given a flow).

What the outage cost is kept: :attr:`DeferredSaves.deferred` saves taken over, and
:attr:`DeferredSaves.outages`, how long each outage held the state unsaved (from the
first deferred save to the save that went through).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from voxflow.errors import FencedWriteError, PersistenceError, PersistenceUnavailableError
from voxflow.flow.saving import set_save_deferral
from voxflow.tasks import cancel_and_wait

__all__ = ["DEFERRED_SAVES_AT_CLOSE", "STRICT_SAVES", "DeferredSaves", "saves_deferred"]

DEFERRED_SAVES_AT_CLOSE = 6.0
"""s: how long a call that ends while its store is unreachable waits for it, to save
what the outage held back (then it is logged as not saved)."""

logger = logging.getLogger(__name__)

STRICT_SAVES = frozenset({"job_update"})
"""Saves never deferred: their caller acts on their being stored."""


class DeferredSaves:
    """The saves of one call's flow while its store is unreachable (see the module).

    Args:
        flow: the call's persisted flow (register :meth:`take` on it with
            ``set_save_deferral(flow, deferred.take)``).
        retry: seconds before the first save again, doubled after each that fails.
        max_retry: the longest wait between two tries (s).
        clock: the monotonic clock the outages are measured with.
    """

    def __init__(
        self, flow: Any, *, retry: float = 0.25, max_retry: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not 0 < retry <= max_retry:
            raise ValueError("retry must be > 0 and <= max_retry (seconds)")
        self.flow = flow
        self.retry = float(retry)
        self.max_retry = float(max_retry)
        self.deferred = 0
        """Saves taken over so far."""
        self.outages: list[float] = []
        """Seconds each outage held the state unsaved (its first deferred save → saved)."""
        self._clock = clock
        self._since: float | None = None
        self._failures = 0  # bumped by each deferred save (a save that went through
        self._pending = asyncio.Event()  # leaves it where it was)

    @property
    def pending(self) -> bool:
        """Whether the state holds what the store has not taken yet."""
        return self._since is not None

    def take(self, method_name: str, error: PersistenceUnavailableError) -> bool:
        """The flow's save deferral: True (taken over) unless ``method_name`` is one of
        :data:`STRICT_SAVES`."""
        if method_name in STRICT_SAVES:
            return False
        self.deferred += 1
        self._failures += 1
        if self._since is None:
            self._since = self._clock()
            # (the type only: a driver's message may carry the URL)
            logger.warning("the session store is unreachable (%s): the call goes on and "
                           "its state is saved once the store is back",
                           type(error).__name__, extra={"save": method_name})
        self._pending.set()
        return True

    async def run(self) -> None:
        """Save the state again while a save is pending, until cancelled (a refused
        write, the lease lost, ends it: the call is ending; so does a conflict, logged:
        another writer saved the session. A write of the call's own whose connection
        broke during its commit is no conflict: the PostgreSQL store finds out whether
        it was made, at once or at the next save)."""
        while True:
            await self._pending.wait()
            try:
                await self._save_until_stored()
            except FencedWriteError:
                return
            except PersistenceError:
                logger.exception("the call's state held back by the outage could not be "
                                 "saved")
                return

    async def _save_until_stored(self) -> None:
        delay = self.retry
        while self._since is not None:
            await asyncio.sleep(delay)
            if await self.save_now():
                return
            delay = min(delay * 2, self.max_retry)

    async def save_now(self) -> bool:
        """Try the pending save once; True when nothing is pending any more.

        Raises:
            FencedWriteError: the call no longer holds its session.
        """
        if self._since is None:
            return True
        failures = self._failures
        try:
            await self.flow.asave_state("store_returned")
        except PersistenceUnavailableError:  # (a strict save's error: not ours to hide)
            return False
        if self._failures != failures:  # deferred again: still unreachable
            return False
        outage = self._clock() - self._since
        self.outages.append(outage)
        self._since = None
        self._pending.clear()
        logger.warning("the session store is back: the call's state is saved (it was "
                       "held back %.1f s)", outage)
        return True

    async def aclose(self, within: float) -> bool:
        """At the call's end: try the pending save for up to ``within`` seconds; True
        when nothing is left unsaved (logged as an error otherwise)."""
        try:
            async with asyncio.timeout(within):
                if not await self.save_now():
                    await self._save_until_stored()
        except TimeoutError:
            pass
        except FencedWriteError:
            return False  # (reported by the ownership: the session is another's now)
        if self._since is None:
            return True
        logger.error("the call ended while its session store was unreachable: its last "
                     "%.1f s are not saved", self._clock() - self._since)
        return False

    def __repr__(self) -> str:
        return (f"DeferredSaves(deferred={self.deferred}, pending={self.pending}, "
                f"outages={len(self.outages)})")


@contextlib.asynccontextmanager
async def saves_deferred(flow: Any, *, within: float = DEFERRED_SAVES_AT_CLOSE
                         ) -> AsyncIterator[DeferredSaves]:
    """Within the block, ``flow``'s saves that find the store unreachable are deferred
    (:class:`DeferredSaves`, yielded) and made again until the store takes them; at its
    end what is still pending is tried for up to ``within`` seconds, then the deferral
    is removed. A failure of the retries (other than the store being away) is raised
    then."""
    deferred = DeferredSaves(flow)
    set_save_deferral(flow, deferred.take)
    resaving = asyncio.get_running_loop().create_task(deferred.run(),
                                                      name="call.deferred-saves")
    try:
        yield deferred
    finally:
        await cancel_and_wait([resaving])
        try:
            await deferred.aclose(within=within)
        finally:
            set_save_deferral(flow, None)
    if not resaving.cancelled() and (failure := resaving.exception()) is not None:
        raise failure
