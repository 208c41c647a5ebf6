"""A call's hold on its session: a lease acquired at call start, renewed in the
background from that moment, released at call end; every save of the call goes through
it, fenced.

:meth:`SessionOwnership.acquire` makes the call the writer of its session
(:meth:`~voxflow.flow._row_store.RowStore.acquire_lease`) and starts renewing it every
``ttl / 3`` seconds: the lease is covered from the moment it is taken (answering the
offer, gathering ICE candidates, loading the session all happen under it), until
:meth:`SessionOwnership.release`, which every path that took it calls. A lease another
owner holds live is waited out (up to ``wait`` seconds: the lease of a worker that died
expires within its ``ttl``), never stolen, unless ``owner_dead`` says its holder is dead
(a call worker whose heartbeat stopped): that lease is taken over at once, the epoch
moving on, so every write the old owner might still make is refused. Every database
call (acquire, renew, release) runs on the ownership's own executor, never the event
loop and never the default executor that speech recognition and synthesis fill
(``asyncio.to_thread``): a busy call cannot starve its heartbeat.

:attr:`SessionOwnership.persistence` is ``store.fenced(lease)`` wrapped so that a
refused write (:class:`~voxflow.errors.FencedWriteError`: taken over, expired,
released) is reported once to ``on_lost`` as well as raised, and so is a renewal that
is refused: the call is then ended with the true reason
(:attr:`SessionOwnership.lost_reason`), and nothing more of it is written. Every refused
write is also logged on its own line, ``refused a write of the session (<reason>)``,
naming the operation: a late write that was tried and stopped can be told from a lease
that was merely found lost at its renewal.

A ``watch`` (:class:`OwnershipWatch`: the process's
:class:`~voxflow_adapters.hosting.metrics.CallMetrics`) is told of each lease taken over
from another owner, each refused write and each store call that failed otherwise.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from voxflow.errors import FencedWriteError, SessionLeaseError
from voxflow.flow.persistence import SessionLease
from voxflow.ids import SessionId
from voxflow.tasks import cancel_and_wait

__all__ = ["DEFAULT_LEASE_SECONDS", "OwnerDead", "OwnershipWatch", "SessionBusyError",
           "SessionOwnership"]

logger = logging.getLogger(__name__)

DEFAULT_LEASE_SECONDS = 6.0
"""How long a call's lease lasts without renewal: the longest a resumed call waits for
the lease of a worker that died (renewed every third of it)."""

OwnerDead = Callable[[str], Awaitable[bool]]
"""Whether a lease's holder (an owner name) is known to be dead: its live lease may then
be taken over instead of waited out. False whenever it cannot tell."""

_RETRY_AFTER = 0.25
"""s: a failed renewal is tried again at once, then after 0.25, 0.5, 1 s... (at most
``ttl / 3``): long before the lease runs out."""

_executor: concurrent.futures.ThreadPoolExecutor | None = None


def _lease_executor() -> concurrent.futures.ThreadPoolExecutor:
    """The process's lease thread (shared by its calls: renewals are tiny transactions)."""
    global _executor
    if _executor is None:
        _executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=2, thread_name_prefix="voxflow-lease"
        )
    return _executor


class OwnershipWatch(Protocol):
    """What an ownership reports (to the process's metrics)."""

    def lease_acquired(self, *, taken_over: bool) -> None:
        """A lease was acquired (``taken_over``: from another owner, dead or silent)."""

    def write_refused(self, reason: str) -> None:
        """The fence refused a write (``FencedWriteError.reason``)."""

    def store_failed(self, operation: str) -> None:
        """A store call (``operation``: its method name) failed otherwise."""


class SessionBusyError(SessionLeaseError):
    """The session's lease is held live by another owner and was not freed in time."""


