"""HTTP(S) endpoints: a URL a process may send requests, and credentials, to, parsed,
normalized and matched against an allow-list.

An endpoint is an ``http``/``https`` URL with a host, without credentials
(``user:password@``), query, fragment, %-escapes or empty, ``.`` and ``..`` path
segments. Its normal form has the scheme and host in lower case, no default port and no
trailing ``/``. A URL is allowed by an endpoint when its scheme, host and port are the
endpoint's and its path is the endpoint's path or under it, segment by segment
(``/v1`` allows ``/v1`` and ``/v1/x``, not ``/v1x`` or ``/v2``).

Used by :class:`voxflow.settings.Settings` (``VOXFLOW_LLM_ENDPOINTS``) and
:mod:`voxflow.llm.endpoints` (where a declared LLM may send its requests).
"""

from __future__ import annotations

import ipaddress
import re
import urllib.parse
from collections.abc import Callable, Iterable
from typing import NamedTuple

__all__ = ["endpoint_allowed", "normalize_endpoint", "normalize_endpoints"]

_MAX_URL = 2048
_DEFAULT_PORTS = {"http": 80, "https": 443}
_HOST_NAME = re.compile(r"[a-z0-9_-]+(\.[a-z0-9_-]+)*\.?")  # a name or IPv4 address


class _Endpoint(NamedTuple):
    scheme: str
    host: str
    port: int
    segments: tuple[str, ...]

    def url(self) -> str:
        netloc = f"[{self.host}]" if ":" in self.host else self.host
        if self.port != _DEFAULT_PORTS[self.scheme]:
            netloc += f":{self.port}"
        return f"{self.scheme}://{netloc}" + "".join(f"/{s}" for s in self.segments)


def _parse(url: object) -> _Endpoint:
    if not isinstance(url, str) or not url.strip():
        raise ValueError("must be an http(s) URL")
    url = url.strip()
    if len(url) > _MAX_URL or any(c.isspace() or not c.isprintable() or c == "\\"
                                  for c in url):
        raise ValueError(f"must be one http(s) URL of at most {_MAX_URL} characters, "
                         "without spaces or backslashes")
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"is not a valid URL ({exc})") from None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS:
        raise ValueError("must start with http:// or https://")
    if "@" in parts.netloc:
        raise ValueError("must not carry credentials (user:password@): the provider's "
                         "key comes from its environment variable")
    if not parts.hostname:
        raise ValueError("names no host")
    if port == 0:
        raise ValueError("has port 0")
    host = parts.hostname.lower()
    if ":" in host:
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError("has a malformed IPv6 host") from None
    elif not _HOST_NAME.fullmatch(host):
        raise ValueError("has a host that is not a name or an address (letters, digits, "
                         "'-', '_' and '.')")
    shown_host = f"[{host}]" if ":" in host else host
    if parts.netloc.lower() not in (shown_host, f"{shown_host}:{port}"):
        raise ValueError("has a malformed host[:port]")  # "[::1]x", "h:08080", ...
    if parts.query or parts.fragment or url.endswith(("?", "#")):
        raise ValueError("must not have a ?query or #fragment")
    if "%" in parts.path:
        raise ValueError("must not have %-escapes in its path")
    segments = tuple(parts.path.split("/")[1:])
    if segments and segments[-1] == "":
        segments = segments[:-1]  # one trailing slash: the same endpoint
    if any(s in ("", ".", "..") for s in segments):
        raise ValueError("must not have empty, '.' or '..' path segments")
    return _Endpoint(scheme, host, _DEFAULT_PORTS[scheme] if port is None else port, segments)


def normalize_endpoint(url: object) -> str:
    """``url`` as voxflow compares and sends it: the scheme and host in lower case, no
    default port, no trailing ``/``.

    Raises:
        ValueError: it is not an ``http``/``https`` URL with a host, or it has
            credentials, a query, a fragment, %-escapes, or ``.``/``..``/empty path
            segments (the message never repeats the URL).
    """
    return _parse(url).url()


def normalize_endpoints(urls: Iterable[object], label: Callable[[int], str]) -> list[str]:
    """Each of ``urls`` in its normal form (:func:`normalize_endpoint`), in order.

    Raises:
        ValueError: one is not an endpoint: the message is ``label(i)`` (``i`` its
            position, from 0), then why.
    """
    normalized = []
    for i, url in enumerate(urls):
        try:
            normalized.append(normalize_endpoint(url))
        except ValueError as exc:
            raise ValueError(f"{label(i)} {exc}") from None
    return normalized


def endpoint_allowed(url: str, allowed: Iterable[str]) -> bool:
    """Whether ``url`` is one of ``allowed`` or under one (same scheme, host and port;
    the allowed path a prefix of its path, segment by segment). An unparsable ``url``
    (or entry) is not allowed."""
    try:
        wanted = _parse(url)
    except ValueError:
        return False
    for entry in allowed:
        try:
            base = _parse(entry)
        except ValueError:
            continue
        if (wanted[:3] == base[:3]
                and wanted.segments[:len(base.segments)] == base.segments):
            return True
    return False
