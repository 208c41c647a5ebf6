"""A server's public address (``voxflow phone --public-url``): well-formed, and leading
to this very process.

The carrier reaches a phone server, and a phone call worker's media stream, at the
address ``--public-url`` gives; the webhook's signature covers it too. A wrong one fails
on the first call only (every webhook refused 403, or the carrier's stream dialling
nowhere), far from its cause. So:

* :func:`check_public_url` refuses, with a :class:`PublicUrlError` naming what is wrong,
  an address that cannot be right: not ``http(s)``, a space or control character, no
  host, a host that is neither a DNS name (RFC 1123 labels) nor an IP address, a port
  outside 1-65535, credentials
  (the carrier would be handed them, and they would be logged wherever the URL is), a
  query or fragment, or a path (the webhook and the media stream are served at the
  host's root: a path would be dropped from one and kept in the other); it returns the
  address normalised (``scheme://host[:port]``: no trailing slash, no empty port, an IP
  address in its canonical form; a DNS name as written), which is what a server stores
  and checks the webhook's signature with;
* :func:`probe_public_url` asks, at start-up, the process's own health path
  (:data:`HEALTH_PATH`, served by :func:`health_handler`) *through* that address, with
  a short timeout: the answer must carry this process's random instance id, or, for a
  front door, the deployment it serves (several front doors behind one load balancer
  share the address: the probe may reach any of them). A problem
  is a sentence with the fix, which the server warns once: a machine that cannot reach
  its own public address (some networks do not route it back) may still be reachable
  from the carrier, so it is not refused.
"""

from __future__ import annotations

import ipaddress
import re
import secrets
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from voxflow.errors import VoxflowError

if TYPE_CHECKING:  # (aiohttp: only to serve or probe; the CLI checks the URL without it)
    from aiohttp import web

__all__ = ["HEALTH_PATH", "PROBE_TIMEOUT", "PublicUrlError", "check_public_url",
           "health_handler", "new_instance_id", "probe_public_url"]

HEALTH_PATH = "/health"
"""Where a server answers ``{"status": "ok", "instance": "<its id>"}`` (a front door also
``"deployment": "<the hash of the deployment it serves>"``)."""

PROBE_TIMEOUT = 3.0
"""Seconds :func:`probe_public_url` waits for the answer."""


_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
"""One label of a DNS name (RFC 1123: letters, digits, inner hyphens, 1-63 long)."""


class PublicUrlError(VoxflowError, ValueError):
    """A public address that cannot be right (``problem`` says why; credentials in it
    are never shown)."""

    def __init__(self, option: str, shown: str, problem: str) -> None:
        super().__init__(f"{option} {shown}: {problem}")
        self.option = option
        self.problem = problem


