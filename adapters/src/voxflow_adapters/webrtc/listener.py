"""The HTTP listener of the page and the signalling: bounded, timed and quiet.

aiohttp's defaults suit a trusted network, not a port anyone can reach: an idle or
half-sent request held its connection for an hour (``keepalive_timeout``), a body that
never came held ``POST /offer`` forever, nothing bounded the connections one client
could open, a client that left mid-body or sent a header over 8,190 bytes was logged as
an ERROR with a traceback, and every response named aiohttp's and Python's versions.
:class:`Listener` serves an app with:

* **header timeout**: a request's headers must have arrived ``header_timeout`` seconds
  after the connection opened or the previous response went out (aiohttp's keep-alive
  timer, which only fires on a connection waiting for a request: an idle keep-alive
  connection is closed then too); a TLS handshake gets as long;
* **body timeout**: :meth:`read_body` reads a body within ``body_timeout`` seconds;
* **a bound**: past ``max_connections`` open connections, a new one is answered ``503``
  and closed at once (logged once per burst), so slow clients cannot exhaust the
  process's file descriptors;
* **client errors in one line**: a malformed request (a line or header too long, not
  HTTP) is a WARNING, a client gone mid-request an INFO, each one line with no
  traceback and none of the client's bytes (a header may hold a token); every other
  failure keeps aiohttp's ERROR with its traceback;
* **headers**: ``Server: voxflow`` (no version), ``X-Content-Type-Options: nosniff``,
  ``X-Frame-Options: DENY``, ``Referrer-Policy: no-referrer`` on every response, and a
  ``Content-Security-Policy`` of ``default-src 'none'; frame-ancestors 'none'`` on any
  response that does not set its own (the page's allows itself, never a frame).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestHandler

__all__ = ["SERVER_NAME", "BodyTimeoutError", "Listener", "harden_headers", "read_body"]

logger = logging.getLogger("voxflow_adapters.webrtc.server")

SERVER_NAME = "voxflow"
"""The ``Server`` header of every response (no version: it only helps an attacker)."""

_DEFAULT_CSP = "default-src 'none'; frame-ancestors 'none'"
_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
}
_BUSY_TEXT = b"too many connections; retry shortly\n"
_BUSY = (b"HTTP/1.1 503 Service Unavailable\r\nServer: " + SERVER_NAME.encode()
         + b"\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: "
         + str(len(_BUSY_TEXT)).encode() + b"\r\nRetry-After: 1\r\nConnection: close"
         b"\r\nX-Content-Type-Options: nosniff\r\n\r\n" + _BUSY_TEXT)


class BodyTimeoutError(Exception):
    """A request body did not arrive within the body timeout."""


def harden_headers(response: web.StreamResponse) -> None:
    """Set the security headers on ``response`` (see the module docstring)."""
    headers = response.headers
    headers["Server"] = SERVER_NAME
    for name, value in _HEADERS.items():
        headers.setdefault(name, value)
    headers.setdefault("Content-Security-Policy", _DEFAULT_CSP)


async def _on_prepare(request: web.Request, response: web.StreamResponse) -> None:
    harden_headers(response)


async def read_body(request: web.BaseRequest, seconds: float) -> bytes:
    """The request's body, read within ``seconds``.

    Raises:
        BodyTimeoutError: it did not all arrive in time.
        aiohttp.web.HTTPRequestEntityTooLarge: it is over the app's ``client_max_size``.
    """
    try:
        async with asyncio.timeout(seconds):
            return await request.read()
    except TimeoutError:
        raise BodyTimeoutError(f"the body did not arrive within {seconds:g} s") from None


class _ClientErrorLog(logging.LoggerAdapter[logging.Logger]):
    """aiohttp's server logger, with what a client did wrong as one line, no traceback."""

    def exception(self, msg: object, *args: object, exc_info: Any = True,
                  **kwargs: Any) -> None:
        exc = exc_info if isinstance(exc_info, BaseException) else None
        if isinstance(exc, HttpProcessingError):
            # the type and status only: the message quotes the client's bytes
            self.logger.warning("refused a malformed HTTP request (%s, %s)",
                                type(exc).__name__, exc.code)
        elif isinstance(exc, ConnectionError):
            self.logger.info("a client disconnected before its request was read (%s)",
                             type(exc).__name__)
        else:
            self.logger.error(msg, *args, exc_info=exc_info, **kwargs)


