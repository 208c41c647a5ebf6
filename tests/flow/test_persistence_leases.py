"""Session leases with fencing (issue 17), on SQLite and PostgreSQL alike.

A lease makes one worker the writer of a session; taking it over bumps the epoch, and
every save through ``store.fenced(lease)`` checks the epoch in its own transaction, so
a paused ("zombie") worker's late save is refused once another worker took over.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from voxflow import ConversationState, Flow, listen, persist
from voxflow.errors import FencedWriteError, PersistenceConflictError, SessionLeaseError
from voxflow.flow import persistence as flow_persistence
from voxflow.settings import SettingsError

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


class Echo(Flow[ConversationState]):
    conversational = True

    def route_turn(self, context: Any) -> str | None:
        return "reply"

    @listen("reply")
    def handle_reply(self) -> str:
        return f"echo {self.state.current_user_message}"


def test_a_lease_is_exclusive_until_it_expires_or_is_released(make_store: Any) -> None:
    store = make_store()
    first = store.acquire_lease("s", "worker-a", ttl=30)
    assert (first.owner, first.epoch) == ("worker-a", 1)
    with pytest.raises(SessionLeaseError, match="worker-a") as held:
        store.acquire_lease("s", "worker-b", ttl=30)
    assert held.value.holder == "worker-a" and held.value.session_id == "s"
    again = store.acquire_lease("s", "worker-a", ttl=30)  # the holder renews: same epoch
    assert again.epoch == 1 and again.expires_at >= first.expires_at
    assert store.renew_lease(again, ttl=60).expires_at > again.expires_at
    store.release_lease(again)
    taken = store.acquire_lease("s", "worker-b", ttl=30)  # free again: the next epoch
    assert (taken.owner, taken.epoch) == ("worker-b", 2)
    with pytest.raises(FencedWriteError) as lost:
        store.renew_lease(again)
    assert (lost.value.epoch, lost.value.current) == (1, 2)
    store.release_lease(again)  # a lease already taken over is left alone
    assert store.lease_of("s") == taken
    for bad in ("", None):
        with pytest.raises(ValueError, match="owner"):
            store.acquire_lease("s", bad, ttl=1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="ttl"):
        store.acquire_lease("s", "w", ttl=0)


def test_a_zombie_writers_late_save_is_refused_after_a_takeover(make_store: Any) -> None:
    store = make_store("zombie")
    lease_a = store.acquire_lease("call", "worker-a", ttl=0.2)
    worker_a = persist(Echo)(persistence=store.fenced(lease_a))
    worker_a.handle_turn("one", session_id="call")
    time.sleep(0.3)  # worker a pauses (GC, SIGSTOP, a partition) past its lease
    other = make_store("zombie")
    lease_b = other.acquire_lease("call", "worker-b", ttl=30)
    assert lease_b.epoch == lease_a.epoch + 1
    worker_b = persist(Echo)(persistence=other.fenced(lease_b))
    worker_b.handle_turn("two", session_id="call")  # restores "one", adds "two"
    before = other.load_state_revision("call")
    with pytest.raises(FencedWriteError, match="taken over") as refused:
        worker_a.handle_turn("late", session_id="call")  # a zombie's write
    assert (refused.value.epoch, refused.value.current) == (lease_a.epoch, lease_b.epoch)
    assert other.load_state_revision("call") == before  # nothing was written
    stored = before[0] if before else None
    assert [m["content"] for m in stored["messages"]] == ["one", "echo one", "two", "echo two"]
    # Fencing is checked before the revision: even a writer that reloads is refused.
    fresh_zombie = persist(Echo)(persistence=store.fenced(lease_a))
    with pytest.raises(FencedWriteError):
        fresh_zombie.handle_turn("again", session_id="call")


def test_an_unleased_writer_behind_a_leased_one_still_gets_a_conflict(make_store: Any) -> None:
    store = make_store()
    lease = store.acquire_lease("c", "w", ttl=30)
    leased = persist(Echo)(persistence=store.fenced(lease))
    unleased = persist(Echo)(persistence=make_store())
    unleased.handle_turn("first", session_id="c")
    leased.handle_turn("second", session_id="c")
    with pytest.raises(PersistenceConflictError):
        unleased.handle_turn("third", session_id="c")


_PAUSED = """
import sys, time
from typing import Any
from voxflow import ConversationState, Flow, listen, persist
from voxflow.flow.persistence import SQLiteFlowPersistence

