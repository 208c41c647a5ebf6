"""Persistence integrity (issue 16): concurrent writers, final statuses, crashes, bad stores.

On SQLite and PostgreSQL (``make_store``): separate connections (as two processes have)
and real subprocesses; the SQLite-only tests say why.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.stores import PlainStore, rows, where
from voxflow import Flow, SQLiteFlowPersistence, persist, start, testing
from voxflow.conversation.persistence import UNANSWERED_REASON
from voxflow.errors import PersistenceConflictError, PersistenceUnavailableError
from voxflow.flow.persistence import WritableCheck
from voxflow.testing import Acknowledger
from voxflow.turns import TurnRunner

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


@persist
class Echo(testing.Echo):  # the kit's echo flow, saved after every method
    pass


def pairs(stored: dict[str, Any] | None) -> list[tuple[str, str]]:
    """``(role, content)`` of every stored message."""
    assert stored is not None
    return [(m["role"], m["content"]) for m in stored["messages"]]


def assert_holds_exactly(stored: dict[str, Any] | None, returned: list[str]) -> None:
    """Every returned turn is stored once, answered by its echo; nothing else is answered.

    A turn that raised (its save was refused after an earlier save of the same turn
    landed) may leave its user message, marked interrupted, and nothing else.
    """
    assert stored is not None
    messages = stored["messages"]
    answered = []
    for i, message in enumerate(messages):
        if message["role"] != "user":
            assert messages[i - 1]["role"] == "user"  # a reply answers the message before
            continue
        after = messages[i + 1] if i + 1 < len(messages) else None
        if after is not None and after["role"] == "assistant":
            assert after["content"] == f"echo {message['content']}"
            answered.append(message["content"])
        else:
            assert message["metadata"]["turn_status"] == "interrupted"
    assert sorted(answered) == sorted(returned)  # none lost, none duplicated, none extra


# -- two writers ----------------------------------------------------------------------


def test_two_instances_writing_one_session_lose_no_returned_turn(make_store: Any) -> None:
    # Two backends on one database: two connections, as two processes would have.
    writers = [Echo(persistence=make_store("two")) for _ in range(2)]
    rng = random.Random(16)
    returned: list[str] = []
    conflicts = 0
    for i in range(300):
        message = f"turn {i}"
        writer = writers[rng.randrange(2)]
        try:
            writer.handle_turn(message, session_id="shared")
        except PersistenceConflictError as exc:
            assert exc.session_id == "shared" and exc.stored > exc.expected
            conflicts += 1
            writer.handle_turn(message, session_id="shared")  # the retry reloads first
        returned.append(message)
    assert conflicts > 50  # the writers really interleaved
    assert_holds_exactly(make_store("two").load_state("shared"), returned)


_WRITER = """
import sys
from voxflow import SQLiteFlowPersistence, persist, testing
from voxflow.errors import PersistenceConflictError

@persist
class Echo(testing.Echo):  # the kit's echo flow, saved after every method
    pass

name, where, turns = sys.argv[1], sys.argv[2], int(sys.argv[3])
if where.startswith("postgresql://"):
    from voxflow.flow.postgres import PostgresFlowPersistence

    url, schema = where.rsplit("#", 1)
    store = PostgresFlowPersistence(url, schema=schema)
else:
    store = SQLiteFlowPersistence(where)
flow = Echo(persistence=store)
conflicts = 0
for i in range(turns):
    message = f"{name} {i}"
    while True:
        try:
            flow.handle_turn(message, session_id="shared")
            break
        except PersistenceConflictError:
            conflicts += 1
    print(message, flush=True)  # reported only once the call returned
