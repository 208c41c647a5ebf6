"""An operator's two set-up mistakes with ``serve --front-door``/``--worker``, on a real
PostgreSQL: a ``search_path`` that differs between the processes is named (the probe: a
worker made its schema and said "ready", the front door on ``public`` answered 503 "0
live worker(s)", nothing named the mismatch), and a wrong database URL is one line with
the driver's cause, said before anything loads (the probe: ~11.8 s, 9 lines, the last
one ``pool initialization incomplete``)."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid
from collections.abc import Iterator

import pytest
from voxflow_adapters.hosting.dispatch import DispatchStore
from voxflow_adapters.hosting.heartbeat import Heartbeat
from voxflow_adapters.hosting.worker import CallWorker
from voxflow_adapters.webrtc import (
    PeerSettings,
    ServerSettings,
    WebRtcServer,
    assistant_call_factory,
)
from voxflow_adapters.webrtc.client import LoopbackCaller, OfferRejected
from voxflow_adapters.webrtc.front_door import FrontDoor
from voxflow_voice.engines import VoiceEngines

from voxflow.cli import main

from .conftest import PG_URL, skip_without_postgres

TOKEN = "dispatch-setup-token"


@pytest.fixture
def other_schema_url() -> Iterator[tuple[str, str]]:
    """A URL whose search_path names a schema that does not exist yet (a typo), and it."""
    skip_without_postgres()
    import psycopg

    schema = f"vxt_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    yield f"{PG_URL}{'&' if '?' in PG_URL else '?'}options=-csearch_path%3D{schema}", schema
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute("SET lock_timeout = '60s'")
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def schema_of(url: str) -> str:
    return url.rsplit("search_path%3D", 1)[1]


async def test_a_front_door_names_the_schema_its_workers_went_to(
    pg_schema_url: str, other_schema_url: tuple[str, str], caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    typo_url, typo = other_schema_url
    workers = DispatchStore(typo_url)  # a worker's URL with another search_path
    await workers.open()
    assert workers.created_schema  # (it did not exist: made on first use)
    beat = Heartbeat(workers, "typo-worker", interval=0.2)
    door = FrontDoor(DispatchStore(pg_schema_url), settings=ServerSettings(port=0,
                                                                           token=TOKEN))
    try:
        await workers.register("typo-worker", slots=4, host="h", pid=1)
        beat.start()
        async with door:
            assert not door.store.created_schema
            with pytest.raises(OfferRejected) as refused:
                await LoopbackCaller(f"http://127.0.0.1:{door.port}", TOKEN).connect()
    finally:
        beat.stop()
        await workers.aclose()
    assert refused.value.status == 503
    reason = refused.value.reason
    assert "another schema" in reason and "same VOXFLOW_DATABASE_URL" in reason, reason
    assert typo not in reason  # (the caller sees no database names: the log has them)
    [said] = [r.getMessage() for r in caplog.records if "search_path" in r.getMessage()]
    assert f"no call worker is registered in schema {schema_of(pg_schema_url)!r}" in said
    assert f"1 in schema {typo!r}" in said and "same VOXFLOW_DATABASE_URL" in said


@pytest.mark.models
async def test_a_worker_that_makes_its_schema_names_the_ones_with_live_workers(
    engines: VoiceEngines, pg_schema_url: str, other_schema_url: tuple[str, str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    typo_url, typo = other_schema_url
    deployed = DispatchStore(pg_schema_url)  # the deployment's worker, live
    beat = Heartbeat(deployed, "deployed-worker", interval=0.2)
    host = WebRtcServer(assistant_call_factory(), engines, settings=ServerSettings(
        max_calls=1, peer=PeerSettings(ice_host_addresses=("127.0.0.1",))))
    worker = CallWorker(host, DispatchStore(typo_url))
    try:
        await deployed.register("deployed-worker", slots=2, host="h", pid=1)
        beat.start()
        await asyncio.sleep(0.3)
        await worker.start()
        await worker.aclose()
    finally:
        beat.stop()
        await deployed.aclose()
    [said] = [r.getMessage() for r in caplog.records if "did not exist" in r.getMessage()]
    assert said.startswith(f"schema {typo!r} (the first of VOXFLOW_DATABASE_URL's "
                           "search_path) did not exist: created it")
    assert f"1 in schema {schema_of(pg_schema_url)!r}" in said


@pytest.mark.parametrize("role", ["--front-door", "--worker"])
@pytest.mark.parametrize(("url", "cause"), [
    ("postgresql://voxflow:s3cret@127.0.0.1:9/nowhere", "Connection refused"),
    (f"{PG_URL.rsplit('/', 1)[0]}/voxflow_no_such_database", "does not exist"),
])
def test_a_wrong_database_url_is_one_line_with_its_cause(
    role: str, url: str, cause: str, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if "5432" in url:
        skip_without_postgres()
    monkeypatch.setenv("VOXFLOW_DATABASE_URL", url)
    with socket.socket() as probe:  # a free port for the front door's listening check
        probe.bind(("127.0.0.1", 0))
        port = str(probe.getsockname()[1])
    assert main(["serve", role, "--port", port] if role == "--front-door"
                else ["serve", role]) == 1
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: cannot use the dispatch database at ")
    assert cause in lines[0] and "check VOXFLOW_DATABASE_URL" in lines[0]
    assert "s3cret" not in err and "pool" not in err
