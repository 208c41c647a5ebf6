"""Fixtures shared by every test package: the persistence backends under test.

``make_store`` is parametrized over SQLite (a file in ``tmp_path``) and PostgreSQL
(``VOXFLOW_TEST_DATABASE_URL``, default ``postgresql://postgres@127.0.0.1:5432/test``,
one fresh schema per test, dropped afterwards, so parallel runs never collide). The
PostgreSQL variant skips with a one-line reason when no server answers, unless
``VOXFLOW_REQUIRE_POSTGRES=1`` (``.ci/run`` sets it): then it fails, naming the fix, so
CI can never stay green with every PostgreSQL test skipped (:func:`skip_without_postgres`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import urllib.parse
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from voxflow.flow._row_store import RowStore
from voxflow.flow.persistence import SQLiteFlowPersistence

PG_URL = os.environ.get("VOXFLOW_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")
REQUIRE_POSTGRES = "VOXFLOW_REQUIRE_POSTGRES"

StoreFactory = Callable[..., RowStore]


def schema_url(schema: str, url: str = PG_URL) -> str:
    """``url`` whose ``search_path`` starts with ``schema``: where every voxflow store given
    it (sessions, job queue, inbox, dispatch) keeps its tables."""
    return f"{url}{'&' if '?' in url else '?'}options=-csearch_path%3D{schema}"


PORTAUDIO_INSTALL = "apt-get install libportaudio2"


def skip_without_portaudio() -> None:
    """Skip the test, with a one-line reason, on a machine without the PortAudio library
    (sounddevice cannot load: the Python package is installed, the native library not);
    ``.ci/run`` installs it."""
    try:
        import sounddevice  # noqa: F401  # loads PortAudio (what a voice command would meet)
    except OSError as exc:
        pytest.skip(f"PortAudio is missing ({exc}): {PORTAUDIO_INSTALL} (.ci/run does)")


@pytest.fixture(autouse=True)
def _root_logging_restored() -> Iterator[None]:
    """Undo what a test running the CLI in-process did to logging (``configure_logging``).

    ``voxflow jobs worker`` and ``serve`` log at INFO: left behind, the root level would
    let a later test's litellm INFO lines into its captured stdout. The handler voxflow
    installed goes too; pytest's own capture handlers are left alone.
    """
    from voxflow import logs

    root = logging.getLogger()
    level, installed = root.level, logs._installed
    yield
    if logs._installed is not installed and logs._installed is not None:
        root.removeHandler(logs._installed)
        logs._installed = installed
        if installed is not None and installed not in root.handlers:
            root.addHandler(installed)
    root.setLevel(level)


@pytest.fixture(autouse=True)
def _tracing_of_the_test_only(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No test sees the environment's tracing variables, and none leaves tracing behind.

    A CI (or a shell) may export ``OTEL_*`` variables for its own collector; a test that
    runs a command in-process (``main([...])``) would then have ``configure_tracing`` set
    the process's tracer provider from them, for every later test: spans recorded,
    exported to that collector, the tests that need tracing off failing. So each test
    starts without them (``VOXFLOW_TRACE_CONTENT`` too: a test that wants them sets
    them), and the tracer provider and content capture are put back as they were after
    it (OpenTelemetry sets its provider once per process: its private globals are
    restored, as ``tests/otel.py`` swaps them).
    """
    from voxflow import telemetry

    for name in list(os.environ):
        if name.startswith("OTEL_") or name in telemetry.CONTENT_VARIABLES:
            monkeypatch.delenv(name)
    capture = telemetry.capture_content()
    try:
        import opentelemetry.trace as ot
    except ImportError:  # (tracing not installed: nothing a test can set up)
        yield
        return
    provider, done = ot._TRACER_PROVIDER, ot._TRACER_PROVIDER_SET_ONCE._done
    try:
        yield
    finally:
        telemetry.set_capture_content(capture)
        if ot._TRACER_PROVIDER is not provider:
            left = ot._TRACER_PROVIDER
            ot._TRACER_PROVIDER, ot._TRACER_PROVIDER_SET_ONCE._done = provider, done
            shutdown = getattr(left, "shutdown", None)
            if callable(shutdown):
                shutdown()


def postgres_unreachable() -> str | None:
    """Why the test PostgreSQL server cannot be used, or None."""
    parts = urllib.parse.urlsplit(PG_URL)
    host, port = parts.hostname or "127.0.0.1", parts.port or 5432
    try:
        socket.create_connection((host, port), timeout=1.0).close()
    except OSError as exc:
        return f"PostgreSQL not reachable at {host}:{port} ({exc.strerror or exc})"
    try:
        import psycopg

        psycopg.connect(PG_URL, connect_timeout=3).close()
    except ImportError:
        return "psycopg is not installed (uv sync installs the dev group)"
    except Exception as exc:
        return f"PostgreSQL at {host}:{port} refused the test URL ({type(exc).__name__})"
    return None


def postgres_required() -> bool:
    """Whether a PostgreSQL test must fail, not skip, without a server (``=1``: CI)."""
    return os.environ.get(REQUIRE_POSTGRES, "").strip() == "1"


