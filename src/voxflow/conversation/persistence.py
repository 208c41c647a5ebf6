"""Persistence whose per-turn cost does not grow with the conversation.

A conversation's history only grows: ``state.messages`` and ``state.events`` are
append-only. :class:`SQLiteConversationPersistence` stores those two lists as one row
per item (``conversation_items``) and the rest of the state as the usual small snapshot
(in ``flow_states``, with its bounded history), so a save after turn 1,000 writes the
turn's new messages plus a few hundred bytes, not the whole transcript.

The conversational turn APIs save through :meth:`save_state_delta` when the backend has
it (see ``ConversationTurns._prepare_state_save``); any other
:class:`~voxflow.flow.persistence.FlowPersistence` still gets full snapshots. Loading
reassembles the full state, so ``load_state`` returns exactly what was saved.

Rules: a list is appended to in place. Reassigning or truncating ``state.messages``
(e.g. trimming history) is detected and triggers one full save; replacing an element in
the middle of the list in place is not supported (messages are frozen for that reason).
One writer per session at a time, as with any snapshot store.

Example::

    @persist(SQLiteConversationPersistence("chats.db"))
    class Support(Flow[ConversationState]): ...
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from voxflow.flow.persistence import SQLiteFlowPersistence

if TYPE_CHECKING:
    import sqlite3

__all__ = ["APPEND_ONLY_FIELDS", "LISTS_KEY", "SQLiteConversationPersistence"]

APPEND_ONLY_FIELDS = ("messages", "events")
"""State fields stored item by item."""

LISTS_KEY = "__voxflow_lists__"
"""Snapshot key recording how many items of each list field belong to the snapshot."""

_ITEMS_SCHEMA = """
CREATE TABLE IF NOT EXISTS conversation_items (
    flow_uuid TEXT NOT NULL,
    field TEXT NOT NULL,
    idx INTEGER NOT NULL,
    item_json TEXT NOT NULL,
    PRIMARY KEY (flow_uuid, field, idx)
) WITHOUT ROWID;
"""


class SQLiteConversationPersistence(SQLiteFlowPersistence):
    """:class:`SQLiteFlowPersistence` that appends history items instead of rewriting them.

    Args:
        path: the database file (None: the default data directory).
        history_limit: older small snapshots kept per session.
    """

    _items_ready = False

    def _connect(self, create: bool) -> sqlite3.Connection | None:
        conn = super()._connect(create)
        if conn is not None and not self._items_ready:
            conn.executescript(_ITEMS_SCHEMA)
            self._items_ready = True
        return conn

    def close(self) -> None:
        """Close the connection (idempotent; the next call reopens it)."""
        super().close()
        self._items_ready = False

    def save_state(self, flow_uuid: str, method_name: str, state_data: dict[str, Any]) -> None:
        """Full save: every item of the list fields, then the small snapshot."""
        self._check_uuid(flow_uuid)
        if not isinstance(state_data, dict):
            raise TypeError("state_data must be a dict")
        lists = {
            f: state_data[f] for f in APPEND_ONLY_FIELDS if isinstance(state_data.get(f), list)
        }
        if not lists:
            super().save_state(flow_uuid, method_name, state_data)
            return
        rows = [
            (flow_uuid, field, i, json.dumps(item))
            for field, items in lists.items()
            for i, item in enumerate(items)
        ]

        def write(conn: sqlite3.Connection) -> None:
            conn.executemany(
                "DELETE FROM conversation_items WHERE flow_uuid = ? AND field = ?",
                [(flow_uuid, field) for field in lists],
            )
            conn.executemany("INSERT INTO conversation_items VALUES (?, ?, ?, ?)", rows)

        self._write(write)
        snapshot = {k: v for k, v in state_data.items() if k not in lists}
        snapshot[LISTS_KEY] = {field: len(items) for field, items in lists.items()}
        super().save_state(flow_uuid, method_name, snapshot)

    def save_state_delta(
        self,
        flow_uuid: str,
        method_name: str,
        snapshot: dict[str, Any],
        appended: Mapping[str, Sequence[Any]],
        counts: Mapping[str, int],
    ) -> None:
        """Append ``appended[field]`` after ``counts[field]`` stored items; save ``snapshot``.

        Args:
            flow_uuid: the session.
            method_name: the method that triggered the save.
            snapshot: the state without the list fields (JSON-compatible).
            appended: new JSON-compatible items per list field.
            counts: items of each field already stored (from the previous save).

        Items are written before the snapshot that counts them, so a crash in between
        leaves the previous snapshot valid (the extra items are ignored, then replaced).
        """
        self._check_uuid(flow_uuid)
        if set(appended) != set(counts):
            raise ValueError("appended and counts must name the same fields")
        rows = [
            (flow_uuid, field, counts[field] + i, json.dumps(item))
            for field, items in appended.items()
            for i, item in enumerate(items)
        ]
        if rows:
            self._write(
                lambda conn: conn.executemany(
                    "INSERT OR REPLACE INTO conversation_items VALUES (?, ?, ?, ?)", rows
                ).close()
            )
        data = dict(snapshot)
        data[LISTS_KEY] = {field: counts[field] + len(items) for field, items in appended.items()}
        super().save_state(flow_uuid, method_name, data)

    def load_state(self, flow_uuid: str) -> dict[str, Any] | None:
        """The latest state of ``flow_uuid`` with its list fields reassembled, or None."""
        data = super().load_state(flow_uuid)
        if data is None or LISTS_KEY not in data:
            return data
        marker = data.pop(LISTS_KEY)

        def read(conn: sqlite3.Connection) -> dict[str, list[Any]]:
            out: dict[str, list[Any]] = {}
            for field, count in marker.items():
                rows = conn.execute(
                    "SELECT item_json FROM conversation_items WHERE flow_uuid = ? AND field = ? "
                    "AND idx < ? ORDER BY idx",
                    (flow_uuid, field, count),
                ).fetchall()
                out[field] = [json.loads(r[0]) for r in rows]
            return out

        data.update(self._read(read) or {})
        return data

    def __repr__(self) -> str:
        return f"SQLiteConversationPersistence(path={str(self.path)!r})"
