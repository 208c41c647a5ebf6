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

**Append-only lists.** The list fields named in :data:`APPEND_ONLY_FIELDS` (a
conversation's ``messages`` and ``events``) are stored one row per item in
``conversation_items``; the snapshot row keeps the rest of the state plus, under
:data:`LISTS_KEY`, how many items of each list belong to it. :meth:`save_state_delta`
then writes only the items appended since the previous save and the small snapshot, so
the cost of a save does not grow with the history (a conversational flow saves this way
automatically, see ``voxflow.conversation.persistence``). :meth:`load_state` reassembles
the lists, so it returns exactly the state that was saved, whichever way it was saved.
Items beyond a snapshot's counts (none are written today: items and snapshot share one
transaction; a database from an older two-step writer may hold some) are ignored and
overwritten by the next delta.
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

if TYPE_CHECKING:
    import sqlite3

__all__ = [
    "APPEND_ONLY_FIELDS",
    "LISTS_KEY",
    "FlowPersistence",
    "PersistConfig",
    "SQLiteFlowPersistence",
    "default_data_dir",
    "default_persistence",
    "persist",
]

logger = logging.getLogger(__name__)

T = TypeVar("T")

APPEND_ONLY_FIELDS = ("messages", "events")
"""State fields stored one row per item (when they hold a list)."""

LISTS_KEY = "__voxflow_lists__"
"""Snapshot key recording how many items of each item-stored list belong to the snapshot."""


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
_defaults_lock = threading.Lock()


def default_persistence() -> SQLiteFlowPersistence:
    """The shared default backend for the current :func:`default_data_dir`."""
    path = default_data_dir() / "flow_states.db"
    with _defaults_lock:
        backend = _defaults.get(path)
        if backend is None:
            backend = _defaults[path] = SQLiteFlowPersistence(path)
        return backend


