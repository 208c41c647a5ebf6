"""STUN servers that fail, on loopback, for the fault tests and ``faults.py``: one that
takes every packet and never answers (``silent``), one that is down (``refusing``: its
port answers ICMP port unreachable) and one that answers late (``slow``)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Iterator
from typing import cast

from aioice import stun

__all__ = ["SLOW_STUN_DELAY", "SlowStun", "stun_server"]

SLOW_STUN_DELAY = 4.0
"""Seconds the slow server answers late: past the 2 s the gathering waits by default."""


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


@contextlib.contextmanager
def refusing_udp_port() -> Iterator[int]:
    """A UDP port nothing listens on: every datagram to it is answered by an ICMP port
    unreachable (a STUN/TURN server that is down); its port."""
    with silent_udp_server() as port:
        pass  # (bound, then closed: free, and refusing)
    yield port


class SlowStun(asyncio.DatagramProtocol):
    """Answers each STUN binding request, ``delay`` seconds late."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.transport: asyncio.DatagramTransport | None = None
        self.answered = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        request = stun.parse_message(data)
        response = stun.Message(message_method=stun.Method.BINDING,
                                message_class=stun.Class.RESPONSE,
                                transaction_id=request.transaction_id)
        response.attributes["XOR-MAPPED-ADDRESS"] = addr
        asyncio.get_running_loop().call_later(self.delay, self._send, bytes(response), addr)

    def _send(self, data: bytes, addr: tuple[str, int]) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.sendto(data, addr)
            self.answered += 1


@contextlib.asynccontextmanager
async def slow_stun_server(delay: float) -> AsyncIterator[tuple[int, SlowStun]]:
    """A STUN server on loopback that answers every binding request ``delay`` s late;
    its port and itself."""
    transport, protocol = await asyncio.get_running_loop().create_datagram_endpoint(
        lambda: SlowStun(delay), local_addr=("127.0.0.1", 0))
    try:
        yield transport.get_extra_info("sockname")[1], protocol
    finally:
        transport.close()


@contextlib.asynccontextmanager
async def stun_server(fault: str) -> AsyncIterator[tuple[int, SlowStun | None]]:
    """A STUN server that is ``silent`` (takes every packet, never answers), ``refusing``
    (down: its port answers ICMP port unreachable) or ``slow`` (answers 4 s late, past
    the 2 s the gathering waits); its port, and the slow one itself."""
    if fault == "slow":
        async with slow_stun_server(SLOW_STUN_DELAY) as (port, slow):
            yield port, slow
        return
    with silent_udp_server() if fault == "silent" else refusing_udp_port() as port:
        yield port, None
