"""Which local addresses a peer connection offers as ICE host candidates, and how long
it waits for its STUN/TURN servers.

aioice gathers host candidates from every interface *except* loopback
(``aioice.ice.get_host_addresses`` skips ``127.0.0.1`` and ``::1``), and it has no
per-connection option for it. A server bound to loopback, a machine with no other
interface, and in-process tests all need a loopback candidate.

:func:`host_addresses` scopes an override to the current task with a context variable;
the wrapper installed once over ``aioice.ice.get_host_addresses`` consults it, so two
calls in one process can use different address sets and code that does not ask keeps
aioice's default. Candidates are gathered inside ``setLocalDescription``, which runs in
the caller's task, so wrapping that call is enough.

:func:`gather_timeout` bounds, the same way, how long the gathering waits for the
server-reflexive and relayed candidates of the STUN/TURN servers: aioice waits 5 s
(``Connection.get_component_candidates``' ``timeout``, which aiortc never sets) for a
server that does not answer, and the answer (no trickle ICE) waits with it. The host
candidates are there at once; a candidate that comes later is left out. A server that
refuses (its port closed) fails at once (:mod:`._ice_refused`): when every server
refused or failed, the gathering ends at once.
"""

from __future__ import annotations

import contextlib
import contextvars
import ipaddress
from collections.abc import Callable, Iterator, Sequence

import aioice.ice

from . import _ice_refused

__all__ = ["gather_timeout", "host_addresses", "validate_addresses"]

_OVERRIDE: contextvars.ContextVar[tuple[str, ...] | None] = contextvars.ContextVar(
    "voxflow_ice_host_addresses", default=None
)
_GATHER_TIMEOUT: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "voxflow_ice_gather_timeout", default=None
)
_installed = False
_gather_installed = False


def validate_addresses(addresses: Sequence[str]) -> tuple[str, ...]:
    """Check that every entry is an IP address literal; return them as a tuple."""
    out: list[str] = []
    for address in addresses:
        if not isinstance(address, str):
            raise TypeError(f"ice host addresses must be strings, got {type(address).__name__}")
        try:
            ipaddress.ip_address(address)
        except ValueError:
            raise ValueError(f"ice host address {address!r} is not an IP address") from None
        out.append(address)
    return tuple(out)


def _install() -> None:
    global _installed
    if _installed:
        return

    original: Callable[[bool, bool], list[str]] = aioice.ice.get_host_addresses

    def get_host_addresses(use_ipv4: bool, use_ipv6: bool) -> list[str]:
        override = _OVERRIDE.get()
        if override is None:
            return original(use_ipv4, use_ipv6)
        return [a for a in override
                if (use_ipv4 and ipaddress.ip_address(a).version == 4)
                or (use_ipv6 and ipaddress.ip_address(a).version == 6)]

    aioice.ice.get_host_addresses = get_host_addresses
    _installed = True


@contextlib.contextmanager
def host_addresses(addresses: Sequence[str] | None) -> Iterator[None]:
    """Gather host candidates on exactly ``addresses`` inside the block (``None``: aioice's
    default, every non-loopback interface)."""
    if addresses is None:
        yield
        return
    checked = validate_addresses(addresses)
    _install()
    token = _OVERRIDE.set(checked)
    try:
        yield
    finally:
        _OVERRIDE.reset(token)


def _install_gather_timeout() -> None:
    global _gather_installed
    if _gather_installed:
        return
    connection = aioice.ice.Connection
    original = connection.get_component_candidates

    async def get_component_candidates(
        self: aioice.ice.Connection, component: int, addresses: list[str],
        timeout: int = 5,  # noqa: ASYNC109 (aioice's signature)
    ) -> list[aioice.Candidate]:
        bound = _GATHER_TIMEOUT.get()
        # (a float: aioice hands it to asyncio.wait, whatever its annotation says)
        return await original(self, component, addresses,
                              timeout=timeout if bound is None else bound)  # type: ignore[arg-type]

    connection.get_component_candidates = get_component_candidates  # type: ignore[method-assign]
    _ice_refused.install()  # (a refusing server does not hold the gathering to its bound)
    _gather_installed = True


@contextlib.contextmanager
def gather_timeout(seconds: float | None) -> Iterator[None]:
    """Wait at most ``seconds`` for the STUN/TURN servers' candidates while gathering
    inside the block (``None``: aioice's own 5 s)."""
    if seconds is None:
        yield
        return
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not seconds > 0:
        raise ValueError("the ICE gather timeout must be a positive number of seconds")
    _install_gather_timeout()
    token = _GATHER_TIMEOUT.set(float(seconds))
    try:
        yield
    finally:
        _GATHER_TIMEOUT.reset(token)