def missing_postgres_message(reason: str) -> str:
    """The failure of a PostgreSQL test under ``VOXFLOW_REQUIRE_POSTGRES=1``: the fix."""
    return (f"{reason}; {REQUIRE_POSTGRES}=1 requires it: start PostgreSQL 15 there (trust "
            "auth, database test), point VOXFLOW_TEST_DATABASE_URL at a server, or unset "
            f"{REQUIRE_POSTGRES} to skip the PostgreSQL tests")


def skip_without_postgres() -> None:
    """Skip the calling test, with the one-line reason, when the test PostgreSQL server
    cannot be used; fail it instead under ``VOXFLOW_REQUIRE_POSTGRES=1``."""
    reason = postgres_unreachable()
    if reason is None:
        return
    if postgres_required():
        pytest.fail(missing_postgres_message(reason), pytrace=False)
    pytest.skip(reason)


@pytest.fixture(params=["sqlite", "postgres"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreFactory]:
    """``make_store(name="store", **options)``: a new backend (its own connections, as a process
    has); the same name is the same database."""
    made: list[RowStore] = []
    if request.param == "sqlite":

        def make(name: str = "store", **options: Any) -> RowStore:
            store = SQLiteFlowPersistence(tmp_path / f"{name}.db", **options)
            made.append(store)
            return store

    else:
        skip_without_postgres()
        from voxflow.flow.postgres import PostgresFlowPersistence

        run = f"vx_{os.getpid()}_{uuid.uuid4().hex[:8]}"

        def make(name: str = "store", **options: Any) -> RowStore:
            store = PostgresFlowPersistence(PG_URL, schema=f"{run}_{name}"[:63], **options)
            made.append(store)
            return store

    yield make
    for store in made:
        store.close()
    if request.param == "postgres" and made:
        for schema in {s.schema for s in made}:  # type: ignore[attr-defined]
            PostgresFlowPersistence(PG_URL, schema=schema).drop_schema()


@pytest.fixture
def default_store(make_store: StoreFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[RowStore]:
    """The store ``@persist`` saves to when a flow names none (``default_persistence()``),
    on each backend of ``make_store``: SQLite at ``$VOXFLOW_HOME/flow_states.db``, or
    PostgreSQL through ``VOXFLOW_DATABASE_URL`` naming a fresh schema (dropped afterwards).
    Subprocesses get the same with ``tests.stores.default_env(store)``."""
    from tests.stores import default_env
    from voxflow.flow.persistence import default_persistence

    store = make_store("flow_states")
    env = default_env(store, {})
    for name in ("VOXFLOW_HOME", "VOXFLOW_DATABASE_URL"):
        if name in env:
            monkeypatch.setenv(name, env[name])
        else:
            monkeypatch.delenv(name, raising=False)
    default = default_persistence()
    same = (getattr(default, "path", None) == getattr(store, "path", None)
            and getattr(default, "schema", None) == getattr(store, "schema", None))
    assert same, f"the default backend is {default!r}, not the test's {store!r}"
    yield default
    default.close()


@pytest.fixture
def pg_schema_url() -> Iterator[str]:
    """A PostgreSQL URL whose ``search_path`` is a fresh schema (dropped afterwards), for
    processes that share tables: every voxflow store given it (dispatch, sessions, job
    queue, inbox) keeps its tables there, so suites running at once on the test database
    of the core tests share nothing. Skipped with a one-line reason when none answers
    (failed under ``VOXFLOW_REQUIRE_POSTGRES=1``)."""
    skip_without_postgres()
    import psycopg

    schema = f"vxd_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    joiner = "&" if "?" in PG_URL else "?"
    yield f"{PG_URL}{joiner}options=-csearch_path%3D{schema}"
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute("SET lock_timeout = '60s'")  # a connection left open fails, not hangs
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


class PgFaults:
    """Faults of a database of the test server that only one test uses (every backend
    connected to it is that test's own): its connections reset, or the database refusing
    connections for a while, as a restarted server does.

    Attributes:
        url: the database's URL.
        name: the database's name.
    """

    def __init__(self, url: str, name: str) -> None:
        self.url = url
        self.name = name

    def reset(self) -> int:
        """``pg_terminate_backend`` every connection to the database (the server stays
        up); how many there were."""
        import psycopg

        with psycopg.connect(PG_URL, autocommit=True) as conn:
            row = conn.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = %s AND pid <> pg_backend_pid()", (self.name,)).fetchone()
        return int(row[0]) if row else 0

    @contextlib.contextmanager
    def down(self) -> Iterator[None]:
        """Within the block the database refuses new connections and its open ones are
        reset (PostgreSQL itself stays up for everyone else)."""
        import psycopg

        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f'ALTER DATABASE "{self.name}" ALLOW_CONNECTIONS false')
        try:
            self.reset()
            yield
        finally:
            with psycopg.connect(PG_URL, autocommit=True) as conn:
                conn.execute(f'ALTER DATABASE "{self.name}" ALLOW_CONNECTIONS true')


@pytest.fixture
def pg_faults() -> Iterator[PgFaults]:
    """A fresh database of the test server for this test alone (dropped afterwards), and
    the faults it can be put through (:class:`PgFaults`). Skipped with a one-line reason
    when no server answers (failed under ``VOXFLOW_REQUIRE_POSTGRES=1``)."""
    skip_without_postgres()
    import psycopg

    name = f"vxf_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    parts = urllib.parse.urlsplit(PG_URL)
    yield PgFaults(urllib.parse.urlunsplit(parts._replace(path=f"/{name}")), name)
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