class Echo(Flow[ConversationState]):
    conversational = True

    def route_turn(self, context: Any) -> str | None:
        return "reply"

    @listen("reply")
    def handle_reply(self) -> str:
        return f"echo {self.state.current_user_message}"

where = sys.argv[1]
if where.startswith("postgresql://"):
    from voxflow.flow.postgres import PostgresFlowPersistence
    url, schema = where.rsplit("#", 1)
    store = PostgresFlowPersistence(url, schema=schema)
else:
    store = SQLiteFlowPersistence(where)
lease = store.acquire_lease("call", "worker-a", ttl=0.5)
flow = persist(Echo)(persistence=store.fenced(lease))
flow.handle_turn("one", session_id="call")
print("ready", flush=True)
sys.stdin.readline()  # SIGSTOPped around here, resumed after the takeover
try:
    flow.handle_turn("late", session_id="call")
except Exception as exc:
    print(type(exc).__name__, flush=True)
else:
    print("saved", flush=True)
"""


def test_a_sigstopped_worker_resumed_after_a_takeover_writes_nothing(
    tmp_path: Path, make_store: Any
) -> None:
    store = make_store("paused")
    store.check_writable()
    where = f"{store.url}#{store.schema}" if hasattr(store, "schema") else str(store.path)
    script = tmp_path / "paused.py"
    script.write_text(_PAUSED)
    proc = subprocess.Popen(
        [sys.executable, str(script), where],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdin is not None
    assert proc.stdout.readline().strip() == "ready"
    os.kill(proc.pid, signal.SIGSTOP)
    try:
        time.sleep(0.6)  # its lease expires while it is stopped
        lease = store.acquire_lease("call", "worker-b", ttl=30)
        worker_b = persist(Echo)(persistence=store.fenced(lease))
        worker_b.handle_turn("two", session_id="call")
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    out, err = proc.communicate("go\n", timeout=60)
    assert out.strip() == "FencedWriteError", err
    stored = store.load_state("call")
    assert stored is not None
    assert [m["content"] for m in stored["messages"]] == ["one", "echo one", "two", "echo two"]


def test_the_database_url_is_validated_and_never_echoes_its_password(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("VOXFLOW_DATABASE_URL", "mysql://user:hunter2@db/x")
    with pytest.raises(SettingsError, match="VOXFLOW_DATABASE_URL") as bad:
        flow_persistence.default_persistence()
    assert "hunter2" not in str(bad.value) and "postgresql://" in str(bad.value)
    monkeypatch.setenv("VOXFLOW_DATABASE_URL", "postgresql://user:hunter2@db:70000/x")
    with pytest.raises(SettingsError, match="VOXFLOW_DATABASE_URL") as port:
        flow_persistence.default_persistence()
    assert "hunter2" not in str(port.value)


def test_the_database_url_selects_postgresql(monkeypatch: pytest.MonkeyPatch) -> None:
    from voxflow.flow.postgres import PostgresFlowPersistence

    url = "postgresql://postgres:secret@127.0.0.1:5432/test"
    monkeypatch.setenv("VOXFLOW_DATABASE_URL", url)
    store = flow_persistence.default_persistence()
    assert isinstance(store, PostgresFlowPersistence) and store.url == url
    assert "secret" not in repr(store)
    assert flow_persistence.default_persistence() is store  # shared, like the SQLite one
    monkeypatch.delenv("VOXFLOW_DATABASE_URL")
    assert isinstance(flow_persistence.default_persistence(), flow_persistence.RowStore)


def test_a_password_in_the_url_query_is_never_echoed() -> None:
    # libpq also reads the password from the query (?password=...): an unreachable
    # server's error, its path and the store's repr must not show it.
    from voxflow.errors import PersistenceUnavailableError
    from voxflow.flow.postgres import PostgresFlowPersistence
    from voxflow.settings import redact_url

    assert redact_url("postgresql://u@h/db?sslmode=disable&password=hunter2") == (
        "postgresql://u@h/db?sslmode=disable&password=***"
    )
    assert "hunter2" not in redact_url("postgresql://u:hunter2@h/db?password=hunter2")
    url = "postgresql://postgres@127.0.0.1:1/test?password=hunter2"
    store = PostgresFlowPersistence(url, connect_timeout=1)
    assert "hunter2" not in repr(store)
    with pytest.raises(PersistenceUnavailableError) as down:
        store.load_state("call")
    assert "hunter2" not in str(down.value)
    assert "hunter2" not in str(getattr(down.value, "path", ""))
