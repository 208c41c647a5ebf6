"""Looking at a persistence backend from outside it, on SQLite and PostgreSQL alike.

The persistence tests check what was *stored*, not what the backend says it stored: each
helper here opens a connection of its own to the store's database (the SQLite file, or
the PostgreSQL schema), or watches the statements the store's own connections send
(SQLite's trace callback; on PostgreSQL, psycopg's cursor methods), or makes the process
die at one statement, inside the save's open transaction. ``where``/``open_store`` name a
store for a subprocess (``path``, or ``postgresql://…#schema``). Subprocess scripts
import this module: run them with the repository root on ``sys.path``.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from voxflow.flow._row_store import RowStore
from voxflow.flow.persistence import SQLiteFlowPersistence

__all__ = ["PlainStore", "crash_at", "default_env", "execute", "open_store", "reopen", "rows",
           "statements", "where"]


class PlainStore:
    """A backend of one's own, in memory: only what ``FlowPersistence`` asks (no
    revisions, no ``check_writable``); ``saved`` holds every snapshot, in order."""

    def __init__(self) -> None:
        self.saved: list[dict[str, Any]] = []

    def save_state(self, flow_uuid: str, method_name: str, state: dict[str, Any]) -> None:
        self.saved.append(state)

    def load_state(self, flow_uuid: str) -> dict[str, Any] | None:
        return self.saved[-1] if self.saved else None

    def save_pending_feedback(self, *args: Any) -> None: ...

    def load_pending_feedback(self, flow_uuid: str) -> None:
        return None

    def clear_pending_feedback(self, flow_uuid: str) -> None: ...


def _sqlite(store: RowStore) -> SQLiteFlowPersistence | None:
    return store if isinstance(store, SQLiteFlowPersistence) else None


@contextlib.contextmanager
def _connection(store: RowStore) -> Iterator[Any]:
    """A new DB-API connection to ``store``'s tables (autocommit), closed afterwards."""
    lite = _sqlite(store)
    if lite is not None:
        with contextlib.closing(sqlite3.connect(lite.path, isolation_level=None)) as conn:
            yield conn
        return
    import psycopg

    schema = store.schema  # type: ignore[attr-defined]
    with psycopg.connect(store.url, autocommit=True,  # type: ignore[attr-defined]
                         options=f"-c search_path={schema}") as conn:
        yield conn


def _portable(store: RowStore, sql: str) -> str:
    return sql if _sqlite(store) else sql.replace("%", "%%").replace("?", "%s")


