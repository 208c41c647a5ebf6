"""STUN/TURN server URLs checked the way aiortc reads them, before any call needs one.

aiortc parses an ICE server's URL only when a call's peer connection gathers its
candidates (``aiortc.rtcicetransport.parse_stun_turn_uri``), so a malformed one used to
pass start-up and refuse every offer (``malformed uri``); some it parses and then
ignores without a word (``stuns:``, a TURN transport other than udp/tcp). :func:`check_ice_url`
accepts only URLs aiortc parses *and* uses, with a host a resolver can look up and a
port a socket can reach (RFC 7064/7065: ``stun:host[:port]``,
``turn(s):host[:port][?transport=udp|tcp]``), and says what is wrong otherwise.

Its messages show the URL through :func:`shown_ice_url`: never the user part before an
``@`` nor the query, where a TURN credential put in the URL would sit.
"""

from __future__ import annotations

import ipaddress
import re

__all__ = ["IceUrlError", "check_ice_url", "shown_ice_url"]

_HOST_LABEL = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)")
_PORT = re.compile(r"[0-9]{1,5}")
_TRANSPORT = re.compile(r"transport=[A-Za-z0-9]*")
_SHOWABLE = re.compile(r"[A-Za-z0-9.:\[\]-]*")
_FORM = "stun:HOST[:PORT] or turn:HOST[:PORT][?transport=udp|tcp] (turns: with tcp)"


class IceUrlError(ValueError):
    """An ICE server URL aiortc would refuse or ignore; the message is safe to show (no
    credential) and says the expected form. ``credentials``: the URL seems to carry some
    (a user part, or a query other than ``transport``)."""

    def __init__(self, message: str, *, credentials: bool = False) -> None:
        super().__init__(message)
        self.credentials = credentials


def shown_ice_url(url: str) -> str:
    """``url`` as a message or a log may show it: what comes before an ``@`` and after a
    ``?`` replaced by ``…`` (where credentials would be), the host and port only when
    made of the characters a host name, an address and a port have (else ``…``)."""
    scheme, colon, rest = url.partition(":")
    if not colon or not re.fullmatch(r"[a-z]{1,6}", scheme):
        return "…"
    user = "…@" if "@" in rest else ""
    rest = rest.rsplit("@", 1)[-1]
    hostport, question, _ = rest.partition("?")
    if len(hostport) > 80 or not _SHOWABLE.fullmatch(hostport):
        hostport = "…"
    return f"{scheme}:{user}{hostport}{'?…' if question else ''}"


def check_ice_url(url: object) -> str:
    """``url`` if aiortc parses it and uses it; otherwise :class:`IceUrlError` naming
    what is wrong (without any credential the URL carries).

    Raises:
        TypeError: ``url`` is not a string.
        IceUrlError: the URL is malformed, carries credentials, or is one aiortc ignores.
    """
    if not isinstance(url, str):
        raise TypeError(f"an ICE server URL must be a string, got {type(url).__name__}")
    shown = shown_ice_url(url)
    scheme, colon, rest = url.partition(":")
    hostport, question, query = rest.partition("?")
    if "@" in url or (question and not _TRANSPORT.fullmatch(query)):
        raise IceUrlError(f"{shown!r} carries credentials or a query other than "
                          "?transport=: credentials go in the server's username and "
                          "credential, not in the URL",
                          credentials=True)
    odd = next((c for c in url if not "!" <= c <= "~"), None)
    if odd is not None:
        raise IceUrlError(f"{shown!r} contains {odd!r} (a space, a control or a non-ASCII "
                          f"character); expected {_FORM}")
    if not colon or scheme not in ("stun", "turn", "turns"):
        hint = " (aiortc ignores stuns: servers)" if scheme == "stuns" else ""
        raise IceUrlError(f"{shown!r} must start with stun:, turn: or turns:{hint}; "
                          f"expected {_FORM}")
    if question:
        allowed = {"stun": (), "turn": ("udp", "tcp"), "turns": ("tcp",)}[scheme]
        value = query.partition("=")[2]
        if value not in allowed:
            accepted = (f"?transport={'|'.join(allowed)} only" if allowed
                        else "no ?transport=")
            raise IceUrlError(f"{shown!r}: a {scheme}: URL takes {accepted} (aiortc refuses "
                              f"or ignores any other); expected {_FORM}")
    if hostport.startswith("[") or hostport.count(":") > 1:
        raise IceUrlError(f"{shown!r}: aiortc cannot use an IPv6 address in an ICE server "
                          "URL; give a host name or an IPv4 address")
    host, colon, port = hostport.partition(":")
    if not host:
        raise IceUrlError(f"{shown!r} names no host; expected {_FORM}")
    if colon and (not _PORT.fullmatch(port) or not 1 <= int(port) <= 65535):
        raise IceUrlError(f"{shown!r}: the port must be a number from 1 to 65535")
    if not _valid_host(host):
        raise IceUrlError(f"{shown!r}: the host is not a host name or an IPv4 address")
    return url


def _valid_host(host: str) -> bool:
    """An IPv4 address, or a DNS name (labels of letters, digits and inner hyphens,
    at most 253 characters, an optional final dot) that is not all digits and dots."""
    try:
        return ipaddress.ip_address(host).version == 4
    except ValueError:
        pass
    name = host[:-1] if host.endswith(".") else host
    if not name or len(name) > 253 or re.fullmatch(r"[0-9.]+", name):
        return False
    return all(_HOST_LABEL.fullmatch(label) for label in name.split("."))
