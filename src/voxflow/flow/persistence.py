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

import json
import logging
import os
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, overload, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from voxflow.errors import PersistenceConflictError, PersistenceUnavailableError
from voxflow.flow._item_rows import (
    APPEND_ONLY_FIELDS,
    LISTS_KEY,
    RECORD_FIELDS,
    RECORDS_KEY,
    SCHEMA,
    RecordChanges,
    StateChanges,
    assemble,
    check_changes,
    split_full,
    stale_reason,
    write_change_rows,
    write_full_rows,
)

if TYPE_CHECKING:
    import sqlite3

__all__ = [
    "APPEND_ONLY_FIELDS",
    "LISTS_KEY",
    "RECORDS_KEY",
    "RECORD_FIELDS",
    "FlowPersistence",
    "PersistConfig",
    "RecordChanges",
    "SQLiteFlowPersistence",
    "StateChanges",
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


def default_data_dir() -> Path:
    """Where voxflow keeps data by default (see module docs); not created here."""
    home = os.environ.get("VOXFLOW_HOME")
    if home:
        return Path(home).expanduser()
    if sys.platform == "win32":
        base = os.environ.get("LOCALAPPDATA") or str(Path.home() / "AppData" / "Local")
        return Path(base) / "voxflow"
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Application Support" / "voxflow"
    xdg = os.environ.get("XDG_DATA_HOME")
    return (Path(xdg) if xdg else Path.home() / ".local" / "share") / "voxflow"


_defaults: dict[Path, SQLiteFlowPersistence] = {}
_defaults_by_env: dict[tuple[str | None, ...], SQLiteFlowPersistence] = {}
_defaults_lock = threading.Lock()
_DATA_DIR_ENV = ("VOXFLOW_HOME", "XDG_DATA_HOME", "LOCALAPPDATA", "HOME", "USERPROFILE")


def default_persistence() -> SQLiteFlowPersistence:
    """The shared default backend for the current :func:`default_data_dir`.

    Called on every save of a flow without a backend of its own, so the lookup is keyed
    on the environment variables the data directory depends on (no path work).
    """
    environ = os.environ
    env = tuple(map(environ.get, _DATA_DIR_ENV))
    backend = _defaults_by_env.get(env)
    if backend is not None:
        return backend
    path = default_data_dir() / "flow_states.db"
    with _defaults_lock:
        backend = _defaults.get(path)
        if backend is None:
            backend = _defaults[path] = SQLiteFlowPersistence(path)
        _defaults_by_env[env] = backend
        return backend


class SQLiteFlowPersistence:
    """:class:`FlowPersistence` on one SQLite file (WAL), safe across threads and processes.

    Args:
        path: the database file; None for :func:`default_data_dir` ``/flow_states.db``.
            Its directory and the file are created on the first write.
        history_limit: older snapshots kept per flow_uuid besides the latest (>= 0).
    """

    def __init__(
        self, path: str | os.PathLike[str] | None = None, *, history_limit: int = 10
    ) -> None:
        if path is not None and not isinstance(path, str | os.PathLike):
            raise TypeError("path must be a str or os.PathLike")
        if isinstance(history_limit, bool) or not isinstance(history_limit, int):
            raise TypeError("history_limit must be an int")
        if history_limit < 0:
            raise ValueError("history_limit must be >= 0")
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
        import sqlite3

        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(
                self.path, timeout=30.0, check_same_thread=False, isolation_level=None
            )
        except (OSError, sqlite3.Error) as exc:
            raise self._unavailable(exc) from exc
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.executescript(SCHEMA)
        self._conn = conn
        return conn

    def _write(self, fn: Callable[[sqlite3.Connection], None]) -> None:
        with self._lock:
            conn = self._connect(create=True)
            assert conn is not None
            conn.execute("BEGIN IMMEDIATE")
            try:
                fn(conn)
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    def _read(self, fn: Callable[[sqlite3.Connection], T]) -> T | None:
        with self._lock:
            conn = self._connect(create=False)
            if conn is None:
                return None
            return fn(conn)

    @staticmethod
    def _check_uuid(flow_uuid: object) -> None:
        if not isinstance(flow_uuid, str) or not flow_uuid:
            raise ValueError("flow_uuid must be a non-empty string")

    def save_state(self, flow_uuid: str, method_name: str, state_data: dict[str, Any]) -> None:
        """Store ``state_data`` as the latest snapshot; the previous one joins the history.

        The :data:`APPEND_ONLY_FIELDS` lists and :data:`RECORD_FIELDS` dicts are
        (re)written one row per element, the rest as the snapshot row, in one transaction.
        """
        self.save_full_state(flow_uuid, method_name, state_data)

    def save_full_state(
        self,
        flow_uuid: str,
        method_name: str,
        state_data: dict[str, Any],
        *,
        expected_revision: int | None = None,
    ) -> int:
        """:meth:`save_state`, returning the stored revision (a base for later changes).

        Args:
            expected_revision: the revision this writer loaded or last wrote (0: it never
                saw the session); checked and bumped in the save's transaction. None
                skips the check (last writer wins, as :meth:`save_state`).

        Raises:
            PersistenceConflictError: the stored revision is not ``expected_revision``
                (another writer saved the session since); nothing was written.
        """
        self._check_uuid(flow_uuid)
        _check_expected(expected_revision)
        if not isinstance(state_data, dict):
            raise TypeError("state_data must be a dict")
        snapshot, lists, records = split_full(state_data)
        payload = json.dumps(snapshot)
        now = datetime.now(UTC).isoformat()
        version = 0

        def write(conn: sqlite3.Connection) -> None:
            nonlocal version
            row = self._latest_row(conn, flow_uuid)
            _check_revision(flow_uuid, row, expected_revision)
            write_full_rows(conn, flow_uuid, lists, records)
            version = self._replace_snapshot(conn, flow_uuid, method_name, now, payload, row)

        self._write(write)
        return version

    def save_state_changes(
        self, flow_uuid: str, method_name: str, changes: StateChanges
    ) -> int | None:
        """Apply one incremental save (new list items, changed records, the small snapshot).

        One transaction: a crash leaves the previous snapshot and its rows intact.
        Returns the stored revision, or None, writing nothing, when the stored list or
        record counts are not the ones ``changes`` builds on (save the full state then,
        with ``expected_revision``).

        Raises:
            PersistenceConflictError: ``changes.base_version`` is set and the stored
                revision differs (another writer saved the session since); nothing was
                written.
            ValueError: ``flow_uuid`` is empty or ``changes`` is inconsistent (named).
            TypeError: ``changes`` is not a :class:`StateChanges` (or holds a bad part).
        """
        self._check_uuid(flow_uuid)
        check_changes(changes)
        now = datetime.now(UTC).isoformat()
        version: int | None = None

        def write(conn: sqlite3.Connection) -> None:
            nonlocal version
            row = self._latest_row(conn, flow_uuid)
            if changes.base_version is not None:
                _check_revision(flow_uuid, row, changes.base_version)
            reason = stale_reason(None if row is None else (row[0], row[3]), changes)
            if reason is not None:
                logger.debug("%s: incremental save refused, %s", flow_uuid, reason)
                return
            payload = write_change_rows(conn, flow_uuid, changes)
            version = self._replace_snapshot(conn, flow_uuid, method_name, now, payload, row)

        self._write(write)
        return version

    def save_state_delta(
        self,
        flow_uuid: str,
        method_name: str,
        snapshot: dict[str, Any],
        appended: Mapping[str, Sequence[Any]],
        counts: Mapping[str, int],
    ) -> bool:
        """Append ``appended[field]`` after ``counts[field]`` stored items; save ``snapshot``.

        The list-only form of :meth:`save_state_changes` (stored counts checked, not the
        version). One transaction: a crash leaves the previous snapshot and its items
        intact. Returns False, writing nothing, when the latest stored snapshot does not
        hold exactly ``counts`` items (another writer saved the session since): save the
        full state then.

        Args:
            flow_uuid: the session.
            method_name: the method that triggered the save.
            snapshot: the state without the list fields (JSON-compatible).
            appended: new JSON-compatible items per list field.
            counts: items of each field the latest stored snapshot holds.

        Raises:
            ValueError: ``flow_uuid`` is empty; ``appended`` and ``counts`` name different
                fields or a count is negative.
        """
        if not isinstance(snapshot, dict):
            raise TypeError("snapshot must be a dict")
        changes = StateChanges(snapshot=snapshot, appended=appended, counts=counts)
        return self.save_state_changes(flow_uuid, method_name, changes) is not None

    @staticmethod
    def _latest_row(conn: sqlite3.Connection, flow_uuid: str) -> tuple[Any, ...] | None:
        """``(version, method_name, saved_at, state_json)`` of the latest snapshot, or None."""
        row: tuple[Any, ...] | None = conn.execute(
            "SELECT version, method_name, saved_at, state_json FROM flow_states "
            "WHERE flow_uuid = ?",
            (flow_uuid,),
        ).fetchone()
        return row

    def _replace_snapshot(
        self,
        conn: sqlite3.Connection,
        flow_uuid: str,
        method_name: str,
        now: str,
        payload: str,
        row: tuple[Any, ...] | None,
    ) -> int:
        """Upsert the latest snapshot; move the previous one to the bounded history.

        ``row`` is the previous snapshot (:meth:`_latest_row`, read in this transaction).
        Returns the new snapshot's version.
        """
        limit = self.history_limit
        version = 1
        if row is not None:
            version = row[0] + 1
            if limit:
                conn.execute(
                    "INSERT INTO flow_state_history "
                    "(flow_uuid, version, method_name, saved_at, state_json) "
                    "VALUES (?, ?, ?, ?, ?)",
                    (flow_uuid, row[0], row[1], row[2], row[3]),
                )
                conn.execute(
                    "DELETE FROM flow_state_history WHERE flow_uuid = ? AND version <= ?",
                    (flow_uuid, row[0] - limit),
                )
        conn.execute(
            "INSERT INTO flow_states (flow_uuid, method_name, saved_at, version, state_json) "
            "VALUES (?, ?, ?, ?, ?) ON CONFLICT(flow_uuid) DO UPDATE SET "
            "method_name = excluded.method_name, saved_at = excluded.saved_at, "
            "version = excluded.version, state_json = excluded.state_json",
            (flow_uuid, method_name, now, version, payload),
        )
        return version

    def _read_consistent(self, fn: Callable[[sqlite3.Connection], T]) -> T | None:
        """``fn`` inside one read transaction: the snapshot and its items agree."""

        def read(conn: sqlite3.Connection) -> T:
            conn.execute("BEGIN")
            try:
                return fn(conn)
            finally:
                conn.execute("COMMIT")

        return self._read(read)

    def load_state(self, flow_uuid: str) -> dict[str, Any] | None:
        """The latest state of ``flow_uuid`` (lists reassembled) or None; never creates a file."""
        found = self.load_state_revision(flow_uuid)
        return None if found is None else found[0]

    def load_state_revision(self, flow_uuid: str) -> tuple[dict[str, Any], int] | None:
        """``(state, revision)`` of ``flow_uuid``, read in one transaction, or None.

        The revision is what a writer passes back as ``expected_revision``.
        """
        self._check_uuid(flow_uuid)

        def read(conn: sqlite3.Connection) -> tuple[dict[str, Any], int] | None:
            row = conn.execute(
                "SELECT state_json, version FROM flow_states WHERE flow_uuid = ?", (flow_uuid,)
            ).fetchone()
            return None if row is None else (assemble(conn, flow_uuid, row[0]), int(row[1]))

        return self._read_consistent(read)

    def revision(self, flow_uuid: str) -> int:
        """The stored revision of ``flow_uuid`` (0: never saved)."""
        self._check_uuid(flow_uuid)
        row = self._read(
            lambda c: c.execute(
                "SELECT version FROM flow_states WHERE flow_uuid = ?", (flow_uuid,)
            ).fetchone()
        )
        return 0 if row is None else int(row[0])

    def check_writable(self) -> None:
        """Raise :class:`PersistenceUnavailableError` unless the database can be written.

        Creates the data directory if missing (not the database); proves the directory
        takes a new file. Called by the runtime before the first method of a persisted
        flow runs, once per backend while it succeeds.
        """
        if self._writable:
            return
        import sqlite3
        import tempfile

        directory = self.path.parent
        try:
            directory.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryFile(dir=directory):
                pass
            if self.path.exists():
                self._read(lambda c: c.execute("SELECT 1").fetchone())
        except (OSError, sqlite3.Error) as exc:
            raise self._unavailable(exc) from exc
        self._writable = True

    def _unavailable(self, exc: BaseException) -> PersistenceUnavailableError:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        return PersistenceUnavailableError(
            f"cannot write the session store: {reason}",
            path=str(self.path),
            fix=(
                "set VOXFLOW_HOME to a writable directory (or pass "
                "SQLiteFlowPersistence(path) a writable path)"
            ),
        )

    def history(self, flow_uuid: str) -> list[tuple[int, str, dict[str, Any]]]:
        """``(version, method, state)`` of the kept snapshots, oldest first, latest last.

        Item-stored lists and records are reassembled from the current rows: lists are
        exact while they were only appended to (after a rewrite, e.g. a trimmed history,
        older versions show the rewritten items); records always show their current
        stored content.
        """
        self._check_uuid(flow_uuid)

        def read(c: sqlite3.Connection) -> list[tuple[int, str, dict[str, Any]]]:
            rows = c.execute(
                "SELECT version, method_name, state_json FROM flow_state_history "
                "WHERE flow_uuid = ? ORDER BY version",
                (flow_uuid,),
            ).fetchall()
            rows += c.execute(
                "SELECT version, method_name, state_json FROM flow_states WHERE flow_uuid = ?",
                (flow_uuid,),
            ).fetchall()
            return [(v, m, assemble(c, flow_uuid, s, latest=False)) for v, m, s in rows]

        return self._read_consistent(read) or []

    def save_pending_feedback(
        self, flow_uuid: str, context: dict[str, Any], state_data: dict[str, Any]
    ) -> None:
        """Store (replace) the paused feedback step of ``flow_uuid``."""
        self._check_uuid(flow_uuid)
        ctx, state = json.dumps(context), json.dumps(state_data)
        now = datetime.now(UTC).isoformat()
        self._write(
            lambda c: c.execute(
                "INSERT OR REPLACE INTO pending_feedback "
                "(flow_uuid, context_json, state_json, created_at) VALUES (?, ?, ?, ?)",
                (flow_uuid, ctx, state, now),
            ).close()
        )

    def load_pending_feedback(self, flow_uuid: str) -> tuple[dict[str, Any], dict[str, Any]] | None:
        """``(context, state)`` of the paused step, or None."""
        self._check_uuid(flow_uuid)
        row = self._read(
            lambda c: c.execute(
                "SELECT context_json, state_json FROM pending_feedback WHERE flow_uuid = ?",
                (flow_uuid,),
            ).fetchone()
        )
        if row is None:
            return None
        return json.loads(row[0]), json.loads(row[1])

    def clear_pending_feedback(self, flow_uuid: str) -> None:
        """Forget the paused step of ``flow_uuid``."""
        self._check_uuid(flow_uuid)
        if self._connect(create=False) is None:
            return
        self._write(
            lambda c: c.execute(
                "DELETE FROM pending_feedback WHERE flow_uuid = ?", (flow_uuid,)
            ).close()
        )

    def close(self) -> None:
        """Close the connection (idempotent; the next call reopens it)."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __repr__(self) -> str:
        return f"SQLiteFlowPersistence(path={str(self.path)!r}, history_limit={self.history_limit})"


def _check_expected(expected: object) -> None:
    if expected is not None and (
        isinstance(expected, bool) or not isinstance(expected, int) or expected < 0
    ):
        raise ValueError("expected_revision must be a non-negative int or None")


def _check_revision(flow_uuid: str, row: tuple[Any, ...] | None, expected: int | None) -> None:
    """Raise :class:`PersistenceConflictError` unless the stored revision is ``expected``.

    ``row`` is the latest snapshot row (revision first) read in the save's transaction,
    None when the session was never saved (revision 0).
    """
    if expected is None:
        return
    stored = 0 if row is None else int(row[0])
    if stored != expected:
        raise PersistenceConflictError(flow_uuid, expected=expected, stored=stored)


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
        from voxflow.flow.dsl import stamp_marks

        stamp_marks(target, "persist").persist = config
        return target

    return decorate
