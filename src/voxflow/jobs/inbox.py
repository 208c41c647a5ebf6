"""The durable job inbox: where job-worker processes leave job updates for a session.

A job that runs in a job-worker process (:mod:`voxflow.jobs.queue`) cannot touch the
session's state, which the call worker owning the session holds. It writes each update
(a :class:`~voxflow.jobs.JobUpdate`, or a progress text) as one row of the session's
inbox, a PostgreSQL table, and ``NOTIFY``\\ s the owner in the same transaction. **The
table is the truth**; the notification only wakes the reader early (a reader that missed
one finds the rows on its next read).

Delivery is at-least-once and the application idempotent, so each result is announced
once:

* **write** (job worker): a row per ``(job_id, revision, attempt, seq)``; writing the same
  update twice keeps one row. A write names the queue job it comes from and lands only
  while the queue still runs that attempt (:meth:`JobInbox.write` returns False for a
  dead attempt's late write: the queue has retried the job since);
* **apply** (the owner): :func:`apply_inbox` passes each row through
  :func:`~voxflow.jobs.commit_job_update` (a new attempt through
  :func:`~voxflow.jobs.begin_attempt` first): a row read twice, by two readers, or from
  an attempt that died is refused by those rules and changes nothing;
* **acknowledge** (the owner): :meth:`JobInbox.ack` marks rows read only *after* the
  state holding them was saved; a worker that dies between the read and the save leaves
  them unacknowledged, and the next owner applies them again (from its restored state,
  which does not have them yet). The announcement itself is guarded by the reply queue's
  covered versions (``ReplyQueueState.covered_updates``), saved with the state.

The rows stay (acknowledged) for audit; :meth:`JobInbox.purge` deletes old ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from voxflow.errors import JobPayloadError, PersistenceUnavailableError
from voxflow.ids import JobId, SessionId
from voxflow.jobs.records import JobState, JobUpdate, begin_attempt, commit_job_update
from voxflow.jobs.results import MAX_PROGRESS_CHARS, BackgroundJob, commit_progress
from voxflow.pg_refusal import refused
from voxflow.pg_retry import atransaction
from voxflow.pg_schema import aensure_tables
from voxflow.pg_url import (
    check_database_url,
    check_schema,
    connection_options,
    database_schema,
    redact_url,
)
from voxflow.settings import DATABASE_URL_VARIABLE
from voxflow.storable import check_json, check_text

if TYPE_CHECKING:
    from psycopg import AsyncConnection
    from psycopg_pool import AsyncConnectionPool

__all__ = ["InboxEntry", "JobInbox", "apply_inbox", "inbox_channel"]

logger = logging.getLogger("voxflow.jobs")

_PROGRESS_NAMESPACE = uuid.UUID("6f1e0c52-6b57-4a59-9d3c-8f3b0e3d7a11")

INBOX_SCHEMA = """
CREATE TABLE IF NOT EXISTS voxflow_job_inbox (
    id bigserial PRIMARY KEY,
    session_id text NOT NULL,
    job_id text NOT NULL,
    revision integer NOT NULL,
    attempt integer NOT NULL,
    seq integer NOT NULL,
    body jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    acked_at timestamptz,
    UNIQUE (job_id, revision, attempt, seq)
);
CREATE INDEX IF NOT EXISTS voxflow_job_inbox_pending
    ON voxflow_job_inbox (session_id, id) WHERE acked_at IS NULL;
"""

_FIX = (f"check {DATABASE_URL_VARIABLE} (postgresql://user[:password]@host[:port]/database) "
        "and that the server is running")


def inbox_channel(schema: str) -> str:
    """The ``LISTEN``/``NOTIFY`` channel of a schema's inbox (payload: the session id)."""
    return f"voxflow_inbox_{schema}"[:63]


