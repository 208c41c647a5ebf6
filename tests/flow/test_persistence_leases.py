"""Session leases with fencing (issue 17), on SQLite and PostgreSQL alike.

A lease makes one worker the writer of a session; taking it over bumps the epoch, and
every write through ``store.fenced(lease)`` checks the epoch, the release and the expiry
(the database's clock) in its own transaction, so a paused ("zombie") worker's late
save is refused once its lease ran out, whether or not another worker took over. A
writer without a lease cannot write a session whose live lease someone holds.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from voxflow import persist, testing
from voxflow.errors import FencedWriteError, SessionLeaseError
from voxflow.flow import persistence as flow_persistence
from voxflow.settings import SettingsError

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


class Echo(testing.Echo):  # persist(Echo) marks this subclass, not the kit's flow
    pass


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


def test_a_dead_owners_live_lease_is_taken_over_and_its_late_write_refused(
    make_store: Any,
) -> None:
    """``take_from``: the caller knows the holder is dead (its worker's heartbeat stopped)
    and takes its live lease at once, the epoch moving on; the old owner, should it wake,
    writes nothing. Any other live holder is still refused."""
    store = make_store("dead_owner")
    lease_a = store.acquire_lease("call", "worker-a/call-1", ttl=60)
    worker_a = persist(Echo)(persistence=store.fenced(lease_a))
    worker_a.handle_turn("one", session_id="call")
    other = make_store("dead_owner")
    with pytest.raises(SessionLeaseError, match="worker-a/call-1"):  # another holder named
        other.acquire_lease("call", "worker-b/call-1", ttl=30, take_from="worker-c/call-9")
    lease_b = other.acquire_lease("call", "worker-b/call-1", ttl=30, take_from="worker-a/call-1")
    assert (lease_b.owner, lease_b.epoch) == ("worker-b/call-1", lease_a.epoch + 1)
    assert lease_a.expires_at > lease_b.expires_at - 30  # a's lease was live when taken
    worker_b = persist(Echo)(persistence=other.fenced(lease_b))
    worker_b.handle_turn("two", session_id="call")
    before = other.load_state_revision("call")
    with pytest.raises(FencedWriteError, match="taken over"):
        worker_a.handle_turn("late", session_id="call")  # the old owner woke up
    with pytest.raises(FencedWriteError, match="taken over"):
        store.renew_lease(lease_a)
    assert other.load_state_revision("call") == before  # nothing of it was stored
    # taking from an owner that no longer holds it is an ordinary acquire
    with pytest.raises(SessionLeaseError, match="worker-b/call-1"):
        store.acquire_lease("call", "worker-c/call-1", ttl=30, take_from="worker-a/call-1")
    with pytest.raises(ValueError, match="take_from"):
        store.acquire_lease("call", "worker-c/call-1", ttl=30, take_from="")


def test_an_unfenced_writer_cannot_write_a_live_leased_session(make_store: Any) -> None:
    # The rule: a session with a live lease is written only through store.fenced(lease).
    store = make_store()
    unleased = persist(Echo)(persistence=make_store())
    unleased.handle_turn("first", session_id="c")  # no lease yet: unfenced saves are fine
    lease = store.acquire_lease("c", "w", ttl=30)
    leased = persist(Echo)(persistence=store.fenced(lease))
    leased.handle_turn("second", session_id="c")
    before = store.load_state_revision("c")
    with pytest.raises(FencedWriteError, match=r"unfenced.*'w'.*store\.fenced") as refused:
        unleased.handle_turn("third", session_id="c")
    assert refused.value.reason == "unfenced" and refused.value.epoch is None
    assert (refused.value.session_id, refused.value.current) == ("c", lease.epoch)
    for write in (
        lambda: store.save_state("c", "m", {"id": "c"}),
        lambda: store.save_state_delta("c", "m", {"id": "c"}, {}, {}),
        lambda: store.save_pending_feedback("c", {"step": 1}, {"id": "c"}),
        lambda: store.clear_pending_feedback("c"),
    ):
        with pytest.raises(FencedWriteError, match="unfenced"):
            write()
    assert store.load_state_revision("c") == before  # nothing was written
    store.save_state("other", "m", {"id": "other"})  # an unleased session: unaffected
    store.release_lease(lease)
    # Released: unfenced writes are allowed again (the refused turn's flow reloads first).
    unleased.handle_turn("fourth", session_id="c")
    stored = store.load_state("c")
    assert stored is not None
    assert [m["content"] for m in stored["messages"] if m["role"] == "user"] == [
        "first",
        "second",
        "fourth",
    ]


def test_an_expired_lease_nobody_took_is_reclaimed_by_its_owner_only(make_store: Any) -> None:
    """An owner cut off from the database for longer than its lease (a restarted server)
    renews it with ``reclaim=True`` as long as nobody took the session since; a lease
    taken over (even if that one expired too) or released is not reclaimed."""
    store = make_store()
    lease = store.acquire_lease("s", "worker-a", ttl=0.3)
    time.sleep(0.4)  # expired, nobody took it
    with pytest.raises(FencedWriteError, match="expired"):
        store.renew_lease(lease, ttl=30)
    reclaimed = store.renew_lease(lease, ttl=30, reclaim=True)
    assert reclaimed.epoch == lease.epoch and store.lease_of("s") == reclaimed
    store.fenced(reclaimed).save_state("s", "m", {"id": "s", "n": 1})  # writes again
    store.release_lease(reclaimed)
    with pytest.raises(FencedWriteError) as released:
        store.renew_lease(reclaimed, ttl=30, reclaim=True)
    assert released.value.reason == "released"
    taken = store.acquire_lease("s", "worker-b", ttl=0.3)
    time.sleep(0.4)  # worker-b's lease expired as well
    with pytest.raises(FencedWriteError) as lost:
        store.renew_lease(reclaimed, ttl=30, reclaim=True)
    assert (lost.value.reason, lost.value.current) == ("taken over", taken.epoch)
    assert store.lease_of("s") == taken and store.load_state("s") == {"id": "s", "n": 1}


def test_an_expired_or_released_lease_can_no_longer_save(make_store: Any) -> None:
    store = make_store()
    fenced = store.fenced(store.acquire_lease("s", "worker-a", ttl=30))
    fenced.save_state("s", "m", {"id": "s", "n": 1})
    # shortened only after the first save, so a slow machine cannot expire it early
    lease = store.renew_lease(store.lease_of("s"), ttl=0.3)
    time.sleep(0.4)  # expired, and nobody took the session over yet
    assert store.lease_of("s") == lease
    with pytest.raises(FencedWriteError, match=r"'s'.*epoch 1 was expired.*database clock") as e:
        fenced.save_state("s", "m", {"id": "s", "n": 2})
    assert (e.value.session_id, e.value.epoch, e.value.reason) == ("s", 1, "expired")
    with pytest.raises(FencedWriteError, match="expired"):
        fenced.save_state_delta("s", "m", {"id": "s"}, {}, {})
    with pytest.raises(FencedWriteError, match="expired"):
        store.renew_lease(lease)
    assert store.load_state("s") == {"id": "s", "n": 1}  # nothing was written
    # The same owner acquires it again (nobody took it: the same epoch) and writes on.
    again = store.acquire_lease("s", "worker-a", ttl=30)
    assert again.epoch == lease.epoch
    fenced.save_state("s", "m", {"id": "s", "n": 3})
    store.release_lease(again)
    with pytest.raises(FencedWriteError, match="was released") as released:
        fenced.save_state("s", "m", {"id": "s", "n": 4})
    assert released.value.reason == "released"
    with pytest.raises(FencedWriteError, match="released"):
        fenced.save_pending_feedback("s", {"step": 1}, {"id": "s"})
    assert store.load_state("s") == {"id": "s", "n": 3}
    assert store.load_pending_feedback("s") is None


def test_lease_expiry_is_judged_by_the_database_clock(make_store: Any) -> None:
    store = make_store()
    lease = store.acquire_lease("s", "w", ttl=10)
    # expires_at is in the database's Unix seconds: the server's clock read in SQL.
    db_now = store._read(lambda c: c.execute(f"SELECT {store._now_sql}").fetchone()[0])
    assert 9.0 < lease.expires_at - float(db_now) <= 10.0
    # A lease row whose expires_at is past at the database's clock is expired, whatever
    # the worker thinks: written in SQL, relative to the database's own now.
    store._write(
        lambda c: c.execute(
            f"UPDATE session_leases SET expires_at = {store._now_sql} - 1 WHERE flow_uuid = ?",
            ("s",),
        )
    )
    with pytest.raises(FencedWriteError, match="expired"):
        store.fenced(lease).save_state("s", "m", {"id": "s"})
    store._write(
        lambda c: c.execute(
            f"UPDATE session_leases SET expires_at = {store._now_sql} + 5 WHERE flow_uuid = ?",
            ("s",),
        )
    )
    store.fenced(lease).save_state("s", "m", {"id": "s"})


def test_a_fenced_store_is_a_complete_flow_persistence(make_store: Any) -> None:
    from voxflow.flow.persistence import FencedPersistence, FlowPersistence

    store = make_store()
    lease = store.acquire_lease("s", "w", ttl=30)
    fenced = store.fenced(lease)
    assert isinstance(fenced, FlowPersistence)
    public = {n for n in dir(store) if not n.startswith("_") and callable(getattr(store, n))}
    leases = {"acquire_lease", "renew_lease", "release_lease", "lease_of", "fenced"}
    backend_only = {"drop_schema"}  # PostgreSQL: a test helper, not persistence
    missing = public - leases - backend_only - set(dir(FencedPersistence))
    assert not missing, f"FencedPersistence lacks {sorted(missing)}"
    fenced.save_state("s", "first", {"id": "s", "messages": [{"content": "a"}]})
    assert fenced.save_state_delta(
        "s", "second", {"id": "s"}, {"messages": [{"content": "b"}]}, {"messages": 1}
    )
    assert fenced.revision("s") == store.revision("s") == 2
    assert fenced.history("s") == store.history("s")
    assert [m for _, m, _ in fenced.history("s")] == ["first", "second"]
    fenced.save_pending_feedback("s", {"step": 1}, {"id": "s"})
    assert fenced.load_pending_feedback("s") == ({"step": 1}, {"id": "s"})
    fenced.clear_pending_feedback("s")
    fenced.close()
    assert fenced.load_state("s") == {"id": "s", "messages": [{"content": "a"}, {"content": "b"}]}
    # Taken over: every write of the session through the old view is refused.
    store.release_lease(lease)
    taken = make_store().acquire_lease("s", "other", ttl=30)
    before = store.load_state_revision("s")
    for write in (
        lambda: fenced.save_state("s", "m", {"id": "s"}),
        lambda: fenced.save_full_state("s", "m", {"id": "s"}, expected_revision=2),
        lambda: fenced.save_state_delta(
            "s", "m", {"id": "s"}, {"messages": [{"content": "z"}]}, {"messages": 2}
        ),
        lambda: fenced.save_pending_feedback("s", {"step": 2}, {"id": "s"}),
        lambda: fenced.clear_pending_feedback("s"),
    ):
        with pytest.raises(FencedWriteError, match="taken over") as refused:
            write()
        assert (refused.value.epoch, refused.value.current) == (lease.epoch, taken.epoch)
    assert store.load_state_revision("s") == before


async def test_a_zombie_runners_turn_is_refused_and_nothing_of_it_is_stored(
    make_store: Any,
) -> None:
    from voxflow.testing import Acknowledger
    from voxflow.turns import TurnRunner, TurnState

    class Saved(Acknowledger):
        pass

    store_a = make_store("conv")
    lease_a = store_a.acquire_lease("call-1", "worker-a", ttl=30)
    flow_a = persist(Saved)(persistence=store_a.fenced(lease_a), state=TurnState(id="call-1"))
    runner_a = TurnRunner(flow_a)
    for text in ("one", "two", "three"):
        async for event in runner_a.astream_turn(text):
            runner_a.accept_event(event)
    stored = store_a.load_state("call-1")
    assert stored is not None
    assert [t["status"] for t in stored["turns"].values()] == ["completed"] * 3
    # Worker a pauses past its (now short) lease: expired, its next turn is refused even
    # before anybody takes the call over.
    store_a.renew_lease(lease_a, ttl=0.2)
    await asyncio.sleep(0.3)
    expired = store_a.load_state_revision("call-1")
    with pytest.raises(FencedWriteError, match="expired"):
        async for event in runner_a.astream_turn("late"):
            runner_a.accept_event(event)
    assert store_a.load_state_revision("call-1") == expired
    # Worker b takes the call over and answers a turn.
    store_b = make_store("conv")
    lease_b = store_b.acquire_lease("call-1", "worker-b", ttl=30)
    assert lease_b.epoch == lease_a.epoch + 1
    flow_b = persist(Saved)(persistence=store_b.fenced(lease_b))
    assert await flow_b.aload_session("call-1")  # the new owner resumes the stored call
    runner_b = TurnRunner(flow_b)
    async for event in runner_b.astream_turn("four"):
        runner_b.accept_event(event)
    before = store_b.load_state_revision("call-1")
    assert before is not None and len(before[0]["turns"]) == 4
    with pytest.raises(FencedWriteError, match="taken over"):
        async for event in runner_a.astream_turn("zombie"):  # worker a resumes
            runner_a.accept_event(event)
    assert store_b.load_state_revision("call-1") == before  # nothing of it is stored
    history = store_b.history("call-1")
    assert all('"zombie"' not in json.dumps(state) for _, _, state in history)
    assert all('"late"' not in json.dumps(state) for _, _, state in history)
    user = [m["content"] for m in before[0]["messages"] if m["role"] == "user"]
    assert user == ["one", "two", "three", "four"]


_PAUSED = """
import sys, time
from voxflow import persist, testing
from voxflow.flow.persistence import SQLiteFlowPersistence

class Echo(testing.Echo):  # persist(Echo) marks this subclass, not the kit's flow
    pass

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
    from voxflow.pg_url import redact_url

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
