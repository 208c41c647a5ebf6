"""How sync entry points run a coroutine cheaply.

``run_blocking(make)`` runs ``make()`` on an event loop cached per thread (no new loop and
no thread pool per call). When the calling thread already runs a loop, blocking it with
``run_until_complete`` is impossible, so the coroutine runs on a small shared worker pool
(each worker with its own cached loop) with the caller's copied context variables, and the
caller blocks until it is done.

At interpreter exit the cached loops are shut down properly: tasks still pending on them
(litellm's logging worker parks one on every loop it has seen) are cancelled and awaited,
async generators closed, then the loop is closed. Left to the garbage collector, such a
task warns "Task was destroyed but it is pending" and can crash the interpreter's
final collection.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextvars
import threading
import weakref
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

__all__ = ["run_blocking", "shut_down_first_at_exit", "thread_loop"]

T = TypeVar("T")


class _Holder:
    """Owns one thread's cached loop; closes it when the thread (and its locals) go away."""

    __slots__ = ("__weakref__", "loop")

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        _holders.add(self)

    def __del__(self) -> None:
        if not self.loop.is_closed() and not self.loop.is_running():
            self.loop.close()

    def shutdown(self) -> None:
        """Cancel and await what is still pending on the loop, then close it."""
        loop = self.loop
        if loop.is_closed() or loop.is_running():
            return
        try:
            pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
            for task in pending:
                task.cancel()
            if pending:
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()


_holders: weakref.WeakSet[_Holder] = weakref.WeakSet()


@atexit.register
def _shutdown_loops() -> None:
    for holder in list(_holders):
        holder.shutdown()


def shut_down_first_at_exit() -> None:
    """Shut the cached loops down before the exit handlers registered so far (call it
    once a library that registers its own, litellm, is imported).

    litellm's logging worker flushes at exit by running, on a loop of its own, each
    logging coroutine it had handed to a task that never got to start (its loop was
    idle between two sync calls). Our shutdown then ran that task, which raised "cannot
    reuse already awaited coroutine" and litellm logged it with a traceback, as the last
    thing the program printed. Exit handlers run last registered first: registered again
    here, ours cancels those tasks first (a task cancelled before it starts closes its
    coroutine, which litellm then leaves alone).
    """
    atexit.unregister(_shutdown_loops)
    atexit.register(_shutdown_loops)


_local = threading.local()


def thread_loop() -> asyncio.AbstractEventLoop:
    """This thread's own event loop (made on first use, and again once closed): where
    sync entry points run their coroutines, one after another."""
    holder: _Holder | None = getattr(_local, "holder", None)
    if holder is None or holder.loop.is_closed():
        holder = _local.holder = _Holder()
    return holder.loop


_worker_lock = threading.Lock()
_worker: concurrent.futures.ThreadPoolExecutor | None = None


def _worker_pool() -> concurrent.futures.ThreadPoolExecutor:
    global _worker
    with _worker_lock:
        if _worker is None:
            _worker = concurrent.futures.ThreadPoolExecutor(
                max_workers=32, thread_name_prefix="voxflow-kickoff"
            )
        return _worker


def _run_here(make: Callable[[], Coroutine[Any, Any, T]]) -> T:
    return thread_loop().run_until_complete(make())


def run_blocking(make: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run the coroutine built by ``make()`` to completion from sync code."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        running = False
    else:
        running = True
    if not running:  # (outside the except: an error of the run must not be chained to it)
        return _run_here(make)
    ctx = contextvars.copy_context()
    return _worker_pool().submit(ctx.run, _run_here, make).result()
