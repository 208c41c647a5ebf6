"""Tasks whose lifetime is a block, where ``asyncio.TaskGroup`` is not the right shape.

A TaskGroup is for sibling tasks that succeed or fail together: it wraps the block's own
exception in an ``ExceptionGroup`` and waits for its tasks to *finish*. Two lifetimes in
voxflow are different:

* :func:`background`: a helper beside a block (a lease renewed around a call, a
  journal beside a session, a producer feeding its consumer, a device's cadence): it
  runs while the block runs and is cancelled, and waited for, when the block ends. The
  block's exception goes on as it is; the helper's own failure is raised where the
  block ends (or logged beside the block's exception, never lost);
* :func:`cancel_and_wait`: stop tasks now and wait until each has ended, even if the
  caller is cancelled meanwhile (as a TaskGroup waits for its children), then let that
  cancellation go on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Collection, Coroutine
from typing import Any, TypeVar

__all__ = ["background", "cancel_and_wait"]

_T = TypeVar("_T")

logger = logging.getLogger(__name__)


async def cancel_and_wait(tasks: Collection[asyncio.Future[Any]]) -> None:
    """Cancel ``tasks`` and wait until every one has ended.

    Their outcomes are left on them (read ``exception()``; nothing is raised here). A
    cancellation of the caller while it waits is held until they have ended, then raised:
    no task outlives its owner.
    """
    for task in tasks:
        task.cancel()
    cancelled = False
    pending = {task for task in tasks if not task.done()}
    while pending:
        try:
            _, pending = await asyncio.wait(pending)
        except asyncio.CancelledError:
            cancelled = True  # they are cancelled already: they end promptly
    if cancelled:
        raise asyncio.CancelledError


def _failure(task: asyncio.Future[Any]) -> BaseException | None:
    """The exception ``task`` ended with on its own (None if it returned or was cancelled)."""
    if task.cancelled():
        return None
    return task.exception()


@contextlib.asynccontextmanager
async def background(
    coro: Coroutine[Any, Any, _T], *, name: str
) -> AsyncIterator[asyncio.Task[_T]]:
    """Run ``coro`` as a task (named ``name``) while the block runs; cancel and wait for
    it when the block ends.

    Yields:
        The task (the block may wait for it: a task that ended is not cancelled).

    Raises:
        Exception: the task's own failure, when the block itself ended without one (with
            one, the task's failure is logged and the block's goes on; a failure the block
            raised itself, having awaited the task, is not logged twice; one found while
            the owner is cancelled waiting for the task is logged, never left unread). A
            block that awaits the task and handles its failure still gets it raised here:
            a helper's failure is never taken as handled.
    """
    task = asyncio.get_running_loop().create_task(coro, name=name)
    block_exc: BaseException | None = None
    try:
        yield task
    except BaseException as exc:
        block_exc = exc
        raise
    finally:
        try:
            await cancel_and_wait([task])
        except BaseException:  # the owner cancelled meanwhile: the task has ended all the same
            _log_failure(task, name, block_exc)
            if block_exc is not None and not isinstance(block_exc, asyncio.CancelledError):
                # the cancellation replaces the block's own failure: say what it was
                logger.error("%s: its block failed, then was cancelled while the helper "
                             "ended", name, exc_info=block_exc)
            raise
        if block_exc is not None:
            _log_failure(task, name, block_exc)
        elif (failure := _failure(task)) is not None:
            raise failure


def _log_failure(task: asyncio.Future[Any], name: str, block_exc: BaseException | None) -> None:
    """Log the ended ``task``'s own failure, unless it is what the block raises (the
    block awaited the task): logged once, by whoever handles that exception."""
    failure = _failure(task)
    if failure is not None and failure is not block_exc:
        logger.error("%s failed as its block ended", name, exc_info=failure)
