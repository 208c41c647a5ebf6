"""Background jobs written as async functions: declared once, started from a handler in
one line, announced when the speaking floor is free.

::

    @background_job
    async def look_up_order(job: JobContext, order_number: str) -> str:
        await job.sleep(2.0)                    # the session's clock (virtual in tests)
        return f"Order {order_number} has shipped."   # the text to announce

    class Shop(Flow[AssistantState]):
        @listen("order")
        def handle_order(self) -> str:
            look_up_order.start(self, order_number="417")
            return "I'm checking your order."

``start`` fills in what the job needs to be announced: the session (``state.id``), the
origin turn (the turn running now) and the first revision; it registers the record
(:class:`BackgroundJob`, in ``state.jobs``) and submits it to the session's
:class:`~voxflow.jobs.JobRunner`. The function runs on the session's event loop (its
sleeps on the session clock); the string it returns is the job's ``announcement``,
spoken by the session once the floor is free (:func:`announce_jobs`); ``await
job.progress("...")`` announces progress the same way. A job whose result
could never be announced is refused at ``start`` with :class:`JobNotAnnounceableError`
naming the reason.

The session wiring (:class:`voxflow.wiring.AssistantWiring`: ``voxflow demo``, ``chat``,
``serve``, ``run_call``) binds the runner, clock and loop to the flow
(:func:`bind_jobs`); nothing else is needed.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import functools
import inspect
import logging
import weakref
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, overload

from pydantic import JsonValue, TypeAdapter, ValidationError

from voxflow.clock import Clock
from voxflow.errors import JobNotAnnounceableError, ResourceClosedError
from voxflow.flow.dsl import start
from voxflow.flow.saving import set_write_barrier
from voxflow.ids import TurnId
from voxflow.jobs.records import (
    JobState,
    add_job,
)
from voxflow.jobs.results import (
    MAX_PROGRESS_CHARS,
    BackgroundJob,
    check_job_result,
    commit_progress,
)
from voxflow.jobs.runner import JobRunner
from voxflow.jobs.work import JobWorkFlow, JobWorkState, Publisher
from voxflow.storable import check_json, check_text

__all__ = [
    "JobBinding",
    "JobContext",
    "JobFunction",
    "background_job",
    "bind_jobs",
    "job_function",
]

logger = logging.getLogger("voxflow.jobs")

_INPUTS: TypeAdapter[dict[str, JsonValue]] = TypeAdapter(dict[str, JsonValue])

class JobContext:
    """What a running job function gets as its first argument.

    Attributes:
        job: a copy of the job's record (identity, kind, inputs, attempt).
        clock: the session's clock (in a job-worker process: the worker's own).
    """

    def __init__(
        self,
        job: BackgroundJob,
        *,
        clock: Clock,
        progress: Callable[[BackgroundJob, str], Awaitable[bool]],
        stop_requested: Callable[[], bool],
    ) -> None:
        self.job = job
        self.clock = clock
        self._progress = progress
        self._stop_requested = stop_requested

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` on the session's clock (virtual time in deterministic calls)."""
        await self.clock.sleep(seconds)

    async def progress(self, text: str) -> bool:
        """Announce ``text`` while the job goes on ("Still looking, one moment."), when the
        floor is free, like a result; it is dropped if the job's result comes first.

        Returns:
            False when the session is closing (nothing will be said).

        Raises:
            ValueError: ``text`` is empty.
            UnstorableTextError: ``text`` is longer than :data:`MAX_PROGRESS_CHARS` or
                holds a NUL or a lone surrogate (refused alike wherever the job runs).
        """
        if not isinstance(text, str) or not text.strip():
            raise ValueError("progress needs the text to announce")
        text = check_text(text.strip(), f"the progress of background job {self.job.kind}",
                          max_chars=MAX_PROGRESS_CHARS)
        return await self._progress(self.job, text)

    @property
    def stop_requested(self) -> bool:
        """True once the session (or the job worker) is closing: return (or raise) soon."""
        return self._stop_requested()

    def __repr__(self) -> str:
        return f"JobContext(kind={self.job.kind!r}, job_id={self.job.job_id!r})"


