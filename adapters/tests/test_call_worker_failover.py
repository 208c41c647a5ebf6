"""A call moving between call workers, in one process: a front door and call workers on
one real PostgreSQL schema (dispatch and sessions), real aiortc callers, the example
assistant on the real models. A worker whose heartbeat stopped has its calls' leases
taken over at once by their resumes (the fence refusing what it still writes)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest
from voxflow_adapters.hosting.dispatch import DispatchStore
from voxflow_adapters.webrtc import (
    PeerSettings,
    ServerSettings,
    WebRtcServer,
    assistant_call_factory,
)
from voxflow_adapters.webrtc.client import LoopbackCaller
from voxflow_adapters.webrtc.front_door import FrontDoor
from voxflow_adapters.webrtc.worker import CallWorker
from voxflow_voice.audio import AudioChunk
from voxflow_voice.engines import VoiceEngines

from voxflow.flow.postgres import PostgresFlowPersistence

pytestmark = pytest.mark.models

LOOPBACK = PeerSettings(ice_host_addresses=("127.0.0.1",))
TOKEN = "worker-failover-token"
STALE = 2.0


@contextlib.asynccontextmanager
async def worker(engines: VoiceEngines, url: str, sessions: Any, *, slots: int = 2,
                 drain_seconds: float = 60.0) -> AsyncIterator[CallWorker]:
    host = WebRtcServer(assistant_call_factory(), engines, store=sessions,
                        settings=ServerSettings(max_calls=slots, peer=LOOPBACK))
    worker = CallWorker(host, DispatchStore(url, stale_after=STALE),
                        drain_seconds=drain_seconds)
    await worker.start()
    try:
        yield worker
    finally:
        await worker.aclose()


@contextlib.asynccontextmanager
async def front_door(url: str) -> AsyncIterator[FrontDoor]:
    door = FrontDoor(DispatchStore(url, stale_after=STALE),
                     settings=ServerSettings(port=0, token=TOKEN), offer_timeout=15.0)
    async with door:
        yield door


@pytest.fixture
def sessions(pg_schema_url: str) -> Any:
    store = PostgresFlowPersistence(pg_schema_url)
    yield store
    store.close()


def dial(door: FrontDoor) -> LoopbackCaller:
    return LoopbackCaller(f"http://127.0.0.1:{door.port}", TOKEN)


def on(caller: LoopbackCaller, worker: CallWorker) -> bool:
    """Whether ``caller``'s current call is held by ``worker`` (its id names it)."""
    return str(caller.call_id).rsplit("-", 1)[0] == worker.worker_id


def speech(engines: VoiceEngines, text: str) -> AudioChunk:
    samples = np.concatenate([np.asarray(s.samples, np.float32)
                              for s in engines.tts.synthesize(text)])
    return AudioChunk.from_float(samples, engines.tts.sample_rate)


async def answered(caller: LoopbackCaller, engines: VoiceEngines, text: str) -> str:
    """Say ``text`` and wait until its answer was played whole; its delivery id."""
    transcripts = len(caller.of_type("transcript"))
    caller.say(speech(engines, text))
    await caller.wait_for(lambda: len(caller.of_type("transcript")) > transcripts,
                          within=60, what=f"the transcript of {text!r}")
    after = caller.messages.index(caller.of_type("transcript")[transcripts])

    def done() -> str | None:
        later = caller.messages[after:]
        replies = [m["delivery_id"] for m in later if m.get("type") == "reply_text"]
        return next((m["delivery_id"] for m in later
                     if m.get("type") == "reply_done" and m["delivery_id"] in replies), None)

    await caller.wait_for(lambda: done() is not None, within=60, what=f"the answer to {text!r}")
    delivery = done()
    assert delivery is not None
    return delivery


async def heartbeat_older_than(store: DispatchStore, worker_id: str, seconds: float) -> None:
    async with asyncio.timeout(30):
        while ((await store.heartbeat_age(worker_id)) or 0.0) <= seconds:  # noqa: ASYNC110
            await asyncio.sleep(0.1)


async def test_a_resume_takes_over_at_once_the_session_of_a_worker_whose_heartbeat_stopped(
    engines: VoiceEngines, pg_schema_url: str, sessions: Any
) -> None:
    """The old worker's call is still connected and renewing its lease (only its
    heartbeat stopped: a worker the page lost and the database no longer hears from);
    the page's resume through the front door takes the lease over at once (waiting it
    out would refuse it with 409 after resume_wait: it never expires), and the old
    call's next renewal is refused: it ends, taken over, having written nothing more."""
    async with worker(engines, pg_schema_url, sessions) as a, \
            front_door(pg_schema_url) as door:
        caller = dial(door)
        await caller.connect()
        session_id = (await caller.wait_message("hello", within=30))["session_id"]
        assert on(caller, a)
        await answered(caller, engines, "What are your opening hours?")
        old = sessions.lease_of(session_id)
        assert old is not None and old.owner.startswith(a.worker_id)
        async with worker(engines, pg_schema_url, sessions) as b:
            a.heartbeat.stop()  # a's calls go on; its heartbeat is not written any more
            await heartbeat_older_than(door.store, a.worker_id, STALE)  # only b claims
            page = dial(door)  # the same page, from where it lost a
            await page.connect(resume_as=(session_id, str(caller._resume_token)))
            hello = await page.wait_message("hello", within=30)
            assert hello["resumed"] and on(page, b)
            taken = sessions.lease_of(session_id)
            assert taken is not None and taken.owner.startswith(b.worker_id)
            assert taken.epoch == old.epoch + 1
            bye = await caller.wait_message("bye", within=30)  # a's renewal was refused
            assert bye["reason"].startswith("the call lost its session (taken over)"), bye
            before = await asyncio.to_thread(sessions.load_state_revision, session_id)
            await answered(page, engines, "Where is my order?")  # the call goes on, on b
            after = await asyncio.to_thread(sessions.load_state_revision, session_id)
            assert before is not None and after is not None
            users = [m["content"] for m in after[0]["messages"] if m["role"] == "user"]
            assert len(users) == 2 and len(after[0]["turns"]) == 2
            await page.aclose()
            await caller.aclose()

