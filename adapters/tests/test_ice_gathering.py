"""How long a peer connection's ICE gathering waits for its STUN/TURN servers.

A server whose port is closed answers a UDP request with ICMP port unreachable, which an
unconnected socket (aioice's) never hears: the gathering waited its whole bound (2 s by
default, here 600 s) and the offer's answer with it. Now a refusal ends that server's
part at once, and a gathering whose every server refused ends at once, with its host
candidates. Real aiortc and aioice on loopback; the wall-clock guard only catches the
wait of the whole bound.
"""

from __future__ import annotations

import asyncio
import runpy
import socket
from pathlib import Path

import pytest
from aiortc import RTCConfiguration, RTCIceServer, RTCPeerConnection
from voxflow_adapters.webrtc import host_addresses
from voxflow_adapters.webrtc._ice import gather_timeout

pytestmark = pytest.mark.unit

BOUND = 600.0  # the gathering's bound: only a refusal heard ends it sooner
# a STUN server on loopback that answers (at once here): benchmarks/_stun_faults.py
slow_stun_server = runpy.run_path(
    str(Path(__file__).parents[2] / "benchmarks" / "_stun_faults.py"))["slow_stun_server"]


def closed_udp_port() -> int:
    """A loopback UDP port nothing listens on (the kernel answers port unreachable)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def gathered(servers: list[RTCIceServer]) -> str:
    """The SDP of an offer whose candidates were gathered with ``servers``."""
    pc = RTCPeerConnection(RTCConfiguration(iceServers=servers))
    try:
        pc.addTransceiver("audio")
        offer = await pc.createOffer()
        with host_addresses(("127.0.0.1",)), gather_timeout(BOUND):
            async with asyncio.timeout(60):  # (wall clock: only the whole bound reaches it)
                await pc.setLocalDescription(offer)
        return str(pc.localDescription.sdp)
    finally:
        await pc.close()


@pytest.mark.parametrize("servers", ["stun", "turn", "stun and turn"])
async def test_a_gathering_whose_every_server_refuses_ends_at_once_with_host_candidates(
    servers: str,
) -> None:
    stun = RTCIceServer(urls=f"stun:127.0.0.1:{closed_udp_port()}")
    turn = RTCIceServer(urls=f"turn:127.0.0.1:{closed_udp_port()}?transport=udp",
                        username="user", credential="secret")
    chosen = {"stun": [stun], "turn": [turn], "stun and turn": [stun, turn]}[servers]
    sdp = await gathered(chosen)
    assert "typ host" in sdp and "127.0.0.1" in sdp
    assert "typ srflx" not in sdp and "typ relay" not in sdp


async def test_a_server_that_answers_still_gives_its_candidate() -> None:
    # (the probe that hears a refusal must not cost a live server its candidate)
    async with slow_stun_server(0.0) as (port, _):
        sdp = await gathered([RTCIceServer(urls=f"stun:127.0.0.1:{port}")])
    assert "typ srflx" in sdp and "typ host" in sdp
