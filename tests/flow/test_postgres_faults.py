"""The PostgreSQL session store through faults of its database: its connections reset
(``pg_terminate_backend``, the server up), and the database refusing connections for a
while (as a restarted server does). Each test has a database of its own on the test
server (``pg_faults``): every connection reset is the test's own."""

from __future__ import annotations

import importlib.util
import sys
import threading
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.conftest import PgFaults
from voxflow import ConversationState, Flow, listen, persist
from voxflow.errors import PersistenceConflictError, PersistenceUnavailableError
from voxflow.flow.postgres import PostgresFlowPersistence

STATE: dict[str, Any] = {"id": "s", "messages": [], "count": 1}


def _pg_cut() -> ModuleType:
    """benchmarks/_pg_cut.py (a proxy that cuts a connection at its COMMIT), imported as
    the benchmark imports it."""
    name = "voxflow_benchmark_pg_cut"
    if name not in sys.modules:
        path = Path(__file__).resolve().parents[2] / "benchmarks" / "_pg_cut.py"
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


CommitCut = _pg_cut().CommitCut


def store_on(faults: PgFaults, **options: Any) -> PostgresFlowPersistence:
    return PostgresFlowPersistence(faults.url, connect_timeout=5, **options)


def fill_the_pool(store: PostgresFlowPersistence, connections: int) -> None:
    """Make the pool hold ``connections`` idle connections (what a busy process has)."""
    pool = store._open()
    held = [pool.getconn() for _ in range(connections)]
    for conn in held:
        pool.putconn(conn)
    assert pool.get_stats()["pool_size"] == connections


def test_a_reset_of_every_connection_is_invisible_to_the_next_operations(
    pg_faults: PgFaults,
) -> None:
    store = store_on(pg_faults, max_connections=4)
    try:
        lease = store.acquire_lease("s", "worker-a", ttl=30)
        revision = store.save_full_state("s", "start", STATE, epoch=lease.epoch)
        fill_the_pool(store, 4)
        assert pg_faults.reset() == 4
        # every idle connection of the pool is dead: none may reach an operation
        lease = store.renew_lease(lease, ttl=30)
        revision = store.save_full_state("s", "turn", {**STATE, "count": 2},
                                         expected_revision=revision, epoch=lease.epoch)
        assert store.load_state("s") == {**STATE, "count": 2}
        lease = store.renew_lease(lease, ttl=30)
        assert store.revision("s") == revision
        assert store.lease_of("s") == lease
    finally:
        store.close()


def test_a_connection_reset_inside_a_transaction_is_retried_on_a_fresh_one(
    pg_faults: PgFaults,
) -> None:
    """A renewal waits for the session's lock (another writer holds it); its connection
    is reset while it waits: it is run again on a new connection, and succeeds."""
    import psycopg

    store = store_on(pg_faults)
    try:
        lease = store.acquire_lease("s", "worker-a", ttl=30)
        with psycopg.connect(pg_faults.url, autocommit=True,
                             application_name="lock-holder") as holder:
            holder.execute("BEGIN")
            holder.execute("SELECT pg_advisory_xact_lock(hashtextextended('s', 0))")
            renewed: list[Any] = []
            thread = threading.Thread(target=lambda: renewed.append(
                _outcome(lambda: store.renew_lease(lease, ttl=30))))
            thread.start()
            waiting = _wait_for_lock_waiter(pg_faults)
            with psycopg.connect(pg_faults.url, autocommit=True) as admin:
                admin.execute("SELECT pg_terminate_backend(%s)", (waiting,))
            holder.execute("COMMIT")  # the retried renewal gets the lock now
            thread.join(30)
        assert len(renewed) == 1 and not isinstance(renewed[0], BaseException), renewed
        assert renewed[0].expires_at > lease.expires_at and renewed[0].epoch == lease.epoch
    finally:
        store.close()


def test_a_database_that_refuses_connections_fails_fast_then_is_used_again(
    pg_faults: PgFaults,
) -> None:
    store = store_on(pg_faults)
    try:
        lease = store.acquire_lease("s", "worker-a", ttl=30)
        fill_the_pool(store, 2)
        with pg_faults.down():
            for _ in range(3):  # typed, each time (not a hang of connect_timeout)
                with pytest.raises(PersistenceUnavailableError, match=r"not currently "
                                   r"accepting connections|terminating connection"):
                    store.renew_lease(lease, ttl=30)
        # back up: the same store object works again, without being reopened by hand
        lease = store.renew_lease(lease, ttl=30)
        store.save_full_state("s", "back", STATE, epoch=lease.epoch)
        assert store.load_state("s") == STATE
    finally:
        store.close()


def _outcome(fn: Any) -> Any:
    try:
        return fn()
    except BaseException as exc:
        return exc


def _wait_for_lock_waiter(faults: PgFaults) -> int:
    """The pid of the store's connection waiting for the advisory lock."""
    import time

    import psycopg

    with psycopg.connect(faults.url, autocommit=True) as conn:
        for _ in range(300):
            row = conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = %s AND wait_event_type = "
                "'Lock' AND wait_event = 'advisory'", (faults.name,)).fetchone()
            if row is not None:
                return int(row[0])
            time.sleep(0.05)
    raise AssertionError("the renewal never waited for the lock")


# -- a connection that breaks during COMMIT (tests/pg_cut.py cuts it at the instant) ---


