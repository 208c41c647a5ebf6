"""The rows behind :class:`~voxflow.flow.persistence.SQLiteFlowPersistence` (internal).

Two kinds of state fields are stored one row per element instead of inside the snapshot
row, so a save writes only what changed:

* append-only lists (:data:`APPEND_ONLY_FIELDS`: a conversation's ``messages`` and
  ``events``) in ``conversation_items``, one row per index;
* dicts of records (:data:`RECORD_FIELDS`: ``turns``, ``replies``, ``deliveries``,
  ``covered_updates``, ``jobs``) in ``state_records``, one row per key, ordered by
  ``pos`` (a new key gets the next position; an updated key keeps its own), so a load
  rebuilds each dict in its insertion order.

The snapshot row records, under :data:`LISTS_KEY` and :data:`RECORDS_KEY`, how many
elements of each field belong to it; a field absent from those markers is stored inline
in the snapshot (older databases, other backends' data). Everything here runs inside the
caller's transaction.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from voxflow.storable import check_text

__all__ = [
    "APPEND_ONLY_FIELDS",
    "LISTS_KEY",
    "PG_SCHEMA",
    "RECORDS_KEY",
    "RECORD_FIELDS",
    "SCHEMA",
    "Conn",
    "RecordChanges",
    "StateChanges",
    "assemble",
    "check_changes",
    "split_full",
    "stale_reason",
    "write_change_rows",
    "write_full_rows",
]

logger = logging.getLogger("voxflow.flow.persistence")

APPEND_ONLY_FIELDS = ("messages", "events")
"""State fields stored one row per item (when they hold a list)."""

RECORD_FIELDS = ("turns", "replies", "deliveries", "covered_updates", "jobs")
"""State fields stored one row per key (when they hold a dict with string keys)."""

LISTS_KEY = "__voxflow_lists__"
"""Snapshot key recording how many items of each item-stored list belong to the snapshot."""

RECORDS_KEY = "__voxflow_records__"
"""Snapshot key recording how many records of each key-stored dict belong to the snapshot."""

SCHEMA = """
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
CREATE TABLE IF NOT EXISTS state_records (
    flow_uuid TEXT NOT NULL,
    field TEXT NOT NULL,
    key TEXT NOT NULL,
    pos INTEGER NOT NULL,
    record_json TEXT NOT NULL,
    PRIMARY KEY (flow_uuid, field, key)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS idx_records_pos ON state_records(flow_uuid, field, pos);
CREATE TABLE IF NOT EXISTS pending_feedback (
    flow_uuid TEXT PRIMARY KEY,
    context_json TEXT NOT NULL,
    state_json TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS session_leases (
    flow_uuid TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    epoch INTEGER NOT NULL,
    expires_at REAL NOT NULL
);
"""

PG_SCHEMA = """
CREATE TABLE IF NOT EXISTS flow_states (
    flow_uuid TEXT PRIMARY KEY,
    method_name TEXT NOT NULL,
    saved_at TEXT NOT NULL,
    version BIGINT NOT NULL,
    state_json TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS flow_state_history (
    id BIGSERIAL PRIMARY KEY,
    flow_uuid TEXT NOT NULL,
    version BIGINT NOT NULL,
    method_name TEXT NOT NULL,
    saved_at TEXT NOT NULL,
    state_json TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS idx_history_uuid ON flow_state_history(flow_uuid, version);
CREATE TABLE IF NOT EXISTS conversation_items (
    flow_uuid TEXT NOT NULL,
    field TEXT NOT NULL,
    idx BIGINT NOT NULL,
    item_json TEXT NOT NULL,
    PRIMARY KEY (flow_uuid, field, idx)
);
CREATE TABLE IF NOT EXISTS state_records (
    flow_uuid TEXT NOT NULL,
    field TEXT NOT NULL,
    key TEXT NOT NULL,
    pos BIGINT NOT NULL,
    record_json TEXT NOT NULL,
    PRIMARY KEY (flow_uuid, field, key)
);
CREATE INDEX IF NOT EXISTS idx_records_pos ON state_records(flow_uuid, field, pos);
CREATE TABLE IF NOT EXISTS pending_feedback (
    flow_uuid TEXT PRIMARY KEY,
    context_json TEXT NOT NULL,
    state_json TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS session_leases (
    flow_uuid TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    epoch BIGINT NOT NULL,
    expires_at DOUBLE PRECISION NOT NULL
);
"""
"""The same tables on PostgreSQL (``?`` placeholders are translated by the backend)."""

# Portable SQL (SQLite >= 3.24 and PostgreSQL): ``?`` placeholders, ON CONFLICT upserts.
_UPSERT_RECORD = (
    "INSERT INTO state_records (flow_uuid, field, key, pos, record_json) VALUES (?, ?, ?, "
    "(SELECT COALESCE(MAX(pos), -1) + 1 FROM state_records WHERE flow_uuid = ? AND field = ?)"
    ", ?) ON CONFLICT (flow_uuid, field, key) DO UPDATE SET record_json = excluded.record_json"
)
_UPSERT_ITEM = (
    "INSERT INTO conversation_items (flow_uuid, field, idx, item_json) VALUES (?, ?, ?, ?) "
    "ON CONFLICT (flow_uuid, field, idx) DO UPDATE SET item_json = excluded.item_json"
)


class Cursor(Protocol):
    def fetchone(self) -> Any: ...
    def fetchall(self) -> list[Any]: ...


class Conn(Protocol):
    """The part of a DB-API connection the row helpers use (``?`` placeholders)."""

    def execute(self, sql: str, parameters: Sequence[Any] = ..., /) -> Cursor: ...
    def executemany(self, sql: str, parameters: Sequence[Sequence[Any]], /) -> Any: ...


@dataclasses.dataclass(frozen=True, slots=True)
class RecordChanges:
    """What one key-stored dict field changed since the stored snapshot.

    Attributes:
        upserts: ``(key, JSON-compatible record)`` pairs, new keys in dict order; a key
            already stored keeps its position, a new key is placed after all others.
        deletes: keys to remove (applied before ``upserts``).
        base_count: records of the field the stored snapshot holds (checked).
        count: records of the field after this save.
        replace: drop every stored record of the field first (``upserts`` is then the
            whole dict, in order), e.g. after the dict was reordered.
    """

    upserts: Sequence[tuple[str, Any]] = ()
    deletes: Sequence[str] = ()
    base_count: int = 0
    count: int = 0
    replace: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class StateChanges:
    """One incremental save: the small snapshot plus what the item-stored fields changed.

    Attributes:
        snapshot: the state without its item-stored fields (JSON-compatible).
        appended: new JSON-compatible items per list field.
        counts: items of each list field the stored snapshot holds (checked).
        records: changes per dict-of-records field.
        base_version: the stored version this save builds on (checked), or None to check
            the stored counts only.
    """

    snapshot: dict[str, Any]
    appended: Mapping[str, Sequence[Any]] = dataclasses.field(default_factory=dict)
    counts: Mapping[str, int] = dataclasses.field(default_factory=dict)
    records: Mapping[str, RecordChanges] = dataclasses.field(default_factory=dict)
    base_version: int | None = None


def _is_count(n: object) -> bool:
    return isinstance(n, int) and not isinstance(n, bool) and n >= 0


def check_changes(changes: object) -> StateChanges:
    """``changes`` if well-formed; raise a TypeError/ValueError naming the bad part."""
    if not isinstance(changes, StateChanges):
        raise TypeError(f"changes must be a StateChanges, got {type(changes).__name__}")
    if not isinstance(changes.snapshot, dict):
        raise TypeError("snapshot must be a dict")
    if set(changes.appended) != set(changes.counts):
        raise ValueError("appended and counts must name the same fields")
    if not all(_is_count(n) for n in changes.counts.values()):
        raise ValueError("counts must be non-negative ints")
    for field, change in changes.records.items():
        if not isinstance(change, RecordChanges):
            raise TypeError(f"records[{field!r}] must be a RecordChanges")
        if not (_is_count(change.base_count) and _is_count(change.count)):
            raise ValueError(f"records[{field!r}]: counts must be non-negative ints")
        if not all(isinstance(k, str) for k, _ in change.upserts) or not all(
            isinstance(k, str) for k in change.deletes
        ):
            raise TypeError(f"records[{field!r}]: keys must be strings")
        for key, _ in change.upserts:
            check_text(key, f"a record key of {field}")
    if changes.base_version is not None and not _is_count(changes.base_version):
        raise ValueError("base_version must be a non-negative int or None")
    if set(changes.appended) & set(changes.records):
        raise ValueError("a field cannot be both a list and a record dict")
    return changes


def split_full(
    state_data: dict[str, Any],
) -> tuple[dict[str, Any], dict[str, list[Any]], dict[str, dict[str, Any]]]:
    """``(snapshot, lists, records)`` of a full state: what goes into which table."""
    lists = {f: state_data[f] for f in APPEND_ONLY_FIELDS if isinstance(state_data.get(f), list)}
    records: dict[str, dict[str, Any]] = {}
    for f in RECORD_FIELDS:
        value = state_data.get(f)
        if isinstance(value, dict) and all(isinstance(k, str) for k in value):
            records[f] = value
    if not lists and not records:
        return state_data, lists, records
    snapshot = {k: v for k, v in state_data.items() if k not in lists and k not in records}
    if lists:
        snapshot[LISTS_KEY] = {field: len(items) for field, items in lists.items()}
    if records:
        snapshot[RECORDS_KEY] = {field: len(values) for field, values in records.items()}
    return snapshot, lists, records


def write_full_rows(
    conn: Conn,
    flow_uuid: str,
    lists: dict[str, list[Any]],
    records: dict[str, dict[str, Any]],
) -> None:
    """Rewrite the item rows of ``lists`` and every record row of ``flow_uuid``."""
    if lists:
        conn.executemany(
            "DELETE FROM conversation_items WHERE flow_uuid = ? AND field = ?",
            [(flow_uuid, field) for field in lists],
        )
        conn.executemany(
            "INSERT INTO conversation_items (flow_uuid, field, idx, item_json) "
            "VALUES (?, ?, ?, ?)",
            [
                (flow_uuid, field, i, json.dumps(item))
                for field, items in lists.items()
                for i, item in enumerate(items)
            ],
        )
    conn.execute("DELETE FROM state_records WHERE flow_uuid = ?", (flow_uuid,))
    if records:
        conn.executemany(
            "INSERT INTO state_records (flow_uuid, field, key, pos, record_json) "
            "VALUES (?, ?, ?, ?, ?)",
            [
                (flow_uuid, field, key, pos, json.dumps(value))
                for field, values in records.items()
                for pos, (key, value) in enumerate(values.items())
            ],
        )


def stale_reason(row: tuple[int, str] | None, changes: StateChanges) -> str | None:
    """Why ``changes`` cannot apply to the stored ``(version, state_json)``, or None."""
    if row is None:
        stored: dict[str, Any] = {}
        version = None
    else:
        version, state_json = row
        stored = json.loads(state_json)
    if changes.base_version is not None and version != changes.base_version:
        return f"version {version} stored, not {changes.base_version}"
    lists = stored.get(LISTS_KEY) or {}
    for field, n in changes.counts.items():
        if lists.get(field, 0) != n:
            return f"{lists.get(field, 0)} {field} items stored, not {n}"
    records = stored.get(RECORDS_KEY) or {}
    for field, change in changes.records.items():
        if field not in records and (row is not None or change.base_count):
            return f"{field} not stored as records"
        if records.get(field, 0) != change.base_count:
            return f"{records.get(field)} {field} records stored, not {change.base_count}"
    return None


def write_change_rows(conn: Conn, flow_uuid: str, changes: StateChanges) -> str:
    """Apply ``changes``' item rows; return the new snapshot's JSON (with its markers)."""
    counts = changes.counts
    rows = [
        (flow_uuid, field, counts[field] + i, json.dumps(item))
        for field, items in changes.appended.items()
        for i, item in enumerate(items)
    ]
    if rows:
        conn.executemany(_UPSERT_ITEM, rows)
    for field, change in changes.records.items():
        if change.replace:
            conn.execute(
                "DELETE FROM state_records WHERE flow_uuid = ? AND field = ?", (flow_uuid, field)
            )
        elif change.deletes:
            conn.executemany(
                "DELETE FROM state_records WHERE flow_uuid = ? AND field = ? AND key = ?",
                [(flow_uuid, field, key) for key in change.deletes],
            )
        if change.upserts:
            conn.executemany(
                _UPSERT_RECORD,
                [
                    (flow_uuid, field, key, flow_uuid, field, json.dumps(value))
                    for key, value in change.upserts
                ],
            )
    skip = set(changes.appended) | set(changes.records)
    data = {k: v for k, v in changes.snapshot.items() if k not in skip}
    if changes.appended:
        data[LISTS_KEY] = {f: counts[f] + len(items) for f, items in changes.appended.items()}
    if changes.records:
        data[RECORDS_KEY] = {f: change.count for f, change in changes.records.items()}
    return json.dumps(data)


def assemble(
    conn: Conn, flow_uuid: str, state_json: str, *, latest: bool = True
) -> dict[str, Any]:
    """A stored snapshot with its item-stored lists and record dicts put back.

    ``latest=False`` (an older snapshot of the history): the records are the current
    rows, whose number may differ from the snapshot's; no warning then.
    """
    data = json.loads(state_json)
    assert isinstance(data, dict)
    for field, count in (data.pop(LISTS_KEY, None) or {}).items():
        rows = conn.execute(
            "SELECT item_json FROM conversation_items WHERE flow_uuid = ? AND field = ? "
            "AND idx < ? ORDER BY idx",
            (flow_uuid, field, count),
        ).fetchall()
        if len(rows) != count:
            logger.warning("%s: %d of %d %s items stored", flow_uuid, len(rows), count, field)
        data[field] = [json.loads(r[0]) for r in rows]
    for field, count in (data.pop(RECORDS_KEY, None) or {}).items():
        rows = conn.execute(
            "SELECT key, record_json FROM state_records WHERE flow_uuid = ? AND field = ? "
            "ORDER BY pos",
            (flow_uuid, field),
        ).fetchall()
        if latest and len(rows) != count:
            logger.warning("%s: %d of %d %s records stored", flow_uuid, len(rows), count, field)
        data[field] = {key: json.loads(value) for key, value in rows}
    return data
