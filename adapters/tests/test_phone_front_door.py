"""The phone's front door and call workers in one process, on a real PostgreSQL schema
(dispatch and sessions) with the example assistant on the real models and a simulated
carrier that signs its requests: the ``<Connect>`` action URL hangs up a call whose
session ended (the worker ended it) and reconnects one whose stream was only handed
over (a draining worker), its session going on on the other worker; an unsigned or
forged action request is refused. Skips with its reason when no PostgreSQL answers."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import pytest
from aiohttp import web
from voxflow_adapters.hosting.calls import assistant_call_factory
from voxflow_adapters.hosting.dispatch import DispatchStore
from voxflow_adapters.hosting.resume import CALL_ENDED_EVENT
from voxflow_adapters.hosting.worker import CallWorker
from voxflow_adapters.phone.dispatch import phone_session_id
from voxflow_adapters.phone.front_door import PhoneFrontDoor
from voxflow_adapters.phone.host import PhoneHost
from voxflow_adapters.phone.server import PhoneSettings, SignatureCheck
from voxflow_adapters.testkit.flows import free_port
from voxflow_adapters.testkit.phone_carrier import SimulatedCarrier, twilio_signature
from voxflow_voice.audio import AudioChunk, write_wav
from voxflow_voice.engines import VoiceEngines

from voxflow.flow.postgres import PostgresFlowPersistence

pytestmark = pytest.mark.models

AUTH = "phone-front-door-auth-token"
STALE = 2.0


@pytest.fixture
def sessions(pg_schema_url: str) -> Iterator[PostgresFlowPersistence]:
    store = PostgresFlowPersistence(pg_schema_url)
    yield store
    store.close()


@contextlib.asynccontextmanager
async def serving(app: web.Application, port: int) -> AsyncIterator[None]:
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield
    finally:
        await runner.cleanup()


@contextlib.asynccontextmanager
async def phone_worker(engines: VoiceEngines, url: str, sessions: Any
                       ) -> AsyncIterator[tuple[CallWorker, PhoneHost]]:
    port = free_port()
    host = PhoneHost(assistant_call_factory(), engines, store=sessions,
                     media_url=f"ws://127.0.0.1:{port}/media",
                     settings=PhoneSettings(max_calls=2))
    worker = CallWorker(host, DispatchStore(url, stale_after=STALE, kind="phone"))
    async with serving(host.app(), port):
        await worker.start()
        try:
            yield worker, host
        finally:
            await worker.aclose()


@contextlib.asynccontextmanager
async def front_door(url: str, sessions: Any) -> AsyncIterator[tuple[PhoneFrontDoor, str]]:
    port = free_port()
    door = PhoneFrontDoor(DispatchStore(url, stale_after=STALE, kind="phone"), sessions,
                          signature=SignatureCheck(AUTH), offer_timeout=15.0)
    await door.start()
    try:
        async with serving(door.app(), port):
            yield door, f"http://127.0.0.1:{port}/voice"
    finally:
        await door.aclose()


def speech_wav(engines: VoiceEngines, text: str, path: Path) -> Path:
    samples = np.concatenate([np.asarray(s.samples, np.float32)
                              for s in engines.tts.synthesize(text)])
    write_wav(path, AudioChunk.from_float(samples, engines.tts.sample_rate))
    return path


async def until(predicate: Callable[[], object], within: float = 60.0) -> None:
    async with asyncio.timeout(within):
        while not predicate():  # noqa: ASYNC110 (what the carrier and the store recorded)
            await asyncio.sleep(0.05)


def answered(carrier: SimulatedCarrier, n: int) -> bool:
    """The carrier played more than a second of its ``n``-th reply."""
    found = carrier.deliveries()
    return len(found) >= n and carrier.played_audio(found[n - 1]).size > 8000


async def test_a_call_the_worker_ended_is_hung_up_by_the_action_url_not_reconnected(
    engines: VoiceEngines, pg_schema_url: str, sessions: PostgresFlowPersistence,
) -> None:
    async with phone_worker(engines, pg_schema_url, sessions) as (_, host), \
            front_door(pg_schema_url, sessions) as (door, url):
        async with SimulatedCarrier(url, auth_token=AUTH) as carrier:
            await until(lambda: host.call_ids())
            [call_id] = host.call_ids()
            assert host.end_call(call_id, "the flow said goodbye")
            await until(lambda: carrier.hung_up_by_server)
        assert not carrier.reconnects and door.reconnected == 0 and door.hung_up == 1
        state = sessions.load_state(phone_session_id(carrier.call_sid))
        assert state is not None
        [ended] = [e for e in state["events"] if e["type"] == CALL_ENDED_EVENT]
        assert ended["payload"]["how"] == "the flow said goodbye"


async def test_a_draining_worker_hands_its_phone_call_over_and_it_goes_on(
    engines: VoiceEngines, pg_schema_url: str, sessions: PostgresFlowPersistence,
    tmp_path: Path,
) -> None:
    """SIGTERM's drain: the stream is closed at a quiet moment without ending the
    session; the carrier asks the action URL, the call is reconnected to the other
    worker, and the session goes on there with its history."""
    hours = speech_wav(engines, "What are your opening hours?", tmp_path / "hours.wav")
    async with phone_worker(engines, pg_schema_url, sessions) as (a, host_a), \
            front_door(pg_schema_url, sessions) as (door, url):
        async with SimulatedCarrier(url, auth_token=AUTH) as carrier:
            await until(lambda: host_a.call_ids())
            carrier.say(hours)
            await until(lambda: answered(carrier, 1))
            async with phone_worker(engines, pg_schema_url, sessions) as (_, host_b):
                await a.drain()
                await until(lambda: carrier.reconnects)
                await until(lambda: host_b.call_ids())
                assert door.reconnected == 1 and not carrier.hung_up_by_server
                carrier.say(hours)
                await until(lambda: answered(carrier, 2))
                await carrier.hang_up()
        state = sessions.load_state(phone_session_id(carrier.call_sid))
        assert state is not None
        users = [m["content"] for m in state["messages"] if m["role"] == "user"]
        assert users == ["What are your opening hours?"] * 2
        assert "<Hangup/>" in str(carrier.after_hang_up)


async def test_an_unsigned_or_forged_action_request_is_refused(
    pg_schema_url: str, sessions: PostgresFlowPersistence,
) -> None:
    async with front_door(pg_schema_url, sessions) as (door, url), \
            aiohttp.ClientSession() as http:
        after = f"{url}/after?reconnects=0"
        params = {"CallSid": "CA" + "1" * 32, "CallStatus": "in-progress"}
        forged = twilio_signature("not-the-auth-token", after, params)
        for headers in ({}, {"X-Twilio-Signature": forged}):
            async with http.post(after, data=params, headers=headers) as response:
                assert response.status == 403
        signed = {"X-Twilio-Signature": twilio_signature(AUTH, after, params)}
        # (signed, but no worker: the caller is told, and the call ends)
        async with http.post(after, data=params, headers=signed) as response:
            body = await response.text()
        assert response.status == 200 and "<Hangup/>" in body and "<Say>" in body
    assert door.refused_webhooks == 2