_SCHEMA = """
CREATE TABLE IF NOT EXISTS flow_states (
    flow_uuid TEXT PRIMARY KEY,
    method_name TEXT NOT NULL,
    saved_at TEXT NOT NULL,
    version INTEGER NOT NULL,
    state_json TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS flow_state_history (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    flow_uuid TEXT NOT NULL,
    version INTEGER NOT NULL,
    method_name TEXT NOT NULL,
    saved_at TEXT NOT NULL,
    state_json TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS idx_history_uuid ON flow_state_history(flow_uuid, version);
CREATE TABLE IF NOT EXISTS conversation_items (
    flow_uuid TEXT NOT NULL,
    field TEXT NOT NULL,
    idx INTEGER NOT NULL,
    item_json TEXT NOT NULL,
    PRIMARY KEY (flow_uuid, field, idx)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS pending_feedback (
    flow_uuid TEXT PRIMARY KEY,
    context_json TEXT NOT NULL,
    state_json TEXT NOT NULL,
    created_at TEXT NOT NULL
);
"""


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

    def _connect(self, create: bool) -> sqlite3.Connection | None:
        if self._conn is not None:
            return self._conn
        if not create and not self.path.exists():
            return None
        import sqlite3

        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(
            self.path, timeout=30.0, check_same_thread=False, isolation_level=None
        )
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.executescript(_SCHEMA)
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

        The :data:`APPEND_ONLY_FIELDS` lists are (re)written one row per item, the rest as
        the snapshot row, in one transaction.
        """
        self._check_uuid(flow_uuid)
        if not isinstance(state_data, dict):
            raise TypeError("state_data must be a dict")
        lists = {
            f: state_data[f] for f in APPEND_ONLY_FIELDS if isinstance(state_data.get(f), list)
        }
        snapshot = state_data
        if lists:
            snapshot = {k: v for k, v in state_data.items() if k not in lists}
            snapshot[LISTS_KEY] = {field: len(items) for field, items in lists.items()}
        payload = json.dumps(snapshot)
        rows = [
            (flow_uuid, field, i, json.dumps(item))
            for field, items in lists.items()
            for i, item in enumerate(items)
        ]
        now = datetime.now(UTC).isoformat()

        def write(conn: sqlite3.Connection) -> None:
            if lists:
                conn.executemany(
                    "DELETE FROM conversation_items WHERE flow_uuid = ? AND field = ?",
                    [(flow_uuid, field) for field in lists],
                )
                conn.executemany("INSERT INTO conversation_items VALUES (?, ?, ?, ?)", rows)
            self._replace_snapshot(conn, flow_uuid, method_name, now, payload)

        self._write(write)

    def save_state_delta(
        self,
        flow_uuid: str,
        method_name: str,
        snapshot: dict[str, Any],
        appended: Mapping[str, Sequence[Any]],
        counts: Mapping[str, int],
    ) -> bool:
        """Append ``appended[field]`` after ``counts[field]`` stored items; save ``snapshot``.

        One transaction: a crash leaves the previous snapshot and its items intact.
        Returns False, writing nothing, when the latest stored snapshot does not hold
        exactly ``counts`` items (another writer saved the session since): save the full
        state then.

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
        self._check_uuid(flow_uuid)
        if not isinstance(snapshot, dict):
            raise TypeError("snapshot must be a dict")
        if set(appended) != set(counts):
            raise ValueError("appended and counts must name the same fields")
        if any(isinstance(n, bool) or not isinstance(n, int) or n < 0 for n in counts.values()):
            raise ValueError("counts must be non-negative ints")
        rows = [
            (flow_uuid, field, counts[field] + i, json.dumps(item))
            for field, items in appended.items()
            for i, item in enumerate(items)
        ]
        data = {k: v for k, v in snapshot.items() if k not in counts}
        data[LISTS_KEY] = {field: counts[field] + len(items) for field, items in appended.items()}
        payload = json.dumps(data)
        now = datetime.now(UTC).isoformat()

        written = False

        def write(conn: sqlite3.Connection) -> None:
            nonlocal written
            row = conn.execute(
                "SELECT state_json FROM flow_states WHERE flow_uuid = ?", (flow_uuid,)
            ).fetchone()
            stored = json.loads(row[0]).get(LISTS_KEY, {}) if row is not None else {}
            stale = {f: stored.get(f, 0) for f, n in counts.items() if stored.get(f, 0) != n}
            if stale:
                logger.debug("%s: delta refused, %s items stored, not %s", flow_uuid, stale, counts)
                return
            conn.executemany("INSERT OR REPLACE INTO conversation_items VALUES (?, ?, ?, ?)", rows)
            self._replace_snapshot(conn, flow_uuid, method_name, now, payload)
            written = True

        self._write(write)
        return written

    def _replace_snapshot(
        self, conn: sqlite3.Connection, flow_uuid: str, method_name: str, now: str, payload: str
    ) -> None:
        """Upsert the latest snapshot; move the previous one to the bounded history."""
        limit = self.history_limit
        row = conn.execute(
            "SELECT version, method_name, saved_at, state_json FROM flow_states "
            "WHERE flow_uuid = ?",
            (flow_uuid,),
        ).fetchone()
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

    @staticmethod
    def _assemble(conn: sqlite3.Connection, flow_uuid: str, state_json: str) -> dict[str, Any]:
        """A stored snapshot with its item-stored lists put back."""
        data = json.loads(state_json)
        assert isinstance(data, dict)
        marker = data.pop(LISTS_KEY, None)
        for field, count in (marker or {}).items():
            rows = conn.execute(
                "SELECT item_json FROM conversation_items WHERE flow_uuid = ? AND field = ? "
                "AND idx < ? ORDER BY idx",
                (flow_uuid, field, count),
            ).fetchall()
            if len(rows) != count:
                logger.warning("%s: %d of %d %s items stored", flow_uuid, len(rows), count, field)
            data[field] = [json.loads(r[0]) for r in rows]
        return data

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
        self._check_uuid(flow_uuid)

        def read(conn: sqlite3.Connection) -> dict[str, Any] | None:
            row = conn.execute(
                "SELECT state_json FROM flow_states WHERE flow_uuid = ?", (flow_uuid,)
            ).fetchone()
            return None if row is None else self._assemble(conn, flow_uuid, row[0])

        return self._read_consistent(read)

    def history(self, flow_uuid: str) -> list[tuple[int, str, dict[str, Any]]]:
        """``(version, method, state)`` of the kept snapshots, oldest first, latest last.

        Item-stored lists are reassembled from the current items: exact while the lists
        were only appended to; after a rewrite (e.g. a trimmed history) older versions
        show the rewritten items.
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
            return [(v, m, self._assemble(c, flow_uuid, s)) for v, m, s in rows]

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
