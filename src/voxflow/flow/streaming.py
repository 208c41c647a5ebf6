"""Streaming a run: ``stream = True`` makes kickoff return a :class:`StreamSession`.

The session yields ordered :class:`StreamFrame` objects (``seq`` from 1): one per flow and
method event of the run (channel ``"flow"`` or ``"method"``, type = the event kind) plus
any frame a method adds with ``flow.emit_frame(channel, type, data)`` (e.g. ``"llm"``
chunks). The last frame is ``flow_finished``, ``flow_failed`` or ``flow_paused``; then
:attr:`StreamSession.result` holds the kickoff result (or raises its error).

From sync ``kickoff()`` the run happens on its own thread and frames are read with
``for frame in session`` (or ``session.events``); from ``kickoff_async()`` it is a task on
the caller's loop, read with ``async for frame in session``. Use the session as a
(async) context manager: leaving it waits for the run (sync) or cancels it (async).

A sync run always runs to its end, whoever reads it: a reader that leaves the loop
early (``break``, without ``close()``) leaves the run going on its thread (a thread
cannot be interrupted), the frames it no longer reads are dropped with the session, and
the process waits for the run before it exits, so a persisted turn is stored whole.
"""

from __future__ import annotations

import asyncio
import contextvars
import queue
import threading
import weakref
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from voxflow.flow.events import FlowEvent

__all__ = ["FrameSink", "StreamFrame", "StreamSession", "frame_from_event"]

_END = object()


class StreamFrame(BaseModel):
    """One ordered frame of a streamed run."""

    model_config = ConfigDict(
        frozen=True, extra="forbid", arbitrary_types_allowed=True, defer_build=True
    )

    seq: int = Field(default=0, description="order within the session, from 1")
    channel: str = Field(description='"flow", "method", or a custom channel such as "llm"')
    type: str = Field(description="the event kind, e.g. method_finished or llm_stream_chunk")
    data: dict[str, Any] = Field(default_factory=dict, description="event fields (by reference)")
    event: Any = Field(
        default=None, exclude=True, repr=False,
        description="the typed event the frame stands for (a FlowEvent; an llm or tool "
        "frame's LLMFrame), None for a frame a method added without one",
    )

    @property
    def content(self) -> str | None:
        """The text a text frame carries (``data["content"]``: an ``llm_stream_chunk``'s
        delta, a message's text), None for frames without text."""
        value = self.data.get("content")
        return value if isinstance(value, str) else None


FrameSink = Callable[["StreamFrame"], None]
"""Where a streamed run's frames go (``StreamSession`` installs its own)."""


def frame_from_event(event: FlowEvent, channel: str | None = None) -> StreamFrame:
    """The frame for an event (fields are referenced, not copied), on ``channel``; by
    default a flow event's own: ``method`` for a method's events, else ``flow``."""
    kind = str(getattr(event, "kind", ""))
    if channel is None:
        channel = "method" if kind.startswith("method_") else "flow"
    data = {name: getattr(event, name) for name in type(event).model_fields if name != "kind"}
    return StreamFrame(channel=channel, type=kind, data=data, event=event)


_runs: weakref.WeakSet[threading.Thread] = weakref.WeakSet()
_runs_lock = threading.Lock()
_waits_at_exit = False


def _wait_for_runs_at_exit(thread: threading.Thread) -> None:
    """Have the interpreter's exit wait for ``thread`` (a sync run) *before* it shuts
    the thread pools down: the run still needs them (``asyncio.to_thread``, litellm), and
    ``concurrent.futures`` refuses new work from its own exit hook on ("cannot schedule
    new futures after shutdown"), which runs before non-daemon threads are joined."""
    global _waits_at_exit
    with _runs_lock:
        _runs.add(thread)
        if _waits_at_exit:
            return
        _waits_at_exit = True
        # CPython calls these hooks in reverse order of registration: registered after
        # the pools' own (imported here first), ours waits while the pools still work.
        import concurrent.futures.thread  # noqa: F401

        register = getattr(threading, "_register_atexit", None)
        if register is not None:
            register(_join_runs)


def _join_runs() -> None:
    for thread in list(_runs):
        if thread is not threading.current_thread():
            thread.join()


