"""Background jobs on a PostgreSQL job queue, run by job-worker processes.

With ``VOXFLOW_DATABASE_URL`` set, a call worker does not run the background jobs its
calls start: :meth:`PostgresJobQueue.enqueue` queues them (one row of Procrastinate's
``procrastinate_jobs`` table) and any number of job-worker processes
(``voxflow jobs worker FLOW``, :meth:`PostgresJobQueue.run_worker`) run them. A job
therefore survives the death of the call worker that started it. Its updates go to the
session's durable inbox (:mod:`voxflow.jobs.inbox`), read by whichever worker owns the
call (:class:`~voxflow.jobs.reader.InboxReader`). How a job worker runs one job and
reports its steps is :mod:`voxflow.jobs.execution`.

**Stalled jobs.** Each job worker heartbeats (a row of ``procrastinate_workers``, every
``heartbeat`` seconds, on its event loop). A job whose worker has not heartbeaten for
``stalled_after`` seconds (killed, its machine gone) is put back in the queue as its
next attempt, in one statement that locks the job and checks it is still that attempt
(:meth:`PostgresJobQueue.retry_stalled`; every job worker runs it once a heartbeat).
A job that runs long on a live worker is never re-run: there is no redelivery timer,
only the heartbeat. The row of a worker silent for :func:`forget_workers_after` (2
minutes) is removed and its death logged once, by the job worker that removed it
(Procrastinate removes rows only when a worker starts). The dead attempt's late writes are
refused by the inbox (the queue no longer runs that attempt) and, should one be read,
by :func:`~voxflow.jobs.commit_job_update`; a resumed zombie cannot finish the queue
job either (a live later attempt owns it: ``FencedJobManager``). A job function must
therefore not block the worker's event loop (no CPU-bound work without
``asyncio.to_thread``): a blocked loop misses heartbeats.

Why Procrastinate (MIT): psycopg 3 native (the ``voxflow[postgres]`` driver already),
small dependencies (attrs, asgiref, croniter, python-dateutil), versioned SQL functions
and shipped migrations, ``LISTEN/NOTIFY`` wake-ups, worker heartbeats and an attempt
counter that a retry bumps. Imported only when a queue is used (``import voxflow``
stays fast).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from voxflow import telemetry
from voxflow.clock import Clock, MonotonicClock
from voxflow.errors import DatabaseRefusedError, JobPayloadError, PersistenceUnavailableError
from voxflow.jobs.execution import REPORT_PATIENCE, QueuedJob, run_queued_job
from voxflow.jobs.inbox import INBOX_SCHEMA, JobInbox
from voxflow.jobs.results import BackgroundJob
from voxflow.jobs.statistics import QueueStatistics, read_statistics
from voxflow.jobs.worker_app import (
    DatabaseWatch,
    WorkerRows,
    job_worker_app,
    ride_out,
    run_again_unreported,
    run_until_stopped,
)
from voxflow.pg_schema import ensure_tables
from voxflow.pg_url import check_database_url, check_schema, database_schema, redact_url
from voxflow.settings import Settings

if TYPE_CHECKING:
    import procrastinate

__all__ = ["TASK_NAME", "PostgresJobQueue", "QueueStatistics", "QueuedJob",
           "default_job_queue"]

logger = logging.getLogger("voxflow.jobs")

TASK_NAME = "voxflow.background_job"
"""The one Procrastinate task every voxflow job is queued as (its kind is in the payload)."""

_FIX = "pip install 'voxflow[postgres]'"
_ONE_PER_VERSION = "voxflow_jobs_one_per_version"
"""The unique index that keeps one queue job per voxflow job id and revision."""
_ONE_PER_VERSION_SQL = (
    f"CREATE UNIQUE INDEX IF NOT EXISTS {_ONE_PER_VERSION} ON procrastinate_jobs "
    f"((args->>'job_id'), (args->>'revision')) WHERE task_name = '{TASK_NAME}'")
INBOX_KEEP = 7 * 86400.0
"""Seconds an acknowledged inbox row is kept (for audit) before a job worker deletes it."""
INBOX_PURGE_EVERY = 3600.0


def forget_workers_after(stalled_after: float) -> float:
    """Seconds without a heartbeat after which a job worker's row is removed as dead:
    long after its jobs were re-run (12 times ``stalled_after``, at least 2 minutes), as
    a worker paused that long cannot register again."""
    return max(120.0, 12 * stalled_after)


class PostgresJobQueue:
    """Voxflow's background jobs on Procrastinate, with the session inboxes beside them.

    Args:
        url: a ``postgresql://`` URL (validated; never shown with its password).
        schema: the schema holding the queue's and the inbox's tables (created, with
            Procrastinate's schema, on first use); None (the default): the first schema
            of the URL's ``search_path`` (:func:`~voxflow.pg_url.database_schema`,
            ``public`` when it names none), as for every voxflow store given that URL.
        queue: the Procrastinate queue name of voxflow's jobs.
        connect_timeout: seconds to wait for a connection before failing.

    Raises:
        ValueError: a bad argument.
    """

    def __init__(self, url: str, *, schema: str | None = None, queue: str = "voxflow",
                 connect_timeout: float = 10.0) -> None:
        check_database_url(url)
        self.url = url
        self.schema = database_schema(url) if schema is None else check_schema(schema)
        if not isinstance(queue, str) or not queue.isidentifier():
            raise ValueError("queue must be an identifier (letters, digits, _)")
        self.queue = queue
        self.inbox = JobInbox(url, schema=self.schema, connect_timeout=connect_timeout)
        self.connect_timeout = float(connect_timeout)
        self._sync_app: procrastinate.App | None = None
        self._sync_lock = threading.Lock()
        self._watch: DatabaseWatch | None = None

    @property
    def database_away(self) -> bool:
        """True while this queue's running job worker finds its database unreachable
        (it takes no job then, and waits for it)."""
        return self._watch is not None and self._watch.away

    @property
    def worker_stopping(self) -> bool:
        """True once this queue's job worker was asked to stop (SIGTERM, a cancellation):
        it takes no new job, the running ones finish."""
        return self._watch is not None and self._watch.stopping

    # -- schema ------------------------------------------------------------------------

    def _connector_kwargs(self, size: int) -> dict[str, Any]:
        """Procrastinate connector (pool) arguments: this schema, ``size`` connections."""
        return {"conninfo": self.url,
                "kwargs": {"options": self.inbox.connect_options["options"]},
                "timeout": self.connect_timeout, "min_size": 1, "max_size": size}

    def _unavailable(self, exc: BaseException) -> PersistenceUnavailableError:
        return self.inbox.unavailable(exc)

    async def migrate(self) -> None:
        """Create the inbox table and, if missing, Procrastinate's schema (idempotent,
        safe from several processes at once).

        Raises:
            PersistenceUnavailableError: the server is unreachable, or Procrastinate is
                not installed (the fix says which extra installs it).
        """
        await asyncio.to_thread(self._migrate)
        await self.inbox.open()

    def _migrate(self) -> None:
        try:
            # here: procrastinate and psycopg are the optional voxflow[postgres] extra
            import procrastinate
            import psycopg
        except ImportError as exc:
            raise PersistenceUnavailableError("the job queue needs procrastinate",
                                              path=redact_url(self.url), fix=_FIX) from exc
        try:
            with psycopg.connect(self.url, connect_timeout=max(1, int(self.connect_timeout)),
                                 **self.inbox.connect_options) as conn, conn.transaction():
                # (the lock timeout and the schema's advisory lock, the inbox if missing)
                ensure_tables(conn, self.schema, INBOX_SCHEMA)
                row = conn.execute("SELECT to_regclass('procrastinate_jobs')").fetchone()
                if row is None or row[0] is None:
                    conn.execute(procrastinate.schema.SchemaManager.get_schema())
                row = conn.execute("SELECT to_regclass(%s)", (_ONE_PER_VERSION,)).fetchone()
                if row is None or row[0] is None:  # (creating it share-locks the jobs table)
                    conn.execute(_ONE_PER_VERSION_SQL)
        except psycopg.Error as exc:
            raise self._unavailable(exc) from None

    # -- the call worker's side --------------------------------------------------------

    def _defer_args(self, job: BackgroundJob, inputs: Mapping[str, Any] | None) -> dict[str, Any]:
        if not isinstance(job, BackgroundJob):
            raise TypeError(f"job must be a BackgroundJob, got {type(job).__name__}")
        payload = QueuedJob.parse({
            "session_id": job.session_id, "job_id": job.job_id, "kind": job.kind,
            "revision": job.revision, "origin_turn_id": job.origin_turn_id,
            "inputs": dict(job.inputs if inputs is None else inputs),
            "traceparent": telemetry.inject_context({}).get("traceparent")})
        args = payload.model_dump(mode="json")
        if args["traceparent"] is None:  # (not traced: the payload as before)
            del args["traceparent"]
        return args

    def enqueue(self, job: BackgroundJob, inputs: Mapping[str, Any] | None = None) -> int:
        """Queue ``job`` for a job worker (blocking: call it from a handler, which runs in
        a thread, or use :meth:`enqueue_async` on an event loop).

        Idempotent by job id and revision: a job already in the queue (waiting, running
        or finished) is not queued again (a unique index of the queue's table says so
        atomically, across processes), so a restored session may queue every job it
        records as ``queued`` without running any twice.

        Returns:
            The queue's job id (the existing one when it was queued before).

        Raises:
            JobPayloadError: the job's fields or inputs are not a valid payload.
            PersistenceUnavailableError: the database is unreachable.
        """
        args = self._defer_args(job, inputs)
        try:
            app = self._open_sync()
            job_id: int = app.configure_task(TASK_NAME, queue=self.queue).defer(**args)
        except Exception as exc:
            if getattr(exc, "constraint_name", None) != _ONE_PER_VERSION:
                raise self._defer_failed(exc) from None
            try:  # queued before: its queue job (it may have run since)
                row = app.connector.execute_query_one(
                    "SELECT id FROM procrastinate_jobs WHERE task_name = %(task)s AND "
                    "args->>'job_id' = %(job_id)s AND args->>'revision' = %(revision)s",
                    task=TASK_NAME, job_id=args["job_id"], revision=str(args["revision"]))
            except Exception as lookup_exc:
                raise self._defer_failed(lookup_exc) from None
            return int(row["id"])
        return job_id

    def _defer_failed(self, exc: BaseException) -> BaseException:
        import psycopg  # here: the optional voxflow[postgres] extra (the queue is open)

        if isinstance(exc, PersistenceUnavailableError | JobPayloadError):
            return exc
        if isinstance(exc, psycopg.Error):
            return self._unavailable(exc)
        # procrastinate wraps driver errors in ConnectorException
        return self._unavailable(exc.__cause__ or exc)

    async def enqueue_async(self, job: BackgroundJob, inputs: Mapping[str, Any] | None = None
                            ) -> int:
        """:meth:`enqueue` off the event loop."""
        return await asyncio.to_thread(self.enqueue, job, inputs)

    def _open_sync(self) -> procrastinate.App:
        with self._sync_lock:
            if self._sync_app is None:
                try:
                    import procrastinate  # here: the optional voxflow[postgres] extra
                except ImportError as exc:
                    raise PersistenceUnavailableError(
                        "the job queue needs procrastinate", path=redact_url(self.url),
                        fix=_FIX) from exc
                connector = procrastinate.SyncPsycopgConnector(**self._connector_kwargs(2))
                app = procrastinate.App(connector=connector)
                self._migrate()
                app.open()
                self._sync_app = app
            return self._sync_app

    def close(self) -> None:
        """Close the blocking side's connections (idempotent)."""
        with self._sync_lock:
            app, self._sync_app = self._sync_app, None
        if app is not None:
            app.close()

    # -- the job worker's side ---------------------------------------------------------

    async def retry_stalled(self, stalled_after: float) -> list[int]:
        """Put every job whose worker has not heartbeaten for ``stalled_after`` seconds
        back in the queue as its next attempt; returns their queue ids.

        One statement: each job is locked and re-checked (still running, still the
        same attempt) before its retry, so two workers never retry one job twice and a
        job re-run by a live worker is never taken from it.
        """
        sql = """
        WITH stalled AS (
            SELECT j.id, j.attempts FROM procrastinate_jobs j
            LEFT JOIN procrastinate_workers w ON w.id = j.worker_id
            WHERE j.status = 'doing' AND j.task_name = %s
              AND (w.id IS NULL OR w.last_heartbeat < now() - make_interval(secs => %s))
        ), locked AS (
            SELECT j.id, j.queue_name FROM procrastinate_jobs j JOIN stalled s ON s.id = j.id
            WHERE j.status = 'doing' AND j.attempts = s.attempts
            FOR UPDATE OF j SKIP LOCKED
        ), retried AS (
            SELECT id, queue_name, procrastinate_retry_job_v2(id, now(), NULL, NULL, NULL)
            FROM locked
        )
        SELECT id, pg_notify('procrastinate_queue_v1#' || queue_name,
                             json_build_object('type', 'job_inserted', 'job_id', id)::text)
        FROM retried
        """
        rows = await self.inbox._execute(sql, (TASK_NAME, float(stalled_after)))
        return [int(r[0]) for r in rows]

    async def forget_dead_workers(self, forget_after: float) -> list[tuple[int, float]]:
        """Remove the ``procrastinate_workers`` rows of job workers that have not
        heartbeaten for ``forget_after`` seconds (killed: Procrastinate removes rows only
        when a worker starts, so they stayed for good) and log each death once (the
        process whose statement removed the row); returns ``(worker id, seconds since
        its heartbeat)`` for each. Their running jobs were queued again long before
        (:meth:`retry_stalled`)."""
        rows = await self.inbox._execute(
            "DELETE FROM procrastinate_workers WHERE last_heartbeat < now() - "
            "make_interval(secs => %s) RETURNING id, "
            "extract(epoch FROM now() - last_heartbeat)::float8", (float(forget_after),))
        gone = [(int(r[0]), float(r[1])) for r in rows]
        for worker_id, age in gone:
            logger.warning("job worker %d is gone: no heartbeat for %.0f s (killed, or its "
                           "machine or network is down); its row is removed", worker_id, age)
        return gone

    def statistics(self) -> QueueStatistics:
        """Count the voxflow jobs of the queue's database by state, with the oldest
        waiting and running ages (blocking: one connection, three short queries;
        ``voxflow status`` and a job worker's ``/metrics`` call it).

        Raises:
            PersistenceUnavailableError: the database is unreachable or has no queue yet.
        """
        try:
            import psycopg  # here: the optional voxflow[postgres] extra
        except ImportError as exc:
            raise PersistenceUnavailableError("the job queue needs psycopg",
                                              path=redact_url(self.url), fix=_FIX) from exc
        try:
            with psycopg.connect(self.url, connect_timeout=max(1, int(self.connect_timeout)),
                                 **self.inbox.connect_options) as conn:
                return read_statistics(conn, TASK_NAME)
        except psycopg.Error as exc:
            raise self._unavailable(exc) from None

    async def run_worker(
        self,
        *,
        concurrency: int = 8,
        heartbeat: float = 2.0,
        stalled_after: float = 10.0,
        clock: Clock | None = None,
        format_error: Callable[[BaseException], str] = str,
        install_signal_handlers: bool = False,
        name: str | None = None,
        running: Callable[[bool], None] | None = None,
        report_patience: float = REPORT_PATIENCE,
    ) -> None:
        """Run queued jobs until cancelled (or, with ``install_signal_handlers``, until
        SIGTERM/SIGINT: running jobs finish first; from the stop on, their
        ``JobContext.stop_requested`` is True).

        The job functions are found by kind (:func:`~voxflow.jobs.background.job_function`):
        import the flow (or module) that declares them before. Each job reports
        ``started``, its stage, its announcement and ``completed`` (or ``failed`` with
        ``format_error(exc)``) to the session's inbox.

        Args:
            concurrency: jobs run at once by this process.
            heartbeat: seconds between two heartbeats of this worker.
            stalled_after: seconds without a heartbeat after which a worker's jobs are
                re-run (greater than ``heartbeat``; a few heartbeats).
            clock: what ``job.sleep`` waits on (monotonic by default).
            format_error: turns a job's exception into its stored error text.
            install_signal_handlers: stop gracefully on SIGTERM/SIGINT (a CLI process).
            name: the worker's name in the logs.
            running: called with True once the worker takes jobs, with False when it
                stops taking them: when it stops, and while its database is unreachable
                (True again once it answers; the readiness of ``/ready``).
            report_patience: seconds a job's report (its start, result or failure)
                waits for an unreachable database, tried again with backoff, so a job
                that finishes during an outage reports its result once the database
                returns (15 minutes by default). Past it the attempt ends, logged as an
                error, and the job runs again as its next attempt once the database
                answers. The worker itself rides out an outage of any length (its
                heartbeat, its fetches, its listener wait for the database;
                :mod:`voxflow.jobs.worker_app`): it never stops because of one.

        Raises:
            ValueError: a bad argument.
            PersistenceUnavailableError: the database is unreachable as the worker
                starts, or went away while it started (before it was registered) for
                longer than ``report_patience``.
        """
        for label, value in (("heartbeat", heartbeat), ("stalled_after", stalled_after),
                             ("report_patience", report_patience)):
            if (isinstance(value, bool) or not isinstance(value, int | float)
                    or not 0 < value < math.inf):  # (inf: a stalled job never re-run)
                raise ValueError(f"{label} must be a positive, finite number of seconds")
        if stalled_after <= heartbeat:
            raise ValueError("stalled_after must be longer than heartbeat (a few heartbeats)")
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ValueError("concurrency must be an int >= 1")
        await self.migrate()
        # here: the optional voxflow[postgres] extra (migrate() said if it is missing)
        import procrastinate
        import psycopg

        logger.info("running the jobs queued in schema %s of %s", self.schema,
                    redact_url(self.url))

        # Procrastinate removes the rows of workers silent for its stalled_worker_timeout
        # as it starts, without a word: say who died. Not at stalled_after: a live
        # worker silent through an outage, its row removed, would lose its running jobs
        # to the first sweep (their worker cleared); their retry needs no removal
        job_clock = clock if clock is not None else MonotonicClock()
        stopping = threading.Event()
        watch = self._watch = DatabaseWatch(running, stopping.is_set)
        # (the database answered migrate(): an outage from here on is ridden out, for up
        # to the report patience, as the rest of the worker's start is)
        await ride_out(lambda: self.forget_dead_workers(forget_workers_after(stalled_after)),
                       "its start", watch, unreachable=_outage, gone=None,
                       within=report_patience)
        watch.back()
        rows = WorkerRows()  # this process's Procrastinate worker (its row)
        refusals: list[DatabaseRefusedError] = []
        worker: asyncio.Future[None] | None = None

        def refuse(error: DatabaseRefusedError) -> None:
            """A query refused on a live connection (no outage): the worker stops (as on
            SIGTERM: its running jobs finish) and ``run_worker`` raises ``error``."""
            if not refusals:
                refusals.append(error)
            stopping.set()
            if worker is not None:
                worker.cancel()

        app = job_worker_app(self._connector_kwargs(concurrency + 3), watch, stopping.is_set,
                             rows, refuse, report_patience)

        async def execute(context: Any, /, **payload: Any) -> None:
            run = (int(context.job.id), int(context.job.attempts))
            task = asyncio.current_task()
            if task is not None:  # (cancelled should another worker take the job)
                rows.runs[run] = task
            try:
                await run_queued_job(self.inbox, context, payload, job_clock, format_error,
                                     stopping.is_set, report_patience)
            finally:
                rows.runs.pop(run, None)

        app.task(name=TASK_NAME, pass_context=True, queue=self.queue,
                 retry=run_again_unreported())(execute)
        try:
            async with app.open_async():
                sweeper = asyncio.create_task(
                    self._sweep(stalled_after, heartbeat, rows, watch, refuse),
                    name="stalled jobs")
                worker = asyncio.ensure_future(app.run_worker_async(
                    queues=[self.queue], concurrency=concurrency,
                    name=name or f"voxflow-jobs-{self.schema}",
                    update_heartbeat_interval=heartbeat,
                    stalled_worker_timeout=forget_workers_after(stalled_after),
                    abort_job_polling_interval=max(0.5, heartbeat),
                    install_signal_handlers=False,
                    fetch_job_polling_interval=max(0.5, stalled_after / 4)))
                try:  # (ready once Procrastinate registered the worker: watch.started)
                    await run_until_stopped(worker, stopping, install_signal_handlers,
                                            running)
                except asyncio.CancelledError:
                    if not refusals:
                        raise
                finally:
                    if running is not None:
                        running(False)
                    stopping.set()
                    sweeper.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await sweeper
        except (psycopg.Error, procrastinate.exceptions.ProcrastinateException) as exc:
            # the database refused the worker's start (or failed otherwise): one typed
            # error (the refusal that stopped it, not what failed as it stopped)
            raise (refusals[0] if refusals else self._unavailable(exc.__cause__ or exc)
                   ) from None
        finally:
            await self.inbox.close()
        if refusals:
            raise refusals[0]

    async def _sweep(self, stalled_after: float, period: float, rows: WorkerRows,
                     watch: DatabaseWatch,
                     refuse: Callable[[DatabaseRefusedError], None]) -> None:
        async def run(sql: str, params: dict[str, Any]) -> list[tuple[int, str]]:
            return [(int(row[0]), str(row[1])) for row in await self.inbox._execute(sql, params)]

        purged_at = float("-inf")
        away = False  # the database did not answer the last sweep
        # a worker starting (a supervisor starts it as the database returns) judges no
        # worker stalled before their heartbeats had stalled_after to resume either
        judge_from = time.monotonic() + stalled_after
        while True:
            try:
                if away:
                    await self.inbox._execute("SELECT 1")
                    # every worker's heartbeat stopped with the database: none is judged
                    # stalled (its jobs run again) before it had time to beat again
                    away, judge_from = False, time.monotonic() + stalled_after
                # beat for this process's worker too (its row put back if another
                # worker removed it): Procrastinate's heartbeat ends when its stop begins,
                # while it waits for the running jobs, and after an outage its pool
                # reconnects only at its next backoff, seconds after the database is back;
                # without a beat every worker's sweep would take its jobs for stalled and
                # run them again
                await rows.beat(run)
                if time.monotonic() >= judge_from:
                    retried = await self.retry_stalled(stalled_after)
                    if retried:
                        logger.warning("re-queued %d stalled job(s) as their next attempt: "
                                       "%s", len(retried), retried)
                    await self.forget_dead_workers(forget_workers_after(stalled_after))
                if time.monotonic() - purged_at > INBOX_PURGE_EVERY:
                    purged_at = time.monotonic()
                    await self.inbox.purge(INBOX_KEEP)
            except DatabaseRefusedError as exc:  # (no outage: the worker stops)
                refuse(exc)
                return
            except PersistenceUnavailableError as exc:
                # (said once an outage; said over when the worker's own queries are
                # answered again: Procrastinate's pool, not this one, takes the jobs)
                watch.lost(exc, "its stalled-job check")
                away = True
            await asyncio.sleep(period)

    def __repr__(self) -> str:
        return (f"PostgresJobQueue({redact_url(self.url)!r}, schema={self.schema!r}, "
                f"queue={self.queue!r})")


def _outage(exc: BaseException) -> bool:
    """``exc`` (the inbox's) says the database is unreachable, not that it refused."""
    return isinstance(exc, PersistenceUnavailableError) and not isinstance(
        exc, DatabaseRefusedError)


def default_job_queue() -> PostgresJobQueue | None:
    """The job queue of ``VOXFLOW_DATABASE_URL``, in the first schema of its
    ``search_path`` (the one the session store and the dispatch of that URL use), or None
    when it is unset (jobs then run in the call's own process, as embedded): what a call
    worker passes as ``AssistantWiring(flow, job_queue=default_job_queue())``, and the
    queue ``voxflow jobs worker`` runs.

    Raises:
        SettingsError: the variable is set but not a ``postgresql://`` URL, or its
            ``search_path`` names no schema voxflow can use (named, the password never
            shown).
    """
    url = Settings.from_env().database_url
    return None if url is None else PostgresJobQueue(url.get_secret_value())