def rows(store: RowStore, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    """The rows of ``sql`` (``?`` placeholders), read on a connection of its own."""
    with _connection(store) as conn:
        return [tuple(r) for r in conn.execute(_portable(store, sql), args).fetchall()]


def execute(store: RowStore, sql: str, *args: Any) -> None:
    """Run one write statement on a connection of its own (committed at once)."""
    with _connection(store) as conn:
        conn.execute(_portable(store, sql), args)


def reopen(store: RowStore) -> RowStore:
    """Another backend on the same database (its own connections, as another process)."""
    lite = _sqlite(store)
    if lite is not None:
        return SQLiteFlowPersistence(lite.path, history_limit=lite.history_limit)
    from voxflow.flow.postgres import PostgresFlowPersistence

    return PostgresFlowPersistence(store.url, schema=store.schema,  # type: ignore[attr-defined]
                                   history_limit=store.history_limit)


def where(store: RowStore) -> str:
    """``store``'s database for :func:`open_store` in another process."""
    lite = _sqlite(store)
    if lite is not None:
        return str(lite.path)
    return f"{store.url}#{store.schema}"  # type: ignore[attr-defined]


def open_store(location: str) -> RowStore:
    """The store :func:`where` named: a SQLite file, or ``postgresql://…#schema``."""
    if location.startswith("postgresql://"):
        from voxflow.flow.postgres import PostgresFlowPersistence

        url, schema = location.rsplit("#", 1)
        return PostgresFlowPersistence(url, schema=schema)
    return SQLiteFlowPersistence(location)


def default_env(store: RowStore, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """``base`` (default: ``os.environ``) changed so that the default backend
    (:func:`~voxflow.flow.persistence.default_persistence`, what ``@persist`` saves to when
    a flow names no store) is ``store``'s database: ``VOXFLOW_HOME`` the folder of a SQLite
    ``flow_states.db``, or ``VOXFLOW_DATABASE_URL`` with the store's schema first on its
    ``search_path``."""
    env = dict(os.environ if base is None else base)
    lite = _sqlite(store)
    if lite is not None:
        assert lite.path.name == "flow_states.db", "the default SQLite file is flow_states.db"
        env.pop("VOXFLOW_DATABASE_URL", None)
        env["VOXFLOW_HOME"] = str(lite.path.parent)
        return env
    url: str = store.url  # type: ignore[attr-defined]
    joiner = "&" if "?" in url else "?"
    env["VOXFLOW_DATABASE_URL"] = f"{url}{joiner}options=-csearch_path%3D{store.schema}"  # type: ignore[attr-defined]
    return env


def _render(sql: str, params: Sequence[Any] | None) -> str:
    return sql if not params else f"{sql} -- {json.dumps(list(params), default=str)}"


def _watch_psycopg(store: RowStore, seen: Callable[[str], None]) -> Callable[[], None]:
    """Call ``seen(statement)`` for every statement ``store``'s connections execute, before
    it runs (one call per parameter row of an ``executemany``, values shown); returns the
    function that stops it."""
    import psycopg

    mark = f"search_path={store.schema}"  # type: ignore[attr-defined]
    execute, executemany = psycopg.Cursor.execute, psycopg.Cursor.executemany

    def ours(cursor: Any) -> bool:
        return mark in (cursor.connection.info.options or "")

    def watched_execute(cursor: Any, query: Any, params: Any = None, **kw: Any) -> Any:
        if ours(cursor):
            seen(_render(str(query), params))
        return execute(cursor, query, params, **kw)

    def watched_executemany(cursor: Any, query: Any, params_seq: Any, **kw: Any) -> Any:
        params_seq = list(params_seq)
        if ours(cursor):
            for params in params_seq:
                seen(_render(str(query), params))
        return executemany(cursor, query, params_seq, **kw)

    def stop() -> None:
        psycopg.Cursor.execute = execute  # type: ignore[method-assign]
        psycopg.Cursor.executemany = executemany  # type: ignore[method-assign]

    psycopg.Cursor.execute = watched_execute  # type: ignore[method-assign]
    psycopg.Cursor.executemany = watched_executemany  # type: ignore[method-assign]
    return stop


def _sqlite_connection(store: SQLiteFlowPersistence) -> sqlite3.Connection:
    conn = store._conn
    assert conn is not None, "the store has not opened its database yet: save or load first"
    return conn


@contextlib.contextmanager
def statements(store: RowStore) -> Iterator[list[str]]:
    """The SQL statements ``store``'s own connections run meanwhile, in order: one entry
    per executed row, values inlined (SQLite's trace callback shows them so)."""
    seen: list[str] = []
    lite = _sqlite(store)
    if lite is not None:
        conn = _sqlite_connection(lite)
        conn.set_trace_callback(seen.append)
        try:
            yield seen
        finally:
            conn.set_trace_callback(None)
        return
    stop = _watch_psycopg(store, seen.append)
    try:
        yield seen
    finally:
        stop()


def crash_at(store: RowStore, prefix: str, *, containing: str = "", code: int = 17) -> None:
    """From now on, this process exits (``os._exit(code)``: no cleanup, no rollback of its
    own) the moment ``store`` is about to run a statement starting with ``prefix`` (and
    holding ``containing``): inside the open transaction of the save that runs it. The
    database must roll that transaction back."""

    def die(statement: str) -> None:
        if statement.startswith(prefix) and containing in statement:
            os._exit(code)

    lite = _sqlite(store)
    if lite is not None:
        _sqlite_connection(lite).set_trace_callback(die)
    else:
        _watch_psycopg(store, die)  # for the rest of the process