class StreamSession:
    """Ordered frames of one run, then its result (see module docs)."""

    def __init__(self, attach: Callable[[FrameSink | None], None]) -> None:
        self._attach = attach
        self._seq = 0
        self._sync_queue: queue.SimpleQueue[object] | None = None
        self._async_queue: asyncio.Queue[object] | None = None
        self._done = threading.Event()
        self._result: Any = None
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._task: asyncio.Task[None] | None = None
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ producers

    def _push(self, frame: StreamFrame) -> None:
        with self._lock:
            self._seq += 1
            frame = frame.model_copy(update={"seq": self._seq})
        self._put(frame)

    def _put(self, item: object) -> None:
        if self._sync_queue is not None:
            self._sync_queue.put(item)
        elif self._async_queue is not None:
            self._async_queue.put_nowait(item)

    def _finish(self, result: Any, error: BaseException | None) -> None:
        self._result, self._error = result, error
        self._attach(None)
        self._done.set()
        self._put(_END)

    @classmethod
    def run_sync(
        cls,
        attach: Callable[[FrameSink | None], None],
        make: Callable[[bool], Coroutine[Any, Any, Any]],
    ) -> StreamSession:
        """Start ``make(private_loop)`` on a new thread; frames go to a thread-safe queue.

        ``attach(sink)`` makes the flow send its frames to ``sink`` (None: nowhere); the
        session attaches itself now and detaches when the run ends."""
        session = cls(attach)
        session._sync_queue = queue.SimpleQueue()
        attach(session._push)

        def run() -> None:
            try:
                result = asyncio.run(make(True))
            except BaseException as exc:
                session._finish(None, exc)
            else:
                session._finish(result, None)

        ctx = contextvars.copy_context()
        # Not a daemon: a reader that stops reading (a ``break`` without ``close()``)
        # leaves the run going, and the interpreter waits for it at exit
        # (_wait_for_runs_at_exit). A daemon thread was frozen mid-run there: its turn
        # never saved, and a frozen thread holding the import lock hung the exit.
        session._thread = threading.Thread(
            target=ctx.run, args=(run,), name="voxflow-stream", daemon=False
        )
        _wait_for_runs_at_exit(session._thread)
        session._thread.start()
        return session

    @classmethod
    def run_async(
        cls,
        attach: Callable[[FrameSink | None], None],
        make: Callable[[bool], Coroutine[Any, Any, Any]],
    ) -> StreamSession:
        """Start ``make(False)`` as a task on the running loop (``attach``: as above)."""
        session = cls(attach)
        session._async_queue = asyncio.Queue()
        attach(session._push)

        async def run() -> None:
            try:
                result = await make(False)
            except BaseException as exc:
                session._finish(None, exc)
                if isinstance(exc, asyncio.CancelledError):
                    raise
            else:
                session._finish(result, None)

        def ended(task: asyncio.Task[None]) -> None:
            # A run cancelled before it began never reached run()'s handlers: end its
            # frames here, or their reader waits forever.
            if not session._done.is_set():
                session._finish(None, asyncio.CancelledError())

        session._task = asyncio.get_running_loop().create_task(run(), name="voxflow-stream")
        session._task.add_done_callback(ended)
        return session

    # ------------------------------------------------------------------ consumers

    @property
    def events(self) -> Iterator[StreamFrame]:
        """The frames, blocking until each arrives (sync sessions)."""
        if self._sync_queue is None:
            raise TypeError(
                "this session came from kickoff_async(): use `async for frame in session`"
            )
        while True:
            item = self._sync_queue.get()
            if item is _END:
                return
            assert isinstance(item, StreamFrame)
            yield item

    def __iter__(self) -> Iterator[StreamFrame]:
        return self.events

    async def __aiter__(self) -> AsyncIterator[StreamFrame]:
        if self._async_queue is None:
            raise TypeError("this session came from kickoff(): use `for frame in session`")
        while True:
            item = await self._async_queue.get()
            if item is _END:
                return
            assert isinstance(item, StreamFrame)
            yield item

    @property
    def done(self) -> bool:
        """Whether the run has ended."""
        return self._done.is_set()

    @property
    def result(self) -> Any:
        """The kickoff result; raises the run's error; RuntimeError while still running."""
        if not self._done.is_set():
            raise RuntimeError("the run is still streaming: iterate the frames or call wait()")
        if self._error is not None:
            raise self._error
        return self._result

    def wait(self, timeout: float | None = None) -> Any:
        """Block until the run ends (sync sessions) and return :attr:`result`."""
        if self._thread is not None:
            self._thread.join(timeout)
        elif not self._done.is_set():
            raise RuntimeError("async session: use `await session.aresult()`")
        return self.result

    async def aresult(self) -> Any:
        """Wait for the run (async sessions) and return :attr:`result`."""
        if self._task is not None:
            await asyncio.wait([self._task])
        elif self._thread is not None:
            await asyncio.to_thread(self._thread.join)
        return self.result

    def close(self) -> None:
        """Wait for a sync run to end (a thread cannot be interrupted)."""
        if self._thread is not None:
            self._thread.join()

    def cancel(self) -> None:
        """Request cancellation of an async run without waiting (idempotent; call it on the
        run's loop). Used by ``TurnRunner.interrupt`` to abort an in-flight LLM stream;
        :meth:`aclose` cancels *and* waits."""
        if self._task is not None and not self._task.done():
            self._task.cancel()

    async def aclose(self) -> None:
        """Cancel an async run and wait for it (idempotent)."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
            await asyncio.wait([self._task])
        elif self._thread is not None:
            await asyncio.to_thread(self._thread.join)

    def __enter__(self) -> StreamSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> StreamSession:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"StreamSession(frames={self._seq}, done={self.done})"