JobCallable = Callable[..., Awaitable[str]]


class JobFunction:
    """An async function declared as a background job (see :func:`background_job`).

    Calling it directly (``await fn(ctx, **inputs)``) runs the function; :meth:`start`
    runs it as a job of the flow's session.
    """

    def __init__(self, fn: JobCallable, kind: str) -> None:
        if not inspect.iscoroutinefunction(fn):
            raise TypeError(
                f"@background_job needs an async function, got {getattr(fn, '__name__', fn)!r}"
            )
        if not isinstance(kind, str) or not kind.strip():
            raise ValueError("kind must be a non-empty string")
        self.fn = fn
        self.kind = kind
        self.__doc__ = fn.__doc__
        self.__name__ = fn.__name__
        _REGISTRY.setdefault(kind, []).append(weakref.ref(self))

    async def __call__(self, job: JobContext, /, **inputs: Any) -> str:
        return await self.fn(job, **inputs)

    def start(self, flow: Any, /, **inputs: Any) -> BackgroundJob:
        """Start this job for ``flow``'s session, from one of its turn handlers.

        Args:
            flow: the conversational flow whose handler is running (``self``).
            inputs: the function's keyword arguments (JSON values: they are stored in
                the job record).

        Returns:
            The registered record (``state.jobs[job.job_id]``), status ``queued``.

        Raises:
            JobNotAnnounceableError: no job runner is wired for ``flow``, its state has
                no reply queue or does not hold :class:`BackgroundJob` records, or no turn
                is running (the announcement belongs to the turn that asked).
            TypeError: an input is not a JSON value.
            UnstorableTextError: a text of the inputs holds a NUL or a lone surrogate
                (named: no store keeps it).
        """
        where = f"{self.kind} for {type(flow).__name__}"
        state = flow.state
        problem = _state_problem(state)
        if problem is not None:
            raise JobNotAnnounceableError(f"cannot start {where}: {problem}")
        binding = _BINDINGS.get(flow)
        if binding is None:
            raise JobNotAnnounceableError(
                f"cannot start {where}: no job runner is wired for this flow; run it "
                "through voxflow.wiring.AssistantWiring (voxflow demo/chat/serve and "
                "voxflow_adapters.testkit.scenario.run_call do it for you)"
            )
        turn_id = binding.current_turn()
        if turn_id is None:
            raise JobNotAnnounceableError(
                f"cannot start {where}: no turn is running; start jobs from a turn's "
                "handler (the announcement answers that turn)"
            )
        try:
            values = _INPUTS.validate_python(dict(inputs))
        except ValidationError as exc:
            raise TypeError(f"{where}: inputs must be JSON values ({exc.errors()[0]['msg']})"
                            ) from None
        check_json(values, f"{where}: inputs")  # stored alike by the call and a job queue
        job = BackgroundJob(session_id=state.id, origin_turn_id=turn_id, kind=self.kind,
                            inputs=values)
        if not add_job(state, job):
            raise JobNotAnnounceableError(f"cannot start {where}: the job was not registered")
        binding.functions[job.job_id] = self  # by job: two functions may share a kind
        if binding.submit is not None:  # a job queue: a job-worker process runs it
            # (a turn that may still be undone, a speculative answer: queued at its
            # verdict, never if it is undone, as the runner holds its own admissions)
            # (in the handler's context when it runs later: the job's span stays the
            # handler's child, its log lines the turn's)
            context = contextvars.copy_context()
            if not binding.runner.hand_off_when_final(
                    job, functools.partial(context.run, binding.queue, job, values)):
                binding.queue(job, values)
        else:
            binding.runner.submit(job, values)
        return job

    def __repr__(self) -> str:
        return f"JobFunction({self.kind!r})"


_REGISTRY: dict[str, list[weakref.ref[JobFunction]]] = {}