print(f"conflicts {conflicts}", flush=True)
"""


def test_two_processes_writing_one_session_lose_no_returned_turn(
    tmp_path: Path, make_store: Any
) -> None:
    store = make_store("procs")
    store.check_writable()  # proves the store writable (PostgreSQL: creates the schema)
    where = f"{store.url}#{store.schema}" if hasattr(store, "schema") else str(store.path)
    script = tmp_path / "writer.py"
    script.write_text(_WRITER)
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), name, where, "80"],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in ("a", "b")
    ]
    returned: list[str] = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        lines = out.splitlines()
        assert lines[-1].startswith("conflicts ")
        returned += lines[:-1]
    assert len(returned) == 160
    assert_holds_exactly(make_store("procs").load_state("shared"), returned)


def test_a_new_store_waits_for_another_writer_to_switch_the_file_to_wal(
    tmp_path: Path,
) -> None:
    # SQLite only: the switch of a file to WAL mode (PostgreSQL has no such step).
    # Two processes creating one database: the second found the first mid-write on a
    # file not yet in WAL mode, and SQLite refused the switch at once ("database is
    # locked", no busy wait) -- a CI failure of the test above.
    import sqlite3
    import threading

    path = tmp_path / "fresh.db"
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("CREATE TABLE elsewhere (x)")  # a rollback-journal database ...
    other.execute("BEGIN IMMEDIATE")  # ... with a write under way
    other.execute("INSERT INTO elsewhere VALUES (1)")
    released = threading.Timer(0.3, lambda: other.execute("COMMIT"))
    released.start()
    try:
        store = SQLiteFlowPersistence(path)
        store.save_state("s", "m", {"id": "s", "n": 1})
    finally:
        released.join()
        other.close()
    assert store.load_state("s") == {"id": "s", "n": 1}
    with sqlite3.connect(path) as check:
        assert check.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert check.execute("SELECT x FROM elsewhere").fetchall() == [(1,)]


def test_a_save_with_a_stale_revision_overwrites_nothing(make_store: Any) -> None:
    backend = make_store()
    assert backend.revision("s") == 0
    assert backend.save_full_state("s", "m", {"id": "s", "n": 1}, expected_revision=0) == 1
    assert backend.save_full_state("s", "m", {"id": "s", "n": 2}, expected_revision=1) == 2
    for stale in (0, 1, 3):
        with pytest.raises(PersistenceConflictError, match="'s'") as refused:
            backend.save_full_state("s", "m", {"id": "s", "n": 9}, expected_revision=stale)
        assert (refused.value.expected, refused.value.stored) == (stale, 2)
    assert backend.load_state_revision("s") == ({"id": "s", "n": 2}, 2)
    with pytest.raises(ValueError, match="expected_revision"):
        backend.save_full_state("s", "m", {}, expected_revision=-1)


# -- final statuses -------------------------------------------------------------------


async def test_a_persisted_tracked_turn_stores_its_final_statuses(make_store: Any) -> None:
    @persist(make_store("statuses"))
    class Saved(Acknowledger):
        pass

    flow = Saved(suppress_flow_events=True)
    runner = TurnRunner(flow)
    async for event in runner.astream_turn("first"):
        runner.accept_event(event)
    events = runner.astream_turn("second")
    async for _ in events:  # the consumer goes away after the first event
        break
    await events.aclose()  # type: ignore[attr-defined]
    stored = make_store("statuses").load_state(flow.state.id)  # another connection
    assert stored is not None
    turns, replies = list(stored["turns"].values()), list(stored["replies"].values())
    assert [t["status"] for t in turns] == ["completed", "interrupted"]
    assert [r["status"] for r in replies] == ["completed", "interrupted"]
    assert replies[0]["text"] == "Request received."


# -- a crash mid-turn -----------------------------------------------------------------

_DIES_MID_TURN = """
import os, signal, sys
from typing import Any
from tests.stores import open_store
from voxflow import ConversationState, Flow, listen, persist

@persist
class Echo(Flow[ConversationState]):
    conversational = True

    def route_turn(self, context: Any) -> str | None:
        return "reply"

    @listen("reply")
    def handle_reply(self) -> str:
        if self.state.current_user_message == "die":
            os.kill(os.getpid(), signal.SIGKILL)  # after the route's save, before a reply
        return f"echo {self.state.current_user_message}"

