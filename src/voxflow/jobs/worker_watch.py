"""A job worker's view of its database: whether it reaches it, said once per outage
(:class:`DatabaseWatch`), and a query tried again with backoff while it finds the
database away (:func:`ride_out`); whether an error says it is away. The job worker's
Procrastinate app (:mod:`voxflow.jobs.worker_app`) and its start
(:meth:`~voxflow.jobs.PostgresJobQueue.run_worker`) wait through outages with them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from voxflow.pg_refusal import GONE_STATES
from voxflow.pg_retry import aretry_conflicts

__all__ = ["BACKOFF", "DatabaseWatch", "database_unreachable", "error_line", "ride_out"]

logger = logging.getLogger("voxflow.jobs")

T = TypeVar("T")

BACKOFF = (0.5, 2.0)
"""The first wait (s) before trying the database again, the longest."""


class DatabaseWatch:
    """Whether a job worker reaches its database, said once per outage: a warning when a
    query first finds it away, an info line when one is answered again, with
    ``running(False)`` and ``running(True)`` (the readiness of ``/ready``) unless the
    worker is stopping.

    Args:
        running: the worker's readiness callback, or None.
        stopping: whether the worker is stopping (it is then not ready again).
    """

    def __init__(self, running: Callable[[bool], None] | None,
                 stopping: Callable[[], bool]) -> None:
        self._running = running
        self._stopping = stopping
        self.away_since: float | None = None
        """``time.monotonic()`` when the current outage was found; None: reachable."""
        self.registered = False
        """Whether the worker is registered (it takes jobs): not ready before."""

    def started(self) -> None:
        """The worker is registered: ready (``running(True)``) unless stopping or the
        database is away."""
        self.registered = True
        if self._running is not None and not self._stopping() and self.away_since is None:
            self._running(True)

    @property
    def stopping(self) -> bool:
        """True once the worker was asked to stop."""
        return self._stopping()

    @property
    def away(self) -> bool:
        """True while the database is found unreachable."""
        return self.away_since is not None

    def lost(self, exc: BaseException, what: str) -> None:
        """``what`` (a query) found the database unreachable (``exc``)."""
        if self.away_since is not None:
            return
        self.away_since = time.monotonic()
        logger.warning("the job worker lost its database (%s): it takes no job and tries "
                       "again with backoff until the database answers: %s", what,
                       error_line(exc))
        if self._running is not None and not self._stopping():
            self._running(False)

    def back(self) -> None:
        """A query of the worker was answered."""
        if self.away_since is None:
            return
        seconds, self.away_since = time.monotonic() - self.away_since, None
        logger.info("the job worker reaches its database again after %.0f s: it takes "
                    "jobs again", seconds)
        if self._running is not None and not self._stopping() and self.registered:
            self._running(True)


async def ride_out(call: Callable[[], Awaitable[T]], what: str, watch: DatabaseWatch, *,
                   unreachable: Callable[[BaseException], bool], gone: T,
                   within: float | None = None) -> T:
    """``await call()``, tried again with backoff (0.5 s doubling up to 2 s; a conflict
    first run again by :func:`~voxflow.pg_retry.aretry_conflicts`) while it fails with
    an error ``unreachable`` says is an outage, each told to ``watch``: ``gone`` once
    the worker stops meanwhile. With ``within``, an outage longer than that many seconds
    raises its error (the worker's start gives up); without it the wait has no end.

    Raises:
        the error of ``call`` that is no outage, or of one outlasting ``within``.
    """
    delay = BACKOFF[0]
    began: float | None = None
    while True:
        try:
            result = await aretry_conflicts(call, logger=logger, what=what)
        except Exception as exc:
            if not unreachable(exc):
                raise
            watch.lost(exc, what)
            began = time.monotonic() if began is None else began
            if within is not None and time.monotonic() - began + delay > within:
                raise
            if watch.stopping:
                return gone
            await asyncio.sleep(delay)
            delay = min(delay * 2, BACKOFF[1])
            continue
        return result


def error_line(exc: BaseException) -> str:
    """The error ``exc`` wraps (or ``exc``), on one line, for a log line."""
    cause = exc.__cause__ or exc
    return " ".join(str(cause).split()) or type(cause).__name__


def database_unreachable(exc: BaseException) -> bool:
    """``exc`` (Procrastinate's ``ConnectorException``, wrapping the driver's error) says
    the database cannot be reached: no connection in time (the pool's timeout), a
    connection that failed or broke (the driver's own error, with no SQLSTATE), a
    connection exception (class 08), the server ending its connections or refusing new
    ones (57P01-57P03). Not a query the server refused on a live connection (a statement
    or lock timeout, a deadlock, a full disk): that is no outage to wait out."""
    # here: the optional voxflow[postgres] extra (the app is open)
    import psycopg
    import psycopg_pool

    cause = exc.__cause__ or exc
    if isinstance(cause, psycopg_pool.PoolTimeout):
        return True
    if not isinstance(cause, psycopg.OperationalError):
        return False
    state = cause.sqlstate
    return state is None or state.startswith("08") or state in GONE_STATES
