"""A process that opens voxflow's PostgreSQL stores while other processes write to them
neither waits for their transactions nor deadlocks with them.

Every store makes sure its tables exist when it opens (the session store, the job inbox,
the call dispatch, the job queue). ``CREATE INDEX IF NOT EXISTS`` takes a SHARE lock on
its table even when the index is there, so a worker starting beside running ones queued behind their
open write transactions, and two tables locked in opposite orders were a deadlock that
aborted one side (a CI run of the kill test: "deadlock detected" opening the session
store). Real PostgreSQL, a fresh schema; skipped with the reason where none answers.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import psycopg
import pytest
from voxflow_adapters.hosting.dispatch import DispatchStore
from voxflow_adapters.hosting.dispatch_tables import SCHEMA_SQL

from voxflow.flow._item_rows import PG_SCHEMA
from voxflow.flow.postgres import PostgresFlowPersistence
from voxflow.jobs import JobInbox, PostgresJobQueue
from voxflow.jobs.inbox import INBOX_SCHEMA
from voxflow.pg_schema import columns_of, relations_of
from voxflow.pg_url import connection_options, database_schema

pytestmark = pytest.mark.unit

WRITTEN = ("flow_state_history", "state_records", "voxflow_job_inbox", "voxflow_call_offers")


def opens_while_written(url: str, open_stores: Callable[[], None]) -> bool:
    """Hold another connection's write locks on every indexed table (what its inserts
    take) while ``open_stores`` runs in a thread; whether it finished within 10 s."""
    schema = database_schema(url)
    with psycopg.connect(url, options=connection_options(url, schema)) as writer:
        writer.execute(f"LOCK TABLE {', '.join(WRITTEN)} IN ROW EXCLUSIVE MODE")
        done = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            try:
                open_stores()
            except BaseException as exc:  # reported below
                failure.append(exc)
            finally:
                done.set()

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        finished = done.wait(10.0)
        writer.rollback()  # the writer ends: a store still waiting goes on
    thread.join(60.0)
    if failure:
        raise failure[0]
    return finished


def test_every_store_opens_beside_a_running_writer(pg_schema_url: str) -> None:
    url = pg_schema_url

    async def open_inbox_and_dispatch() -> None:
        inbox, dispatch, queue = JobInbox(url), DispatchStore(url), PostgresJobQueue(url)
        try:
            await inbox.open()
            await dispatch.open()
            await queue.migrate()  # the job queue's tables and its inbox's
        finally:
            await inbox.close()
            await dispatch.aclose()
            queue.close()
            await queue.inbox.close()

    def open_all() -> None:  # a process starting: a store of each kind
        store = PostgresFlowPersistence(url)
        try:
            assert store.load_state("no-such-session") is None
        finally:
            store.close()
        asyncio.run(open_inbox_and_dispatch())

    open_all()  # the first process creates the tables
    assert opens_while_written(url, open_all)  # the next ones neither wait nor deadlock


def test_a_missing_index_is_created_on_the_next_open(pg_schema_url: str) -> None:
    """The check counts every relation the DDL names, tables and indexes alike: one
    missing (an upgrade that adds it) runs the DDL again."""
    assert relations_of(PG_SCHEMA) == (
        "flow_states", "flow_state_history", "idx_history_uuid", "conversation_items",
        "state_records", "idx_records_pos", "pending_feedback", "session_leases")
    assert relations_of(INBOX_SCHEMA) == ("voxflow_job_inbox", "voxflow_job_inbox_pending")
    schema = database_schema(pg_schema_url)
    first = PostgresFlowPersistence(pg_schema_url)
    first.load_state("x")
    first.close()
    with psycopg.connect(pg_schema_url, autocommit=True,
                         options=connection_options(pg_schema_url, schema)) as conn:
        conn.execute("DROP INDEX idx_records_pos")
        again = PostgresFlowPersistence(pg_schema_url)
        again.load_state("x")
        again.close()
        row = conn.execute("SELECT to_regclass('idx_records_pos')").fetchone()
    assert row is not None and row[0] is not None


def test_a_column_an_upgrade_adds_is_added_to_a_table_an_older_version_made(
    pg_schema_url: str,
) -> None:
    """Every relation there but a column a later version adds (``ALTER TABLE ... ADD
    COLUMN IF NOT EXISTS``): the DDL runs again. Before, the check counted relations only,
    so a deployment whose tables an older version made never got the dispatch rows'
    ``kind`` nor the heartbeat's report columns, and every heartbeat then failed on them
    (a worker never live)."""
    assert "voxflow_call_workers.kind" in columns_of(SCHEMA_SQL)
    assert "voxflow_call_workers.call_cost" in columns_of(SCHEMA_SQL)
    schema = database_schema(pg_schema_url)

    async def open_and_register() -> None:
        store = DispatchStore(pg_schema_url, kind="phone")
        try:
            await store.register("w-1", slots=2, host="h", pid=1)
        finally:
            await store.aclose()

    asyncio.run(open_and_register())
    with psycopg.connect(pg_schema_url, autocommit=True,
                         options=connection_options(pg_schema_url, schema)) as conn:
        conn.execute("ALTER TABLE voxflow_call_workers DROP COLUMN kind, "
                     "DROP COLUMN call_cost, DROP COLUMN model_rtf")  # an older version's
        asyncio.run(open_and_register())
        row = conn.execute("SELECT kind, call_cost, model_rtf FROM voxflow_call_workers "
                           "WHERE worker_id = 'w-1'").fetchone()
    assert row == ("phone", None, None)


def test_an_upgrade_that_waits_too_long_for_the_tables_says_so(
    pg_schema_url: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The first process of a new version adds its columns beside running processes of
    the older one: a lock it waits past the bound for is said as that, with the fix
    (start again), not as an unreachable database (before: "check VOXFLOW_DATABASE_URL
    ... and that the server is running")."""
    from voxflow_adapters.hosting.dispatch_tables import DispatchUnavailableError

    import voxflow.pg_schema

    schema = database_schema(pg_schema_url)

    async def open_store() -> None:
        store = DispatchStore(pg_schema_url)
        try:
            await store.open()
        finally:
            await store.aclose()

    asyncio.run(open_store())
    monkeypatch.setattr(voxflow.pg_schema, "_LOCK_TIMEOUT", "SET LOCAL lock_timeout = '200ms'")
    with psycopg.connect(pg_schema_url, autocommit=True,
                         options=connection_options(pg_schema_url, schema)) as conn:
        conn.execute("ALTER TABLE voxflow_call_workers DROP COLUMN model_rtf")  # older
        with psycopg.connect(pg_schema_url, options=connection_options(pg_schema_url, schema)
                             ) as running, running.transaction():
            running.execute("SELECT count(*) FROM voxflow_call_workers")  # (its lock)
            with pytest.raises(DispatchUnavailableError) as refused:
                asyncio.run(open_store())
    said = str(refused.value)
    assert "another process held them (LockNotAvailable)" in said
    assert "start it again" in said and "VOXFLOW_DATABASE_URL" not in said