class SessionOwnership:
    """One call's lease on its session (build it with :meth:`acquire`).

    Attributes:
        lease: the lease held now (renewals replace it).
        lost: the refusal that ended the ownership (None while it holds).
    """

    def __init__(
        self, store: Any, lease: SessionLease, *, ttl: float,
        on_lost: Callable[[FencedWriteError], None] | None = None,
        watch: OwnershipWatch | None = None,
    ) -> None:
        self.store = store
        self.lease = lease
        self.ttl = ttl
        self.lost: FencedWriteError | None = None
        self.lost_reason: str | None = None
        """Why the session was lost, in words (the ``bye`` reason), once it was."""
        self._on_lost = on_lost
        self._released = False
        self._loop = asyncio.get_running_loop()
        self._renewing: asyncio.Task[None] | None = None
        self._failing_since: float | None = None  # loop time of the first failed renewal
        self._watch = watch
        self.renewal_failures = 0
        """Renewals failed in a row (the store unreachable); 0 while renewals succeed."""
        self.persistence = _NoticingPersistence(store.fenced(lease), self._lose,
                                                self._reclaim, watch)

    @classmethod
    async def acquire(
        cls, store: Any, session_id: str, owner: str, *, ttl: float = DEFAULT_LEASE_SECONDS,
        wait: float = 0.0, on_lost: Callable[[FencedWriteError], None] | None = None,
        owner_dead: OwnerDead | None = None, watch: OwnershipWatch | None = None,
    ) -> SessionOwnership:
        """Lease ``session_id`` for ``owner``, waiting up to ``wait`` seconds for another
        owner's live lease to expire or be released (polled every 0.1 s), and start
        renewing it (until :meth:`release`); a holder that ``owner_dead`` finds dead has
        its lease taken over at once (logged, naming it). ``watch`` is told of the
        acquisition, the refused writes and the failed store calls.

        Raises:
            SessionBusyError: it is still held live by another owner after ``wait``.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        take_from: str | None = None
        while True:
            call = functools.partial(store.acquire_lease, session_id, owner, ttl=ttl,
                                     **({} if take_from is None else {"take_from": take_from}))
            try:
                lease = await loop.run_in_executor(_lease_executor(), call)
            except SessionLeaseError as exc:
                if exc.holder != take_from and owner_dead is not None \
                        and await owner_dead(exc.holder):
                    take_from = exc.holder  # taken on the next try, if still that holder's
                    continue
                if loop.time() >= deadline:
                    raise SessionBusyError(str(exc), session_id=exc.session_id,
                                           holder=exc.holder) from None
                await asyncio.sleep(min(0.1, max(0.0, deadline - loop.time())))
                continue
            if take_from is not None:
                logger.warning("took over the session of a dead owner (its heartbeat "
                               "stopped): its writes are refused from now on",
                               extra={"session_id": session_id, "holder": take_from,
                                      "epoch": lease.epoch})
            if watch is not None:
                watch.lease_acquired(taken_over=bool(getattr(lease, "taken_over", False)))
            ownership = cls(store, lease, ttl=ttl, on_lost=on_lost, watch=watch)
            ownership._renewing = loop.create_task(ownership._renew(),
                                                   name=f"lease.{session_id}")
            return ownership

    @property
    def session_id(self) -> SessionId:
        """The owned session."""
        return SessionId(str(self.lease.session_id))

    def _lose(self, exc: FencedWriteError) -> None:
        """Record the loss once and report it on the loop (saves run in threads)."""
        try:
            on_loop = asyncio.get_running_loop() is self._loop
        except RuntimeError:
            on_loop = False
        if not on_loop:
            self._loop.call_soon_threadsafe(self._lose, exc)
            return
        if self.lost is not None:
            return
        self.lost = exc
        self.lost_reason = self._explain(exc)
        logger.warning("%s", self.lost_reason, extra={"session_id": self.session_id})
        renewing = self._renewing
        if renewing is not None and renewing is not asyncio.current_task():
            renewing.cancel()  # nothing left to renew (release() waits for it)
        if self._on_lost is not None:
            self._on_lost(exc)

    def _reclaim(self) -> bool:
        """Renew a lease that expired while nobody took the session (from a save's
        thread: the save was refused as expired, the store just came back before the
        next renewal); False if it was taken over or released.

        Raises:
            PersistenceUnavailableError: the store can be read but not written (a full
                disk: the fence saw the lease expired, the renewal cannot be stored):
                the write is then unavailable, deferred by a call, not refused.
        """
        try:
            self.lease = self.store.renew_lease(self.lease, ttl=self.ttl, reclaim=True)
        except FencedWriteError:  # (the save's own refusal is reported)
            return False
        except Exception:
            if self._watch is not None:
                self._watch.store_failed("renew_lease")
            raise
        return True

    def _explain(self, exc: FencedWriteError) -> str:
        """The true reason the session was lost (the ``bye`` the caller gets)."""
        if exc.reason == "taken over":
            why = "another worker took it over (the caller resumed it there)"
        elif exc.reason == "released":
            why = "its lease was released"
        elif exc.reason == "expired":
            since = self._failing_since
            if since is not None:
                why = (f"its {self.ttl:g} s lease ran out while the session store was "
                       f"unreachable ({self._loop.time() - since:.1f} s)")
            else:
                why = (f"its {self.ttl:g} s lease ran out before it was renewed (this "
                       "process was stopped or too busy to renew it)")
        else:
            why = str(exc)
        return f"the call lost its session ({exc.reason}): {why}; nothing more is saved"

    async def _renew(self) -> None:
        """Renew the lease every ``ttl / 3`` seconds until released or lost; a renewal
        that fails (the store unreachable) is tried again at once, then after 0.25,
        0.5, 1 s...: a reset costs nothing, and an outage is noticed as it ends. A lease
        that expired meanwhile is reclaimed if nobody took the session since."""
        loop = asyncio.get_running_loop()
        delay = self.ttl / 3
        while self.lost is None and not self._released:
            await asyncio.sleep(delay)
            if self._released:
                return
            renew = functools.partial(self.store.renew_lease, self.lease, ttl=self.ttl,
                                      reclaim=True)
            try:
                self.lease = await loop.run_in_executor(_lease_executor(), renew)
            except FencedWriteError as exc:
                self._lose(exc)
                return
            except Exception as exc:  # the database is unreachable: tried again soon
                if self._watch is not None:
                    self._watch.store_failed("renew_lease")
                self.renewal_failures += 1
                if self._failing_since is None:
                    self._failing_since = loop.time()
                    logger.warning("could not renew the session lease (%s); trying again",
                                   type(exc).__name__, exc_info=True,
                                   extra={"session_id": self.session_id})
                failures = self.renewal_failures  # again at once, then 0.25, 0.5, 1 s...
                delay = 0.0 if failures == 1 else min(self.ttl / 3,
                                                      _RETRY_AFTER * 2 ** min(failures - 2, 8))
                continue
            if self._failing_since is not None:
                logger.warning("the session lease is renewed again after %.1f s",
                               loop.time() - self._failing_since,
                               extra={"session_id": self.session_id})
                self._failing_since = None
            self.renewal_failures = 0
            delay = self.ttl / 3

    async def release(self) -> None:
        """Stop renewing and give the lease up (idempotent; a lease already lost is left
        alone)."""
        if self._released:
            return
        self._released = True
        renewing = self._renewing
        if renewing is not None and renewing is not asyncio.current_task():
            await cancel_and_wait([renewing])
            if not renewing.cancelled() and (failure := renewing.exception()) is not None:
                logger.error("the session lease's renewal failed", exc_info=failure,
                             extra={"session_id": self.session_id})
        if self.lost is not None:
            return
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(_lease_executor(), self.store.release_lease, self.lease)
        except Exception:  # it expires on its own within ttl
            logger.warning("could not release the session lease", exc_info=True,
                           extra={"session_id": self.session_id})

    def __repr__(self) -> str:
        return (f"SessionOwnership({self.session_id!r}, owner={self.lease.owner!r}, "
                f"epoch={self.lease.epoch}, lost={self.lost is not None})")


class _NoticingPersistence:
    """A fenced store whose refused writes are also reported (then raised as they are).

    A write refused because the lease expired while nobody took the session (the store
    was unreachable for longer than the lease, and came back before the next renewal)
    reclaims the lease and is made once more."""

    def __init__(self, fenced: Any, on_refused: Callable[[FencedWriteError], None],
                 reclaim: Callable[[], bool], watch: OwnershipWatch | None = None) -> None:
        self._fenced = fenced
        self._on_refused = on_refused
        self._reclaim = reclaim
        self._watch = watch

    def check_writable(self) -> None:
        """The fenced store's check, reported as its other calls are. Declared, not left
        to :meth:`__getattr__`: a ``WritableCheck`` on every Python (from 3.12 on,
        ``isinstance`` with a protocol does not call ``__getattr__``)."""
        self.__getattr__("check_writable")()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._fenced, name)
        if not callable(attr):
            return attr

        @functools.wraps(attr)
        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return attr(*args, **kwargs)
            except FencedWriteError as exc:
                refused = exc
            except Exception:
                if self._watch is not None:
                    self._watch.store_failed(name)
                raise
            if refused.reason == "expired" and self._reclaim():
                logger.info("the session's lease had expired while the store was "
                            "unreachable; reclaimed, %s made again", name,
                            extra={"session_id": refused.session_id})
                try:
                    return attr(*args, **kwargs)
                except FencedWriteError as exc:
                    refused = exc
                except Exception:
                    if self._watch is not None:
                        self._watch.store_failed(name)
                    raise
            logger.warning("refused a write of the session (%s): %s stored nothing",
                           refused.reason, name, extra={"session_id": refused.session_id,
                                                        "epoch": refused.epoch,
                                                        "current_epoch": refused.current})
            if self._watch is not None:
                self._watch.write_refused(refused.reason)
            self._on_refused(refused)
            raise refused

        return call

    def __repr__(self) -> str:
        return f"Noticing({self._fenced!r})"