def _same_declaration(a: Any, b: Any) -> bool:
    """Whether job functions ``a`` and ``b`` are one declaration made twice: the same
    qualified name in the same module (a module or notebook cell run again) or in the
    same source file (a file loaded by path and also imported by its module name)."""
    if a.__qualname__ != b.__qualname__:
        return False
    if a.__module__ == b.__module__:
        return True
    file_a = getattr(getattr(a, "__code__", None), "co_filename", None)
    return bool(file_a) and file_a == getattr(getattr(b, "__code__", None), "co_filename", None)


def job_function(kind: str) -> JobFunction:
    """The job function declared with ``kind`` in this process (a job worker finds the
    function of a queued job by its kind, after importing the flow's module).

    Raises:
        LookupError: no live function has that kind, or two different functions do
            (give one ``kind=``); the same function declared twice is its latest.
    """
    found = [f for ref in _REGISTRY.get(kind, []) if (f := ref()) is not None]
    # the same function declared again (a module or a notebook cell run twice, or one
    # file both loaded by path and imported by its module name): the latest
    # declaration; two different functions of one kind: ambiguous
    if any(not _same_declaration(f.fn, found[-1].fn) for f in found):
        raise LookupError(f"two background job functions share the kind {kind!r}: give "
                          "one of them its own @background_job(kind=...)")
    if not found:
        raise LookupError(f"no background job function of kind {kind!r} here: the job "
                          "worker must load the flow (or module) that declares it")
    return found[-1]


@overload
def background_job(fn: JobCallable, /) -> JobFunction: ...


@overload
def background_job(*, kind: str | None = None) -> Callable[[JobCallable], JobFunction]: ...


def background_job(
    fn: JobCallable | None = None, /, *, kind: str | None = None
) -> JobFunction | Callable[[JobCallable], JobFunction]:
    """Declare an async function ``fn(job: JobContext, **inputs) -> str`` as a background
    job; the returned text is announced. ``kind`` labels its records (default: the
    function's module and name).

    Use as ``@background_job`` or ``@background_job(kind="order_lookup")``.
    """

    def wrap(f: JobCallable) -> JobFunction:
        return JobFunction(f, kind if kind is not None else f"{f.__module__}.{f.__qualname__}")

    return wrap(fn) if fn is not None else wrap


_REPLY_QUEUE_FIELDS = ("deliveries", "covered_updates", "delivery_floor", "delivery_sequence")


def _state_problem(state: Any) -> str | None:
    # The reply queue's fields, not its class: voxflow.replies builds on jobs, not the
    # reverse (ReplyQueueState declares exactly these).
    fields = getattr(type(state), "model_fields", {})
    if not all(name in fields for name in _REPLY_QUEUE_FIELDS):
        return ("its state has no reply queue to announce the result; derive the state "
                "from voxflow.wiring.AssistantState")
    if not isinstance(state, JobState):
        return "its state holds no jobs; derive the state from voxflow.wiring.AssistantState"
    annotation = type(state).model_fields["jobs"].annotation
    if "BackgroundJob" not in str(annotation):
        return (f"its state holds {annotation} records, not BackgroundJob; derive the state "
                "from voxflow.wiring.AssistantState")
    return None


