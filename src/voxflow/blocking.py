"""Sync twins: every blocking method of voxflow's API is generated from its async one.

voxflow is async inside; scripts, notebooks and tests call it from sync code. Where a
sync method does exactly what its async twin does, it is not written twice: it is
:func:`sync_twin` of it, one line in the class::

    class Agent:
        async def akickoff(self, input, *, context=None) -> AgentResult: ...

        kickoff = sync_twin(akickoff)

The twin takes the same parameters (its signature, types and documentation are the async
one's; a method's twin runs the instance's own async method, a subclass's override) and
runs the coroutine to completion on the calling thread's cached event loop;
called from inside a running loop (a sync step of an async flow), on a worker thread's
own loop, so the caller's loop is never re-entered (:mod:`voxflow._loops`: no new loop per
call, which litellm's per-loop workers would not survive). The twins so made:
``Agent.kickoff``, ``LLM.call``, ``classify_intent`` (and ``Flow.classify_intent``),
``Flow.resume`` and the test kit's ``CallRunner.run``.

The sync methods that differ from their async twin are written out, and say how:
``Flow.kickoff`` and ``handle_turn`` run the flow's sync methods inline on their private
loop (the async ones hand them to an executor, off the caller's loop), ``load_session``
reads the store inline (``aload_session`` in a worker thread);
``stream_turn`` streams from a worker thread; ``StreamSession.result`` and ``close`` wait
for that thread; ``PostgresJobQueue.enqueue`` and ``pg_schema.ensure_tables`` are sync
database code (their async twins run it in a thread, or through the async driver).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec, TypeVar

from ._loops import run_blocking

__all__ = ["sync_twin"]

P = ParamSpec("P")
T = TypeVar("T")


def _sync_name(name: str) -> str:
    """``acall`` → ``call``, ``resume_async`` → ``resume``."""
    if name.endswith("_async"):
        return name.removesuffix("_async")
    return name[1:] if name.startswith("a") else name


def sync_twin(async_fn: Callable[P, Coroutine[Any, Any, T]]) -> Callable[P, T]:
    """The blocking twin of ``async_fn`` (a coroutine function or method): the same
    parameters, its coroutine run to completion (see the module).

    Raises:
        TypeError: ``async_fn`` is not a coroutine function.
    """
    if not inspect.iscoroutinefunction(async_fn):
        raise TypeError(f"sync_twin needs a coroutine function, got {async_fn!r}")

    owner, _, _ = async_fn.__qualname__.rpartition(".")
    method = bool(owner) and not owner.endswith("<locals>")  # defined in a class body
    async_name = async_fn.__name__

    @functools.wraps(async_fn)
    def twin(*args: P.args, **kwargs: P.kwargs) -> T:
        __tracebackhide__ = True  # (pytest shows the caller's line, not this one)
        if method and args:  # the instance's own async method: a subclass's override
            bound: Callable[..., Coroutine[Any, Any, T]] = getattr(args[0], async_name)
            return run_blocking(lambda: bound(*args[1:], **kwargs))
        return run_blocking(lambda: async_fn(*args, **kwargs))

    name = _sync_name(async_fn.__name__)
    twin.__name__ = name
    twin.__qualname__ = f"{async_fn.__qualname__.rpartition('.')[0]}.{name}".lstrip(".")
    twin.__doc__ = (f"Blocking: :meth:`{async_fn.__name__}` run to completion "
                    "(:func:`voxflow.blocking.sync_twin`).\n\n"
                    + inspect.cleandoc(async_fn.__doc__ or ""))
    return twin
