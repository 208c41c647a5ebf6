"""``@persist``, the :class:`FlowPersistence` protocol and :class:`SQLiteFlowPersistence`.

``@persist`` only stamps configuration (on a class: every method; on a method: that
one); nothing is created at import or decoration time. After a persisted method
completes, the runtime calls ``save_state(state.id, method, snapshot)``.

The default backend is SQLite (stdlib ``sqlite3``, WAL journal) in a file created on the
first write at :func:`default_data_dir` ``/flow_states.db``:

* ``$VOXFLOW_HOME`` when set, else
* ``$XDG_DATA_HOME/voxflow`` or ``~/.local/share/voxflow`` (Linux and other POSIX),
  ``~/Library/Application Support/voxflow`` (macOS), ``%LOCALAPPDATA%\\voxflow`` (Windows).

Storage per session does not grow quadratically: ``flow_states`` keeps the *latest*
snapshot per ``flow_uuid`` (an upsert), and ``flow_state_history`` keeps at most
``history_limit`` older snapshots per ``flow_uuid`` (pruned in the same transaction).
Every save is one transaction, so a crash mid-save leaves the previous snapshot intact.
Quiet by default: it logs, never prints.

**Item-stored fields.** The list fields named in :data:`APPEND_ONLY_FIELDS` (a
conversation's ``messages`` and ``events``) are stored one row per item in
``conversation_items``, and the dict-of-record fields named in :data:`RECORD_FIELDS`
(``turns``, ``replies``, ``deliveries``, ``covered_updates``, ``jobs``) one row per key
in ``state_records``; the snapshot row keeps the rest of the state plus, under
:data:`LISTS_KEY` and :data:`RECORDS_KEY`, how many elements of each belong to it.
:meth:`save_state_changes` then writes only the items appended and the records added,
changed or removed since the previous save, plus the small snapshot, so the cost of a
save does not grow with the session (conversational and job flows save this way
automatically, see ``voxflow.conversation.persistence``); :meth:`save_state_delta` is
its older list-only form. :meth:`load_state` reassembles the lists and dicts (each dict
in its insertion order), so it returns exactly the state that was saved, whichever way
it was saved. Items beyond a snapshot's counts (none are written today: rows and
snapshot share one transaction; a database from an older two-step writer may hold some)
are ignored and overwritten by the next delta. The tables are created if missing, so a
database written before records were item-stored opens as is: its snapshots keep their
dicts inline until the next full save.
"""

from __future__ import annotations

import logging
import os
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, overload, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from voxflow.errors import PersistenceUnavailableError, StoreLockedError
from voxflow.flow._item_rows import (
    APPEND_ONLY_FIELDS,
    LISTS_KEY,
    RECORD_FIELDS,
    RECORDS_KEY,
    SCHEMA,
    Conn,
    RecordChanges,
    StateChanges,
)
from voxflow.flow._leases import FencedPersistence, SessionLease, WritableCheck
from voxflow.flow._row_store import RowStore
from voxflow.flow.dsl import stamp_marks
from voxflow.paths import default_data_dir

if TYPE_CHECKING:
    import sqlite3

__all__ = [
    "APPEND_ONLY_FIELDS",
    "LISTS_KEY",
    "RECORDS_KEY",
    "RECORD_FIELDS",
    "FencedPersistence",
    "FlowPersistence",
    "PersistConfig",
    "RecordChanges",
    "SQLiteFlowPersistence",
    "SessionLease",
    "StateChanges",
    "WritableCheck",
    "default_data_dir",
    "default_persistence",
    "persist",
]

logger = logging.getLogger(__name__)

T = TypeVar("T")


