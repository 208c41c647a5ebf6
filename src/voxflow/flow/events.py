"""Typed flow events and the non-blocking :class:`FlowEventBus`.

Events are frozen pydantic models and past-tense facts. They carry the flow's name and
state ``id`` but never a copy of the state: a subscriber that needs the state asks the
flow. :class:`MethodFinished` carries the method's output *by reference*.

Delivery never blocks the dispatch loop. :meth:`FlowEventBus.emit` only enqueues: a
daemon delivery thread (started on the first event that has a subscriber) calls sync
subscribers in order and runs each async subscriber on its own worker task on the
delivery thread's loop, so one slow subscriber delays neither the flow nor the other
subscribers. ``inline=True`` subscribers are the exception: they are called synchronously
inside ``emit`` and must only record (the :class:`voxflow.testing.EventRecorder` and
stream sessions use this). When nobody subscribes, the runtime does not even build the
event objects.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import logging
import threading
from collections.abc import Awaitable, Callable
from typing import Any, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "FlowEvent",
    "FlowEventBus",
    "FlowFailed",
    "FlowFinished",
    "FlowPaused",
    "FlowStarted",
    "MethodCancelled",
    "MethodFailed",
    "MethodFinished",
    "MethodStarted",
    "Subscription",
    "flow_event_bus",
]

logger = logging.getLogger(__name__)


class FlowEvent(BaseModel):
    """Base of every event on a :class:`FlowEventBus`."""

    model_config = ConfigDict(
        frozen=True, extra="forbid", arbitrary_types_allowed=True, defer_build=True
    )

    kind: str
    at: float = Field(description="Clock.now() of the flow when it happened")
    flow_name: str = Field(description="the Flow class name")
    flow_id: str = Field(description="the state id of the run")


class FlowStarted(FlowEvent):
    """A kickoff began (after restore and input hydration)."""

    kind: Literal["flow_started"] = "flow_started"
    input_keys: tuple[str, ...] = Field(default=(), description="keys of kickoff inputs")


class FlowFinished(FlowEvent):
    """A kickoff completed; ``result`` is what kickoff returns (by reference)."""

    kind: Literal["flow_finished"] = "flow_finished"
    result: Any = None


class FlowFailed(FlowEvent):
    """A kickoff raised."""

    kind: Literal["flow_failed"] = "flow_failed"
    error_type: str
    error: str


class FlowPaused(FlowEvent):
    """A method is waiting for human feedback; kickoff returned a pending result."""

    kind: Literal["flow_paused"] = "flow_paused"
    method_name: str
    message: str


class MethodStarted(FlowEvent):
    """A flow method is about to run."""

    kind: Literal["method_started"] = "method_started"
    method_name: str


class MethodFinished(FlowEvent):
    """A flow method completed; ``output`` is its return value (not a copy)."""

    kind: Literal["method_finished"] = "method_finished"
    method_name: str
    output: Any = None


class MethodFailed(FlowEvent):
    """A flow method raised (including a losing ``or_`` racer that failed)."""

    kind: Literal["method_failed"] = "method_failed"
    method_name: str
    error_type: str
    error: str


class MethodCancelled(FlowEvent):
    """A method's run was discarded: it lost an ``or_`` race."""

    kind: Literal["method_cancelled"] = "method_cancelled"
    method_name: str
    reason: Literal["lost_race", "not_started"]


Handler: TypeAlias = Callable[[Any], "Awaitable[None] | None"]


@dataclasses.dataclass(eq=False, slots=True)
class Subscription:
    """A handle returned by :meth:`FlowEventBus.subscribe`; ``close()`` unsubscribes."""

    bus: FlowEventBus
    handler: Handler
    event_type: type[BaseModel]
    inline: bool
    is_async: bool
    queue: asyncio.Queue[BaseModel] | None = None
    worker: asyncio.Task[None] | None = None

    def close(self) -> None:
        """Stop receiving events (idempotent)."""
        self.bus._unsubscribe(self)


