"""One deadline-aware scheduler for the model work of every call in the process.

Whisper and Piper are shared by all calls; what matters is *which* call's work runs
next on the few cores. A first-come thread pool runs a call's later reply sentences
before another call's finished turn, so every turn waits behind everyone's playout.
:class:`ModelScheduler` instead runs each job by its :class:`Work` ticket:

* ``urgent``: STT of a finished turn and the *first* clause of a reply: someone is
  waiting in silence; due the moment it is submitted;
* ``ahead``: later clauses of a reply, due when playout will need them
  (``slack`` seconds from submission: the audio still queued ahead of the listener);
* ``speculative``: an STT at a pause (the turn may not end) or a reply held until its
  turn is confirmed: due :data:`SPECULATIVE_SLACK` after submission at the earliest
  (about when the turn would end), so it yields to urgent work submitted meanwhile and
  to clauses whose playout runs dry sooner, and goes before clauses with seconds of
  audio still queued; :meth:`Work.update` makes it urgent when the turn ends on that
  very audio.

Jobs wait in per-call queues; a free worker takes, of the queued jobs, the one with
the earliest deadline, among jobs whose resource has room: a
resource (``stt``) is a model that runs one job at a time (faster-whisper's CTranslate2
model has one replica, so a second decode would only block a worker). Work already
running is never interrupted (onnxruntime and CTranslate2 cannot stop mid-run); jobs
are short (a sentence, an utterance of a few seconds), but on a loaded machine a
sentence takes a second or two: so besides the workers, ``urgent_lanes`` threads (one
by default) run urgent jobs only, and a turn's STT or a reply's first clause never waits
for a worker to finish someone's later sentence (the lane shares the cores with the
workers meanwhile: at most workers + lanes model threads, never one per call).

Bounded threads: ``workers`` threads run model work (the number of cores by default),
and each model is loaded with few intra-op threads (Piper 1, Whisper
``SttSettings.cpu_threads``), so N calls never start N x cores threads. The ticket of
the work being submitted travels in a context variable (:func:`scheduled`), so the
engines' signatures stay the same: the session and the speaker say how urgent their
work is, the engines only run it.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import itertools
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal, ParamSpec, TypeVar

__all__ = [
    "SPECULATIVE_SLACK",
    "WAIT_WINDOW",
    "ModelScheduler",
    "SchedulerStatistics",
    "Urgency",
    "Work",
    "current_work",
    "scheduled",
]

Urgency = Literal["urgent", "ahead", "speculative"]
SPECULATIVE_SLACK = 1.0
"""Seconds after submission a speculative job is due, at the earliest: a pause's STT
would be needed when the turn ends (end-of-turn silence after the pause), and anything
urgent that comes meanwhile goes first."""
_URGENCIES: tuple[Urgency, ...] = ("urgent", "ahead", "speculative")

logger = logging.getLogger(__name__)

_P = ParamSpec("_P")
_T = TypeVar("_T")


class Work:
    """How urgent a piece of model work is, and whose it is (a mutable ticket).

    One ticket may cover several jobs (every sentence of a clause); :meth:`update`
    reorders its queued jobs at once, and its jobs submitted later see the new values.

    Args:
        call: the call the work is for (its per-call queue).
        urgency: ``urgent``, ``ahead`` or ``speculative``.
        slack: seconds from submission until the result is needed (``ahead`` work:
            the audio queued ahead of playout); 0 for urgent work.

    Raises:
        ValueError: an unknown urgency or a negative or non-finite slack.
    """

    __slots__ = ("_lock", "_schedulers", "call", "slack", "urgency")

    def __init__(self, call: str = "", urgency: Urgency = "urgent", slack: float = 0.0) -> None:
        _check(urgency, slack)
        self.call = str(call)
        self.urgency: Urgency = urgency
        self.slack = float(slack)
        self._lock = threading.Lock()
        self._schedulers: list[ModelScheduler] = []

    def update(self, urgency: Urgency | None = None, slack: float | None = None) -> None:
        """Change the urgency or the slack; queued jobs of this ticket are reordered
        (their deadline becomes now + slack)."""
        new_urgency = self.urgency if urgency is None else urgency
        new_slack = self.slack if slack is None else float(slack)
        _check(new_urgency, new_slack)
        self.urgency, self.slack = new_urgency, new_slack
        with self._lock:
            schedulers = list(self._schedulers)
        for scheduler in schedulers:
            scheduler._reorder(self)

    def _attach(self, scheduler: ModelScheduler) -> None:
        with self._lock:
            if scheduler not in self._schedulers:
                self._schedulers.append(scheduler)

    def __repr__(self) -> str:
        return f"Work(call={self.call!r}, urgency={self.urgency!r}, slack={self.slack:.2f})"


def _slack(work: Work) -> float:
    if work.urgency == "speculative":
        return max(work.slack, SPECULATIVE_SLACK)
    return work.slack


def _check(urgency: object, slack: float) -> None:
    if urgency not in _URGENCIES:
        raise ValueError(f"urgency must be one of {_URGENCIES}, got {urgency!r}")
    if not (slack >= 0.0 and slack < float("inf")):
        raise ValueError(f"slack must be a finite number of seconds >= 0, got {slack!r}")


_current: contextvars.ContextVar[Work | None] = contextvars.ContextVar(
    "voxflow_model_work", default=None
)


def current_work() -> Work | None:
    """The ticket :func:`scheduled` set in this context, if any."""
    return _current.get()


@contextlib.contextmanager
def scheduled(work: Work) -> Iterator[Work]:
    """Model work submitted inside the block (tasks created in it too) uses ``work``."""
    if not isinstance(work, Work):
        raise TypeError(f"work must be a Work, got {type(work).__name__}")
    token = _current.set(work)
    try:
        yield work
    finally:
        _current.reset(token)


@dataclass(frozen=True, slots=True)
class SchedulerStatistics:
    """What a :class:`ModelScheduler` has done so far.

    Attributes:
        workers: worker threads (urgent lanes not counted).
        running: jobs running now.
        queued: jobs waiting now, by urgency.
        completed: jobs finished, by urgency.
        waited_p95_ms: 95th percentile of the time jobs waited in the queue (the jobs
            started in the last :data:`WAIT_WINDOW` seconds, at most 256), by urgency;
            absent for an urgency without such jobs.
        late: ``ahead`` jobs that started after their deadline.
        busy_seconds: worker time spent running jobs.
    """

    workers: int
    running: int
    queued: Mapping[Urgency, int]
    completed: Mapping[Urgency, int]
    waited_p95_ms: Mapping[Urgency, float]
    late: int
    busy_seconds: float


class _Job:
    __slots__ = ("call", "cancelled", "deadline", "done", "fn", "resource", "seq", "submitted",
                 "work")

    def __init__(self, fn: Callable[[], Any], work: Work, resource: str | None, seq: int,
                 now: float, done: Callable[[bool, Any], None]) -> None:
        self.fn = fn
        self.work = work
        self.call = work.call
        self.resource = resource
        self.seq = seq
        self.submitted = now
        self.deadline = now + _slack(work)
        self.done = done
        self.cancelled = False

    def key(self) -> tuple[int, float, int]:
        return (0, self.deadline, self.seq)


_RECENT = 256  # waits kept per urgency for the p95
WAIT_WINDOW = 60.0
"""Seconds a job's queue wait counts in :attr:`SchedulerStatistics.waited_p95_ms`: an
overload that has passed no longer shows (a count alone kept it for good on a server
that went quiet)."""


class ModelScheduler:
    """Runs blocking model calls on ``workers`` threads, earliest deadline first.

    Args:
        workers: worker threads (the machine's CPU count if ``None``).
        urgent_lanes: extra threads that run urgent jobs only.
        limits: resources that run at most that many jobs at once (``{"stt": 1}``:
            one Whisper decode at a time, its model has one replica).
        clock: seconds, for deadlines (``time.monotonic``; tests pass their own).

    Raises:
        ValueError: ``workers`` < 1 or a limit < 1.
    """

    def __init__(
        self, workers: int | None = None, *, urgent_lanes: int = 1,
        limits: Mapping[str, int] | None = None, clock: Callable[[], float] = time.monotonic,
    ) -> None:
        count = workers if workers is not None else (os.cpu_count() or 2)
        if not isinstance(count, int) or count < 1:
            raise ValueError(f"workers must be an int >= 1, got {workers!r}")
        if not isinstance(urgent_lanes, int) or urgent_lanes < 0:
            raise ValueError(f"urgent_lanes must be an int >= 0, got {urgent_lanes!r}")
        self.urgent_lanes = urgent_lanes
        limits = dict(limits) if limits is not None else {"stt": 1}
        for name, limit in limits.items():
            if not isinstance(limit, int) or limit < 1:
                raise ValueError(f"limit of resource {name!r} must be an int >= 1, got {limit!r}")
        self.workers = count
        self._limits = limits
        self._clock = clock
        self._cond = threading.Condition()
        self._queues: dict[str, list[_Job]] = {}
        self._in_use: dict[str, int] = {}
        self._running = 0
        self._seq = itertools.count()
        self._completed = dict.fromkeys(_URGENCIES, 0)
        self._waits: dict[Urgency, deque[tuple[float, float]]] = {
            u: deque(maxlen=_RECENT) for u in _URGENCIES}  # (started, waited)
        self._late = 0
        self._busy = 0.0
        self._closed = False
        self._threads: list[threading.Thread] = []

    # -- submitting -------------------------------------------------------------------

    async def run(self, fn: Callable[_P, _T], /, *args: _P.args, **kwargs: _P.kwargs) -> _T:
        """Run ``fn(*args, **kwargs)`` on a worker when its turn comes; its result.

        The ticket is the context's (:func:`scheduled`), else an urgent one; a
        ``resource=`` keyword is not passed on (use :meth:`run_on`). Cancelling the
        awaiting task drops a queued job; a running one finishes and is discarded.
        """
        return await self.run_on(None, fn, *args, **kwargs)

    async def run_on(
        self, resource: str | None, fn: Callable[_P, _T], /, *args: _P.args, **kwargs: _P.kwargs
    ) -> _T:
        """:meth:`run` on a limited ``resource`` (e.g. ``"stt"``)."""
        work = _current.get() or Work()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[_T] = loop.create_future()

        def settle(ok: bool, value: Any) -> None:
            if future.done():
                return
            if ok:
                future.set_result(value)
            else:
                future.set_exception(value)

        def done(ok: bool, value: Any) -> None:
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(settle, ok, value)

        context = contextvars.copy_context()
        job = self.submit(lambda: context.run(fn, *args, **kwargs), work,
                          resource=resource, done=done)
        try:
            return await future
        except asyncio.CancelledError:
            self.cancel(job)
            raise

    def submit(self, fn: Callable[[], Any], work: Work, *, resource: str | None = None,
               done: Callable[[bool, Any], None]) -> object:
        """Queue ``fn`` (thread-level API): ``done(ok, result_or_exception)`` is called
        from the worker. Returns a handle for :meth:`cancel`.

        Raises:
            RuntimeError: the scheduler is closed.
        """
        if not isinstance(work, Work):
            raise TypeError(f"work must be a Work, got {type(work).__name__}")
        work._attach(self)
        with self._cond:
            if self._closed:
                raise RuntimeError("the ModelScheduler is closed")
            self._start_workers()
            job = _Job(fn, work, resource, next(self._seq), self._clock(), done)
            self._queues.setdefault(job.call, []).append(job)
            self._cond.notify_all()  # a lane woken for a job it may not run must not eat it
        return job

    def cancel(self, handle: object) -> bool:
        """Drop a queued job (True); a running or finished one is left alone (False)."""
        with self._cond:
            if not isinstance(handle, _Job) or handle.cancelled:
                return False
            queue = self._queues.get(handle.call)
            if queue is None or handle not in queue:
                return False
            queue.remove(handle)
            if not queue:
                del self._queues[handle.call]
            handle.cancelled = True
            return True

    def _reorder(self, work: Work) -> None:
        with self._cond:
            now = self._clock()
            for job in self._queues.get(work.call, ()):
                if job.work is work:
                    job.deadline = now + _slack(work)
            self._cond.notify_all()

    # -- running ----------------------------------------------------------------------

    def _start_workers(self) -> None:
        while len(self._threads) < self.workers + self.urgent_lanes:
            lane = len(self._threads) >= self.workers
            thread = threading.Thread(
                target=self._work, args=(lane,), daemon=True,
                name=f"voxflow-model-{'urgent-' if lane else ''}{len(self._threads)}")
            self._threads.append(thread)
            thread.start()

    def _next(self, urgent_only: bool = False) -> _Job | None:
        """The queued job to run next (the caller holds the condition)."""
        best: _Job | None = None
        for queue in self._queues.values():
            for job in queue:  # a call queues a few jobs: a scan beats keeping heaps fresh
                if urgent_only and job.work.urgency != "urgent":
                    continue
                limit = self._limits.get(job.resource) if job.resource is not None else None
                if limit is not None and self._in_use.get(job.resource or "", 0) >= limit:
                    continue
                if best is None or job.key() < best.key():
                    best = job
        return best

    def _work(self, urgent_only: bool) -> None:
        while True:
            with self._cond:
                job = self._next(urgent_only)
                while job is None:
                    # closed: a lane leaves the rest to the workers; a worker stays while
                    # any job is queued (waiting for a resource another thread holds)
                    if self._closed and (urgent_only or not self._queues):
                        return
                    self._cond.wait()
                    job = self._next(urgent_only)
                queue = self._queues[job.call]
                queue.remove(job)
                if not queue:
                    del self._queues[job.call]
                if job.resource is not None:
                    self._in_use[job.resource] = self._in_use.get(job.resource, 0) + 1
                self._running += 1
                started = self._clock()
                urgency = job.work.urgency
                self._waits[urgency].append((started, started - job.submitted))
                if urgency == "ahead" and started > job.deadline:
                    self._late += 1
            begun = time.perf_counter()
            try:
                ok, value = True, job.fn()
            except BaseException as exc:  # handed to the awaiting task
                ok, value = False, exc
            elapsed = time.perf_counter() - begun
            with self._cond:
                self._running -= 1
                self._busy += elapsed
                self._completed[urgency] += 1
                if job.resource is not None:
                    self._in_use[job.resource] -= 1
                self._cond.notify_all()
            try:
                job.done(ok, value)
            except Exception:  # the submitter's callback: the worker must live on
                logger.exception("a model job's done callback failed")

    # -- state --------------------------------------------------------------------------

    def statistics(self) -> SchedulerStatistics:
        """Running and queued jobs, completed ones, queue waits, late ``ahead`` jobs."""
        with self._cond:
            queued = dict.fromkeys(_URGENCIES, 0)
            for queue in self._queues.values():
                for job in queue:
                    queued[job.work.urgency] += 1
            horizon = self._clock() - WAIT_WINDOW
            waits = {}
            for urgency, kept in self._waits.items():
                while kept and kept[0][0] < horizon:
                    kept.popleft()
                if kept:
                    waits[urgency] = _p95([wait for _, wait in kept]) * 1000.0
            return SchedulerStatistics(
                workers=self.workers, running=self._running, queued=queued,
                completed=dict(self._completed), waited_p95_ms=waits, late=self._late,
                busy_seconds=self._busy,
            )

    def close(self) -> None:
        """Stop the workers once the queued jobs have run (new submissions fail)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            threads = list(self._threads)
        for thread in threads:
            if thread is not threading.current_thread():
                thread.join()

    def __repr__(self) -> str:
        s = self.statistics()
        return (f"ModelScheduler(workers={s.workers}, running={s.running}, "
                f"queued={sum(s.queued.values())})")


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
