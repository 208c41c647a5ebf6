"""Calls that own their session through a lease and resume after a drop, in process: a
real aiortc caller, the example assistant on the real models, SQLite and PostgreSQL
(the PostgreSQL half skips with its reason when no server answers)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from voxflow_adapters.hosting.admission import AdmissionController
from voxflow_adapters.hosting.host import CallRefused
from voxflow_adapters.hosting.wire import ResumeRequest
from voxflow_adapters.webrtc import (
    Call,
    PeerSettings,
    ServerSettings,
    WebRtcPeer,
    WebRtcServer,
    assistant_call_factory,
)
from voxflow_adapters.webrtc.client import LoopbackCaller, OfferRejected
from voxflow_voice.audio import AudioChunk
from voxflow_voice.engines import VoiceEngines

from voxflow.errors import PersistenceUnavailableError

from ._pinned_cost import pinned_admission

pytestmark = pytest.mark.models

LOOPBACK = PeerSettings(ice_host_addresses=("127.0.0.1",))


@contextlib.asynccontextmanager
async def serving(
    engines: VoiceEngines, store: Any, admission: AdmissionController | None = None,
    **settings: Any,
) -> AsyncIterator[tuple[WebRtcServer, list[tuple[WebRtcPeer, Call]]]]:
    calls: list[tuple[WebRtcPeer, Call]] = []
    options: dict[str, Any] = {"port": 0, "peer": LOOPBACK, **settings}
    server = WebRtcServer(assistant_call_factory(), engines, settings=ServerSettings(**options),
                          on_call=lambda peer, call: calls.append((peer, call)), store=store,
                          admission=admission)
    async with server:
        yield server, calls


def say(engines: VoiceEngines, text: str, tmp_path: Path) -> AudioChunk:
    """``text`` in the bundled voice (what the caller speaks)."""
    import numpy as np

    samples = np.concatenate([np.asarray(s.samples, np.float32)
                              for s in engines.tts.synthesize(text)])
    return AudioChunk.from_float(samples, engines.tts.sample_rate)


def user_turns(state: dict[str, Any]) -> list[str]:
    return [m["content"] for m in state["messages"] if m["role"] == "user"]


async def test_a_served_call_owns_its_session_through_a_lease(
    engines: VoiceEngines, make_store: Any, tmp_path: Path
) -> None:
    store = make_store("calls")
    async with serving(engines, store) as (server, _):
        caller = LoopbackCaller(f"http://127.0.0.1:{server.port}", server.token)
        await caller.connect()
        hello = await caller.wait_message("hello")
        assert caller.resumable and hello["resumed"] is False
        assert "resume_token" not in hello  # the caller keeps it out of its message log
        session_id = hello["session_id"]
        lease = store.lease_of(session_id)
        assert lease is not None and lease.owner.startswith(server.worker_id)
        caller.say(say(engines, "What are your opening hours?", tmp_path))
        await caller.wait_message("reply_done", within=60)
        first_expiry = lease.expires_at
        await asyncio.sleep(server.settings.lease_seconds / 3 + 0.5)
        renewed = store.lease_of(session_id)
        assert renewed is not None and renewed.expires_at > first_expiry  # the heartbeat
        caller.send({"v": 1, "type": "hangup"})
        await caller.wait_message("bye")
        await caller.aclose()
        async with asyncio.timeout(20):
            await server.wait_idle()
    released = store.lease_of(session_id)
    assert released is not None and released.owner == ""  # released at the call's end
    stored = store.load_state(session_id)
    assert stored is not None and user_turns(stored) == ["What are your opening hours?"]
    assert [t["status"] for t in stored["turns"].values()] == ["completed"]
    settled = [e for e in stored["events"] if e["type"] == "reply_settled"]
    assert len(settled) == 1  # the reply played whole: settled, nothing cut


async def test_a_call_whose_lease_is_taken_over_ends_and_writes_nothing(
    engines: VoiceEngines, make_store: Any, tmp_path: Path
) -> None:
    store = make_store("calls")
    async with serving(engines, store, lease_seconds=1.5) as (server, calls):
        caller = LoopbackCaller(f"http://127.0.0.1:{server.port}", server.token)
        await caller.connect()
        session_id = (await caller.wait_message("hello"))["session_id"]
        held = store.lease_of(session_id)
        assert held is not None
        # Another worker takes the session over (as after a partition: the lease freed).
        store.release_lease(held)
        other = store.acquire_lease(session_id, "worker-b", ttl=60)
        before = store.load_state_revision(session_id)
        bye = await caller.wait_message("bye", within=10)
        assert "lost its session (taken over): another worker took it over" in bye["reason"]
        caller.say(say(engines, "What are your opening hours?", tmp_path))
        await asyncio.sleep(1.0)
        await caller.aclose()
        async with asyncio.timeout(20):
            await server.wait_idle()
        peer, _ = calls[0]
        assert peer.close_reason is not None and "taken over" in peer.close_reason
    assert store.load_state_revision(session_id) == before  # nothing written after it
    assert store.lease_of(session_id) == other  # and the new owner's lease left alone


async def test_the_same_page_reconnecting_mid_reply_resumes_the_call(
    engines: VoiceEngines, make_store: Any, tmp_path: Path
) -> None:
    store = make_store("calls")
    # one call at most: the reconnection takes its own call's place, not another slot
    # (the old connection still holds it; a loaded machine's measured slots are 1 too)
    async with serving(engines, store, max_calls=1) as (server, calls):
        caller = LoopbackCaller(f"http://127.0.0.1:{server.port}", server.token)
        await caller.connect()
        session_id = (await caller.wait_message("hello"))["session_id"]
        caller.say(say(engines, "What are your opening hours?", tmp_path))
        await caller.wait_message("reply_done", within=60)
        caller.say(say(engines, "Tell me a story.", tmp_path))
        await caller.wait_for(lambda: len([m for m in caller.of_type("state")
                                           if m["state"] == "speaking"]) == 2,
                              within=60, what="the story")
        began = caller.of_type("state")[-1]["_at"]
        await caller.wait_for(lambda: caller.audible_frames(after=began) > 50,
                              what="a second of the story")
        # The page reconnects while its old connection still looks alive to the server.
        reconnection = await caller.reconnect()
        assert reconnection.attempts == 1
        await caller.wait_for(lambda: bool([m for m in caller.of_type("hello")
                                            if m["_conn"] == 2]), what="the second hello")
        hello = [m for m in caller.of_type("hello") if m["_conn"] == 2]
        assert hello[0]["session_id"] == session_id and hello[0]["resumed"] is True
        old_peer, _ = calls[0]
        assert old_peer.closed.is_set()  # (the old connection's end reached it first)
        caller.say(say(engines, "What are your opening hours?", tmp_path))
        await caller.wait_for(lambda: any(m["_conn"] == 2 for m in caller.of_type("reply_done")),
                              within=60, what="the answer on the new connection")
        caller.send({"v": 1, "type": "hangup"})
        await caller.wait_message("bye", _conn=2)
        await caller.aclose()
        async with asyncio.timeout(20):
            await server.wait_idle()
    stored = store.load_state(session_id)
    assert stored is not None
    assert user_turns(stored) == ["What are your opening hours?", "Tell me a story.",
                                  "What are your opening hours?"], [
        (m["role"], m["content"], m.get("metadata")) for m in stored["messages"]]
    assert len(stored["turns"]) == 3  # turns 1..3, each once
    story = [m for m in stored["messages"] if m["role"] == "assistant"][1]
    assert story["metadata"]["interrupted"] is True  # cut at what was heard
    heard = story["content"].rsplit("[", 1)[0].split()
    generated = story["metadata"]["generated_text"].split()
    assert heard and generated[: len(heard)] == heard and len(heard) < len(generated)


async def test_a_resume_with_a_bad_token_is_refused_and_changes_nothing(
    engines: VoiceEngines, make_store: Any, tmp_path: Path
) -> None:
    store = make_store("calls")
    # two calls and a third offer at a time (each refused resume but the last is judged
    # as a new call), whatever the machine's load
    async with serving(engines, store, pinned_admission(3)) as (server, _):
        base = f"http://127.0.0.1:{server.port}"
        first = LoopbackCaller(base, server.token)
        await first.connect()
        one = (await first.wait_message("hello"))["session_id"]
        second = LoopbackCaller(base, server.token)
        await second.connect()
        assert (await second.wait_message("hello"))["session_id"] != one
        token_two = second._resume_token
        assert token_two is not None and token_two != first._resume_token
        before = store.load_state_revision(one)
        lease = store.lease_of(one)
        hostile = LoopbackCaller(base, server.token)
        for session, token, status, reason in (
            (one, "A" * 43, 403, "not this session's"),  # a guessed token
            (one, token_two, 403, "not this session's"),  # another session's token
            ("no-such-session", token_two, 403, "no such session"),
            (one, "short", 400, "resume.token"),  # malformed: typed, named
            ("bad id!", token_two, 400, "resume.session_id"),
        ):
            with pytest.raises(OfferRejected) as refused:
                await hostile.connect(resume_as=(session, token))
            assert refused.value.status == status and reason in refused.value.reason
        assert store.load_state_revision(one) == before  # nothing lost, nothing written
        kept = store.lease_of(one)  # the live call keeps its session (its lease renewed
        assert kept is not None and lease is not None  # meanwhile on a slow machine)
        assert (kept.owner, kept.epoch) == (lease.owner, lease.epoch)
        assert server.statistics().rejected.get("resume_token") == 3
        # The right token while the call is live: the same page reconnecting (a reload):
        # the live call is ended first, then the session goes on in the new connection.
        # Its stored state is read once, for the token and whether it takes its live
        # call's place (the state the call goes on with is loaded under the new lease).
        reads: list[str] = []
        read = store.load_state

        def counted(session_id: str) -> Any:
            reads.append(session_id)
            return read(session_id)

        store.load_state = counted
        again = LoopbackCaller(base, server.token)
        await again.connect(resume_as=(one, first._resume_token or ""))
        assert reads == [one]
        store.load_state = read
        assert (await again.wait_message("hello"))["resumed"] is True
        bye = await first.wait_message("bye")
        assert "reconnected" in bye["reason"]
        taken = store.lease_of(one)
        assert taken is not None and lease is not None and taken.epoch == lease.epoch + 1
        for caller in (first, second, hostile, again):
            await caller.aclose()


async def test_a_server_without_a_store_refuses_a_resume_with_the_reason(
    engines: VoiceEngines,
) -> None:
    async with serving(engines, None) as (server, _):
        caller = LoopbackCaller(f"http://127.0.0.1:{server.port}", server.token)
        with pytest.raises(OfferRejected) as refused:
            await caller.connect(resume_as=("s-1", "A" * 43))
        assert refused.value.status == 400 and "keeps no sessions" in refused.value.reason
        await caller.aclose()
        await caller.connect()
        hello = await caller.wait_message("hello")
        assert hello["resumed"] is False and not caller.resumable
        await caller.aclose()



class _StoreDown:
    """The session store during a database blip (the far side of the store's boundary):
    every read fails as PostgreSQL's store fails while its server restarts."""

    def load_state(self, session_id: str) -> Any:
        raise PersistenceUnavailableError("the session store is unreachable",
                                          path="postgresql://db", fix="start it")


async def test_a_page_reconnecting_while_the_store_is_away_gets_the_stores_503(
    engines: VoiceEngines,
) -> None:
    """The check whether a resume takes its live call's place reads the store: when that
    read fails, the offer is refused with the store's typed 503, not a 500."""
    async def no_call(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("no call starts while the store is away")

    server = WebRtcServer(no_call, engines, store=_StoreDown(),  # type: ignore[arg-type]
                          settings=ServerSettings(port=0, peer=LOOPBACK, max_calls=1))
    live: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    server._calls["call-1"] = (object(), live)  # type: ignore[assignment]  # a call live here
    server._sessions["s-1"] = "call-1"  # ... for session s-1
    resume = ResumeRequest(v=1, session_id="s-1", token="t" * 24)
    with pytest.raises(CallRefused) as refused:
        await server.answer_offer("v=0\r\n", resume)
    assert (refused.value.status, refused.value.key) == (503, "store")
    assert "session store is unavailable" in refused.value.reason