@dataclasses.dataclass(frozen=True, slots=True)
class InboxEntry:
    """One inbox row as the owner reads it.

    Attributes:
        id: the row id (acknowledge it with :meth:`JobInbox.ack`).
        session_id: the session it is for.
        update: the job update, or None for a progress report or a malformed row.
        progress: the progress text of a progress report (``update`` is None).
        job_id, revision, attempt, seq: the identity of the report.
        problem: why a malformed row cannot be applied (it is skipped and acknowledged).
    """

    id: int
    session_id: SessionId
    job_id: JobId
    revision: int
    attempt: int
    seq: int
    update: JobUpdate | None = None
    progress: str | None = None
    problem: str | None = None

    @property
    def progress_job_id(self) -> JobId:
        """The id of the progress record this report makes (the same every time it is
        read, so it is registered once)."""
        key = f"{self.job_id}:{self.revision}:{self.attempt}:{self.seq}"
        return JobId(str(uuid.uuid5(_PROGRESS_NAMESPACE, key)))


def _entry(row: Sequence[Any]) -> InboxEntry:
    row_id, session_id, job_id, revision, attempt, seq, body = row
    base: dict[str, Any] = {"id": row_id, "session_id": session_id, "job_id": job_id,
                            "revision": revision, "attempt": attempt, "seq": seq}
    try:
        if not isinstance(body, dict):
            raise JobPayloadError("an inbox row's body is not a JSON object")
        kind = body.get("type")
        if kind == "progress":
            text = body.get("text")
            if not isinstance(text, str) or not text.strip() or len(text) > MAX_PROGRESS_CHARS:
                raise JobPayloadError(f"a progress row needs 1 to {MAX_PROGRESS_CHARS} "
                                      "characters of text")
            return InboxEntry(**base, progress=text.strip())
        if kind != "update":
            raise JobPayloadError(f"unknown inbox row type {kind!r}")
        update = JobUpdate.model_validate(body.get("update"))
        if (update.session_id, update.job_id, update.revision, update.attempt, update.seq) != (
                session_id, job_id, revision, attempt, seq):
            raise JobPayloadError("the row's update does not match its identity columns")
        return InboxEntry(**base, update=update)
    except (JobPayloadError, ValidationError) as exc:
        reason = exc.errors()[0]["msg"] if isinstance(exc, ValidationError) else str(exc)
        return InboxEntry(**base, problem=reason)


def apply_inbox(state: JobState[Any], entries: Iterable[InboxEntry]) -> list[bool]:
    """Apply inbox rows to ``state`` through the job rules; one bool per row: accepted.

    An update of a later attempt first moves its job to that attempt
    (:func:`~voxflow.jobs.begin_attempt`); every update then goes through
    :func:`~voxflow.jobs.commit_job_update`, which refuses a duplicate (a row read
    twice), a dead attempt's late update, a foreign session and every lifecycle error.
    A progress report registers a completed ``<kind>.progress`` record once (its id is
    derived from the report's identity). Malformed rows are refused (logged at WARNING).

    Not locked: hold the session's state lock (``AssistantWiring.state_lock``).
    """
    results: list[bool] = []
    for entry in entries:
        if entry.problem is not None or entry.session_id != state.id:
            if entry.problem is not None:
                logger.warning("job inbox row %s refused: %s", entry.id, entry.problem)
            results.append(False)
            continue
        job = state.jobs.get(entry.job_id)
        if entry.update is not None:
            update = entry.update
            if (job is not None and update.revision == job.revision
                    and update.attempt > job.attempt):
                begin_attempt(state, job.job_id, revision=update.revision,
                              attempt=update.attempt)
            results.append(commit_job_update(state, update))
        elif entry.progress is not None and isinstance(job, BackgroundJob):
            made = commit_progress(state, job, entry.progress, job_id=entry.progress_job_id)
            results.append(made is not None)
        else:
            results.append(False)
    return results


