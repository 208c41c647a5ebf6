"""@persist and its backends: SQLite files and PostgreSQL schemas (``make_store``; the
default backend through ``default_store``), real subprocesses."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from tests.stores import default_env, rows
from voxflow import Flow, FlowState, SQLiteFlowPersistence, listen, persist, start
from voxflow.errors import PersistenceConflictError
from voxflow.flow import FlowPersistence, default_data_dir
from voxflow.flow.parts import FlowPart

ROOT = Path(__file__).resolve().parents[2]


class Notes(FlowState):
    notes: list[str] = []
    turns: int = 0


@persist
class Session(Flow[Notes]):
    @start()
    def take_note(self) -> int:
        self.state.turns += 1
        self.state.notes.append(f"note {self.state.turns}")
        return self.state.turns


class MethodOnly(Flow[Notes]):
    @start()
    def scratch(self) -> None:
        self.state.notes.append("scratch")

    @persist()
    @listen(scratch)
    def keep(self) -> None:
        self.state.turns += 1


def test_persist_creates_nothing_until_first_write(_voxflow_home: Path) -> None:
    # SQLite only: the embedded default's file and folder (PostgreSQL creates its schema
    # on first use too, proved with the database URL in test_persistence_leases.py).
    assert not _voxflow_home.exists()  # decorating the classes above created nothing
    flow = Session()
    assert not _voxflow_home.exists()
    flow.kickoff()
    assert (_voxflow_home / "flow_states.db").is_file()
    assert default_data_dir() == _voxflow_home


def test_restore_by_id_continues_the_session(
    default_store: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    Session().kickoff(inputs={"id": "s1"})
    Session().kickoff(inputs={"id": "s1"})
    third = Session()
    assert third.kickoff(inputs={"id": "s1"}) == 3
    assert third.state.notes == ["note 1", "note 2", "note 3"]
    assert capsys.readouterr().out == ""  # quiet by default


def test_method_level_persist_saves_after_that_method(make_store: Any) -> None:
    backend = make_store()
    flow = MethodOnly(persistence=backend)
    flow.kickoff(inputs={"id": "m1"})
    saved = backend.load_state("m1")
    assert saved is not None and saved["turns"] == 1 and saved["notes"] == ["scratch"]
    assert [m for _, m, _ in backend.history("m1")] == ["keep"]


class HoldsLive(FlowPart):
    """A part holding every session's state live (as a tracked conversation does)."""

    attribute = "holds_live"

    def skips_restore(self, flow_id: str) -> bool:
        return True


class LiveSession(Session, parts=(HoldsLive,)):
    pass


def test_a_part_that_skips_the_restore_writes_behind_the_store(default_store: Any) -> None:
    Session().kickoff(inputs={"id": "s2"})
    flow = LiveSession()
    # The saved turn was not reloaded, so this writer is behind: its save is refused.
    with pytest.raises(PersistenceConflictError, match="never loaded"):
        flow.kickoff(inputs={"id": "s2"})
    assert flow.state.turns == 1 and flow.state.id == "s2"
    stored = default_store.load_state("s2")
    assert stored is not None and stored["notes"] == ["note 1"]


def test_restore_from_state_id_forks_with_a_new_id(make_store: Any) -> None:
    backend = make_store()
    Session(persistence=backend).kickoff(inputs={"id": "source"})
    fork = Session(persistence=backend)
    assert fork.kickoff(restore_from_state_id="source") == 2
    assert fork.state.id != "source"
    source = backend.load_state("source")
    assert source is not None and source["turns"] == 1  # the source history is untouched
    named = Session(persistence=backend)
    named.kickoff(inputs={"id": "fork-2"}, restore_from_state_id="source")
    assert named.state.id == "fork-2" and named.state.turns == 2


def test_restore_from_unknown_id_carries_on(default_store: Any) -> None:
    flow = Session()
    assert flow.kickoff(restore_from_state_id="missing") == 1
    assert default_store.load_state("missing") is None
    stored = default_store.load_state(flow.state.id)
    assert stored is not None and stored["turns"] == 1


def test_storage_per_session_stays_bounded(make_store: Any) -> None:
    # Flaw 3: the reference appended a full snapshot per save forever (O(n^2) per session).
    backend = make_store(history_limit=3)
    flow = Session(persistence=backend)
    for _ in range(40):
        flow.kickoff(inputs={"id": "long"})
    counts = [rows(backend, f"SELECT COUNT(*) FROM {table}")[0][0]
              for table in ("flow_states", "flow_state_history")]
    assert counts == [1, 3]
    if isinstance(backend, SQLiteFlowPersistence):
        with sqlite3.connect(backend.path) as conn:
            assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    versions = [v for v, _, _ in backend.history("long")]
    assert versions == [37, 38, 39, 40]
    loaded = backend.load_state("long")
    assert loaded is not None and loaded["turns"] == 40


