"""Calls that survive their dependencies: an ICE server that never answers, and resets of
the session store's database connections. Real aiortc caller, the example assistant on
the real models, real SQLite and PostgreSQL (the PostgreSQL half skips with its reason
when no server answers). The slow faults (10 resets in a row, a PostgreSQL restart) and
their figures are ``benchmarks/faults.py``'s."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Iterator
from typing import Any

import numpy as np
import pytest
from voxflow_adapters.webrtc import (
    Call,
    IceServer,
    PeerSettings,
    ServerSettings,
    WebRtcPeer,
    WebRtcServer,
    assistant_call_factory,
)
from voxflow_adapters.webrtc.client import LoopbackCaller
from voxflow_voice.audio import AudioChunk
from voxflow_voice.engines import VoiceEngines

pytestmark = pytest.mark.models

LOOPBACK = PeerSettings(ice_host_addresses=("127.0.0.1",))
QUESTION = "Hello there!"  # answered in two seconds: "Hello! How can I help you today?"


@contextlib.asynccontextmanager
async def serving(
    engines: VoiceEngines, store: Any, **settings: Any
) -> AsyncIterator[tuple[WebRtcServer, list[tuple[WebRtcPeer, Call]]]]:
    calls: list[tuple[WebRtcPeer, Call]] = []
    options: dict[str, Any] = {"port": 0, "peer": LOOPBACK, **settings}
    server = WebRtcServer(assistant_call_factory(), engines, settings=ServerSettings(**options),
                          on_call=lambda peer, call: calls.append((peer, call)), store=store)
    async with server:
        yield server, calls


def say(engines: VoiceEngines, text: str) -> AudioChunk:
    samples = np.concatenate([np.asarray(s.samples, np.float32)
                              for s in engines.tts.synthesize(text)])
    return AudioChunk.from_float(samples, engines.tts.sample_rate)


def user_turns(state: dict[str, Any]) -> list[str]:
    """The user's messages, as Whisper wrote them (lower case, no punctuation)."""
    return ["".join(c for c in m["content"].lower() if c.isalpha() or c == " ")
            for m in state["messages"] if m["role"] == "user"]


@contextlib.contextmanager
def silent_udp_server() -> Iterator[int]:
    """A UDP port that takes every datagram and never answers (a STUN/TURN server that
    hangs); its port."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    try:
        yield sock.getsockname()[1]
    finally:
        sock.close()


async def ask(caller: LoopbackCaller, engines: VoiceEngines, answered: int) -> None:
    """Ask the question and wait for the ``answered``-th reply to end."""
    caller.say(say(engines, QUESTION))
    await caller.wait_for(lambda: len(caller.of_type("reply_done")) >= answered, within=60,
                          what=f"answer {answered}")


async def hang_up(caller: LoopbackCaller, server: WebRtcServer) -> None:
    caller.send({"v": 1, "type": "hangup"})
    await caller.wait_message("bye")
    await caller.aclose()
    async with asyncio.timeout(20):
        await server.wait_idle()


async def test_a_call_whose_ice_server_never_answers_keeps_its_session(
    engines: VoiceEngines, make_store: Any
) -> None:
    """The lease is renewed from the moment it is taken: gathering candidates while the
    STUN server stays silent (bounded by ``ice_gather_timeout``) outlasts a short lease,
    and the call still connects on its host candidates, keeps its session and answers."""
    store = make_store("calls")
    with silent_udp_server() as port:
        stun = PeerSettings(ice_host_addresses=("127.0.0.1",),
                            ice_servers=(IceServer(urls=(f"stun:127.0.0.1:{port}",)),))
        async with serving(engines, store, peer=stun, lease_seconds=1.5) as (server, calls):
            caller = LoopbackCaller(f"http://127.0.0.1:{server.port}", server.token)
            await caller.connect()
            assert caller.answer_sdp is not None
            assert "typ host" in caller.answer_sdp and "typ srflx" not in caller.answer_sdp
            session_id = (await caller.wait_message("hello"))["session_id"]
            await ask(caller, engines, 1)
            await asyncio.sleep(1.0)  # two more renewals of the 1.5 s lease
            assert not caller.of_type("bye"), caller.of_type("bye")
            lease = store.lease_of(session_id)
            assert lease is not None and lease.owner.startswith(server.worker_id)
            peer, _ = calls[0]
            assert peer.close_reason is None
            await hang_up(caller, server)
    stored = store.load_state(session_id)
    assert stored is not None and user_turns(stored) == ["hello there"]
    assert [t["status"] for t in stored["turns"].values()] == ["completed"]