flow = Echo(persistence=open_store(sys.argv[1]))
flow.handle_turn("hello", session_id="crashy")
flow.handle_turn("die", session_id="crashy")
"""


def test_a_session_restored_after_a_crash_marks_the_unanswered_turn(
    tmp_path: Path, make_store: Any
) -> None:
    backend = make_store("crash")
    backend.check_writable()  # PostgreSQL: creates the schema the subprocess writes to
    script = tmp_path / "dies.py"
    script.write_text(_DIES_MID_TURN)
    proc = subprocess.run(
        [sys.executable, str(script), where(backend)], cwd=ROOT, capture_output=True,
        timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == -9, proc.stderr
    assert pairs(backend.load_state("crashy"))[-1] == ("user", "die")  # what the crash left
    flow = Echo(persistence=backend)
    flow.handle_turn("are you there?", session_id="crashy")
    stored = backend.load_state("crashy")
    assert pairs(stored) == [
        ("user", "hello"),
        ("assistant", "echo hello"),
        ("user", "die"),
        ("user", "are you there?"),
        ("assistant", "echo are you there?"),
    ]
    assert stored is not None
    marked = stored["messages"][2]["metadata"]
    assert marked == {"turn_status": "interrupted", "reason": UNANSWERED_REASON}
    assert [e for e in stored["events"] if e["type"] == "turn_interrupted"] == [
        {
            "type": "turn_interrupted",
            "payload": {"message_index": 2, "reason": UNANSWERED_REASON},
            "agent_name": None,
            "visibility": "public",
        }
    ]
    assert flow.state.model_dump(mode="json") == stored
    # The marker is added once: a later restore leaves the history as it is.
    Echo(persistence=backend).handle_turn("again", session_id="crashy")
    assert len(backend.load_state("crashy")["events"]) == 1  # type: ignore[index]


# -- an unwritable store --------------------------------------------------------------

ran: list[str] = []


@persist
class Counter(Flow[Any]):
    @start()
    def count(self) -> int:
        ran.append("count")
        return len(ran)


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_an_unwritable_store_fails_before_any_method_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, backend: str
) -> None:
    # The default store unusable: SQLite's VOXFLOW_HOME on a file, or a PostgreSQL URL
    # where no server listens (port 1: this variant needs none).
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    home = blocker / "voxflow"
    monkeypatch.setenv("VOXFLOW_HOME", str(home))
    nowhere = "postgresql://voxflow:hunter2@127.0.0.1:1/test"
    if backend == "postgres":
        monkeypatch.setenv("VOXFLOW_DATABASE_URL", nowhere)
    else:
        monkeypatch.delenv("VOXFLOW_DATABASE_URL", raising=False)
    ran.clear()
    with pytest.raises(PersistenceUnavailableError) as failed:
        Counter().kickoff()
    assert ran == []  # the method never ran, so no work was lost at its save
    if backend == "sqlite":
        assert failed.value.path == str(home / "flow_states.db")
        assert "VOXFLOW_HOME" in failed.value.fix and str(home) in str(failed.value)
    else:
        assert failed.value.path == "postgresql://voxflow:***@127.0.0.1:1/test"
        assert "VOXFLOW_DATABASE_URL" in failed.value.fix
        assert "hunter2" not in str(failed.value) + failed.value.fix
    chat = Echo()
    with pytest.raises(PersistenceUnavailableError):
        chat.handle_turn("hello", session_id="nowhere")
    assert chat.state.messages == []  # no user message kept without its reply
    monkeypatch.delenv("VOXFLOW_DATABASE_URL", raising=False)
    monkeypatch.setenv("VOXFLOW_HOME", str(tmp_path / "fine"))
    assert Counter().kickoff() == 1 and ran == ["count"]


def test_check_persistence_proves_a_store_that_checks_and_passes_one_that_cannot(
    tmp_path: Path,
) -> None:
    """A flow's check_persistence (run_call's, the chat's) asks a backend that has
    ``check_writable`` (a :class:`WritableCheck`: SQLite, PostgreSQL) to prove it, and
    passes one without it untouched (its first save tells)."""
    plain = PlainStore()
    assert not isinstance(plain, WritableCheck)
    Counter(persistence=plain).check_persistence()  # nothing to prove: no error
    assert plain.saved == []
    (tmp_path / "home").write_text("not a folder")
    unwritable = SQLiteFlowPersistence(tmp_path / "home" / "calls.db")
    assert isinstance(unwritable, WritableCheck)
    with pytest.raises(PersistenceUnavailableError):
        Counter(persistence=unwritable).check_persistence()


# -- crash consistency: SIGKILL at seeded random points -------------------------------

_ZYGOTE = """
import os, sys
from tests.stores import open_store
from voxflow import persist, testing

@persist
class Echo(testing.Echo):  # the kit's echo flow, saved after every method
    pass

