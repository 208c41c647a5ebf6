"""One async PostgreSQL transaction that survives a broken connection.

A connection reset or a restarted server breaks every connection of a pool at once, and
the pool hands them out without checking them. :func:`atransaction` runs a unit of work
in one transaction; when its connection breaks *before* ``COMMIT`` was sent (nothing was
written) the pool is discarded and the work run once more on a fresh connection, so a
reconnect is invisible to the caller. One that breaks *during* ``COMMIT`` is not retried:
the write may have landed, and the caller hears the store is unavailable.

A transaction the server rolled back for its conflict with another (a serialization
failure, 40001, or a deadlock, 40P01) wrote nothing, even when refused at ``COMMIT``:
:func:`aretry_conflicts` runs it again after a short, jittered backoff, a bounded number
of times (:data:`CONFLICT_TRIES`), so a conflict another transaction won is not an error
of voxflow's (it used to stop a job worker). Only those two: the rest of class 40 is not
transient (40002, a deferred constraint, fails again; 40003, completion unknown, may have
written).

Used by the job inbox (:mod:`voxflow.jobs.inbox`) and the call dispatch of
``voxflow serve --front-door`` (``voxflow_adapters.hosting.dispatch``); the sync session
store (:mod:`voxflow.flow.postgres`) follows the same rule on its own connections.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from psycopg import AsyncConnection
    from psycopg_pool import AsyncConnectionPool

__all__ = ["CONFLICT_STATES", "CONFLICT_TRIES", "aretry_conflicts", "atransaction",
           "conflict", "conflict_tries_spent"]

T = TypeVar("T")

CONFLICT_STATES = frozenset({"40001", "40P01"})
"""The SQLSTATEs of a transaction rolled back for a conflict with another (serialization
failure, deadlock detected): run again, it succeeds once the other one is through."""
CONFLICT_TRIES = 6
"""Tries of a transaction that conflicts every time before its error is raised."""
_CONFLICT_BACKOFF = (0.05, 1.0)  # the first wait (s) before running it again, the longest


def conflict(exc: BaseException | None) -> bool:
    """``exc`` is a database error (a psycopg error, or an error wrapping one as its
    ``__cause__``) of a transaction the server rolled back for a conflict with another
    (:data:`CONFLICT_STATES`)."""
    for found in (exc, getattr(exc, "__cause__", None)):
        if getattr(found, "sqlstate", None) in CONFLICT_STATES:
            return True
    return False


async def aretry_conflicts(call: Callable[[], Awaitable[T]], *, logger: logging.Logger,
                           what: str) -> T:
    """``await call()`` (one transaction), run again while it fails with a
    :func:`conflict`, up to :data:`CONFLICT_TRIES` tries, after a backoff doubling from
    50 ms up to 1 s, jittered (two transactions that deadlocked do not meet again in
    step); each retry is said at INFO, naming ``what``.

    A conflict whose tries a loop inside ``call`` already spent (an :func:`atransaction`
    of its) is raised at once: the tries are counted by one loop, not multiplied (the
    job worker's ``ride_out`` around the inbox's transaction ran a recurring conflict
    6 x 6 = 36 times, its "try n of 6" lines interleaved).

    Raises:
        whatever ``call`` raises; a conflict once it recurred on every try.
    """
    delay = _CONFLICT_BACKOFF[0]
    for attempt in range(1, CONFLICT_TRIES + 1):
        try:
            return await call()
        except Exception as exc:
            if not conflict(exc) or conflict_tries_spent(exc):
                raise
            if attempt == CONFLICT_TRIES:
                _spend(exc)
                raise
            state = getattr(exc, "sqlstate", None) or getattr(exc.__cause__, "sqlstate", "")
            logger.info("%s: the database rolled it back for a conflict with another "
                        "transaction (SQLSTATE %s); running it again (try %d of %d)", what,
                        state, attempt + 1, CONFLICT_TRIES)
        await asyncio.sleep(delay * random.uniform(0.5, 1.0))
        delay = min(delay * 2, _CONFLICT_BACKOFF[1])
    raise AssertionError("unreachable")  # (the loop returns or raises)


async def atransaction(
    open_pool: Callable[[], Awaitable[AsyncConnectionPool[Any]]],
    work: Callable[[AsyncConnection[Any]], Awaitable[T]],
    *,
    discard: Callable[[AsyncConnectionPool[Any]], Awaitable[None]],
    unavailable: Callable[[Exception], Exception],
    logger: logging.Logger,
    what: str,
) -> T:
    """``await work(conn)`` in one transaction on a connection of ``await open_pool()``.

    Args:
        open_pool: the store's pool, opened (or reopened after a discard) on demand.
        work: the unit of work; it may run twice when the first connection broke before
            the commit, and again after a transaction conflict (:func:`aretry_conflicts`;
            it wrote nothing then).
        discard: drops a pool one of whose connections broke.
        unavailable: the typed error raised for a failure that is not retried.
        logger: where the retry is said, once, at INFO.
        what: the store's name in that line (``"job inbox"``, ``"dispatch"``).

    Raises:
        The error ``unavailable`` makes of the connection failure that was not retried
        (of a conflict that recurred on every try, too).
    """
    # here: the optional voxflow[postgres] extra (the caller's pool loaded it)
    import psycopg

    async def once() -> T:
        return await _reconnecting(open_pool, work, discard=discard, logger=logger,
                                   what=what)

    try:
        return await aretry_conflicts(once, logger=logger, what=what)
    except psycopg.OperationalError as exc:
        error = unavailable(exc)
        # (its sqlstate still says conflict: no other loop runs it again)
        if conflict_tries_spent(exc):
            _spend(error)
        raise error from None


_SPENT = "voxflow_conflict_tries_spent"


def _spend(exc: BaseException) -> None:
    """Mark ``exc``: the conflict it is was tried :data:`CONFLICT_TRIES` times."""
    setattr(exc, _SPENT, True)


def conflict_tries_spent(exc: BaseException) -> bool:
    """``exc`` (or the error it wraps) is a conflict that recurred on all
    :data:`CONFLICT_TRIES` tries of :func:`aretry_conflicts`."""
    return any(getattr(found, _SPENT, False)
               for found in (exc, getattr(exc, "__cause__", None)))


async def _reconnecting(
    open_pool: Callable[[], Awaitable[AsyncConnectionPool[Any]]],
    work: Callable[[AsyncConnection[Any]], Awaitable[T]],
    *,
    discard: Callable[[AsyncConnectionPool[Any]], Awaitable[None]],
    logger: logging.Logger,
    what: str,
) -> T:
    """:func:`atransaction`'s work, run once more on a fresh connection when its
    connection broke before the commit; the driver's error otherwise."""
    # here: the optional voxflow[postgres] extra (the caller's pool loaded it)
    import psycopg
    from psycopg_pool import PoolClosed

    for attempt in (1, 2):
        pool = await open_pool()
        conn: AsyncConnection[Any] | None = None
        committing = False
        try:
            async with pool.connection() as conn:
                async with conn.transaction():
                    result = await work(conn)
                    committing = True
                return result
        except psycopg.OperationalError as exc:
            broken = conn is not None and conn.broken
            if broken:
                await discard(pool)
            if attempt == 1 and not committing and (broken or isinstance(exc, PoolClosed)):
                logger.info("%s: a database connection broke (%s); retrying on a new one",
                            what, type(exc).__name__)
                continue
            raise
    raise AssertionError("unreachable")  # (the loop returns or raises)
