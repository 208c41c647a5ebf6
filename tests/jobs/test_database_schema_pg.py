"""One schema for every PostgreSQL store: the first schema of ``VOXFLOW_DATABASE_URL``'s
``search_path``. A call worker and a job worker given only the same URL share their
queue, inbox and sessions there; the URL's other options are kept on every connection;
a search_path voxflow cannot use is a typed error naming the fix. Real PostgreSQL (a
fresh schema per test, dropped after it); skipped with the reason where none answers."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from typing import Any

import pytest

from tests.conftest import PG_URL
from tests.jobs.queue_kit import FLOW, ROOT, stop
from voxflow.cli import main as cli_main
from voxflow.flow.postgres import PostgresFlowPersistence
from voxflow.jobs import JobInbox, PostgresJobQueue, default_job_queue
from voxflow.pg_url import check_database_url, connection_options, database_schema
from voxflow.settings import Settings, SettingsError

pytestmark = pytest.mark.unit


def with_options(url: str, options: str) -> str:
    """``url`` with a libpq ``options`` query parameter (percent-encoded)."""
    import urllib.parse

    joiner = "&" if "?" in url else "?"
    return f"{url}{joiner}options={urllib.parse.quote(options, safe='')}"


def test_the_schema_is_the_first_of_the_urls_search_path() -> None:
    base = "postgresql://u:hunter2@db.example:5432/v"
    assert database_schema(base) == "public"
    assert database_schema(with_options(base, "-csearch_path=calls")) == "calls"
    assert database_schema(with_options(base, "-c search_path=calls,public")) == "calls"
    assert database_schema(with_options(base, "--search-path=calls")) == "calls"
    # the last search_path is the one the server applies
    assert database_schema(with_options(
        base, "-c search_path=old -c statement_timeout=5s -c search_path=new")) == "new"
    assert database_schema(f"{base}?sslmode=disable&options=-csearch_path%3Dcalls") == "calls"


@pytest.mark.parametrize(("options", "said"), [
    ("-c search_path=", "empty search_path"),
    ("-c search_path=$user,public", "$user"),
    ("-c search_path=No-Such", "lower-case SQL identifier"),
    ('-c search_path="Calls"', "lower-case SQL identifier"),
    ("-c search_path=pg_catalog", "reserved"),
])
def test_a_search_path_voxflow_cannot_use_is_refused_naming_the_fix(
    options: str, said: str, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    url = with_options("postgresql://u:hunter2@127.0.0.1:1/v", options)
    with pytest.raises(ValueError, match="search_path") as err:
        check_database_url(url)
    assert said in str(err.value) and "options=-csearch_path%3D" in str(err.value)
    for store in (PostgresFlowPersistence, PostgresJobQueue, JobInbox):
        with pytest.raises(ValueError, match="search_path"):
            store(url)
    monkeypatch.setenv("VOXFLOW_DATABASE_URL", url)
    with pytest.raises(SettingsError, match="VOXFLOW_DATABASE_URL") as env:
        Settings.from_env()
    assert said in str(env.value) and "hunter2" not in str(env.value)
    with pytest.raises(SettingsError):
        default_job_queue()
    # the job worker (and a call worker) stop before anything runs, exit 2, one line
    assert cli_main(["jobs", "worker", FLOW]) == 2
    shown = capsys.readouterr().err
    assert shown.startswith("error: VOXFLOW_DATABASE_URL") and said in shown
    assert "hunter2" not in shown and "Traceback" not in shown


def test_the_connection_options_keep_the_urls_own_options() -> None:
    url = with_options(PG_URL, "-c statement_timeout=4321 -c search_path=calls,public")
    assert connection_options(url, "calls") == (
        "-c statement_timeout=4321 -c search_path=calls,public")
    assert connection_options(url, "other") == "-c statement_timeout=4321 -c search_path=other"
    assert connection_options(PG_URL, "public") == "-c search_path=public"
    spaced = with_options(PG_URL, r"-c application_name=a\ b")
    assert connection_options(spaced, "x") == r"-c application_name=a\ b -c search_path=x"


async def test_every_store_connects_to_the_urls_schema_with_its_options(schema: str) -> None:
    url = with_options(PG_URL, f"-c statement_timeout=4321 -c search_path={schema}")
    sql = "SELECT current_schema(), current_setting('statement_timeout')"
    store = PostgresFlowPersistence(url)
    queue = PostgresJobQueue(url)
    try:
        assert store.schema == queue.schema == queue.inbox.schema == schema
        row = store._read(lambda c: c.execute(sql).fetchone())
        assert tuple(row or ()) == (schema, "4321ms")
        await queue.migrate()
        assert await queue.inbox._execute(sql) == [(schema, "4321ms")]
        app = queue._open_sync()  # Procrastinate's own connections (the call side)
        found = app.connector.execute_query_one(
            "SELECT current_schema() AS s, current_setting('statement_timeout') AS t")
        assert (found["s"], found["t"]) == (schema, "4321ms")
        # an explicit schema overrides the URL's, and keeps its other options
        other = PostgresFlowPersistence(url, schema=f"{schema}_x")
        try:
            row = other._read(lambda c: c.execute(sql).fetchone())
            assert tuple(row or ()) == (f"{schema}_x", "4321ms")
        finally:
            other.drop_schema()
    finally:
        store.close()
        queue.close()
        await queue.inbox.close()


def job_worker_given(url: str) -> subprocess.Popen[bytes]:
    """``voxflow jobs worker FLOW`` with ``VOXFLOW_DATABASE_URL=url`` and no other option
    about the database."""
    env = {**os.environ, "VOXFLOW_DATABASE_URL": url, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-m", "voxflow.cli", "jobs", "worker", FLOW, "--heartbeat", "0.5"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


async def test_a_call_worker_and_a_job_worker_given_only_the_url_run_a_job_in_its_schema(
    schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from voxflow import persist
    from voxflow.flow.persistence import default_persistence
    from voxflow.loader import load_flow_class
    from voxflow.wiring import AssistantWiring

    url = with_options(PG_URL, f"-csearch_path={schema}")
    monkeypatch.setenv("VOXFLOW_DATABASE_URL", url)
    # what `voxflow serve --worker` opens for that URL: sessions and queue, one schema
    sessions, queue = default_persistence(), default_job_queue()
    assert queue is not None
    assert (getattr(sessions, "schema", None), queue.schema) == (schema, schema)
    worker = job_worker_given(url)
    try:
        saved = persist(type("SavedTravel", (load_flow_class(FLOW),), {}))
        flow = saved()
        save = functools.partial(flow.asave_state, "handle_turn")
        async with AssistantWiring(flow, job_queue=queue, save_jobs=save) as call:
            assert await call.text_turn("is my flight on time?") == "I'm checking your flight."
            assert await call.wait_for_jobs(60), "the job worker never ran the job"
            assert await call.announce_ready() == ["Flight BA 117 is on time (attempt 1)."]
            async with call.state_lock:
                await save()
    finally:
        code, err = stop(worker)
        queue.close()
        await queue.inbox.close()
    assert code == 0, err
    assert f"running the jobs queued in schema {schema}" in err
    # every table of the run is in the URL's schema
    counted: dict[str, Any] = {}
    for table in ("procrastinate_jobs", "voxflow_job_inbox", "flow_states"):
        rows = await queue.inbox._execute(f'SELECT count(*) FROM "{schema}".{table}')
        counted[table] = rows[0][0]
    await queue.inbox.close()
    assert counted["procrastinate_jobs"] == 1 and counted["voxflow_job_inbox"] == 4
    assert counted["flow_states"] == 1
    stored = sessions.load_state(flow.state.id)
    assert stored is not None and [j["status"] for j in stored["jobs"].values()] == [
        "completed"]
    sessions.close()


def test_the_job_worker_takes_its_schema_from_the_url_only(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # no --schema: a job worker on another schema than its call workers' cannot be started
    with pytest.raises(SystemExit) as done:
        cli_main(["jobs", "worker", FLOW, "--schema", "calls"])
    assert done.value.code == 2
    assert "unrecognized arguments: --schema" in capsys.readouterr().err

