"""The transport contract (``voxflow_voice.testing``) run against the simulated client
(virtual time) and the WebRTC peer over a real aiortc loopback call (the reply track's
20 ms RTP tick drives the queue; mute arrives over the data channel). The local sound
card runs the same suite on its fake driver in test_local_adapter.py (every run) and on
real PortAudio streams in test_local_device.py (ALSA's file PCM)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from voxflow_adapters.testkit.script import CallScript
from voxflow_adapters.testkit.simulated import SimulatedClient
from voxflow_adapters.webrtc import PeerSettings, WebRtcPeer, host_addresses
from voxflow_adapters.webrtc.protocol import PROTOCOL_VERSION
from voxflow_voice.audio import AudioChunk, ReplyChunk
from voxflow_voice.testing import (
    CHECKS,
    TransportContractError,
    TransportHarness,
    check_transport,
    reply_chunks,
)
from voxflow_voice.transport import ClientObservation

from voxflow.clock import VirtualClock
from voxflow.ids import DeliveryId

pytestmark = pytest.mark.unit

LOOPBACK = PeerSettings(ice_host_addresses=("127.0.0.1",))


@contextlib.asynccontextmanager
async def simulated() -> AsyncIterator[TransportHarness]:
    clock = VirtualClock(autojump=True)
    client = SimulatedClient(CallScript().until(60.0), clock=clock, tail=0.0)

    async def mute(muted: bool) -> None:
        client.set_muted(muted)

    async with clock, client:
        yield TransportHarness(client, sleep=clock.sleep, close=client.aclose, mute=mute)


RECEIVED: list[int] = []  # frames the aiortc callers received over the wire


@contextlib.asynccontextmanager
async def webrtc() -> AsyncIterator[TransportHarness]:
    """A WebRtcPeer answering a real aiortc caller on loopback (no signaling server)."""
    from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription

    peer = WebRtcPeer(settings=LOOPBACK)
    caller = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    channel = caller.createDataChannel("voxflow")
    opened = asyncio.Event()
    channel.on("open", opened.set)
    caller.addTransceiver("audio", direction="recvonly")
    readers: list[asyncio.Task[None]] = []

    async def receive(track: Any) -> None:
        with contextlib.suppress(Exception):
            while True:
                RECEIVED.append((await track.recv()).samples)

    caller.on("track", lambda track: readers.append(asyncio.create_task(receive(track))))
    offer = await caller.createOffer()
    with host_addresses(("127.0.0.1",)):
        await caller.setLocalDescription(offer)
    answer = await peer.accept(caller.localDescription.sdp)
    await caller.setRemoteDescription(RTCSessionDescription(sdp=answer, type="answer"))
    await asyncio.wait_for(opened.wait(), 20)

    async def mute(muted: bool) -> None:
        channel.send(json.dumps({"v": PROTOCOL_VERSION, "type": "mute", "muted": muted}))

    try:
        yield TransportHarness(peer, sleep=asyncio.sleep, close=peer.aclose, mute=mute)
    finally:
        await peer.aclose()
        await caller.close()
        for task in readers:
            task.cancel()


async def test_the_simulated_client_keeps_the_transport_contract() -> None:
    report = await check_transport(simulated)
    assert report == {name: "passed" for name in CHECKS}


async def test_the_webrtc_peer_keeps_the_transport_contract_over_a_real_call() -> None:
    report = await check_transport(webrtc)
    assert report == {name: "passed" for name in CHECKS}
    assert sum(RECEIVED) >= 48_000  # the receipted audio really went out on the wire


class _Leaky:
    """A transport that breaks the fence: its flush forgets to drop the queued audio.

    It shows that the suite fails a transport that would play a stale sample."""

    def __init__(self, inner: SimulatedClient) -> None:
        self.inner = inner

    def audio_input(self) -> AsyncIterator[AudioChunk]:
        return self.inner.audio_input()

    async def wait_writable(self) -> None:
        await self.inner.wait_writable()

    def write_nowait(self, chunk: ReplyChunk) -> None:
        self.inner.write_nowait(chunk)

    def flush(self, delivery_id: DeliveryId) -> int:
        return 1  # claims a drop, drops nothing

    def observations(self) -> AsyncIterator[ClientObservation]:
        return self.inner.observations()


async def test_a_transport_that_plays_after_a_fence_fails_the_suite() -> None:
    @contextlib.asynccontextmanager
    async def leaky() -> AsyncIterator[TransportHarness]:
        async with simulated() as harness:
            assert isinstance(harness.transport, SimulatedClient)
            yield TransportHarness(_Leaky(harness.transport), sleep=harness.sleep,
                                   close=harness.close)

    with pytest.raises(TransportContractError, match="fencing"):
        await check_transport(leaky, checks=["fencing"])
    report = await check_transport(leaky, checks=["receipts", "pause", "mute"])
    assert report == {"receipts": "passed", "pause": "skipped: not a PausableTransport",
                      "mute": "skipped: the harness cannot mute"}
    with pytest.raises(ValueError, match="unknown checks"):
        await check_transport(leaky, checks=["fence"])


def test_reply_chunks_are_contiguous_and_tagged() -> None:
    chunks = reply_chunks(DeliveryId("d"), 0.25)
    assert [c.start_sample for c in chunks] == [0, 2205, 4410]
    assert sum(c.num_samples for c in chunks) == 5512
    assert {c.delivery_id for c in chunks} == {"d"}
