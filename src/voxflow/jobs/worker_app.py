"""The Procrastinate app a job worker runs (:meth:`~voxflow.jobs.PostgresJobQueue.run_worker`):
fenced finishes, database outages ridden out, and the stop on SIGTERM/SIGINT.

**Fencing.** Procrastinate finishes (or re-queues) a job by its id alone: a resumed
zombie attempt would end, and fence out, the live next attempt. Here a job is finished
or re-queued only while the queue still runs the attempt that asks.

**Outages.** Procrastinate stops its worker at the first query that fails: a fetch of the
next job that finds the database away ends its run loop, and the heartbeat's task dies
with it. Here every query of the worker's run waits for an unreachable database instead,
tried again with backoff (0.5 s doubling up to 2 s, each try waiting up to 3 s for a
connection), however long the outage: the heartbeat, the fetch
of the next job, the job's finish, the listener of new jobs, the poll of jobs to abort.
The outage is said once when the worker finds the database away and once when it answers
again (:class:`DatabaseWatch`), and ``/ready`` says not-ready meanwhile. A stop (SIGTERM,
SIGINT, a cancellation) ends the waits: the worker unregisters if the database answers,
and otherwise leaves its row for another worker's sweep (its heartbeat stops with it).
A database unreachable at start-up still fails fast (before this app runs). One that
goes away after that, while the worker starts (the removal of dead workers' rows,
Procrastinate's pruning and registration), is waited for the same way for up to the
worker's report patience (:func:`ride_out`), and the worker is ready (``running(True)``)
once it is registered. A fetch that
failed once its query may have run (anything but no connection in time) may have taken a
job, its commit made and its answer lost: before the next fetch the worker queues again
the jobs running under it in the queue that it does not run (their attempt kept: they
never started), or they would stay running for good (its heartbeat goes on, so no
sweep takes them for stalled).

**Conflicts.** A query the server rolled back for a conflict with another transaction
(a deadlock, a serialization failure: :func:`~voxflow.pg_retry.conflict`) wrote
nothing: it is run again after a short backoff, a few times
(:func:`~voxflow.pg_retry.aretry_conflicts`), as the job inbox's are. Only one that
recurs on every try stops the worker, as any other refused query does.

**Its row.** After an outage longer than ``stalled_after``, another job worker starting
(Procrastinate prunes the rows that silent) or a sibling's sweep removes this worker's
row of ``procrastinate_workers`` although it lives. Its heartbeat (Procrastinate's, and
the stalled-job sweep's) therefore puts the row back when it is missing
(:class:`WorkerRows`), and a fetch refused for the missing row
(``procrastinate_jobs_worker_id_fkey``) puts it back and fetches again: the worker goes
on taking jobs. The jobs it runs whose worker the removal cleared are taken back in the
same statement (no sweep queued them again yet: they are not run twice). Rows are removed
only after :func:`~voxflow.jobs.queue.forget_workers_after` of silence (Procrastinate's
own pruning included), long after a silent worker's jobs were queued again.

**Jobs taken while it was away.** A worker away longer than ``stalled_after`` (cut off
from the database while others reach it) has its jobs queued again by another worker's
sweep: that is at-least-once, inherent to a heartbeat. When it sees that (the queue runs
a later attempt of a job it runs: its poll of jobs to abort, or its fetch of the next
attempt), it cancels its own run of the old attempt; its updates and finish are refused
anyway (fenced by the attempt).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import signal
import threading
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from voxflow.errors import DatabaseRefusedError
from voxflow.jobs.execution import ReportNotStored
from voxflow.jobs.worker_watch import (
    BACKOFF,
    DatabaseWatch,
    database_unreachable,
    error_line,
    ride_out,
)
from voxflow.pg_refusal import refused
from voxflow.pg_retry import aretry_conflicts, conflict

if TYPE_CHECKING:
    import procrastinate

__all__ = ["DatabaseWatch", "WorkerRows", "job_worker_app", "ride_out",
           "run_again_unreported", "run_until_stopped"]

logger = logging.getLogger("voxflow.jobs")

T = TypeVar("T")

_TRY_FOR = 3.0
"""Seconds one try of a query waits for a connection, and the pool's own reconnection
attempts last before it gives them up (psycopg's default is 5 minutes, its backoff
doubling without a cap: after a long outage its next attempt came minutes after the
database was back). The next try starts a fresh attempt at once: while the database is
away it is tried at least every few seconds."""


_BEAT = """
WITH beat AS (
    INSERT INTO procrastinate_workers (id, last_heartbeat)
    OVERRIDING SYSTEM VALUE SELECT unnest(%(ids)s::bigint[]), now()
    ON CONFLICT (id) DO UPDATE SET last_heartbeat = excluded.last_heartbeat
    RETURNING id, xmax = 0 AS inserted
), reclaimed AS (
    UPDATE procrastinate_jobs j SET worker_id = (SELECT min(id) FROM beat)
    FROM unnest(%(jobs)s::bigint[], %(attempts)s::int[]) AS held(id, attempts)
    WHERE j.id = held.id AND j.attempts = held.attempts
      AND j.status IN ('doing', 'aborting')
      AND (j.worker_id IS NULL OR (j.worker_id = (SELECT min(id) FROM beat)
                                   AND EXISTS (SELECT 1 FROM beat WHERE inserted)))
    RETURNING j.id
)
SELECT id, 'row' AS what FROM beat WHERE inserted
UNION ALL SELECT id, 'job' FROM reclaimed
"""
"""The heartbeat of this process's worker rows, putting back a row another worker removed
(the ids are Procrastinate's, taken from its identity: no other worker gets them), and
the worker of the jobs this process runs whose worker the removal cleared (still the
attempt it runs: no sweep took them yet; a process runs one worker); the ids of the rows
put back (``row``) and of the jobs taken back (``job``), in one statement: a sweep never
sees the row back and the jobs still without a worker. A row put back also takes the
jobs its snapshot still shows under it: a removal committing while this statement waited
for its lock cleared them after the snapshot (the update re-reads them once locked)."""

_TAKEN = """
SELECT held.id, held.attempts::text AS what
FROM unnest(%(jobs)s::bigint[], %(attempts)s::int[]) AS held(id, attempts)
LEFT JOIN procrastinate_jobs j ON j.id = held.id
WHERE j.id IS NULL OR j.attempts <> held.attempts
"""
"""Of the jobs this process runs (id, attempt), those the queue no longer runs as that
attempt: queued again by another worker's sweep (its heartbeat was old) or deleted."""

_WORKER_FKEY = "procrastinate_jobs_worker_id_fkey"

_PUT_BACK = """
WITH lost AS (
    SELECT id FROM procrastinate_jobs
    WHERE worker_id = %(worker_id)s AND status = 'doing' AND NOT (id = ANY(%(held)s::bigint[]))
    FOR UPDATE
), put AS (
    UPDATE procrastinate_jobs j
    SET status = (CASE WHEN j.abort_requested THEN 'aborted' ELSE 'todo' END
                  )::procrastinate_job_status, worker_id = NULL
    FROM lost WHERE j.id = lost.id
    RETURNING j.id, j.queue_name, j.status
)
SELECT id, CASE WHEN status = 'todo' THEN pg_notify(
    'procrastinate_queue_v1#' || queue_name,
    json_build_object('type', 'job_inserted', 'job_id', id)::text) END AS notified
FROM put
"""
"""Put back the jobs running under a worker (``worker_id``) that its process does not run
(``held``: the ones it does): taken by a fetch whose answer was lost. Not run, they keep
their attempt; one asked to abort is aborted."""


class WorkerRows:
    """This process's Procrastinate worker rows (``procrastinate_workers``), from their
    registration until their removal begins, and their heartbeat, which puts a row back
    when another worker removed it (see the module). A beat and the removal of a row do
    not overlap: a beat never puts back the row of a worker that unregistered.

    Attributes:
        held: the jobs this process runs (fetched, their finish or retry not begun), as
            (queue id, the attempt counter it fetched them with).
        runs: the task running each of them (the job's function), while it runs.
    """

    def __init__(self) -> None:
        self.ids: set[int] = set()
        self.held: set[tuple[int, int]] = set()
        self.runs: dict[tuple[int, int], asyncio.Task[Any]] = {}
        self._lock = asyncio.Lock()

    def _held(self) -> dict[str, Any]:
        held = sorted(self.held)
        return {"jobs": [job for job, _ in held], "attempts": [n for _, n in held]}

    def cancel_taken(self, job: tuple[int, int]) -> None:
        """Cancel this process's run of ``job`` (id, attempt counter), which the queue
        queued again (another worker's sweep took this worker for dead): it would run
        to its end for nothing, its updates and finish refused."""
        logger.warning("queue job %s attempt %d was queued again by another worker's "
                       "sweep while this worker was away (its heartbeat was old): its run "
                       "here is cancelled, the queue runs its next attempt", job[0],
                       job[1] + 1)
        task = self.runs.get(job)
        if task is not None:
            task.cancel()

    async def beat(self, run: Callable[[str, dict[str, Any]],
                                       Awaitable[list[tuple[int, str]]]]) -> None:
        """Beat for every row, one statement through ``run`` (it returns the rows put back
        and the jobs taken back, as ``(id, "row" | "job")``); the errors are ``run``'s."""
        async with self._lock:
            if not self.ids:
                return
            found = await run(_BEAT, {"ids": sorted(self.ids), **self._held()})
        for worker_id in (found_id for found_id, what in found if what == "row"):
            logger.warning("job worker %d's row was removed by another worker (its "
                           "heartbeat was old: the database was away); it is registered "
                           "again and goes on taking jobs", worker_id)
        jobs = [found_id for found_id, what in found if what == "job"]
        if jobs:
            logger.warning("queue job(s) %s run on here: their worker's row was removed "
                           "while they ran and no sweep had queued them again", jobs)

    async def taken(self, run: Callable[[str, dict[str, Any]],
                                        Awaitable[list[tuple[int, str]]]]
                    ) -> list[tuple[int, int]]:
        """The jobs this process runs (id, attempt counter) that the queue no longer runs
        as that attempt (another worker's sweep queued them again while this one was
        away)."""
        if not self.held:
            return []
        return [(found_id, int(what)) for found_id, what in await run(_TAKEN, self._held())]

    async def unregister(self, worker_id: int, remove: Callable[[], Awaitable[None]]
                         ) -> None:
        """Stop beating for ``worker_id``, then ``await remove()`` (its row's removal)."""
        self.ids.discard(worker_id)
        async with self._lock:  # (after a beat in flight: it may still put the row back)
            await remove()


def _may_have_run(exc: BaseException) -> bool:
    """``exc`` (a ``ConnectorException``) may have come after the query ran, its commit
    included: anything but no connection in time (the query was never sent)."""
    import psycopg_pool  # here: the optional voxflow[postgres] extra (the app is open)

    # (a conflict rolled the fetch back: it took nothing)
    return not isinstance(exc.__cause__, psycopg_pool.PoolTimeout) and not conflict(exc)


def _row_gone(exc: BaseException) -> bool:
    """``exc`` (a ``ConnectorException``) is a fetch refused because the worker's row is
    missing (another worker removed it)."""
    diag = getattr(exc.__cause__, "diag", None)
    return getattr(diag, "constraint_name", None) == _WORKER_FKEY


def _refusal(exc: BaseException, url: str, what: str) -> BaseException:
    """``exc`` (a ``ConnectorException`` that is no outage) as the error naming the query
    the server refused and its fix (:func:`~voxflow.pg_refusal.refused`); ``exc`` itself
    when it is not the server's refusal."""
    return refused(exc.__cause__ or exc, url=url, what=what) or exc


def job_worker_app(connector_options: dict[str, Any], watch: DatabaseWatch,
                   stopping: Callable[[], bool], rows: WorkerRows,
                   refuse: Callable[[DatabaseRefusedError], None],
                   start_patience: float) -> procrastinate.App:
    """The Procrastinate app of a job worker (``connector_options``: its pool's), fenced
    and riding out outages (see the module; those of its start for up to
    ``start_patience`` seconds), ``watch`` told of each query's outcome, every
    wait ended by ``stopping()``, its worker's row kept in ``rows``. A query the server
    refuses on a live connection (a statement timeout, ...) is no outage: the fetch of
    the next job raises its :class:`~voxflow.errors.DatabaseRefusedError`, and a
    heartbeat or a poll of jobs to abort (Procrastinate's side tasks, which would log a
    traceback) gives it to ``refuse``, which stops the worker."""
    # here: the optional voxflow[postgres] extra (checked by migrate)
    import procrastinate
    from procrastinate.manager import JobManager

    url = str(connector_options["conninfo"])

    wakers: list[Callable[..., Awaitable[None]]] = []  # the worker's notification handler
    held = rows.held  # the jobs this process runs: fetched, not finished or retried
    told: set[tuple[int, int]] = set()  # the runs cancelled: taken by another worker
    unsure = False  # a fetch failed once its query may have run: did it take a job?

    async def wake() -> None:
        """Have the worker look for jobs now: the ones queued (or re-queued) while its
        listener was away sent a notification nobody heard, and its next poll may be
        seconds away."""
        for notify in wakers:
            await notify(channel="", notification={"type": "job_inserted"})

    def outage(exc: BaseException) -> bool:
        return isinstance(exc, procrastinate.exceptions.ConnectorException) and (
            database_unreachable(exc))

    async def patiently(call: Callable[[], Awaitable[T]], what: str, gone: T,
                        within: float | None = None) -> T:
        """``await call()``, tried again while the database is unreachable (for up to
        ``within`` seconds if given: :func:`ride_out`); ``gone`` once the worker stops
        meanwhile."""
        try:
            result = await ride_out(call, what, watch, unreachable=outage, gone=gone,
                                    within=within)
        except procrastinate.exceptions.ConnectorException as exc:
            if outage(exc):  # (its start gave up: the worker fails, said by run_worker)
                raise
            raise _refusal(exc, url, what) from None
        if watch.away:
            watch.back()
            await wake()
        return result

    class FencedJobManager(JobManager):
        """Finishes a job only while the queue still runs the attempt that finishes it,
        and waits for an unreachable database (see the module)."""

        async def finish_job(self, job: Any, status: Any, delete_job: bool) -> None:
            async def finish() -> list[Any]:
                return await self.connector.execute_query_all_async(
                    "WITH mine AS (SELECT id FROM procrastinate_jobs WHERE id = %(job_id)s "
                    "AND status = 'doing' AND attempts = %(attempts)s FOR UPDATE) "
                    "SELECT procrastinate_finish_job_v1(id, %(status)s, %(delete_job)s) "
                    "FROM mine",
                    job_id=job.id, status=status.value, delete_job=delete_job,
                    attempts=job.attempts)

            held.discard((int(job.id), int(job.attempts)))  # (its end begun)
            told.discard((int(job.id), int(job.attempts)))
            done = await patiently(finish, "a job's finish", None)
            if done is None:
                _left_running(job)
            elif not done:
                logger.warning("queue job %s attempt %d not finished: the queue runs a "
                               "later attempt", job.id, job.attempts + 1)

        async def retry_job(self, job: Any, retry_at: Any = None, priority: Any = None,
                            queue: Any = None, lock: Any = None) -> None:
            """Queue the job again as its next attempt, as ``finish_job`` only while the
            queue still runs the attempt that asks."""
            async def retry() -> list[Any]:
                return await self.connector.execute_query_all_async(
                    "WITH mine AS (SELECT id FROM procrastinate_jobs WHERE id = %(job_id)s "
                    "AND status = 'doing' AND attempts = %(attempts)s FOR UPDATE) "
                    "SELECT procrastinate_retry_job_v2(id, %(retry_at)s, NULL, NULL, NULL) "
                    "FROM mine", job_id=job.id, attempts=job.attempts,
                    retry_at=retry_at or datetime.datetime.now(datetime.UTC))

            held.discard((int(job.id), int(job.attempts)))  # (its end begun)
            told.discard((int(job.id), int(job.attempts)))
            done = await patiently(retry, "a job's retry", None)
            if done:
                await wake()  # (it is queued again: run it now, here or elsewhere)
            elif done is None:
                _left_running(job)
            else:
                logger.warning("queue job %s attempt %d not queued again: the queue "
                               "runs a later attempt", job.id, job.attempts + 1)

        async def fetch_job(self, queues: Any, worker_id: int) -> Any:
            async def take() -> Any:
                try:
                    return await super(FencedJobManager, self).fetch_job(queues, worker_id)
                except procrastinate.exceptions.ConnectorException as exc:
                    if not _row_gone(exc):
                        raise
                await rows.beat(self._run)  # (its row back: nothing was fetched)
                return await super(FencedJobManager, self).fetch_job(queues, worker_id)

            async def fetch() -> Any:
                nonlocal unsure
                if unsure:
                    await self.put_back_lost(worker_id)
                    unsure = False
                try:
                    job = await take()
                except procrastinate.exceptions.ConnectorException as exc:
                    unsure = unsure or _may_have_run(exc)
                    raise
                if job is not None:
                    for older in [run for run in held if run[0] == job.id]:
                        if older not in told:  # (its run here is a taken attempt)
                            told.add(older)
                            rows.cancel_taken(older)
                    held.add((int(job.id), int(job.attempts)))
                return job

            return await patiently(fetch, "the fetch of the next job", None)

        async def put_back_lost(self, worker_id: int) -> list[int]:
            """Queue again the jobs a fetch whose answer was lost took (committed, the
            connection broken before its answer): running under this worker in the
            queue, not here, they would stay so for good (its heartbeat goes on); their
            ids."""
            found = await self.connector.execute_query_all_async(
                _PUT_BACK, worker_id=worker_id, held=sorted({job for job, _ in held}))
            lost = [int(row["id"]) for row in found]
            if lost:
                logger.warning("queue job(s) %s queued again: the fetch that took them "
                               "committed but its answer was lost (the connection broke)",
                               lost)
            return lost

        async def _run(self, sql: str, params: dict[str, Any]) -> list[tuple[int, str]]:
            found = await self.connector.execute_query_all_async(sql, **params)
            return [(int(row["id"]), str(row.get("what", ""))) for row in found]

        async def prune_stalled_workers(self, seconds_since_heartbeat: float) -> Any:
            return await patiently(lambda: super(FencedJobManager, self).prune_stalled_workers(
                seconds_since_heartbeat), "its start", [], start_patience)

        async def register_worker(self) -> int:
            worker_id = await patiently(lambda: super(FencedJobManager, self).register_worker(),
                                        "its start", None, start_patience)
            if worker_id is None:  # (stopped while the database was away)
                raise asyncio.CancelledError
            rows.ids.add(worker_id)
            watch.started()
            return worker_id

        async def update_heartbeat(self, worker_id: int) -> None:
            """Beat, putting the row back when another worker removed it."""
            try:
                await patiently(lambda: rows.beat(self._run), "its heartbeat", None)
            except DatabaseRefusedError as exc:
                refuse(exc)

        async def list_jobs_to_abort_async(self, queue: str | None = None) -> Any:
            if watch.away:  # (Procrastinate logs each failed poll with its traceback)
                return []
            try:
                asked = await aretry_conflicts(
                    lambda: super(FencedJobManager, self).list_jobs_to_abort_async(queue),
                    logger=logger, what="the poll of jobs to abort")
                taken = await aretry_conflicts(lambda: rows.taken(self._run), logger=logger,
                                               what="the poll of jobs to abort")
            except procrastinate.exceptions.ConnectorException as exc:
                if not database_unreachable(exc):
                    error = _refusal(exc, url, "the poll of jobs to abort")
                    if not isinstance(error, DatabaseRefusedError):
                        raise
                    refuse(error)
                    return []
                watch.lost(exc, "the poll of jobs to abort")
                return []
            for run in set(taken) - told:
                told.add(run)
                rows.cancel_taken(run)
            return asked

        async def unregister_worker(self, worker_id: int) -> None:
            """Remove the stopping worker's row; left for another worker's sweep (its
            heartbeat stops now) when the database does not answer."""
            async def remove() -> None:
                await aretry_conflicts(lambda: super(FencedJobManager, self).unregister_worker(
                    worker_id), logger=logger, what="the removal of its row")

            try:
                await rows.unregister(worker_id, remove)
            except procrastinate.exceptions.ConnectorException as exc:
                if not database_unreachable(exc) and not stopping():
                    raise
                logger.warning("the stopping job worker could not remove its row (%s); "
                               "another worker's sweep removes it once its heartbeat is "
                               "old", error_line(exc) if database_unreachable(exc) else
                               f"SQLSTATE {getattr(exc.__cause__, 'sqlstate', None)}")

        async def listen_for_jobs(self, **kwargs: Any) -> None:
            """Listen again, with backoff, when the listening connection cannot be made
            again (the database away)."""
            if kwargs.get("on_notification") is not None:
                wakers.append(kwargs["on_notification"])
            delay = BACKOFF[0]
            while True:
                try:
                    await super().listen_for_jobs(**kwargs)
                    return
                except procrastinate.exceptions.ConnectorException as exc:
                    watch.lost(exc, "its listener of new jobs")
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, BACKOFF[1])

    # min_size 0: opening the pool waits for no connection (up to 30 s during an outage);
    # its first query, the start's, rides the outage out like the others
    options = {**connector_options, "reconnect_timeout": _TRY_FOR, "min_size": 0}
    options["timeout"] = min(float(options.get("timeout", _TRY_FOR)), _TRY_FOR)
    connector = procrastinate.PsycopgConnector(**options)
    app = procrastinate.App(connector=connector)
    app.job_manager = FencedJobManager(connector=connector)
    return app