class _Handler(RequestHandler):
    """aiohttp's connection handler; its own error responses get our headers too."""

    def handle_error(self, request: web.BaseRequest, status: int = 500,
                     exc: BaseException | None = None,
                     message: str | None = None) -> web.StreamResponse:
        response = super().handle_error(request, status, exc, message)
        harden_headers(response)
        return response


class _Busy(asyncio.Protocol):
    """A connection over the bound: a 503, then closed."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        transport.write(_BUSY)
        transport.close()


class Listener:
    """``app`` served on ``host:port`` (``ssl_context``: HTTPS) under the limits.

    Args:
        app: the aiohttp application (its ``on_response_prepare`` gets
            :func:`harden_headers`).
        header_timeout: seconds a request's headers (or a TLS handshake) may take.
        max_connections: open connections beyond which a new one gets a 503.
        lingering: seconds an unread body is drained after a response (then closed).
    """

    def __init__(self, app: web.Application, *, host: str, port: int,
                 ssl_context: ssl.SSLContext | None = None, header_timeout: float = 10.0,
                 max_connections: int = 256, lingering: float = 2.0) -> None:
        if not header_timeout > 0 or max_connections < 1 or lingering < 0:
            raise ValueError("header_timeout must be > 0, max_connections >= 1 and "
                             "lingering >= 0")
        app.on_response_prepare.append(_on_prepare)
        self.app = app
        self.host = host
        self.port = port
        self.ssl_context = ssl_context
        self.header_timeout = float(header_timeout)
        self.max_connections = int(max_connections)
        self.lingering = float(lingering)
        self.refused = 0
        """Connections answered 503 for being over the bound."""
        self._log = _ClientErrorLog(logging.getLogger("aiohttp.server"), {})
        self._runner: web.AppRunner | None = None
        self._server: asyncio.Server | None = None
        self._last_refusal_log = 0.0

    @property
    def open_connections(self) -> int:
        """Connections being served now."""
        server = self._runner.server if self._runner is not None else None
        return len(server.connections) if server is not None else 0

    async def start(self) -> int:
        """Listen; returns the bound port."""
        runner = web.AppRunner(self.app, access_log=None)
        await runner.setup()
        self._runner = runner
        server = runner.server
        assert server is not None
        loop = asyncio.get_running_loop()

        # (our logger adapter has a Logger's API; None: no access log, as AppRunner's)
        options: dict[str, Any] = {
            "keepalive_timeout": self.header_timeout, "logger": self._log,
            "access_log": None, "lingering_time": self.lingering,
        }

        def connection() -> asyncio.Protocol:
            if len(server.connections) >= self.max_connections:
                self._refuse()
                return _Busy()
            return _Handler(server, loop=loop, **options)

        try:
            self._server = await loop.create_server(
                connection, self.host, self.port, ssl=self.ssl_context,
                ssl_handshake_timeout=self.header_timeout if self.ssl_context else None)
        except BaseException:
            await runner.cleanup()
            self._runner = None
            raise
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self.port

    def _refuse(self) -> None:
        self.refused += 1
        now = time.monotonic()
        if now - self._last_refusal_log >= 10.0:
            self._last_refusal_log = now
            logger.warning("refusing connections: %d open, the bound (%d refused so far)",
                           self.max_connections, self.refused)

    async def aclose(self) -> None:
        """Stop listening and close every connection."""
        server, self._server = self._server, None
        if server is not None:
            server.close()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if server is not None:
            await server.wait_closed()