@dataclass(slots=True, eq=False)
class JobBinding:
    """What runs a flow's background jobs: its JobRunner, clock, loop and turn ledger.

    Built by the session wiring (:func:`bind_jobs`); ``make_work`` is the runner's.
    """

    clock: Clock
    current_turn: Callable[[], TurnId | None]
    loop: asyncio.AbstractEventLoop
    runner: JobRunner = field(init=False)
    notify: Callable[[dict[str, Any]], Awaitable[Any]] | None = None
    functions: dict[str, JobFunction] = field(default_factory=dict)
    submit: Callable[[BackgroundJob, dict[str, JsonValue]], object] | None = None
    """Set when a job queue runs the jobs (job-worker processes), instead of the runner."""
    pending: set[asyncio.Future[Any]] = field(default_factory=set)
    """Queue submissions handed to a thread from the event loop, not finished yet (and
    the failures they record)."""
    submitting: set[asyncio.Future[Any]] = field(default_factory=set)
    """The submissions alone: each state write of the flow waits for them (:meth:`queued`)."""
    unqueued: dict[str, BaseException] = field(default_factory=dict)
    """Jobs whose submission failed, until their record is no longer ``queued``."""

    def queue(self, job: BackgroundJob, inputs: dict[str, JsonValue]) -> None:
        """Hand ``job`` to ``submit`` (a blocking database round trip) without blocking
        an event loop: from a sync handler (a worker thread) it is called here, its error
        raised to the handler; from an async handler (on the running loop) it runs in a
        thread, and a failure marks the job ``failed`` (the turn has its queued record).

        The flow's state writes wait for the submissions (:meth:`queued`, its write
        barrier): a stored session never holds a ``queued`` job that is not in the queue,
        even when the process dies right after the turn's save. (A job of a turn that
        may still be undone is queued at its verdict, :meth:`JobRunner.hand_off_when_final`:
        a session stored before it holds the job ``queued``, and its next owner queues it
        again.)"""
        submit = self.submit
        assert submit is not None
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            submit(job, inputs)
            return
        # in the handler's context (as asyncio.to_thread): its trace goes in the job's
        # row, so the job worker's span joins the turn's; its ids on the thread's lines
        context = contextvars.copy_context()
        future = running.run_in_executor(None, context.run, submit, job, inputs)
        self.pending.add(future)
        self.submitting.add(future)
        future.add_done_callback(functools.partial(self._queued, job.job_id))

    async def queued(self) -> None:
        """The flow's write barrier: wait for the submissions in flight (never for the
        state lock: a turn saves holding it).

        Raises:
            Exception: the error of a failed submission whose job is still ``queued`` in
                the state (its failure not recorded yet): that state must not be stored.
        """
        while self.submitting:  # (their failures are _queued's: kept in unqueued)
            await asyncio.wait(self.submitting)
        jobs = getattr(self.runner.state, "jobs", {}) if hasattr(self, "runner") else {}
        for job_id, error in list(self.unqueued.items()):
            job = jobs.get(job_id)
            if job is None or job.status != "queued":
                del self.unqueued[job_id]
            else:
                raise error

    def _queued(self, job_id: str, future: asyncio.Future[Any]) -> None:
        self.pending.discard(future)
        self.submitting.discard(future)
        if future.cancelled() or future.exception() is None:
            return
        exc = future.exception()
        assert exc is not None
        self.unqueued[job_id] = exc
        error = f"not queued: {exc}"
        logger.warning("background job %s %s", job_id, error)
        task = self.loop.create_task(self.runner.fail_job(job_id, error))
        self.pending.add(task)
        task.add_done_callback(self.pending.discard)
        task.add_done_callback(_log_failure)

    async def drain(self) -> None:
        """Wait for the queue submissions still in flight (a call closing)."""
        while self.pending:  # (a failure is logged, or kept in unqueued, as it happens)
            await asyncio.wait(self.pending)

    async def announce_progress(self, parent: BackgroundJob, text: str) -> bool:
        """Commit a completed progress record of ``parent`` whose announcement is ``text``
        (:func:`commit_progress`), then notify the session. Runs on the session loop."""
        async with self.runner.state_lock:
            if self.runner.closed or commit_progress(self.runner.state, parent, text) is None:
                return False
        if self.notify is not None:
            await self.notify(self.runner.snapshot())
        return True

    def make_work(self, job: Any, inputs: dict[str, Any], publish: Publisher) -> Any:
        """``JobRunner``'s ``make_work``: the worker that runs one job's function."""
        function = self.functions.get(job.job_id)
        if function is None or not isinstance(job, BackgroundJob):
            raise LookupError(f"no background job function started job {job.job_id} "
                              f"({job.kind!r}) here")
        work: Any = _work_class()(state=JobWorkState[BackgroundJob](job=job), publish=publish,
                                  suppress_flow_events=True)
        work.binding = self
        work.function = function
        work.inputs = dict(inputs)
        # the worker's thread hops (its start, its result's commit) take no time on a
        # virtual clock: held until the function starts, then from its return until
        # its result is committed and offered for announcement
        work.hold = _Hold(self.clock, self.loop)
        return work


