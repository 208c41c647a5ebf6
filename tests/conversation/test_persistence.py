"""Conversation persistence: append-only history saves, full-state round trips, on
SQLite and PostgreSQL (``make_store``); what was stored is read back on a connection of
its own (``tests.stores``)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.stores import execute, rows, statements
from voxflow import ConversationState, Flow, listen, persist

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


def item_count(store: Any, session: str) -> int:
    sql = "SELECT COUNT(*) FROM conversation_items WHERE flow_uuid = ? AND field = 'messages'"
    return int(rows(store, sql, session)[0][0])


def snapshot_size(store: Any) -> int:
    [(size,)] = rows(store, "SELECT length(state_json) FROM flow_states")
    return int(size)


def test_history_is_appended_not_rewritten_and_restores_in_full(make_store: Any) -> None:
    backend = make_store("c")
    chat = make_flow(backend)
    first = chat()
    first.handle_turn("one", session_id="s")
    with statements(backend) as seen:
        for text in ("two", "agent"):
            first.handle_turn(text, session_id="s")
    assert item_count(backend, "s") == 6
    # Every item row written since turn one is a new one: 4 messages and 1 event, each
    # appended once, nothing deleted or written again.
    writes = [s for s in seen if "conversation_items" in s and not s.startswith("SELECT")]
    assert len(writes) == 5 and all(s.startswith("INSERT INTO") for s in writes), writes
    [(snapshot,)] = rows(backend, "SELECT state_json FROM flow_states")
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


def test_trimming_the_history_triggers_a_full_save(make_store: Any) -> None:
    backend = make_store("c")
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


def test_full_and_plain_snapshots_round_trip(make_store: Any) -> None:
    backend = make_store("c")
    backend.save_state("x", "m", {"id": "x", "messages": [{"role": "user"}], "other": 1})
    backend.save_state("y", "m", {"id": "y", "plain": True})
    assert backend.load_state("x") == {"id": "x", "messages": [{"role": "user"}], "other": 1}
    assert backend.load_state("y") == {"id": "y", "plain": True}
    assert backend.load_state("missing") is None
    with pytest.raises(ValueError, match="flow_uuid"):
        backend.save_state("", "m", {})
    with pytest.raises(ValueError, match="same fields"):
        backend.save_state_delta("x", "m", {}, {"messages": []}, {})


def test_items_written_without_their_snapshot_are_ignored(make_store: Any) -> None:
    backend = make_store("c")
    backend.save_state("s", "m", {"id": "s", "messages": [{"n": 0}], "events": []})
    # What an older two-step writer could leave after a crash: an item beyond the counts.
    execute(backend, "INSERT INTO conversation_items VALUES (?, ?, ?, ?)",
            "s", "messages", 1, '{"n": 99}')
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


def test_a_plain_backend_still_gets_full_snapshots(make_store: Any) -> None:
    backend = make_store("p")
    flow = make_flow(backend)()
    flow.handle_turn("one", session_id="p")
    flow.handle_turn("two", session_id="p")
    stored = backend.load_state("p")
    assert stored is not None and len(stored["messages"]) == 4


def test_per_turn_writes_do_not_grow_with_the_history(make_store: Any) -> None:
    # Flaw 3, structurally (no timing): after turn 5 and after turn 60 a save writes the
    # same small snapshot plus the turn's own two messages.
    backend = make_store("c")
    flow = make_flow(backend)()
    sizes: dict[int, int] = {}
    item_writes: dict[int, list[str]] = {}
    for turn in range(1, 61):
        if turn not in (5, 60):
            flow.handle_turn("hi", session_id="s")
            continue
        with statements(backend) as seen:
            flow.handle_turn("hi", session_id="s")
        sizes[turn] = snapshot_size(backend)
        assert item_count(backend, "s") == 2 * turn
        item_writes[turn] = [s for s in seen if "conversation_items" in s
                             and not s.startswith("SELECT")]
    assert abs(sizes[60] - sizes[5]) <= 8  # only counters' digits differ
    # The rows a turn's saves write: its own two messages, at turn 5 as at turn 60.
    assert len(item_writes[5]) == len(item_writes[60]) == 2, item_writes[60][:4]
    assert all(s.startswith("INSERT INTO conversation_items") for s in item_writes[60])