def test_backend_validates_input(tmp_path: Path, make_store: Any) -> None:
    backend = make_store()
    assert isinstance(backend, FlowPersistence)
    with pytest.raises(ValueError, match="flow_uuid"):
        backend.save_state("", "m", {})
    with pytest.raises(TypeError, match="state_data"):
        backend.save_state("x", "m", [])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="history_limit"):
        SQLiteFlowPersistence(tmp_path / "v.db", history_limit=-1)
    with pytest.raises(TypeError, match="backend"):
        persist(object())  # type: ignore[call-overload]
    assert backend.load_state("never") is None
    if isinstance(backend, SQLiteFlowPersistence):
        assert not backend.path.exists()  # reading never creates the file
    with pytest.raises(ValueError, match="history_limit"):
        make_store(history_limit=-1)


def _run(code: str, store: Any) -> subprocess.CompletedProcess[str]:
    """``code`` in a new interpreter whose default backend is ``store``'s database."""
    env = {**default_env(store), "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


_FLOW_SRC = """
from voxflow import Flow, FlowState, persist, start

class Notes(FlowState):
    notes: list[str] = []
    turns: int = 0

@persist
class Session(Flow[Notes]):
    @start()
    def take_note(self) -> int:
        self.state.turns += 1
        self.state.notes.append(f"note {self.state.turns}")
        return self.state.turns
"""


def test_second_process_restores_what_the_first_saved(default_store: Any) -> None:
    first = _run(_FLOW_SRC + "print(Session().kickoff(inputs={'id': 'xproc'}))", default_store)
    assert first.returncode == 0, first.stderr
    second = _run(
        _FLOW_SRC + "f = Session(); print(f.kickoff(inputs={'id': 'xproc'})); print(f.state.notes)",
        default_store,
    )
    assert second.returncode == 0, second.stderr
    assert second.stdout.split("\n")[:2] == ["2", "['note 1', 'note 2']"]


@pytest.mark.parametrize("point", ["INSERT INTO flow_state_history", "INSERT INTO flow_states "],
                         ids=["at-the-history-row", "at-the-snapshot-row"])
def test_crash_between_save_steps_keeps_the_previous_snapshot(
    default_store: Any, point: str
) -> None:
    # The process dies (os._exit) as the save writes the history row, or once it is
    # written and only the latest snapshot is left, before COMMIT: the next process must
    # load turn 1.
    ok = _run(_FLOW_SRC + "Session().kickoff(inputs={'id': 'crashy'})", default_store)
    assert ok.returncode == 0, ok.stderr
    crash = _run(
        _FLOW_SRC
        + f"""
from tests.stores import crash_at
from voxflow.flow.persistence import default_persistence
backend = default_persistence()
backend.load_state("crashy")  # opens the connection
crash_at(backend, {point!r})
Session().kickoff(inputs={{'id': 'crashy'}})
""",
        default_store,
    )
    assert crash.returncode == 17, crash.stderr
    after = _run(_FLOW_SRC + "f = Session(); print(f.kickoff(inputs={'id': 'crashy'}))",
                 default_store)
    assert after.returncode == 0, after.stderr
    assert after.stdout.strip() == "2"  # turn 1 restored intact, this is turn 2
    assert [v for v, _, _ in default_store.history("crashy")] == [1, 2]


def test_verbose_persist_logs_instead_of_printing(
    make_store: Any, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    backend = make_store()

    @persist(backend, verbose=True)
    class Loud(Flow[Notes]):
        @start()
        def step(self) -> None:
            return None

    with caplog.at_level("INFO", logger="voxflow.flow"):
        Loud().kickoff()
    assert any("saved state of Loud after step" in r.getMessage() for r in caplog.records)
    assert capsys.readouterr().out == ""


class BlankId(BaseModel):
    id: str = ""  # a state ported from code that leaves the id to the runtime
    n: int = 0


@persist
class Blank(Flow[BlankId]):
    @start()
    def bump(self) -> int:
        self.state.n += 1
        return self.state.n


def test_an_empty_state_id_gets_a_fresh_uuid_and_the_save_succeeds(default_store: Any) -> None:
    flow = Blank()
    assert flow.kickoff() == 1  # before: ValueError at the save, after the method ran
    assert uuid.UUID(flow.state.id).version == 4
    stored = default_store.load_state(flow.state.id)
    assert stored == {"id": flow.state.id, "n": 1}
    given = Blank(state=BlankId(n=5))
    assert given.kickoff() == 6 and given.state.id not in ("", flow.state.id)
    assert Blank(state=BlankId(id="kept")).flow_id == "kept"
