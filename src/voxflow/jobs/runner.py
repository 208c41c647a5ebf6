"""JobRunner: admits jobs, runs their workers in threads, commits their updates.

**The lock model.** ``JobRunner.state_lock`` is the one ``asyncio.Lock`` of a session's
state. Hold it for:

* every foreground turn, for the whole iteration of ``TurnRunner.astream_turn``;
* every parent-state mutation: ``add_job`` + ``submit``, ``ReplyQueue`` operations,
  your own edits of ``flow.state``;
* (the runner holds it itself) every commit of a worker update.

Never hold it across an ``await`` of something that needs it (``on_update`` is called
*after* the lock is released, so a subscriber may take it), and never take it inside
``TurnRunner.interrupt`` paths: interruption has its own thread-safe lock and must work
while a turn holds ``state_lock``. Worker updates therefore wait while a foreground turn
runs; that is the point: a turn sees one consistent state. Never hold it while waiting
for the call's clock or its audio (a user's verdict on a speculative answer): a job's
result is committed the moment it is ready, and its clock is held until then. A turn
that may still be undone holds its jobs' admissions instead (:meth:`JobRunner.hold_admissions`;
a job queue's submissions too, :meth:`JobRunner.hand_off_when_final`); its rollback
(:class:`~voxflow.flow.RollbackPoint`) keeps the updates committed meanwhile.

Workers are sync flows run by ``kickoff()`` in a thread (``asyncio.to_thread``); each
``publish_update`` is a blocking round-trip through the runner's processor task, which
commits with :func:`~voxflow.jobs.records.commit_job_update` and then awaits
``on_update(snapshot)``. Closing (``request_close`` then ``aclose``) stops admission,
releases blocked publishers (they get False), asks every worker to stop at its next
stage boundary and awaits the worker tasks. An in-flight provider call inside a worker
is not aborted. Restoring a snapshot never restarts work.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import inspect
import logging
import threading
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from voxflow import telemetry
from voxflow.jobs.records import JobRecord, JobState, JobUpdate, commit_job_update, job_copy
from voxflow.jobs.work import JobWorkFlow, Publisher
from voxflow.logs import log_scope
from voxflow.storable import storable_text

__all__ = ["JobRunner", "MakeWork"]

logger = logging.getLogger("voxflow.jobs")

MakeWork = Callable[[Any, dict[str, Any], Publisher], JobWorkFlow[Any]]
"""``make_work(job_copy, inputs, publish)`` builds the worker flow for one job."""

_Command = tuple[str, Any, Any]


class JobRunner:
    """Run background jobs of one session and commit their updates into its state.

    Args:
        state: the session state (a ``JobState``, usually also a conversation state).
        make_work: builds a non-streaming :class:`JobWorkFlow` for a job copy.
        on_update: awaited with a JSON-compatible snapshot (``session_id``, ``seq``,
            ``jobs``) after every admission and every accepted update.
        on_worker_event: optional (sync or async) observer of worker start/settlement.
        format_error: turns a worker exception into the stored error text (redaction).

    Raises:
        RuntimeError: not constructed on a running event loop.
        TypeError: a malformed argument.
    """

    def __init__(
        self,
        state: JobState[Any],
        make_work: MakeWork,
        on_update: Callable[[dict[str, Any]], Awaitable[Any]],
        on_worker_event: Callable[[dict[str, Any]], Any] | None = None,
        format_error: Callable[[BaseException], str] = str,
    ) -> None:
        if not isinstance(state, JobState):
            raise TypeError(f"state must be a JobState, got {type(state).__name__}")
        for name, fn in (("make_work", make_work), ("on_update", on_update)):
            if not callable(fn):
                raise TypeError(f"{name} must be callable")
        if on_worker_event is not None and not callable(on_worker_event):
            raise TypeError("on_worker_event must be callable or None")
        if not callable(format_error):
            raise TypeError("format_error must be callable")
        try:
            self._loop = asyncio.get_running_loop()
        except RuntimeError:
            raise RuntimeError(
                "JobRunner must be constructed on a running event loop (inside async code)"
            ) from None
        self.state = state
        self.state_lock = asyncio.Lock()
        """The session's one state lock (see the module docs for who holds it when)."""
        self._make_work = make_work
        self._on_update = on_update
        self._on_worker_event = on_worker_event
        self._format_error = format_error
        self._queue: asyncio.Queue[_Command] = asyncio.Queue()
        self._processor: asyncio.Task[None] | None = None
        self._workers: dict[str, tuple[JobWorkFlow[Any], asyncio.Task[None]]] = {}
        self._waiting: set[concurrent.futures.Future[bool]] = set()
        self._closing = False
        # origin turn → admissions (and hand-offs) waiting for that turn's verdict
        # (hold_admissions); a handler's thread keeps hand-offs in it: under the lock
        self._held: dict[str, list[_Command]] = {}
        self._held_lock = threading.Lock()
        self._asked: dict[str, Callable[[], None]] = {}  # origin turn → told of its first job

    # -- public API -------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """True once :meth:`request_close` (or :meth:`aclose`) was called."""
        return self._closing

    @property
    def waiting_updates(self) -> int:
        """How many worker updates are waiting for their commit (blocked publishers)."""
        return len(self._waiting)

    def submit(self, job: JobRecord, inputs: Mapping[str, Any] | None = None) -> None:
        """Queue the admission of a registered, queued job (thread-safe, non-blocking).

        Admission (on the runner's loop) requires: the runner open, the job registered
        and still ``queued`` with the same session, revision and attempt, and no worker
        already running it. Rejections are logged at DEBUG.
        """
        if not isinstance(job, JobRecord):
            raise TypeError(f"job must be a JobRecord, got {type(job).__name__}")
        if inputs is not None and not isinstance(inputs, Mapping):
            raise TypeError("inputs must be a mapping or None")
        command: _Command = ("admit", job_copy(job), dict(inputs or {}))
        self._send(command)

    async def fail_job(self, job_id: str, error: str) -> None:
        """Settle ``job_id`` as failed with ``error`` unless it already settled: a job
        whose work never started or never finished (its worker could not be built, or a
        job queue refused it). Committed under :attr:`state_lock` through the same rules
        as a worker's updates (the next ``seq`` of its revision and attempt); subscribers
        are notified when it lands. An unknown ``job_id`` is ignored."""
        error = storable_text(error)  # kept whatever it holds, alike on every backend
        async with self.state_lock:
            job = self.state.jobs.get(job_id)
            if job is None or job.status in ("completed", "failed"):
                return
            update = JobUpdate(
                session_id=job.session_id,
                job_id=job.job_id,
                revision=job.revision,
                attempt=job.attempt,
                seq=job.last_update_seq + 1,
                kind="failed",
                error=error,
            )
            accepted = commit_job_update(self.state, update)
        if accepted:
            await self._notify()

    def snapshot(self) -> dict[str, Any]:
        """JSON-compatible records of every job (what ``on_update`` receives)."""
        return {
            "session_id": self.state.id,
            "seq": self.state.job_sequence,
            "jobs": [job.model_dump(mode="json") for job in self.state.jobs.values()],
        }

    def hold_admissions(self, turn_id: str, *, asked: Callable[[], None] | None = None) -> None:
        """Admit no job asked for by ``turn_id`` until :meth:`release_admissions`: the
        turn may still be undone (a speculative answer waiting for its verdict), and a
        job must not start for a turn that never was. Other jobs' admissions and every
        worker update go on meanwhile.

        Args:
            asked: called (on the loop) when the turn asks for its first job meanwhile (an
                admission, or a hand-off to a job queue): a turn that acts on the world may
                want to be final at once.

        Raises:
            TypeError: ``asked`` is neither None nor callable.
        """
        if asked is not None and not callable(asked):
            raise TypeError(f"asked must be callable or None, got {type(asked).__name__}")
        with self._held_lock:
            self._held.setdefault(str(turn_id), [])
            if asked is not None:
                self._asked[str(turn_id)] = asked

    def release_admissions(self, turn_id: str) -> None:
        """Admit the jobs ``turn_id`` asked for while held (idempotent): each is admitted
        if still registered and queued (a job of a turn that was undone is not); so is
        each hand-off kept by :meth:`hand_off_when_final`, called here."""
        with self._held_lock:
            commands = self._held.pop(str(turn_id), [])
            self._asked.pop(str(turn_id), None)
        for command in commands:
            if command[0] != "hand_off":
                self._send(command)
                continue
            job, hand_off = command[1], command[2]
            current = self.state.jobs.get(job.job_id)
            if (current is None or current.status != "queued"
                    or (current.session_id, current.revision, current.attempt)
                    != (job.session_id, job.revision, job.attempt)):
                logger.debug("job hand-off dropped: its turn was undone",
                             extra={"voxflow": {"job_id": job.job_id}})
                continue
            hand_off()

    def hand_off_when_final(self, job: JobRecord, hand_off: Callable[[], object]) -> bool:
        """Keep ``hand_off`` (what gives ``job`` to something else to run: a job queue's
        submission) until the verdict of ``job``'s origin turn if that turn's admissions
        are held (:meth:`hold_admissions`), as an admission is kept: at
        :meth:`release_admissions` it is called if the job is still registered and
        queued, dropped if its turn was undone. Thread-safe (a handler's thread).

        Returns:
            False when the turn is not held (nothing kept): call ``hand_off`` now.
        """
        if not isinstance(job, JobRecord):
            raise TypeError(f"job must be a JobRecord, got {type(job).__name__}")
        if not callable(hand_off):
            raise TypeError("hand_off must be callable")
        origin = job.origin_turn_id
        with self._held_lock:
            held = self._held.get(str(origin)) if origin is not None else None
            if held is None:
                return False
            held.append(("hand_off", job_copy(job), hand_off))
            asked = self._asked.pop(str(origin), None)
        if asked is not None:
            self._tell_asked(asked)
        return True

    def _tell_asked(self, asked: Callable[[], None]) -> None:
        """Call a held turn's ``asked`` on the loop (from the loop or a handler's thread)."""
        def call() -> None:
            try:
                asked()
            except Exception:  # a broken observer must not stop the runner
                logger.exception("a held admission's callback failed")

        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            call()
        else:
            with contextlib.suppress(RuntimeError):  # (the loop is closed)
                self._loop.call_soon_threadsafe(call)

    def request_close(self) -> None:
        """Stop admission and publication, release waiting publishers, stop workers.

        Call it on the owning loop before draining foreground work; idempotent.
        """
        self._closing = True
        for fut in list(self._waiting):
            if not fut.done():
                fut.set_result(False)
        self._waiting.clear()
        for work, _ in self._workers.values():
            work.request_stop()

    async def aclose(self) -> None:
        """:meth:`request_close`, then await every worker task and stop the processor."""
        self.request_close()
        tasks = [task for _, task in self._workers.values()]
        try:
            if tasks:  # a worker settles its own job's failure: here we only wait for them
                await asyncio.wait(tasks)
        except asyncio.CancelledError:  # the close itself cancelled: the workers with it
            for task in tasks:
                task.cancel()
            raise
        finally:
            processor, self._processor = self._processor, None
            if processor is not None:
                processor.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await processor
        for task in tasks:  # (read, so none is reported as never retrieved)
            if not task.cancelled() and (failure := task.exception()) is not None:
                logger.warning("a job worker task failed: %s", type(failure).__name__)

    async def __aenter__(self) -> JobRunner:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- plumbing -----------------------------------------------------------------------

    def _send(self, command: _Command) -> None:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            self._enqueue(command)
        else:
            self._loop.call_soon_threadsafe(self._enqueue, command)

    def _enqueue(self, command: _Command) -> None:
        if self._processor is None or self._processor.done():
            self._processor = self._loop.create_task(self._process(), name="JobRunner.process")
        self._queue.put_nowait(command)

    def _publisher(self, job_id: str) -> Publisher:
        def publish(update: JobUpdate) -> bool:
            if not isinstance(update, JobUpdate):
                raise TypeError("publish takes a JobUpdate")
            try:
                running = asyncio.get_running_loop()
            except RuntimeError:
                running = None
            if running is self._loop:
                raise RuntimeError(
                    "publish_update blocks until the parent commits: call it from the worker "
                    "thread, never from the JobRunner's own event loop"
                )
            if self._closing or update.job_id != job_id:
                return False
            fut: concurrent.futures.Future[bool] = concurrent.futures.Future()
            try:
                self._loop.call_soon_threadsafe(self._enqueue, ("update", update, fut))
            except RuntimeError:  # the loop is closed
                return False
            return fut.result()

        return publish

    async def _process(self) -> None:
        while True:
            kind, payload, extra = await self._queue.get()
            origin = payload.origin_turn_id if kind == "admit" else None
            asked: Callable[[], None] | None = None
            with self._held_lock:
                held = self._held.get(str(origin)) if origin is not None else None
                if held is not None:  # its turn has no verdict yet
                    held.append((kind, payload, extra))
                    asked = self._asked.pop(str(origin), None)
            if held is not None:
                if asked is not None:
                    self._tell_asked(asked)
                continue
            try:
                if kind == "admit":
                    await self._admit(payload, extra)
                else:
                    await self._commit(payload, extra)
            except Exception:
                logger.exception("job subscriber failed; closing the job runner")
                self.request_close()

    async def _notify(self) -> None:
        await self._on_update(self.snapshot())

    async def _commit(self, update: JobUpdate, fut: concurrent.futures.Future[bool]) -> None:
        if fut.done():
            return
        if self._closing:
            fut.set_result(False)
            return
        self._waiting.add(fut)
        accepted = False
        try:
            async with self.state_lock:
                # Closing may have happened while we waited for the lock: nothing lands after.
                accepted = not self._closing and commit_job_update(self.state, update)
            if accepted:
                await self._notify()
        finally:
            self._waiting.discard(fut)
            if not fut.done():
                fut.set_result(accepted if not self._closing else False)

    def _admission_error(self, job: JobRecord) -> str | None:
        if self._closing:
            return "runner closed"
        current = self.state.jobs.get(job.job_id)
        if current is None:
            return "job not registered (call add_job first)"
        if current.status != "queued":
            return f"job is {current.status}, not queued"
        if (current.session_id, current.revision, current.attempt) != (
            job.session_id,
            job.revision,
            job.attempt,
        ) or current.session_id != self.state.id:
            return "session/revision/attempt mismatch"
        if job.job_id in self._workers:
            return "job already running"
        return None

    async def _admit(self, job: JobRecord, inputs: dict[str, Any]) -> None:
        async with self.state_lock:
            reason = self._admission_error(job)
            current = self.state.jobs.get(job.job_id)
            work_copy = job_copy(current) if current is not None else None
        if reason is not None or work_copy is None:
            logger.debug(
                "job admission rejected: %s", reason, extra={"voxflow": {"job_id": job.job_id}}
            )
            return
        await self._notify()
        try:
            work = self._make_work(work_copy, dict(inputs), self._publisher(job.job_id))
            problem = _work_problem(work, work_copy)
        except Exception as exc:
            await self.fail_job(job.job_id, self._format_error(exc))
            return
        if problem is not None:
            await self.fail_job(job.job_id, problem)
            return
        task = self._loop.create_task(self._run_worker(job.job_id, work), name=f"job.{job.job_id}")
        self._workers[job.job_id] = (work, task)
        if self._closing:
            work.request_stop()

    async def _run_worker(self, job_id: str, work: JobWorkFlow[Any]) -> None:
        # the job's lines say whose they are; traced, it is a span of the turn that
        # started it (its task inherits the turn's context), as on a job worker
        record = self.state.jobs.get(job_id)
        kind = record.kind if record is not None else "job"
        with log_scope(job_id=str(job_id)), telemetry.trace_span(
                f"voxflow.job {kind}", {"voxflow.job_id": str(job_id),
                                        "voxflow.job_kind": kind}):
            await self._run_worker_traced(job_id, work)

    async def _run_worker_traced(self, job_id: str, work: JobWorkFlow[Any]) -> None:
        await self._worker_event({"type": "worker_started", "job_id": job_id})
        error: str | None = None
        try:
            await asyncio.to_thread(work.kickoff)
        except Exception as exc:
            error = self._format_error(exc)
        try:
            job = self.state.jobs.get(job_id)
            if error is None and job is not None and job.status not in ("completed", "failed"):
                error = "Worker finished without completing the job."
            if error is not None and not self._closing:
                await self.fail_job(job_id, error)
            await self._worker_event({"type": "worker_settled", "job_id": job_id, "error": error})
        finally:
            self._workers.pop(job_id, None)

    async def _worker_event(self, event: dict[str, Any]) -> None:
        if self._on_worker_event is None:
            return
        try:
            result = self._on_worker_event(event)
            if inspect.isawaitable(result):
                await result
        except Exception:
            logger.exception("on_worker_event failed")

    def __repr__(self) -> str:
        return (
            f"JobRunner(jobs={len(self.state.jobs)}, workers={len(self._workers)}, "
            f"closed={self._closing})"
        )


def _work_problem(work: object, job: JobRecord) -> str | None:
    if not isinstance(work, JobWorkFlow):
        return "make_work must return a JobWorkFlow"
    if work.stream:
        return "make_work must return a non-streaming JobWorkFlow"
    mine = work.job
    if (mine.job_id, mine.session_id, mine.revision, mine.attempt) != (
        job.job_id,
        job.session_id,
        job.revision,
        job.attempt,
    ):
        return "make_work returned a worker for another job identity"
    return None