def _left_running(job: Any) -> None:
    logger.warning("queue job %s attempt %d stays running in the queue: the worker stops "
                   "while the database does not answer; another worker's sweep runs it "
                   "again once this worker's heartbeat is old (a job that reported its "
                   "end is not run again)", job.id, job.attempts + 1)


def run_again_unreported() -> Any:
    """Procrastinate's retry strategy for voxflow's jobs: an attempt whose report could
    not be stored within the report patience
    (:class:`~voxflow.jobs.execution.ReportNotStored`) is queued again at once (run once
    the database answers); any other failure is not."""
    import procrastinate  # here: the optional voxflow[postgres] extra (the queue is open)

    class RunAgainUnreported(procrastinate.BaseRetryStrategy):
        def get_retry_decision(self, *, exception: BaseException, job: Any
                               ) -> procrastinate.RetryDecision | None:
            if isinstance(exception, ReportNotStored):
                return procrastinate.RetryDecision()
            return None

    return RunAgainUnreported()


async def run_until_stopped(worker: asyncio.Future[None], stopping: threading.Event,
                            on_signals: bool,
                            running: Callable[[bool], None] | None = None) -> None:
    """Await the Procrastinate worker; a stop (SIGTERM/SIGINT with ``on_signals``, or
    this task's cancellation) sets ``stopping`` first, so running jobs see
    ``JobContext.stop_requested``, then stops the worker gracefully (cancelling its run:
    it waits for the running jobs). A signal's stop returns normally."""
    loop = asyncio.get_running_loop()
    signalled = False

    def stop() -> None:
        nonlocal signalled
        if signalled:  # once: a second signal must not cut the running jobs short
            return
        signalled = True
        stopping.set()
        if running is not None:
            running(False)
        worker.cancel()

    # (signal handlers only exist on the main thread: elsewhere, cancel the task)
    main = threading.current_thread() is threading.main_thread()
    signals = (signal.SIGTERM, signal.SIGINT) if on_signals and main else ()
    for number in signals:
        loop.add_signal_handler(number, stop)
    try:
        try:
            await asyncio.shield(worker)
        except asyncio.CancelledError:
            stopping.set()
            worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await worker
            if not signalled:
                raise
    finally:
        for number in signals:
            loop.remove_signal_handler(number)