class JobInbox:
    """The ``voxflow_job_inbox`` table of one schema, through an async connection pool.

    The pool opens, and the table is created, on first use.

    Args:
        url: a ``postgresql://`` URL (validated; never shown with its password).
        schema: the schema holding the table (created if missing); None (the default):
            the first schema of the URL's ``search_path``
            (:func:`~voxflow.pg_url.database_schema`), as for every voxflow store.
        max_connections: the pool's size (>= 1).
        connect_timeout: seconds to wait for a connection before failing.

    Raises:
        ValueError: a bad argument (the message never shows the URL's password).
    """

    def __init__(self, url: str, *, schema: str | None = None, max_connections: int = 4,
                 connect_timeout: float = 10.0) -> None:
        check_database_url(url)
        self.url = url
        self.schema = database_schema(url) if schema is None else check_schema(schema)
        if isinstance(max_connections, bool) or not isinstance(max_connections, int) or (
                max_connections < 1):
            raise ValueError("max_connections must be an int >= 1")
        if isinstance(connect_timeout, bool) or not isinstance(connect_timeout, int | float):
            raise ValueError("connect_timeout must be a number of seconds")
        self.max_connections = max_connections
        self.connect_timeout = float(connect_timeout)
        self.channel = inbox_channel(self.schema)
        self._pool: AsyncConnectionPool[Any] | None = None
        self._open_lock = asyncio.Lock()
        self._watchers: dict[str, set[asyncio.Event]] = {}
        self._listener: asyncio.Task[None] | None = None

    # -- connections -------------------------------------------------------------------

    @property
    def connect_options(self) -> dict[str, Any]:
        """The psycopg connection options (autocommit; the URL's own options, with this
        schema first on the search path)."""
        return {"autocommit": True, "options": connection_options(self.url, self.schema)}

    def unavailable(self, exc: BaseException) -> PersistenceUnavailableError:
        """The typed error for a database failure (the URL without its password): a
        query the server refused on a live connection is a
        :class:`~voxflow.errors.DatabaseRefusedError` naming it."""
        refusal = refused(exc, url=self.url, what="a query of the job queue")
        if refusal is not None:
            return refusal
        lines = str(exc).replace(self.url, redact_url(self.url)).strip().splitlines()
        return PersistenceUnavailableError(
            f"cannot use the PostgreSQL job inbox: {lines[0] if lines else type(exc).__name__}",
            path=redact_url(self.url), fix=_FIX)

    async def _open(self) -> AsyncConnectionPool[Any]:
        if self._pool is not None:
            return self._pool
        async with self._open_lock:
            if self._pool is not None:
                return self._pool
            try:
                # here: psycopg is the optional voxflow[postgres] extra
                import psycopg
                from psycopg_pool import AsyncConnectionPool, PoolTimeout
            except ImportError as exc:
                raise PersistenceUnavailableError(
                    "the job inbox needs psycopg", path=redact_url(self.url),
                    fix="pip install 'voxflow[postgres]'") from exc
            pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
                self.url, min_size=1, max_size=self.max_connections,
                kwargs=self.connect_options, timeout=self.connect_timeout, open=False,
                name=f"voxflow-inbox-{self.schema}")
            try:  # one direct connection first: a refused server fails at once, with why
                async with await psycopg.AsyncConnection.connect(
                        self.url, connect_timeout=max(1, int(self.connect_timeout)),
                        **self.connect_options) as conn, conn.transaction():
                    await aensure_tables(conn, self.schema, INBOX_SCHEMA)
                await pool.open(wait=True, timeout=self.connect_timeout)
            except (psycopg.Error, PoolTimeout, OSError) as exc:
                await pool.close()
                raise self.unavailable(exc) from None
            self._pool = pool
            return pool

    async def _execute(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()
                       ) -> list[tuple[Any, ...]]:
        """``sql`` in one transaction, its rows. A connection that breaks before the
        commit (a reset, a restarted server: nothing was written) is replaced, with its
        pool, and the statement run once more on a fresh one; one that breaks during the
        commit is not (it may have been written)."""
        async def work(conn: AsyncConnection[Any]) -> list[tuple[Any, ...]]:
            cursor = await conn.execute(sql, params)
            return await cursor.fetchall() if cursor.description else []

        return await atransaction(self._open, work, discard=self._discard,
                                  unavailable=self.unavailable, logger=logger,
                                  what="job inbox")

    async def _discard(self, pool: AsyncConnectionPool[Any]) -> None:
        """Close ``pool`` after one of its connections broke: the next call opens a new
        one, or says at once that the server is still unreachable."""
        async with self._open_lock:
            if self._pool is not pool:
                return
            self._pool = None
        await pool.close(timeout=1.0)

    async def open(self) -> None:
        """Open the pool and create the table now: a typed error before any work.

        Raises:
            PersistenceUnavailableError: the server is unreachable or refused.
        """
        await self._open()

    async def close(self) -> None:
        """Stop listening and close the pool (idempotent; the next call reopens it)."""
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await listener
        async with self._open_lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()

    # -- the job worker's side ---------------------------------------------------------

    async def _insert(self, session_id: str, ids: tuple[str, int, int, int],
                      body: dict[str, Any], queue_job: tuple[int, int] | None) -> bool:
        job_id, revision, attempt, seq = ids
        params: list[Any] = [session_id, job_id, revision, attempt, seq, json.dumps(body)]
        guard = ""
        if queue_job is not None:
            # the queue's attempt counter is still this attempt's: not a dead one's write.
            # (Not the status: a resumed zombie's queue library may mark the job finished
            # under the live attempt, whose updates must still land.)
            guard = ("WHERE EXISTS (SELECT 1 FROM procrastinate_jobs WHERE id = %s "
                     "AND attempts = %s)")
            params += [queue_job[0], queue_job[1] - 1]
        sql = ("WITH row AS (INSERT INTO voxflow_job_inbox "
               "(session_id, job_id, revision, attempt, seq, body) "
               f"SELECT %s, %s, %s, %s, %s, %s::jsonb {guard} "
               "ON CONFLICT (job_id, revision, attempt, seq) DO NOTHING RETURNING session_id) "
               "SELECT pg_notify(%s, session_id) FROM row")
        rows = await self._execute(sql, [*params, self.channel])
        if not rows and queue_job is not None:
            again = await self._execute(
                "SELECT 1 FROM voxflow_job_inbox WHERE job_id = %s AND revision = %s "
                "AND attempt = %s AND seq = %s", (job_id, revision, attempt, seq))
            return bool(again)  # a duplicate write of a stored row is not a refusal
        return True

    async def write(self, update: JobUpdate, *, queue_job: tuple[int, int] | None = None
                    ) -> bool:
        """Store ``update`` in its session's inbox and wake the owner (one transaction).

        Args:
            update: the job update.
            queue_job: ``(queue job id, attempt)`` of the execution that made it: the
                row lands only while the queue still runs that attempt.

        Returns:
            True when stored (or already stored: writing twice keeps one row); False
            when the queue no longer runs that attempt (it was retried: this execution
            is dead, stop it).

        Raises:
            TypeError: ``update`` is not a JobUpdate.
            UnstorableTextError: a text of it (an output, the error, an id) holds a NUL
                or a lone surrogate (PostgreSQL's jsonb refuses them), named; nothing
                was written.
            PersistenceUnavailableError: the database is unreachable.
        """
        if not isinstance(update, JobUpdate):
            raise TypeError(f"update must be a JobUpdate, got {type(update).__name__}")
        body = {"type": "update", "update": update.model_dump(mode="json")}
        check_json(body["update"], "the job update")
        ids = (update.job_id, update.revision, update.attempt, update.seq)
        return await self._insert(update.session_id, ids, body, queue_job)

    async def write_progress(self, session_id: str, ids: tuple[str, int, int, int], text: str,
                             *, queue_job: tuple[int, int] | None = None) -> bool:
        """Store a progress report (``ids``: job id, revision, attempt, seq) like
        :meth:`write`.

        Raises:
            ValueError: ``text`` is empty or longer than 2,000 characters.
            UnstorableTextError: ``text`` or the session id holds a NUL or a lone
                surrogate.
        """
        if not isinstance(text, str) or not text.strip() or len(text) > MAX_PROGRESS_CHARS:
            raise ValueError(f"progress text must be 1 to {MAX_PROGRESS_CHARS} characters")
        check_text(text, "the progress text")
        check_text(session_id, "the session id")
        return await self._insert(session_id, ids, {"type": "progress", "text": text.strip()},
                                  queue_job)

    async def finished(self, job_id: str, revision: int) -> bool:
        """True when some attempt of this job version already reported its end
        (``completed`` or ``failed``): a retried execution then has nothing to do."""
        rows = await self._execute(
            "SELECT 1 FROM voxflow_job_inbox WHERE job_id = %s AND revision = %s "
            "AND body->>'type' = 'update' AND body->'update'->>'kind' IN ('completed', 'failed') "
            "LIMIT 1", (job_id, revision))
        return bool(rows)

    # -- the owner's side --------------------------------------------------------------

    async def pending(self, session_id: str, *, limit: int = 500) -> list[InboxEntry]:
        """The session's unacknowledged rows, oldest first (malformed ones flagged with
        ``problem``, never raised)."""
        rows = await self._execute(
            "SELECT id, session_id, job_id, revision, attempt, seq, body FROM "
            "voxflow_job_inbox WHERE session_id = %s AND acked_at IS NULL ORDER BY id LIMIT %s",
            (session_id, limit))
        return [_entry(row) for row in rows]

    async def ack(self, session_id: str, ids: Iterable[int]) -> int:
        """Mark rows read (call it after the state holding them was saved); returns how
        many were newly acknowledged."""
        wanted = [int(i) for i in ids]
        if not wanted:
            return 0
        rows = await self._execute(
            "UPDATE voxflow_job_inbox SET acked_at = clock_timestamp() WHERE session_id = %s "
            "AND id = ANY(%s) AND acked_at IS NULL RETURNING id", (session_id, wanted))
        return len(rows)

    async def purge(self, older_than: float) -> int:
        """Delete acknowledged rows older than ``older_than`` seconds; returns how many."""
        rows = await self._execute(
            "DELETE FROM voxflow_job_inbox WHERE acked_at IS NOT NULL AND acked_at < "
            "clock_timestamp() - make_interval(secs => %s) RETURNING id", (float(older_than),))
        return len(rows)

    async def notifications(self) -> AsyncIterator[str]:
        """The session ids of new rows, as they are written (a dedicated connection
        ``LISTEN``\\ s until the iterator is closed). A wake-up, not the truth: read
        :meth:`pending` after each, and on a timer too.

        Raises:
            PersistenceUnavailableError: the database is unreachable.
        """
        async for session_id in self._notifications(None):
            yield session_id

    async def _notifications(self, on_listening: Callable[[], None] | None
                             ) -> AsyncIterator[str]:
        """:meth:`notifications`, calling ``on_listening`` once the ``LISTEN`` is in
        place (a row written after that call is notified)."""
        import psycopg  # here: the optional voxflow[postgres] extra (loaded by _open)

        await self._open()
        conn: AsyncConnection[Any] | None = None
        try:
            conn = await psycopg.AsyncConnection.connect(
                self.url, connect_timeout=max(1, int(self.connect_timeout)),
                **self.connect_options)
            await conn.execute(f'LISTEN "{self.channel}"')
            if on_listening is not None:
                on_listening()
            async for note in conn.notifies():
                yield note.payload
        except psycopg.OperationalError as exc:
            raise self.unavailable(exc) from None
        finally:
            if conn is not None:
                await conn.close()

    def watch(self, session_id: str) -> asyncio.Event:
        """An event set whenever a row for ``session_id`` is written (and whenever the
        listener (re)connects, since rows may have come meanwhile). One ``LISTEN``
        connection serves every watched session of this inbox; call on the event loop
        that uses the inbox, and :meth:`unwatch` when done."""
        event = asyncio.Event()
        self._watchers.setdefault(session_id, set()).add(event)
        if self._listener is None or self._listener.done():
            self._listener = asyncio.create_task(self._listen(), name="job inbox listener")
        return event

    def unwatch(self, session_id: str, event: asyncio.Event) -> None:
        """Stop setting ``event`` (the listener stops with the last watcher)."""
        events = self._watchers.get(session_id)
        if events is not None:
            events.discard(event)
            if not events:
                del self._watchers[session_id]
        if not self._watchers and self._listener is not None:
            self._listener.cancel()
            self._listener = None

    async def _listen(self) -> None:
        while True:
            def wake_all() -> None:  # rows may have come while nobody listened
                for events in list(self._watchers.values()):
                    for event in events:
                        event.set()

            try:
                async for session_id in self._notifications(wake_all):
                    for event in self._watchers.get(session_id, ()):
                        event.set()
            except Exception as exc:  # a lost connection: listen again (readers poll)
                logger.warning("job inbox listener stopped (%s); listening again", exc)
                await asyncio.sleep(1.0)

    def __repr__(self) -> str:
        return f"JobInbox({redact_url(self.url)!r}, schema={self.schema!r})"
