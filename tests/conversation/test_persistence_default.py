"""The default ``@persist`` backend saves conversations incrementally (flaw 3 of the reference).

On SQLite and PostgreSQL (``default_store``: the default backend on each; ``make_store``),
read back on a connection of its own (``tests.stores``); real subprocesses for the
cross-process restore and the crash in the middle of a save.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.stores import default_env, rows, statements
from voxflow import SQLiteFlowPersistence, persist, testing
from voxflow.conversation import ConversationMessage, SQLiteConversationPersistence
from voxflow.errors import PersistenceConflictError
from voxflow.flow.persistence import default_persistence

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _voxflow_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The default backend lives in a per-test data directory."""
    home = tmp_path / "voxflow-home"
    monkeypatch.setenv("VOXFLOW_HOME", str(home))
    return home


@persist
class Echo(testing.Echo):  # the kit's echo flow, saved after every method
    pass


def contents(stored: dict[str, Any] | None) -> list[str]:
    assert stored is not None
    return [m["content"] for m in stored["messages"]]


def test_default_backend_writes_the_same_small_snapshot_at_turn_5_and_turn_60(
    default_store: Any,
) -> None:
    flow = Echo()
    sizes: dict[int, int] = {}
    for turn in range(1, 61):
        flow.handle_turn(f"m{turn}", session_id="s")
        if turn in (5, 60):
            [(size,)] = rows(default_store, "SELECT length(state_json) FROM flow_states")
            sizes[turn] = size
            [(items,)] = rows(default_store,
                              "SELECT COUNT(*) FROM conversation_items WHERE field='messages'")
            assert items == 2 * turn
    assert abs(sizes[60] - sizes[5]) <= 8  # only counters' digits differ
    [(snapshot,)] = rows(default_store, "SELECT state_json FROM flow_states")
    assert "echo m1" not in snapshot
    backend = default_persistence()
    assert backend is default_store
    assert SQLiteConversationPersistence is SQLiteFlowPersistence
    assert backend.load_state("s") == flow.state.model_dump(mode="json")
    latest = backend.history("s")[-1][2]
    assert contents(latest)[-2:] == ["m60", "echo m60"]


def test_a_reply_replaced_in_place_is_saved_in_full(default_store: Any) -> None:
    # What the voice layer does after an interruption: the last assistant message is
    # replaced by index with what the user heard; the next save must store it.
    flow = Echo()
    flow.handle_turn("one", session_id="r")
    flow.handle_turn("two", session_id="r")
    cut = ConversationMessage(role="assistant", content="ec [interrupted]")
    flow.state.messages[-1] = cut
    flow.handle_turn("three", session_id="r")
    stored = default_store.load_state("r")
    assert contents(stored) == ["one", "echo one", "two", "ec [interrupted]", "three", "echo three"]
    restored = Echo()
    restored.handle_turn("four", session_id="r")
    assert restored.state.messages[3] == cut


def test_two_writers_on_one_session_the_one_behind_gets_a_conflict(default_store: Any) -> None:
    first, second = Echo(), Echo()
    first.handle_turn("a1", session_id="w")
    second.handle_turn("b1", session_id="w")  # restores a1 (revision known), adds b1
    # first holds a stale history: its save is refused, b1 is not overwritten.
    with pytest.raises(PersistenceConflictError) as refused:
        first.handle_turn("a2", session_id="w")
    assert refused.value.session_id == "w" and refused.value.stored > refused.value.expected
    stored = default_store.load_state("w")
    assert contents(stored) == ["a1", "echo a1", "b1", "echo b1"]
    first.handle_turn("a2", session_id="w")  # the retry reloads the session first
    stored = default_store.load_state("w")
    assert contents(stored) == ["a1", "echo a1", "b1", "echo b1", "a2", "echo a2"]
    assert stored == first.state.model_dump(mode="json")