def test_a_save_whose_commit_was_made_but_never_answered_is_saved(
    pg_faults: PgFaults,
) -> None:
    """The server committed the save; its answer never came back (the connection cut
    right after): the store asks on a fresh connection, learns it was made and returns
    its revision. The next save, built on it, is not a conflict; nothing is saved twice."""
    with CommitCut(pg_faults.url) as cut:
        store = PostgresFlowPersistence(cut.url, connect_timeout=5)
        try:
            first = store.save_full_state("s", "start", STATE, expected_revision=0)
            cut.arm("after")
            second = store.save_full_state("s", "turn", {**STATE, "count": 2},
                                           expected_revision=first)
            assert cut.cuts == 1
            assert second == first + 1 == store.revision("s")
            third = store.save_full_state("s", "turn", {**STATE, "count": 3},
                                          expected_revision=second)
            assert third == second + 1
            assert [r for r, _, _ in store.history("s")] == [first, second, third]
            assert store.load_state("s") == {**STATE, "count": 3}
        finally:
            store.close()


def test_a_save_whose_commit_never_reached_the_server_is_made_again(
    pg_faults: PgFaults,
) -> None:
    """The connection broke as the save's COMMIT was sent, before the server saw it:
    the store learns that nothing was written and saves again on a fresh connection."""
    with CommitCut(pg_faults.url) as cut:
        store = PostgresFlowPersistence(cut.url, connect_timeout=5)
        try:
            first = store.save_full_state("s", "start", STATE, expected_revision=0)
            cut.arm("before")
            second = store.save_full_state("s", "turn", {**STATE, "count": 2},
                                           expected_revision=first)
            assert cut.cuts == 1
            assert second == first + 1 == store.revision("s")
            assert store.load_state("s") == {**STATE, "count": 2}
            assert [r for r, _, _ in store.history("s")] == [first, second]
        finally:
            store.close()


def test_a_save_whose_commit_is_unknown_is_resolved_by_the_next_save(
    pg_faults: PgFaults,
) -> None:
    """The save's commit was made, and the server went away before the store could ask:
    the save fails as unavailable (the call defers it). Once the server is back, the
    save again, built on the revision before the lost answer (what the caller knows),
    finds its own write there: it is stored, not refused as another writer's."""
    with CommitCut(pg_faults.url) as cut:
        store = PostgresFlowPersistence(cut.url, connect_timeout=1)
        try:
            first = store.save_full_state("s", "start", STATE, expected_revision=0)
            cut.arm("after", then_refuse=True)
            with pytest.raises(PersistenceUnavailableError):
                store.save_full_state("s", "turn", {**STATE, "count": 2},
                                      expected_revision=first)
            cut.accept()
            assert store.revision("s") == first + 1  # it was made
            again = store.save_full_state("s", "store_returned", {**STATE, "count": 3},
                                          expected_revision=first)
            assert again == first + 2
            assert store.load_state("s") == {**STATE, "count": 3}
            with pytest.raises(PersistenceConflictError):  # (asked once: then a conflict)
                store.save_full_state("s", "stale", STATE, expected_revision=first + 1)
        finally:
            store.close()


async def test_a_conversation_whose_saves_break_at_their_commit_stores_each_turn_once(
    pg_faults: PgFaults,
) -> None:
    """Turns of a persisted conversation, each save's connection cut at its COMMIT: one
    made and never answered, one never made, one made while the server then went away
    (the turn fails; saved again once the server is back, as a call's deferred save
    does). The stored history has every turn once, in order: nothing lost, nothing
    doubled."""
    with CommitCut(pg_faults.url) as cut:
        store = PostgresFlowPersistence(cut.url, connect_timeout=1)

        @persist(store)
        class Chat(Flow[ConversationState]):
            conversational = True

            def route_turn(self, context: Any) -> str | None:
                return "reply"

            @listen("reply")
            def handle_reply(self) -> str:
                return f"echo {self.state.current_user_message}"

        try:
            flow = Chat()
            await flow.ahandle_turn("one", session_id="s")
            for text, mode in (("two", "after"), ("three", "before")):
                cut.arm(mode)  # type: ignore[arg-type]
                assert await flow.ahandle_turn(text, session_id="s") == f"echo {text}"
                assert cut.cuts == (1 if text == "two" else 2)
            cut.arm("after", then_refuse=True)
            with pytest.raises(PersistenceUnavailableError):
                await flow.ahandle_turn("four", session_id="s")
            cut.accept()
            await flow.asave_state("store_returned")
            await flow.ahandle_turn("five", session_id="s")
            stored = store.load_state("s")
            assert stored is not None
            said = [m["content"] for m in stored["messages"]]
            # (turn four failed at its first save, of the user's words: no reply)
            assert said == [*(f"{w}{t}" for t in ("one", "two", "three")
                              for w in ("", "echo ")), "four", "five", "echo five"], said
        finally:
            store.close()


def test_a_commit_lost_on_the_way_while_the_server_side_stays_open_is_ended_and_made_again(
    pg_faults: PgFaults,
) -> None:
    """The COMMIT never reached the server, and the server never learnt that the
    connection was gone (a network that drops packets): its transaction stays open, in
    progress, holding the session's lock. The store ends that backend (its transaction
    aborts, nothing written) and saves again: the write is made, once."""
    with CommitCut(pg_faults.url) as cut:
        store = PostgresFlowPersistence(cut.url, connect_timeout=5)
        try:
            first = store.save_full_state("s", "start", STATE, expected_revision=0)
            cut.arm("before", server_unaware=True)
            second = store.save_full_state("s", "turn", {**STATE, "count": 2},
                                           expected_revision=first)
            assert cut.cuts == 1
            assert second == first + 1 == store.revision("s")
            assert store.load_state("s") == {**STATE, "count": 2}
        finally:
            store.close()