@pytest.mark.parametrize("ddl", [
    "ALTER TABLE t ADD COLUMN c int;",  # no IF NOT EXISTS: the check could not name it
    "CREATE TABLE IF NOT EXISTS t (a int); ALTER TABLE s.t ADD COLUMN IF NOT EXISTS c int;",
    "CREATE TABLE IF NOT EXISTS t (a int); ALTER TABLE t DROP COLUMN a;",
    # a second ADD in one statement: its column would not be counted, never seen missing
    "ALTER TABLE t ADD COLUMN IF NOT EXISTS a int, ADD COLUMN IF NOT EXISTS b int;",
])
def test_an_alter_the_check_cannot_name_is_refused(ddl: str) -> None:
    with pytest.raises(ValueError, match="ADD COLUMN IF NOT EXISTS"):
        columns_of(ddl)


def test_mixed_case_names_are_counted_as_the_catalog_holds_them() -> None:
    """PostgreSQL folds an unquoted name to lower case: the check compares the folded
    names (before: a mixed-case name never matched, and the DDL and its locks ran on
    every start)."""
    ddl = ("CREATE TABLE IF NOT EXISTS Workers (a int); "
           "ALTER TABLE Workers ADD COLUMN IF NOT EXISTS Call_Cost float8;")
    assert (relations_of(ddl), columns_of(ddl)) == (("workers",), ("workers.call_cost",))


@pytest.mark.parametrize("ddl", [
    "",
    "CREATE TABLE t (a int);",  # no IF NOT EXISTS: the check could not name it
    "CREATE TABLE IF NOT EXISTS s.t (a int);",  # qualified: it would count a relation 's'
    "CREATE TABLE IF NOT EXISTS t (a int); CREATE FUNCTION f() RETURNS int AS 'SELECT 1';",
])
def test_ddl_the_check_cannot_name_is_refused(ddl: str) -> None:
    """Else the check would count nothing missing forever and the DDL never run."""
    with pytest.raises(ValueError, match=r"CREATE TABLE\|INDEX IF NOT EXISTS"):
        relations_of(ddl)