def _shown(url: str) -> str:
    """``url`` with any ``user:password@`` replaced (messages never show it)."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return repr(url)
    netloc, slash, tail = rest.partition("/")
    if "@" in netloc:
        netloc = "<credentials>@" + netloc.rpartition("@")[2]
    return repr(f"{scheme}{sep}{netloc}{slash}{tail}")


def check_public_url(url: str, *, option: str = "--public-url") -> str:
    """``url`` as a base address (``https://host[:port]``, no trailing slash).

    Raises:
        PublicUrlError: ``url`` is not ``http(s)://host[:port]`` (the message names what
            is wrong and how to write it).
    """
    if not isinstance(url, str):
        raise TypeError(f"{option} must be a str, got {type(url).__name__}")
    shown = _shown(url)
    if any(ch.isspace() or not ch.isprintable() for ch in url):
        raise PublicUrlError(option, shown, "holds a space or control character; give "
                             "https://host[:port]")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise PublicUrlError(option, shown, f"not a URL ({exc}); give https://host[:port]"
                             ) from None
    if parts.scheme not in ("https", "http"):
        raise PublicUrlError(option, shown, "give https://host[:port] (the carrier needs "
                             "https; http only for a trial)")
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise PublicUrlError(option, shown, "carries credentials: the carrier would be sent "
                             "them and logs would show them; drop the user:password@ part")
    if not parts.hostname:
        raise PublicUrlError(option, shown, "names no host; give https://host[:port]")
    if parts.query or parts.fragment or "?" in url or "#" in url:
        raise PublicUrlError(option, shown, "has a query or fragment, which the carrier's "
                             "requests would not carry; give https://host[:port] only")
    if parts.path not in ("", "/"):
        raise PublicUrlError(option, shown, f"has a path ({parts.path}): the webhook and "
                             "the media stream are served at the host's root; give "
                             "https://host[:port] only")
    if port == 0:
        raise PublicUrlError(option, shown, "has port 0, which nothing is reached at; give "
                             "a port from 1 to 65535, or none")
    written = parts.netloc.rsplit(":", 1)[0] if ":" in parts.netloc.rpartition("]")[2] \
        else parts.netloc
    host = _host(parts.hostname, written)
    if host is None:
        raise PublicUrlError(option, shown, f"names an invalid host ({parts.hostname!r}): "
                             "give a DNS name (letters, digits and inner hyphens, each "
                             "dot-separated label 1-63 long; an international name in its "
                             "xn-- form) or an IP address, in https://host[:port]")
    return f"{parts.scheme}://{host}" + ("" if port is None else f":{port}")


def _host(name: str, written: str) -> str | None:
    """The URL's host (``name`` in lower case, ``written`` as given) as a URL holds it:
    a DNS name as written (the carrier signs the URL it was given: its case is kept), an
    IPv4 address, or an IPv6 address in brackets; None if it is none of them."""
    if written.startswith("[") or ":" in name:
        try:
            return f"[{ipaddress.IPv6Address(name).compressed}]" if "%" not in name else None
        except ValueError:
            return None
    labels = name.split(".")
    if all(label.isdigit() for label in labels):  # (dotted numbers: only an IPv4 address)
        try:
            return str(ipaddress.IPv4Address(name))
        except ValueError:
            return None
    if len(name) > 253 or written.lower() != name or not all(
            _LABEL.fullmatch(label) for label in labels):
        return None
    return written


def new_instance_id() -> str:
    """A random id naming one server process in its health answer."""
    return secrets.token_hex(8)


def health_handler(instance: str, deployment: Callable[[], str | None] | None = None
                   ) -> Callable[[web.Request], Awaitable[web.Response]]:
    """The :data:`HEALTH_PATH` handler of the process named ``instance``; ``deployment``
    (a front door's): the hash of the deployment it serves, once known (never a URL or
    a credential: :meth:`~voxflow_adapters.hosting.dispatch.DispatchStore.deployment`)."""
    from aiohttp import web  # (served only: the CLI checks a URL without aiohttp)

    async def health(request: web.Request) -> web.Response:
        body = {"status": "ok", "instance": instance}
        serves = deployment() if deployment is not None else None
        if serves is not None:
            body["deployment"] = serves
        return web.json_response(body, headers={"Cache-Control": "no-store"})

    return health


async def probe_public_url(base: str, instance: str, *, listening: str,
                           deployment: str | None = None, option: str = "--public-url",
                           within: float = PROBE_TIMEOUT) -> str | None:
    """None if ``GET base + HEALTH_PATH`` answers the process named ``instance``, or,
    given a front door's ``deployment``, any front door of that deployment (a sibling
    behind the same load balancer); else what is wrong, with the fix (``listening``:
    where this process listens, ``host:port``, for the message; ``within``: seconds the
    answer may take). A worker gives no ``deployment``: its own address leads to it.

    Raises:
        PublicUrlError: ``base`` is not a well-formed public address.
    """
    import aiohttp  # (aiohttp's client: only when probing)

    base = check_public_url(base, option=option)
    url = base + HEALTH_PATH
    where = (f"point {base} at this process (it listens on {listening}: the DNS name, "
             "the proxy's or tunnel's target), or give the right " + option)
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=within)
                                         ) as http, http.get(url, allow_redirects=False
                                                             ) as answer:
            if answer.status != 200:
                return (f"{option} {base} does not lead to this process: GET "
                        f"{HEALTH_PATH} there answered HTTP {answer.status}; {where}")
            body = await answer.json(content_type=None)
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        reason = str(exc) or type(exc).__name__
        return (f"{option} {base} could not be reached from this machine within "
                f"{within:g} s ({reason}); the carrier will fail the same way unless "
                f"this network just cannot reach its own public address: {where}")
    except ValueError:  # not JSON
        return (f"{option} {base} does not lead to a voxflow server (GET {HEALTH_PATH} "
                f"answered something else); {where}")
    if not isinstance(body, dict):
        body = {}
    if body.get("instance") == instance or (
            deployment is not None and body.get("deployment") == deployment):
        return None
    if deployment is not None:
        return (f"{option} {base} leads to another server, neither this process nor a "
                f"front door of its deployment (its {HEALTH_PATH} answered another "
                f"instance, not of this deployment); {where}")
    return (f"{option} {base} leads to another server, not this process (its "
            f"{HEALTH_PATH} answered another instance); {where}")