db, report = sys.argv[1], sys.argv[2]
for line in sys.stdin:  # "run N": fork a writer, wait for the test to SIGKILL it
    pid = os.fork()
    if pid == 0:
        fd = os.open(report, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        flow = Echo(persistence=open_store(db))  # its own connection
        turn = 0
        while True:
            message = f"{line.split()[1]}-{turn}"
            flow.handle_turn(message, session_id="crash")
            os.write(fd, (message + "\\n").encode())  # only once the call returned
            turn += 1
    print(pid, flush=True)
    _, status = os.waitpid(pid, 0)
    print(status, flush=True)
"""

KILLS = 60


def test_sigkill_at_random_points_loses_no_returned_turn(
    tmp_path: Path, make_store: Any
) -> None:
    backend = make_store("crash")
    backend.check_writable()  # PostgreSQL: creates the schema before the writers fork
    report = tmp_path / "returned.txt"
    script = tmp_path / "zygote.py"
    script.write_text(_ZYGOTE)
    # One interpreter imports voxflow once and forks a fresh writer per kill.
    zygote = subprocess.Popen(
        [sys.executable, str(script), where(backend), str(report)],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert zygote.stdin is not None and zygote.stdout is not None
    rng = random.Random(1616)
    waited_for = 0
    try:
        for run in range(KILLS):
            zygote.stdin.write(f"run {run}\n")
            zygote.stdin.flush()
            pid = int(zygote.stdout.readline())
            # Kill point: after 0 to 3 of this writer's turns returned, then a random
            # delay (the next turn is restoring, running or saving).
            target = rng.randrange(4)
            waited_for += target
            deadline = time.monotonic() + 60  # a hang guard (a writer that died), not a figure
            while returned_by(report, run) < target:
                assert time.monotonic() < deadline, f"writer {run} stopped returning turns"
                time.sleep(0.002)
            time.sleep(rng.uniform(0.0, 0.03))
            os.kill(pid, signal.SIGKILL)
            status = int(zygote.stdout.readline())
            assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
            returned = report.read_text().split() if report.exists() else []
            stored = backend.load_state("crash")  # the database opens, every time
            if stored is None:
                assert returned == []
                continue
            assert_survives_a_crash(stored, returned)
        if isinstance(backend, SQLiteFlowPersistence):  # (PostgreSQL has no such check)
            assert rows(backend, "PRAGMA integrity_check") == [("ok",)]
    finally:
        zygote.stdin.close()
        zygote.wait(timeout=30)
    assert len(report.read_text().split()) >= waited_for > KILLS  # not a vacuous check


def returned_by(report: Path, run: int) -> int:
    """How many turns writer ``run`` reported as returned."""
    if not report.exists():
        return 0
    return sum(1 for line in report.read_text().split() if line.startswith(f"{run}-"))


def assert_survives_a_crash(stored: dict[str, Any], returned: list[str]) -> None:
    """Every returned turn is stored answered once; the history is well-formed.

    Beyond the returned turns, the crash may leave the one turn in flight: answered
    (its last save landed, its report did not) or as a last, unanswered user message
    (marked interrupted by the next restore). Earlier unanswered ones are marked.
    Writers are named by run: ``"<run>-<turn>"``.
    """
    messages = stored["messages"]
    answered = []
    for i, message in enumerate(messages):
        if message["role"] != "user":
            assert i > 0 and messages[i - 1]["role"] == "user"
            assert message["content"] == f"echo {messages[i - 1]['content']}"
            continue
        if i + 1 < len(messages) and messages[i + 1]["role"] == "assistant":
            answered.append(message["content"])
        elif i + 1 < len(messages):  # a user message right after it: must be marked
            assert message["metadata"]["turn_status"] == "interrupted", message
    assert len(set(answered)) == len(answered)  # no duplicates
    assert set(returned) <= set(answered)  # no returned turn lost
    # Only a turn in flight when its writer was killed may be stored without having
    # returned: the one after the last that writer reported.
    per_run: dict[str, int] = {}
    for message in returned:
        run = message.split("-")[0]
        per_run[run] = per_run.get(run, 0) + 1
    for extra in set(answered) - set(returned):
        run, turn = extra.split("-")
        assert int(turn) == per_run.get(run, 0), extra


async def test_load_session_builds_on_the_stored_revision(make_store: Any) -> None:
    @persist(make_store("load"))
    class Saved(Acknowledger):
        pass

    first = Saved(suppress_flow_events=True)
    first.handle_turn("hello", session_id="s")
    # A restarted process loads the session, then runs tracked turns on it.
    restarted = Saved(suppress_flow_events=True)
    assert await restarted.aload_session("s") is True
    runner = TurnRunner(restarted)
    async for event in runner.astream_turn("still there?"):
        runner.accept_event(event)
    stored = make_store("load").load_state("s")
    assert stored is not None and len(stored["messages"]) == 4
    # The first instance is behind now: its save is refused, nothing is overwritten.
    with pytest.raises(PersistenceConflictError):
        first.handle_turn("late", session_id="s")
    assert make_store("load").load_state("s") == stored