@runtime_checkable
class FlowPersistence(Protocol):
    """What the runtime needs from a persistence backend (all methods are blocking)."""

    def save_state(self, flow_uuid: str, method_name: str, state_data: dict[str, Any]) -> None:
        """Atomically store ``state_data`` as the latest snapshot of ``flow_uuid``."""
        ...

    def load_state(self, flow_uuid: str) -> dict[str, Any] | None:
        """The latest snapshot of ``flow_uuid``, or None."""
        ...

    def save_pending_feedback(
        self, flow_uuid: str, context: dict[str, Any], state_data: dict[str, Any]
    ) -> None:
        """Store the context of a paused feedback step (replaces an older one)."""
        ...

    def load_pending_feedback(self, flow_uuid: str) -> tuple[dict[str, Any], dict[str, Any]] | None:
        """``(context, state)`` of the paused step of ``flow_uuid``, or None."""
        ...

    def clear_pending_feedback(self, flow_uuid: str) -> None:
        """Forget the paused step of ``flow_uuid`` (idempotent)."""
        ...


class PersistConfig(BaseModel):
    """What ``@persist`` stamped: the backend (None: the runtime's default) and verbosity."""

    model_config = ConfigDict(
        frozen=True, extra="forbid", arbitrary_types_allowed=True, defer_build=True
    )

    backend: Any = Field(default=None, description="a FlowPersistence, or None for the default")
    verbose: bool = Field(default=False, description="log each save at INFO")



_defaults: dict[str, RowStore] = {}
_defaults_by_env: dict[tuple[str | None, ...], RowStore] = {}
_defaults_lock = threading.Lock()
_DATA_DIR_ENV = (
    "VOXFLOW_DATABASE_URL",
    "VOXFLOW_HOME",
    "XDG_DATA_HOME",
    "LOCALAPPDATA",
    "HOME",
    "USERPROFILE",
)


def default_persistence() -> RowStore:
    """The shared default backend: PostgreSQL when ``VOXFLOW_DATABASE_URL`` is set, else
    SQLite at :func:`default_data_dir` ``/flow_states.db``.

    Called on every save of a flow without a backend of its own, so the lookup is keyed
    on the environment variables the choice depends on (no path work).

    Raises:
        SettingsError: ``VOXFLOW_DATABASE_URL`` is not a usable PostgreSQL URL (the
            message names the variable, never the password).
    """
    environ = os.environ
    env = tuple(map(environ.get, _DATA_DIR_ENV))
    backend = _defaults_by_env.get(env)
    if backend is not None:
        return backend
    url = (env[0] or "").strip()
    if url:
        # Here: `from voxflow import Flow` builds no settings model.
        from voxflow.pg_url import check_database_url
        from voxflow.settings import DATABASE_URL_VARIABLE, SettingsError

        try:
            check_database_url(url)
        except ValueError as exc:
            raise SettingsError(
                f"{DATABASE_URL_VARIABLE}: {exc}; give postgresql://user[:password]@host"
                "[:port]/database, or unset it for the embedded SQLite store"
            ) from None
        key = url
    else:
        key = str(default_data_dir() / "flow_states.db")
    with _defaults_lock:
        backend = _defaults.get(key)
        if backend is None:
            if url:
                # Here: only a database URL loads the PostgreSQL backend.
                from voxflow.flow.postgres import PostgresFlowPersistence

                backend = PostgresFlowPersistence(url)
            else:
                backend = SQLiteFlowPersistence(key)
            _defaults[key] = backend
        _defaults_by_env[env] = backend
        return backend


_BUSY_TIMEOUT_S = 30.0


def _prepare(conn: sqlite3.Connection, *, timeout: float) -> None:
    """Put a new connection in WAL mode and create the tables, waiting out other writers.

    Switching a database to WAL needs it to itself, and SQLite answers "database is
    locked" at once, without its busy handler, when another connection is in a write
    (two processes creating one database together). So the switch is retried, up to
    ``timeout``; a database already in WAL mode is left as is.
    """
    import sqlite3  # here: `from voxflow import Flow` loads no sqlite3

    deadline = time.monotonic() + timeout
    pause = 0.005
    while True:
        try:
            (mode,) = conn.execute("PRAGMA journal_mode").fetchone()
            if str(mode).lower() != "wal":
                conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.executescript(SCHEMA)
            return
        except sqlite3.OperationalError as exc:
            if not _locked(exc) or time.monotonic() + pause > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.1)


_SQLITE_BUSY, _SQLITE_LOCKED = 5, 6  # SQLite's primary result codes (extended & 0xff)


