"""A call moving between call workers, in one process: a front door and call workers on
one real PostgreSQL schema (dispatch and sessions), real aiortc callers, the example
assistant on the real models. A worker whose heartbeat stopped has its calls' leases
taken over at once by their resumes (the fence refusing what it still writes); a
draining worker hands its calls over to another worker (the same resume path) at a
quiet moment of each, and ends them with a ``bye`` only when no other worker is live."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest
from voxflow_adapters.hosting.dispatch import DispatchStore
from voxflow_adapters.hosting.worker import CallWorker
from voxflow_adapters.webrtc import (
    PeerSettings,
    ServerSettings,
    WebRtcServer,
    assistant_call_factory,
)
from voxflow_adapters.webrtc.client import LoopbackCaller
from voxflow_adapters.webrtc.front_door import FrontDoor
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


async def test_a_draining_worker_hands_its_call_over_at_a_quiet_moment_and_it_goes_on(
    engines: VoiceEngines, pg_schema_url: str, sessions: Any
) -> None:
    """SIGTERM's drain with another worker live: the call is not hung up. The answer
    playing when the drain starts is played whole first (no word cut, nothing dropped);
    then the page is told to move (``handover``, never a ``bye``), resumes on the other
    worker at once, and the call goes on there, its history whole; the drain returns
    without waiting for the call to end."""
    from voxflow_adapters.hosting.resume import DROPPED_MARK

    async with worker(engines, pg_schema_url, sessions) as a, \
            front_door(pg_schema_url) as door:
        caller = dial(door)
        await caller.connect()
        session_id = (await caller.wait_message("hello", within=30))["session_id"]
        assert on(caller, a)
        caller.keep_connected(peer_timeout=10.0)  # (a handover, not a silence, moves it)
        async with worker(engines, pg_schema_url, sessions) as b:
            caller.say(speech(engines, "What are your opening hours?"))
            await caller.wait_message("reply_text", within=60)
            answer = caller.of_type("reply_text")[0]["delivery_id"]
            assert not caller.of_type("reply_done")  # the answer is playing
            draining = asyncio.get_running_loop().create_task(a.drain())
            handover = await caller.wait_message("handover", within=60)
            assert handover["reason"] == "the worker is shutting down"
            done = caller.of_type("reply_done")
            assert [m["delivery_id"] for m in done] == [answer]  # played whole, before it
            assert caller.messages.index(done[0]) < caller.messages.index(handover)
            await caller.wait_for(
                lambda: any(m.get("resumed") for m in caller.of_type("hello")),
                within=30, what="the resumed hello")
            assert on(caller, b) and caller.reconnects[0].handover
            async with asyncio.timeout(30):  # the drain did not wait for the call to end
                await draining
            assert not caller.of_type("bye")
            state = await asyncio.to_thread(sessions.load_state, session_id)
            assert state is not None
            [stored] = [m for m in state["messages"]
                        if m["metadata"].get("delivery_id") == answer]
            assert DROPPED_MARK not in stored["content"] and not stored["metadata"].get(
                "dropped")
            assert state["replies"][answer]["interrupted"] is False
            await answered(caller, engines, "Where is my order?")  # on b, numbered on
            state = await asyncio.to_thread(sessions.load_state, session_id)
            assert state is not None
            users = [m["content"] for m in state["messages"] if m["role"] == "user"]
            assert users == [m["text"] for m in caller.of_type("transcript")]
            assert len(users) == 2 and len(state["turns"]) == 2
            assert not caller.of_type("bye")
            await caller.aclose()


async def test_a_draining_worker_with_no_other_live_worker_ends_its_call_with_a_bye(
    engines: VoiceEngines, pg_schema_url: str, sessions: Any
) -> None:
    """No worker could take the call: it goes on until the drain's deadline, then ends
    with the true reason (and no handover is sent)."""
    async with worker(engines, pg_schema_url, sessions, drain_seconds=1.0) as a, \
            front_door(pg_schema_url) as door:
        caller = dial(door)
        await caller.connect()
        await caller.wait_message("hello", within=30)
        assert on(caller, a)
        async with asyncio.timeout(30):
            await a.drain()
        bye = await caller.wait_message("bye", within=10)
        assert bye["reason"] == "the worker is shutting down"
        assert not caller.of_type("handover")
        await caller.aclose()
