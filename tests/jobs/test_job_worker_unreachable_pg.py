"""Which failed query of a job worker is an outage to wait out (``database_unreachable``): a
connection that cannot be made or broke, the server ending or refusing connections; not
a query the server refused on a live connection (a statement or lock timeout, a
deadlock): before, every psycopg ``OperationalError`` was, so a worker waited out a
statement timeout as if the database were away, and said so on ``/ready``.

The errors are the real driver's, from a real PostgreSQL, wrapped as Procrastinate wraps
them.
"""

from __future__ import annotations

import socket

import procrastinate
import psycopg
import psycopg_pool
import pytest

from tests.conftest import PG_URL, skip_without_postgres
from tests.jobs.worker_kit import pg_error
from voxflow.jobs.worker_watch import database_unreachable

pytestmark = pytest.mark.unit


def _wrapped(exc: BaseException) -> BaseException:
    """``exc`` as Procrastinate's connector raises it."""
    try:
        raise procrastinate.exceptions.ConnectorException from exc
    except procrastinate.exceptions.ConnectorException as wrapped:
        return wrapped


def test_queries_refused_on_a_live_connection_are_no_outage() -> None:
    skip_without_postgres()
    timeout = pg_error("SELECT pg_sleep(5)", "SET statement_timeout = '50ms'")
    assert isinstance(timeout, psycopg.OperationalError)  # (57014: what it was taken for)
    assert not database_unreachable(_wrapped(timeout))
    with psycopg.connect(PG_URL, autocommit=True) as holder:
        holder.execute("SELECT pg_advisory_lock(424242)")
        locked = pg_error("SELECT pg_advisory_lock(424242)", "SET lock_timeout = '50ms'")
    assert isinstance(locked, psycopg.OperationalError)  # (55P03)
    assert not database_unreachable(_wrapped(locked))
    assert not database_unreachable(_wrapped(pg_error("SELECT 1/0")))


def test_connections_that_fail_or_break_are_an_outage() -> None:
    skip_without_postgres()
    with psycopg.connect(PG_URL, autocommit=True) as victim:
        pid = victim.info.backend_pid
        with psycopg.connect(PG_URL, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        with pytest.raises(psycopg.OperationalError) as ended:
            victim.execute("SELECT 1")
        assert database_unreachable(_wrapped(ended.value)), repr(ended.value)
        with pytest.raises(psycopg.OperationalError) as closed:  # (it is closed now)
            victim.execute("SELECT 1")
        assert database_unreachable(_wrapped(closed.value)), repr(closed.value)
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(psycopg.OperationalError) as refused:
        psycopg.connect(f"postgresql://postgres@127.0.0.1:{port}/test", connect_timeout=2)
    assert database_unreachable(_wrapped(refused.value))


async def test_no_connection_in_time_is_an_outage() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    pool = psycopg_pool.AsyncConnectionPool(
        f"postgresql://postgres@127.0.0.1:{port}/test", open=False, timeout=0.2,
        reconnect_timeout=0.5)
    await pool.open(wait=False)
    try:
        with pytest.raises(psycopg_pool.PoolTimeout) as timed_out:
            async with pool.connection():
                pass
    finally:
        await pool.close()
    assert database_unreachable(_wrapped(timed_out.value))