def _locked(exc: Exception) -> bool:
    """Whether an SQLite error says another connection holds the database's lock (past
    the busy timeout): SQLITE_BUSY or SQLITE_LOCKED, by their result codes (an extended
    code's low byte), not by the message's words. The store is unavailable until the
    other connection lets go."""
    code = getattr(exc, "sqlite_errorcode", None)
    return isinstance(code, int) and (code & 0xFF) in (_SQLITE_BUSY, _SQLITE_LOCKED)


def _out_of_storage(exc: Exception) -> bool:
    """Whether an SQLite error says the storage failed (full, I/O, read-only), not the
    statement: the store is then unavailable until the storage is back."""
    text = str(exc).lower()
    return any(words in text for words in ("disk is full", "disk i/o error", "readonly",
                                           "read-only", "unable to open"))


class SQLiteFlowPersistence(RowStore):
    """:class:`FlowPersistence` on one SQLite file (WAL), safe across threads and processes.

    Every operation (revisions, leases, item rows) is :class:`~voxflow.flow._row_store.
    RowStore`'s, shared with :class:`~voxflow.flow.postgres.PostgresFlowPersistence`.

    Args:
        path: the database file; None for :func:`default_data_dir` ``/flow_states.db``.
            Its directory and the file are created on the first write.
        history_limit: older snapshots kept per flow_uuid besides the latest (>= 0).
        busy_timeout: seconds a write waits for another connection's write lock (> 0);
            past it the write raises :class:`~voxflow.errors.StoreLockedError`.
    """

    # SQLite runs in the writing process: the clock is the machine's (a WAL file is
    # shared by the processes of one machine only).
    _now_sql = "((julianday('now') - 2440587.5) * 86400.0)"

    def __init__(
        self, path: str | os.PathLike[str] | None = None, *, history_limit: int = 10,
        busy_timeout: float = _BUSY_TIMEOUT_S,
    ) -> None:
        if path is not None and not isinstance(path, str | os.PathLike):
            raise TypeError("path must be a str or os.PathLike")
        if isinstance(history_limit, bool) or not isinstance(history_limit, int):
            raise TypeError("history_limit must be an int")
        if history_limit < 0:
            raise ValueError("history_limit must be >= 0")
        if isinstance(busy_timeout, bool) or not isinstance(busy_timeout, int | float):
            raise TypeError("busy_timeout must be a number of seconds")
        if not 0 < busy_timeout < float("inf"):
            raise ValueError("busy_timeout must be > 0 seconds")
        self.busy_timeout = float(busy_timeout)
        self.path = Path(path) if path is not None else default_data_dir() / "flow_states.db"
        self.history_limit = history_limit
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._writable = False

    def _connect(self, create: bool) -> sqlite3.Connection | None:
        if self._conn is not None:
            return self._conn
        if not create and not self.path.exists():
            return None
        import sqlite3  # here: `from voxflow import Flow` loads no sqlite3

        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(
                self.path,
                timeout=self.busy_timeout,
                check_same_thread=False,
                isolation_level=None,
            )
        except (OSError, sqlite3.Error) as exc:
            raise self._unavailable(exc) from exc
        try:
            _prepare(conn, timeout=self.busy_timeout)
        except sqlite3.Error as exc:
            conn.close()
            raise self._unavailable(exc) from exc
        self._conn = conn
        return conn

    def _write(self, fn: Callable[[Conn], None]) -> None:
        import sqlite3  # here: `from voxflow import Flow` loads no sqlite3

        with self._lock:
            conn = self._connect(create=True)
            assert conn is not None
            try:
                conn.execute("BEGIN IMMEDIATE")  # serialises writers: the revision check holds
                try:
                    fn(conn)
                    conn.execute("COMMIT")
                except BaseException:
                    if conn.in_transaction:  # (SQLite may have rolled back already)
                        conn.execute("ROLLBACK")
                    raise
            except sqlite3.OperationalError as exc:
                if not (_out_of_storage(exc) or _locked(exc)):
                    raise
                # a full disk, an I/O error, another writer's lock: the store is
                # unavailable (a call defers its saves and makes them again), never a
                # raw sqlite3 error
                raise self._unavailable(exc) from exc

    def _read(self, fn: Callable[[Conn], T]) -> T | None:
        with self._lock:
            conn = self._connect(create=False)
            if conn is None:
                return None
            return fn(conn)

    def _read_consistent(self, fn: Callable[[Conn], T]) -> T | None:
        def read(conn: Conn) -> T:
            conn.execute("BEGIN")
            try:
                return fn(conn)
            finally:
                conn.execute("COMMIT")

        return self._read(read)

    def check_writable(self) -> None:
        """Raise :class:`PersistenceUnavailableError` unless the database can be written.

        Creates the data directory if missing (not the database); proves the directory
        takes a new file. Called by the runtime before the first method of a persisted
        flow runs, once per backend while it succeeds.
        """
        if self._writable:
            return
        import sqlite3  # here: `from voxflow import Flow` loads no sqlite3

        directory = self.path.parent
        try:
            directory.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryFile(dir=directory):
                pass
            if self.path.exists():
                self._read(lambda c: c.execute("SELECT 1").fetchone())
        except PersistenceUnavailableError:
            raise  # (typed already: another writer's lock, _connect's)
        except (OSError, sqlite3.Error) as exc:
            raise self._unavailable(exc) from exc
        self._writable = True

    def _unavailable(self, exc: BaseException) -> PersistenceUnavailableError:
        if isinstance(exc, Exception) and _locked(exc):
            return StoreLockedError(
                "the SQLite session store is locked by another writer (a connection or "
                f"process held its write lock longer than the {self.busy_timeout:g} s busy "
                "timeout); nothing was written",
                path=str(self.path),
                fix=("end or shorten the other writer's transaction (`fuser` on the file "
                     "shows which process holds it), or use one store per file; a call "
                     "saves once the lock is released"),
            )
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        return PersistenceUnavailableError(
            f"cannot write the session store: {reason}",
            path=str(self.path),
            fix=(
                "set VOXFLOW_HOME to a writable directory (or pass "
                "SQLiteFlowPersistence(path) a writable path)"
            ),
        )

    def clear_pending_feedback(self, flow_uuid: str, *, epoch: int | None = None) -> None:
        """Forget the paused step of ``flow_uuid`` (idempotent; creates no file)."""
        self._check_uuid(flow_uuid)
        if self._connect(create=False) is None:
            return
        super().clear_pending_feedback(flow_uuid, epoch=epoch)

    def close(self) -> None:
        """Close the connection (idempotent; the next call reopens it)."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __repr__(self) -> str:
        return f"SQLiteFlowPersistence(path={str(self.path)!r}, history_limit={self.history_limit})"


@overload
def persist(target: type[T], /) -> type[T]: ...
@overload
def persist(
    backend: FlowPersistence | None = None, *, verbose: bool = False
) -> Callable[[T], T]: ...
def persist(backend: Any = None, *, verbose: bool = False) -> Any:
    """Save the state after methods complete: on a class (all methods) or one method.

    Usable bare (``@persist``) or called (``@persist()``, ``@persist(backend)``).

    Args:
        backend: a :class:`FlowPersistence`; None uses the flow's ``persistence=`` or the
            default SQLite backend, created lazily on the first save.
        verbose: log each save at INFO level (never printed).
    """
    if isinstance(backend, type) or (callable(backend) and hasattr(backend, "__code__")):
        return persist()(backend)
    if backend is not None and not isinstance(backend, FlowPersistence):
        raise TypeError("persist(): backend must implement FlowPersistence")
    config = PersistConfig(backend=backend, verbose=verbose)

    def decorate(target: T) -> T:
        if isinstance(target, type):
            target._voxflow_persist = config  # type: ignore[attr-defined]
            reset = getattr(target, "_voxflow_definition", None)
            if reset is not None:  # the class was compiled before this decorator ran
                target._voxflow_definition = None  # type: ignore[attr-defined]
                target.flow_definition()  # type: ignore[attr-defined]
            return target
        if not callable(target):
            raise TypeError("@persist applies to a Flow class or a flow method")
        stamp_marks(target, "persist").persist = config
        return target

    return decorate