_BINDINGS: weakref.WeakKeyDictionary[Any, JobBinding] = weakref.WeakKeyDictionary()


class _Hold:
    """A hold of a virtual ``clock`` (nothing for another clock), taken on the loop when
    made or by :meth:`take`, released from any thread (idempotent)."""

    def __init__(self, clock: Clock, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._hold = getattr(clock, "hold", None)
        self._held: Any = None
        self.take()

    def take(self) -> None:
        """Hold the clock (on the loop)."""
        if self._hold is not None and self._held is None:
            self._held = self._hold()
            self._held.__enter__()

    def _release(self) -> None:
        held, self._held = self._held, None
        if held is not None:
            held.__exit__(None, None, None)

    def release(self) -> None:
        """Let the clock move again (from the loop or a thread)."""
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            self._release()
        else:
            with contextlib.suppress(RuntimeError):  # the loop is closed
                self._loop.call_soon_threadsafe(self._release)


def _log_failure(task: asyncio.Future[Any]) -> None:
    """A failed job's failure record that could not be written, logged as it ends
    (:meth:`JobBinding.drain` only waits for it)."""
    if not task.cancelled() and (failure := task.exception()) is not None:
        logger.error("recording a job's failure failed", exc_info=failure)


def bind_jobs(flow: Any, binding: JobBinding) -> None:
    """Let ``flow``'s handlers start jobs on ``binding`` (the session wiring calls it);
    the flow's state writes wait for the jobs handed to a queue (:meth:`JobBinding.queued`)."""
    _BINDINGS[flow] = binding
    set_write_barrier(flow, binding.queued)


@functools.cache
def _work_class() -> type[JobWorkFlow[Any]]:
    """The worker flow class, built on first use (``import voxflow.jobs`` builds no model)."""

    class _FunctionWork(JobWorkFlow[JobWorkState[BackgroundJob]]):
        """Runs a job function on the session loop and publishes its stages and result."""

        binding: JobBinding | None = None
        function: JobFunction | None = None
        inputs: Mapping[str, Any] = {}
        hold: _Hold | None = None
        _future: concurrent.futures.Future[str] | None = None

        @start()
        def run(self) -> None:
            binding, function, hold = self.binding, self.function, self.hold
            assert binding is not None and function is not None and hold is not None
            self._run_job(binding, function, hold)

        def kickoff(self, *args: Any, **kwargs: Any) -> Any:
            try:
                return super().kickoff(*args, **kwargs)
            finally:  # (however the worker ended)
                if self.hold is not None:
                    self.hold.release()

        def _run_job(self, binding: JobBinding, function: JobFunction, hold: _Hold) -> None:
            self.check_open()
            self.publish_update("started")
            self.publish_update("stage_started", stage="run")
            job: BackgroundJob = self.state.job
            context = JobContext(job.model_copy(deep=True), clock=binding.clock,
                                 progress=binding.announce_progress,
                                 stop_requested=lambda: self.stop_requested)

            async def call() -> str:  # on the loop: the clock moves while it runs
                hold.release()
                try:
                    return await function(context, **self.inputs)
                finally:
                    hold.take()  # until its result is committed and offered

            self._future = asyncio.run_coroutine_threadsafe(call(), binding.loop)
            if self.stop_requested:
                self._future.cancel()
            try:
                text = self._future.result()
            except concurrent.futures.CancelledError:
                raise ResourceClosedError("the session closed while the job ran") from None
            text = check_job_result(function.kind, text)
            self.check_open()
            self.publish_update("stage_completed", stage="run", outputs={"announcement": text})
            self.publish_update("completed")

        def request_stop(self) -> None:
            super().request_stop()
            if self._future is not None:
                self._future.cancel()

    return _FunctionWork
