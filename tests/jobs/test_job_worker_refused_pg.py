"""A job worker whose query the database refuses on a live connection (issue 29): since
bc59bec a statement timeout is no outage to wait out and stops the worker, which then
said "cannot use the PostgreSQL job inbox ... check VOXFLOW_DATABASE_URL ... and that the
server is running": wrong, the URL and the server were fine. The error now names what
failed (the SQLSTATE and its condition) and the fix for it, in one line.

A real PostgreSQL, a real ``statement_timeout`` (the URL's options), a real lock held on
the queue's table by another connection, a real ``voxflow jobs worker`` process.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess

import psycopg
import pytest

from tests.conftest import PG_URL
from tests.jobs.queue_kit import start_job_worker, wait_for
from tests.jobs.worker_kit import pg_error
from voxflow.errors import DatabaseRefusedError, PersistenceUnavailableError
from voxflow.pg_refusal import refused

pytestmark = pytest.mark.unit


async def test_a_statement_timeout_stops_the_worker_naming_it_and_its_fix(
    schema: str,
) -> None:
    options = f"-csearch_path%3D{schema}%20-cstatement_timeout%3D1500"
    worker = start_job_worker(schema, url=f"{PG_URL}?options={options}")
    try:
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            async def registered() -> bool:
                if worker.poll() is not None:
                    raise AssertionError(worker.communicate()[1].decode())
                found = conn.execute("SELECT to_regclass(%s)",
                                     (f'"{schema}".procrastinate_workers',)).fetchone()
                if found is None or found[0] is None:
                    return False
                row = conn.execute(
                    f'SELECT count(*) FROM "{schema}".procrastinate_workers').fetchone()
                return row is not None and row[0] > 0

            await wait_for(registered, 60, "the job worker to register")
            # another session holds the queue's table: the worker's next fetch waits for
            # it past its statement_timeout
            with conn.transaction():
                conn.execute(
                    f'LOCK TABLE "{schema}".procrastinate_jobs IN ACCESS EXCLUSIVE MODE')
                code = await asyncio.to_thread(worker.wait, 60)
    finally:
        if worker.poll() is None:
            worker.kill()
        _, raw = worker.communicate()
    err = raw.decode(errors="replace")
    assert code != 0, err
    assert "Traceback" not in err, err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, err
    line = errors[0]
    assert "57014" in line and "query_canceled" in line, line
    assert "statement_timeout" in line, line
    assert "check VOXFLOW_DATABASE_URL" not in line, line
    assert "lost its database" not in err, err  # (no outage either)


@pytest.mark.parametrize(("setup", "sql", "state", "fix"), [
    (("SET statement_timeout = '50ms'",), "SELECT pg_sleep(5)", "57014", "statement_timeout"),
    (("SET default_transaction_read_only = on",), "CREATE TEMP TABLE t (x int)", "25006",
     "primary"),
    ((), "SELECT * FROM no_such_table_here", "42P01", "schema"),
    ((), "SELECT 1/0", "22012", "report"),
])
def test_refusals_name_their_condition_and_fix(setup: tuple[str, ...], sql: str, state: str,
                                               fix: str) -> None:
    from tests.conftest import skip_without_postgres

    skip_without_postgres()
    error = refused(pg_error(sql, *setup), url=PG_URL, what="the fetch of the next job")
    assert isinstance(error, DatabaseRefusedError)
    assert isinstance(error, PersistenceUnavailableError)  # (caught where it was)
    assert error.sqlstate == state
    assert state in str(error) and fix in error.fix, str(error)
    assert "\n" not in str(error)


def test_a_connection_failure_is_no_refusal() -> None:
    from tests.conftest import skip_without_postgres

    skip_without_postgres()
    with psycopg.connect(PG_URL, autocommit=True) as victim:
        with psycopg.connect(PG_URL, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (victim.info.backend_pid,))
        with pytest.raises(psycopg.OperationalError) as ended:
            victim.execute("SELECT 1")
        with contextlib.suppress(Exception):
            victim.close()
    assert refused(ended.value, url=PG_URL, what="x") is None
    assert refused(subprocess.SubprocessError("no"), url=PG_URL, what="x") is None
