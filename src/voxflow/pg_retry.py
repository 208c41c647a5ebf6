"""One async PostgreSQL transaction that survives a broken connection.

A connection reset or a restarted server breaks every connection of a pool at once, and
the pool hands them out without checking them. :func:`atransaction` runs a unit of work
in one transaction; when its connection breaks *before* ``COMMIT`` was sent (nothing was
written) the pool is discarded and the work run once more on a fresh connection, so a
reconnect is invisible to the caller. One that breaks *during* ``COMMIT`` is not retried:
the write may have landed, and the caller hears the store is unavailable.

Used by the job inbox (:mod:`voxflow.jobs.inbox`) and the call dispatch of
``voxflow serve --front-door`` (``voxflow_adapters.hosting.dispatch``); the sync session
store (:mod:`voxflow.flow.postgres`) follows the same rule on its own connections.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from psycopg import AsyncConnection
    from psycopg_pool import AsyncConnectionPool

__all__ = ["atransaction"]

T = TypeVar("T")


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
            the commit (it wrote nothing then).
        discard: drops a pool one of whose connections broke.
        unavailable: the typed error raised for a failure that is not retried.
        logger: where the retry is said, once, at INFO.
        what: the store's name in that line (``"job inbox"``, ``"dispatch"``).

    Raises:
        The error ``unavailable`` makes of the connection failure that was not retried.
    """
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
            raise unavailable(exc) from None
    raise AssertionError("unreachable")  # (the loop returns or raises)