def test_a_stale_delta_writes_nothing(make_store: Any) -> None:
    backend = make_store("d")
    backend.save_state("s", "m", {"id": "s", "messages": [{"n": 0}, {"n": 1}], "events": []})
    ok = backend.save_state_delta(
        "s", "m", {"id": "s", "x": 1}, {"messages": [{"n": 9}], "events": []},
        {"messages": 1, "events": 0},
    )  # fmt: skip
    assert ok is False
    assert backend.load_state("s") == {"id": "s", "messages": [{"n": 0}, {"n": 1}], "events": []}
    assert backend.save_state_delta(
        "s", "m", {"id": "s", "x": 1}, {"messages": [{"n": 2}], "events": []},
        {"messages": 2, "events": 0},
    )  # fmt: skip
    assert backend.load_state("s") == {
        "id": "s",
        "x": 1,
        "messages": [{"n": 0}, {"n": 1}, {"n": 2}],
        "events": [],
    }
    with pytest.raises(ValueError, match="counts"):
        backend.save_state_delta("s", "m", {}, {"messages": []}, {"messages": -1})
    with pytest.raises(TypeError, match="snapshot"):
        backend.save_state_delta("s", "m", [], {}, {})  # type: ignore[arg-type]


_CHAT_SRC = """
import os, sys
from voxflow import persist, testing
from voxflow.flow.persistence import default_persistence

@persist
class Echo(testing.Echo):  # the kit's echo flow, saved after every method
    pass

flow = Echo()
"""


def _run(code: str, store: Any) -> subprocess.CompletedProcess[str]:
    """``code`` in a new interpreter whose default backend is ``store``'s database."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**default_env(store), "PYTHONPATH": str(ROOT)},
        timeout=120,
        check=False,
    )


def test_another_process_continues_and_a_crash_mid_delta_loses_only_that_save(
    default_store: Any,
) -> None:
    first = _run(_CHAT_SRC + "flow.handle_turn('p1', session_id='x')\n", default_store)
    assert first.returncode == 0, first.stderr
    # Turn 2 restores and saves in full; turn 3 saves deltas, and the process dies inside
    # the first one's transaction (after its items are written, before COMMIT).
    crash = _run(
        _CHAT_SRC
        + """
flow.handle_turn('p2', session_id='x')
from tests.stores import crash_at
crash_at(default_persistence(), "INSERT INTO conversation_items", containing="ON CONFLICT")
flow.handle_turn('p3', session_id='x')
""",
        default_store,
    )
    assert crash.returncode == 17, crash.stderr
    after = _run(
        _CHAT_SRC
        + "flow.handle_turn('p4', session_id='x')\n"
        + "print([m.content for m in flow.state.messages])\n",
        default_store,
    )
    assert after.returncode == 0, after.stderr
    assert after.stdout.strip() == str(["p1", "echo p1", "p2", "echo p2", "p4", "echo p4"])


def test_a_fresh_instance_per_turn_appends_instead_of_rewriting(make_store: Any) -> None:
    # The stateless-server pattern: every turn a new Flow restores the session. The
    # restored lists count as saved, so the turn's saves append its own messages only.
    backend = make_store("stateless")

    @persist(backend)
    class Stateless(Echo):
        pass

    for turn in range(3):
        Stateless().handle_turn(f"t{turn}", session_id="st")
    assert backend.load_state("st") is not None
    with statements(backend) as seen:
        last = Stateless()
        last.handle_turn("t3", session_id="st")
    item_writes = [s for s in seen if "conversation_items" in s and not s.startswith("SELECT")]
    assert item_writes and all("ON CONFLICT" in s for s in item_writes)
    assert len(item_writes) == 2  # this turn's user message and reply, nothing older
    assert contents(backend.load_state("st")) == [
        m for t in range(4) for m in (f"t{t}", f"echo t{t}")
    ]
    assert backend.load_state("st") == last.state.model_dump(mode="json")