class FlowEventBus:
    """Publish/subscribe for flow (and conversation) events; emit never blocks.

    Any pydantic model may be emitted; subscribers filter by ``event_type``.
    """

    def __init__(self) -> None:
        self._subs: tuple[Subscription, ...] = ()
        self._inline: tuple[Subscription, ...] = ()
        self._queued: tuple[Subscription, ...] = ()
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def active(self) -> bool:
        """True when anyone subscribes (the runtime skips building events otherwise)."""
        return bool(self._subs)

    def subscribe(
        self,
        handler: Handler,
        *,
        event_type: type[BaseModel] = FlowEvent,
        inline: bool = False,
    ) -> Subscription:
        """Call ``handler(event)`` for every emitted event that is an ``event_type``.

        Args:
            handler: a function or an ``async`` function taking the event.
            event_type: only events of this class (or subclasses) are delivered.
            inline: call a sync handler synchronously inside ``emit`` (must only record).
        """
        if not callable(handler):
            raise TypeError("handler must be callable")
        if not (isinstance(event_type, type) and issubclass(event_type, BaseModel)):
            raise TypeError("event_type must be a pydantic model class")
        is_async = inspect.iscoroutinefunction(handler)
        if inline and is_async:
            raise ValueError("inline=True needs a sync handler; async handlers are queued")
        sub = Subscription(self, handler, event_type, inline, is_async)
        with self._lock:
            self._subs = (*self._subs, sub)
            self._split()
        return sub

    def _unsubscribe(self, sub: Subscription) -> None:
        with self._lock:
            self._subs = tuple(s for s in self._subs if s is not sub)
            self._split()

    def _split(self) -> None:
        self._inline = tuple(s for s in self._subs if s.inline)
        self._queued = tuple(s for s in self._subs if not s.inline)

    def emit(self, event: BaseModel) -> None:
        """Deliver ``event``: inline subscribers now, the others on the delivery thread."""
        for sub in self._inline:
            if isinstance(event, sub.event_type):
                try:
                    sub.handler(event)
                except Exception:
                    logger.exception("inline event subscriber failed")
        if self._queued:
            self._ensure_thread().call_soon_threadsafe(self._deliver, event)

    def _ensure_thread(self) -> asyncio.AbstractEventLoop:
        loop = self._loop
        if loop is not None:
            return loop
        with self._lock:
            if self._loop is None:
                ready = threading.Event()
                new_loop = asyncio.new_event_loop()

                def run() -> None:
                    asyncio.set_event_loop(new_loop)
                    new_loop.call_soon(ready.set)
                    new_loop.run_forever()

                self._thread = threading.Thread(target=run, name="voxflow-events", daemon=True)
                self._thread.start()
                ready.wait()
                self._loop = new_loop
            return self._loop

    def _deliver(self, event: BaseModel) -> None:
        for sub in self._queued:
            if not isinstance(event, sub.event_type):
                continue
            if not sub.is_async:
                try:
                    sub.handler(event)
                except Exception:
                    logger.exception("event subscriber failed")
                continue
            if sub.queue is None:
                sub.queue = asyncio.Queue()
            sub.queue.put_nowait(event)
            if sub.worker is None or sub.worker.done():
                sub.worker = asyncio.get_running_loop().create_task(self._work(sub))

    async def _work(self, sub: Subscription) -> None:
        assert sub.queue is not None
        while not sub.queue.empty():
            event = sub.queue.get_nowait()
            try:
                result = sub.handler(event)
                if inspect.isawaitable(result):
                    await result
            except Exception:
                logger.exception("async event subscriber failed")
            finally:
                sub.queue.task_done()

    async def _drain(self) -> None:
        # Loop until quiet: a handler may have been queued while we waited for another.
        while True:
            workers = [
                s.worker for s in self._queued if s.worker is not None and not s.worker.done()
            ]
            if not workers:
                return
            await asyncio.gather(*workers, return_exceptions=True)

    def flush(self, timeout: float | None = None) -> bool:
        """Block until every event emitted so far was delivered; False on timeout.

        For tests and shutdown; the flow runtime never calls it.
        """
        loop = self._loop
        if loop is None:
            return True
        if self._thread is threading.current_thread():
            raise RuntimeError("flush() called from a subscriber; it would deadlock")
        fut = asyncio.run_coroutine_threadsafe(self._drain(), loop)
        try:
            fut.result(timeout)
        except TimeoutError:
            fut.cancel()
            return False
        return True

    async def aflush(self) -> bool:
        """:meth:`flush` for async callers (waits in a worker thread; wrap in a timeout)."""
        return await asyncio.to_thread(self.flush)

    def __repr__(self) -> str:
        return f"FlowEventBus(subscribers={len(self._subs)}, inline={len(self._inline)})"


flow_event_bus = FlowEventBus()
"""The process-wide default bus every Flow emits on unless given its own."""
