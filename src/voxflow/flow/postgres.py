""":class:`PostgresFlowPersistence`: the item-row store on PostgreSQL (psycopg 3, a pool).

The same rows as SQLite (:mod:`voxflow.flow._item_rows`: a small snapshot row per
session, list items and records one row each, appended and upserted, never whole
snapshots), the same revision check and lease fencing (:mod:`voxflow.flow._row_store`),
so several worker processes or machines can share one database. Writers of one session
are serialised by a transaction-level advisory lock on the session id; reads see one
consistent snapshot (``REPEATABLE READ``).

Chosen by ``VOXFLOW_DATABASE_URL`` (``postgresql://user@host:5432/db``; see
:func:`voxflow.flow.persistence.default_persistence`); SQLite stays the embedded
default. Needs the ``postgres`` extra: ``pip install 'voxflow[postgres]'``.

Example::

    store = PostgresFlowPersistence("postgresql://postgres@127.0.0.1:5432/test")

    @persist(store)
    class Support(Flow[ConversationState]): ...
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from voxflow.errors import PersistenceUnavailableError
from voxflow.flow._item_rows import PG_SCHEMA, Conn, Cursor
from voxflow.flow._row_store import RowStore
from voxflow.pg_schema import ensure_tables
from voxflow.pg_url import (
    check_database_url,
    check_schema,
    connection_options,
    database_schema,
    redact_url,
)
from voxflow.settings import DATABASE_URL_VARIABLE

if TYPE_CHECKING:
    from psycopg import Connection
    from psycopg_pool import ConnectionPool

__all__ = ["PostgresFlowPersistence"]

_ORPHAN_AFTER = 1.0
"""Seconds a write whose connection broke during its COMMIT may stay in progress on the
server before its backend is ended (:meth:`PostgresFlowPersistence._landed`)."""

T = TypeVar("T")

logger = logging.getLogger("voxflow.flow.persistence")

_FIX = (
    f"check {DATABASE_URL_VARIABLE} (postgresql://user[:password]@host[:port]/database) and "
    "that the server is running; unset it to use the embedded SQLite store"
)


class _PgConn:
    """A psycopg connection seen as :class:`~voxflow.flow._item_rows.Conn` (``?`` → ``%s``)."""

    __slots__ = ("_conn",)
    _sql: dict[str, str] = {}

    def __init__(self, conn: Connection[Any]) -> None:
        self._conn = conn

    @classmethod
    def _translate(cls, sql: str) -> str:
        found = cls._sql.get(sql)
        if found is None:
            found = cls._sql[sql] = sql.replace("%", "%%").replace("?", "%s")
        return found

    def execute(self, sql: str, parameters: Sequence[Any] = (), /) -> Cursor:
        return self._conn.execute(self._translate(sql), parameters)

    def executemany(self, sql: str, parameters: Sequence[Sequence[Any]], /) -> Any:
        with self._conn.cursor() as cursor:
            cursor.executemany(self._translate(sql), parameters)


class PostgresFlowPersistence(RowStore):
    """:class:`~voxflow.flow.persistence.FlowPersistence` on PostgreSQL, shared by processes.

    The pool opens and the tables are created on first use (not in the constructor).

    Args:
        url: a ``postgresql://`` URL (validated: :func:`check_database_url`); its own
            ``options`` (``-c statement_timeout=…``) apply to every connection.
        schema: the schema holding the tables (created if missing); None (the default):
            the first schema of the URL's ``search_path``
            (:func:`~voxflow.pg_url.database_schema`, ``public`` when it names none),
            the schema every voxflow store given that URL uses.
        history_limit: older snapshots kept per session besides the latest (>= 0).
        max_connections: the pool's size (>= 1).
        connect_timeout: seconds to wait for a connection before failing.

    Raises:
        ValueError: a bad ``url`` (the message never shows its password) or argument.
    """

    _now_sql = "extract(epoch FROM clock_timestamp())::float8"  # the server's clock

    def __init__(
        self,
        url: str,
        *,
        schema: str | None = None,
        history_limit: int = 10,
        max_connections: int = 4,
        connect_timeout: float = 10.0,
    ) -> None:
        check_database_url(url)
        schema = database_schema(url) if schema is None else check_schema(schema)
        for name, value, low in (("history_limit", history_limit, 0), ("max_connections",
                                 max_connections, 1)):  # fmt: skip
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name} must be an int >= {low}")
        if isinstance(connect_timeout, bool) or not isinstance(connect_timeout, int | float):
            raise ValueError("connect_timeout must be a number of seconds")
        self.url = url
        self.schema = schema
        self.history_limit = history_limit
        self.max_connections = max_connections
        self.connect_timeout = float(connect_timeout)
        self._pool: ConnectionPool[Any] | None = None
        self._open_lock = threading.Lock()
        self._writable = False
        self._local = threading.local()  # what the running write noted (_note_revision)
        # session → (transaction id, revision) of a write whose commit is unknown. This
        # process's alone, and enough: only the writer that made the write retries it
        # (revision-checked, expecting the revision before it); another process loads
        # the stored state (the write in it iff it was made) when it takes the session,
        # and a writer whose lease it took is fenced before any revision check
        self._uncertain: dict[str, tuple[int, int]] = {}

    # -- connections -----------------------------------------------------------------

    def _unavailable(self, exc: BaseException) -> PersistenceUnavailableError:
        reason = str(exc).replace(self.url, redact_url(self.url)).strip().splitlines()
        return PersistenceUnavailableError(
            f"cannot use the PostgreSQL session store: {reason[0] if reason else exc}",
            path=redact_url(self.url),
            fix=_FIX,
        )

    def _open(self) -> ConnectionPool[Any]:
        pool = self._pool
        if pool is not None:
            return pool
        with self._open_lock:
            if self._pool is not None:
                return self._pool
            try:
                # here: psycopg is the optional voxflow[postgres] extra
                import psycopg
                from psycopg_pool import ConnectionPool, PoolTimeout
            except ImportError as exc:
                raise PersistenceUnavailableError(
                    "PostgreSQL persistence needs psycopg",
                    path=redact_url(self.url),
                    fix="pip install 'voxflow[postgres]'",
                ) from exc
            options: dict[str, Any] = {"autocommit": True,
                                       "options": connection_options(self.url, self.schema)}
            pool = ConnectionPool(
                self.url,
                min_size=1,
                max_size=self.max_connections,
                kwargs=options,
                timeout=self.connect_timeout,
                open=False,
                name=f"voxflow-{self.schema}",
            )
            try:
                # One direct connection first: a refused or unknown server fails at once,
                # saying why (the pool retries for connect_timeout, logging each retry,
                # and then says only that it could not start).
                with psycopg.connect(self.url, connect_timeout=max(1, int(self.connect_timeout)),
                                     **options) as conn, conn.transaction():
                    ensure_tables(conn, self.schema, PG_SCHEMA)
                pool.open(wait=True, timeout=self.connect_timeout)
            except (psycopg.Error, PoolTimeout, OSError) as exc:
                pool.close()
                raise self._unavailable(exc) from None
            self._pool = pool
            return pool

    def _discard(self, pool: ConnectionPool[Any]) -> None:
        """Close ``pool`` after one of its connections broke (a reset or a restart of the
        server breaks them all): the next operation opens a new one, or says at once
        that the server is still unreachable (``_open``'s direct connection)."""
        with self._open_lock:
            if self._pool is not pool:
                return  # another thread replaced it already
            self._pool = None
        pool.close(timeout=1.0)

    def _transaction(self, begin: str, fn: Callable[[Conn], T], *, write: bool = False) -> T:
        """``fn`` in one transaction. A connection that breaks before ``COMMIT`` was sent
        (a reset, a restarted server: nothing was written) is replaced, with its pool,
        and ``fn`` run once more on a fresh one. One that breaks during the ``COMMIT`` of
        a ``write`` leaves it unknown whether the write was made: a fresh connection asks
        the server (``txid_status`` of the transaction's id, read before the commit).
        Committed: it was, and ``fn``'s result is returned. Aborted: it was not, and
        ``fn`` runs once more. Unknown (the server unreachable):
        :class:`PersistenceUnavailableError`, as when the server cannot be reached, and
        the session's next revision-checked save learns the answer
        (:meth:`_own_revision`), so a retry never finds its own write a conflict."""
        # here: the optional voxflow[postgres] extra (loaded by _open)
        import psycopg
        from psycopg_pool import PoolClosed

        for attempt in (1, 2):
            pool = self._open()
            conn: Connection[Any] | None = None
            committing = False
            xid: int | None = None
            self._local.noted = None
            try:
                with pool.connection() as conn:
                    pid = conn.info.backend_pid
                    conn.execute(begin)
                    try:
                        result = fn(_PgConn(conn))
                        if write:  # (None when nothing was written)
                            row = conn.execute("SELECT txid_current_if_assigned()").fetchone()
                            xid = None if row is None or row[0] is None else int(row[0])
                    except BaseException:
                        if not conn.broken:
                            conn.execute("ROLLBACK")
                        raise
                    committing = True
                    conn.execute("COMMIT")
                    return result
            except psycopg.OperationalError as exc:
                broken = conn is not None and conn.broken
                if broken:
                    self._discard(pool)
                landed: bool | None = False  # (nothing was written: as not committed)
                if committing and xid is not None:
                    landed = self._landed(xid, pid)
                    noted = self._local.noted
                    if landed is None and noted is not None:
                        with self._open_lock:
                            self._uncertain[noted[0]] = (xid, noted[1])
                if committing and landed:
                    logger.info("a connection to the session store broke during a commit, "
                                "which was made (%s)", type(exc).__name__)
                    return result
                if attempt == 1 and landed is False and (
                        broken or isinstance(exc, PoolClosed)):
                    logger.info("a connection to the session store broke%s (%s); retrying "
                                "on a new one", " during a commit that was not made"
                                if committing else "", type(exc).__name__)
                    continue
                raise self._unavailable(exc) from None
        raise AssertionError("unreachable")  # (the loop returns or raises)

    def _landed(self, xid: int, pid: int) -> bool | None:
        """Whether transaction ``xid`` committed (False: aborted; None: unknown, the
        server unreachable), asked on a connection of its own. A transaction whose
        connection was just cut may still be ending: asked again for up to
        ``connect_timeout``. One still in progress after a second is one whose server
        side never saw the cut (a network that drops packets, not connections): its
        backend ``pid`` is ended, so that its transaction ends too (made, or not) and
        stops holding the session's lock."""
        import psycopg  # here: the optional voxflow[postgres] extra (loaded by _open)

        began = time.monotonic()
        ended = False
        try:
            with psycopg.connect(self.url, connect_timeout=max(1, int(self.connect_timeout)),
                                 autocommit=True) as conn:
                while True:
                    row = conn.execute("SELECT txid_status(%s)", (xid,)).fetchone()
                    status = None if row is None else row[0]
                    if status in ("committed", "aborted"):
                        return bool(status == "committed")
                    waited = time.monotonic() - began
                    if status is None or waited > self.connect_timeout:
                        return None  # (too old to know, or never ending)
                    if not ended and waited > _ORPHAN_AFTER:
                        ended = True
                        conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
                    time.sleep(0.02)
        except psycopg.Error:
            return None

    def _note_revision(self, flow_uuid: str, revision: int) -> None:
        self._local.noted = (flow_uuid, revision)

    def _own_revision(self, conn: Conn, flow_uuid: str, stored: int) -> bool:
        """Whether ``stored`` is the revision of this store's own write of ``flow_uuid``
        whose commit was left unknown, and that was made after all (forgotten once
        asked: a later revision is another writer's)."""
        with self._open_lock:
            uncertain = self._uncertain.pop(flow_uuid, None)
        if uncertain is None or uncertain[1] != stored:
            return False
        row = conn.execute("SELECT txid_status(?)", (uncertain[0],)).fetchone()
        return row is not None and row[0] == "committed"

    def _write(self, fn: Callable[[Conn], None]) -> None:
        self._transaction("BEGIN", fn, write=True)

    def _read(self, fn: Callable[[Conn], T]) -> T | None:
        return self._transaction("BEGIN READ ONLY", fn)

    def _read_consistent(self, fn: Callable[[Conn], T]) -> T | None:
        return self._transaction("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", fn)

    def _lock_session(self, conn: Conn, flow_uuid: str) -> None:
        conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(?, 0))", (flow_uuid,))

    def check_writable(self) -> None:
        """Open the pool and create the tables now: a typed error before any method runs.
        Called by the runtime before the first method of a persisted flow runs, once per
        backend while it succeeds (until :meth:`close`): a server that becomes
        unreachable later fails the writes themselves, not every turn's start.

        Raises:
            PersistenceUnavailableError: the server is unreachable or refused (the URL
                is shown without its password).
        """
        if self._writable:
            return
        self._transaction("BEGIN", lambda c: None)
        self._writable = True

    def drop_schema(self) -> None:
        """Drop this store's schema and everything in it (tests, benchmarks); then close."""
        if self.schema == "public":
            raise ValueError("refusing to drop the public schema")
        self._transaction("BEGIN", lambda c: c.execute(f'DROP SCHEMA "{self.schema}" CASCADE'))
        self.close()

    def close(self) -> None:
        """Close the pool (idempotent; the next call reopens it)."""
        self._writable = False
        with self._open_lock:
            if self._pool is not None:
                self._pool.close()
                self._pool = None

    def __repr__(self) -> str:
        return f"PostgresFlowPersistence({redact_url(self.url)!r}, schema={self.schema!r})"
