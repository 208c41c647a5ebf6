"""SQLiteConversationPersistence: append-only history saves, full-state round trips."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from voxflow import ConversationState, Flow, SQLiteFlowPersistence, listen, persist
from voxflow.conversation import SQLiteConversationPersistence

pytestmark = pytest.mark.unit


def make_flow(backend: Any) -> type[Flow[ConversationState]]:
    @persist(backend)
    class Chat(Flow[ConversationState]):
        conversational = True

        def route_turn(self, context: Any) -> str | None:
            return "reply"

        @listen("reply")
        def handle_reply(self) -> str:
            text = self.state.current_user_message or ""
            if text == "trim":
                self.state.messages = self.state.messages[-2:]
            if text == "agent":
                self.append_agent_result("helper", "scratch")
            return f"echo {text}"

    return Chat


def query(path: Path, sql: str, *args: Any) -> list[Any]:
    """Read the database file directly (an independent check of what was stored)."""
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return conn.execute(sql, args).fetchall()


def item_count(path: Path, session: str) -> int:
    sql = "SELECT COUNT(*) FROM conversation_items WHERE flow_uuid = ? AND field = 'messages'"
    return int(query(path, sql, session)[0][0])


def test_history_is_appended_not_rewritten_and_restores_in_full(tmp_path: Path) -> None:
    backend = SQLiteConversationPersistence(tmp_path / "c.db")
    chat = make_flow(backend)
    first = chat()
    for text in ("one", "two", "agent"):
        first.handle_turn(text, session_id="s")
    assert item_count(tmp_path / "c.db", "s") == 6
    [(snapshot,)] = query(tmp_path / "c.db", "SELECT state_json FROM flow_states")
    assert '"echo one"' not in snapshot  # the snapshot stays small: no message in it
    stored = backend.load_state("s")
    assert stored is not None
    assert [m["content"] for m in stored["messages"]] == [
        "one",
        "echo one",
        "two",
        "echo two",
        "agent",
        "echo agent",
    ]
    assert stored["events"][0]["agent_name"] == "helper"
    assert stored["last_intent"] == "reply"
    fresh = chat()
    fresh.handle_turn("four", session_id="s")
    assert len(fresh.state.messages) == 8
    assert fresh.state.agent_threads["helper"][0].content == "scratch"
    assert backend.load_state("s") == fresh.state.model_dump(mode="json")


def test_trimming_the_history_triggers_a_full_save(tmp_path: Path) -> None:
    backend = SQLiteConversationPersistence(tmp_path / "c.db")
    flow = make_flow(backend)()
    for text in ("a", "b", "trim", "c"):
        flow.handle_turn(text, session_id="s")
    assert [m.content for m in flow.state.messages] == [
        "echo b",
        "trim",
        "echo trim",
        "c",
        "echo c",
    ]
    stored = backend.load_state("s")
    assert stored is not None
    assert [m["content"] for m in stored["messages"]] == [
        "echo b",
        "trim",
        "echo trim",
        "c",
        "echo c",
    ]


def test_full_and_plain_snapshots_round_trip(tmp_path: Path) -> None:
    backend = SQLiteConversationPersistence(tmp_path / "c.db")
    backend.save_state("x", "m", {"id": "x", "messages": [{"role": "user"}], "other": 1})
    backend.save_state("y", "m", {"id": "y", "plain": True})
    assert backend.load_state("x") == {"id": "x", "messages": [{"role": "user"}], "other": 1}
    assert backend.load_state("y") == {"id": "y", "plain": True}
    assert backend.load_state("missing") is None
    with pytest.raises(ValueError, match="flow_uuid"):
        backend.save_state("", "m", {})
    with pytest.raises(ValueError, match="same fields"):
        backend.save_state_delta("x", "m", {}, {"messages": []}, {})


def test_items_written_without_their_snapshot_are_ignored(tmp_path: Path) -> None:
    backend = SQLiteConversationPersistence(tmp_path / "c.db")
    backend.save_state("s", "m", {"id": "s", "messages": [{"n": 0}], "events": []})
    # A crash after writing items but before the snapshot: simulate the orphan row.
    with contextlib.closing(sqlite3.connect(tmp_path / "c.db")) as conn, conn:
        conn.execute(
            "INSERT INTO conversation_items VALUES (?, ?, ?, ?)", ("s", "messages", 1, '{"n": 99}')
        )
    assert backend.load_state("s") == {"id": "s", "messages": [{"n": 0}], "events": []}
    backend.save_state_delta(
        "s",
        "m",
        {"id": "s"},
        {"messages": [{"n": 1}], "events": []},
        {
            "messages": 1,
            "events": 0,
        },
    )
    assert backend.load_state("s") == {"id": "s", "messages": [{"n": 0}, {"n": 1}], "events": []}


def test_a_plain_backend_still_gets_full_snapshots(tmp_path: Path) -> None:
    backend = SQLiteFlowPersistence(tmp_path / "p.db")
    flow = make_flow(backend)()
    flow.handle_turn("one", session_id="p")
    flow.handle_turn("two", session_id="p")
    stored = backend.load_state("p")
    assert stored is not None and len(stored["messages"]) == 4


def test_per_turn_writes_do_not_grow_with_the_history(tmp_path: Path) -> None:
    # Flaw 3, structurally (no timing): after turn 5 and after turn 60 a save writes the
    # same small snapshot plus the turn's own two messages.
    db = tmp_path / "c.db"
    backend = SQLiteConversationPersistence(db)
    flow = make_flow(backend)()
    sizes: dict[int, int] = {}
    for turn in range(1, 61):
        flow.handle_turn("hi", session_id="s")
        if turn in (5, 60):
            [(size,)] = query(db, "SELECT length(state_json) FROM flow_states")
            sizes[turn] = size
            assert item_count(db, "s") == 2 * turn
    assert abs(sizes[60] - sizes[5]) <= 8  # only counters' digits differ
