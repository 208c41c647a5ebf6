"""A STUN/TURN server that refuses (its port closed: ICMP port unreachable) fails its
part of the ICE gathering at once, instead of holding the answer for the whole bound.

aioice asks a STUN server (and a TURN server over UDP) from the unconnected UDP socket of
each host candidate, and Linux reports no ICMP error on an unconnected socket: a refused
request is retransmitted until the gathering's bound (:func:`~._ice.gather_timeout`, 2 s
by default) runs out, although the server said no in the first millisecond. So each
request for a server-reflexive or relayed candidate races a probe of its server from a
*connected* UDP socket of its own, which does hear the refusal
(``ConnectionRefusedError``): refused, the request fails at once. When every server has
refused or failed, the gathering therefore ends at once with the host candidates. A
server that answers the probe, or stays silent, is left to the request and the bound.
(A TURN server over TCP or TLS already fails at once: its connection is refused.)

Installed over ``aioice.ice.server_reflexive_candidate`` and
``aioice.ice.relayed_candidate``, which ``Connection.get_component_candidates`` looks up
at each gathering.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import socket
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import aioice.ice
import aioice.stun

__all__ = ["install"]

T = TypeVar("T")

_WAITS = (0.1, 0.15, 0.25, 0.5)
"""How long the probe waits for a verdict after each send (s), then 1 s: ICMP errors
are rate-limited, and a lost one must not leave the refusal unheard."""

_installed = False


class _Probe(asyncio.DatagramProtocol):
    def __init__(self) -> None:
        self.verdict: asyncio.Future[bool] = asyncio.get_running_loop().create_future()

    def datagram_received(self, data: bytes, addr: Any) -> None:
        if not self.verdict.done():
            self.verdict.set_result(False)  # it answers: not refused

    def error_received(self, exc: Exception) -> None:
        if isinstance(exc, ConnectionRefusedError) and not self.verdict.done():
            self.verdict.set_result(True)


async def refused(server: tuple[str, int]) -> bool:
    """Whether the STUN/TURN server at ``server`` refuses UDP (True as soon as its host
    says so; False once it answers; waits while it is silent, until cancelled)."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(server[0], server[1], family=socket.AF_INET,
                                   type=socket.SOCK_DGRAM)  # (aioice asks over IPv4)
    if not infos:
        return False
    address = (str(infos[0][4][0]), int(infos[0][4][1]))
    transport, probe = await loop.create_datagram_endpoint(_Probe, remote_addr=address)
    request = bytes(aioice.stun.Message(message_method=aioice.stun.Method.BINDING,
                                        message_class=aioice.stun.Class.REQUEST))
    try:
        for wait in itertools.chain(_WAITS, itertools.repeat(1.0)):
            transport.sendto(request)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):
                    return await asyncio.shield(probe.verdict)
        raise AssertionError("unreachable")  # (the waits never end)
    finally:
        transport.close()


async def _unless_refused(request: Awaitable[T], server: tuple[str, int]) -> T:
    """``await request``, or ConnectionRefusedError as soon as ``server`` refuses."""
    asked = asyncio.ensure_future(request)
    probe = asyncio.ensure_future(refused(server))
    try:
        await asyncio.wait({asked, probe}, return_when=asyncio.FIRST_COMPLETED)
        if not asked.done() and not probe.cancelled() and probe.exception() is None \
                and probe.result():
            raise ConnectionRefusedError(f"the ICE server {server[0]}:{server[1]} refused")
        return await asked
    finally:
        for task in (asked, probe):
            task.cancel()
        await asyncio.wait({asked, probe})


def install() -> None:
    """Wrap aioice's requests for server-reflexive and relayed candidates (idempotent)."""
    global _installed
    if _installed:
        return
    reflexive: Callable[..., Awaitable[Any]] = aioice.ice.server_reflexive_candidate
    relayed: Callable[..., Awaitable[Any]] = aioice.ice.relayed_candidate

    async def server_reflexive_candidate(protocol: Any, stun_server: tuple[str, int]) -> Any:
        return await _unless_refused(reflexive(protocol, stun_server), stun_server)

    async def relayed_candidate(**kwargs: Any) -> Any:
        request = relayed(**kwargs)
        if kwargs.get("turn_transport") != "udp":
            return await request  # (a refused TCP connection fails at once)
        return await _unless_refused(request, kwargs["turn_server"])

    aioice.ice.server_reflexive_candidate = server_reflexive_candidate
    aioice.ice.relayed_candidate = relayed_candidate
    _installed = True
