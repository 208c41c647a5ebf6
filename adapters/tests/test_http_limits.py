"""The page's HTTP server against slow, greedy and broken clients, over real sockets: a
request's headers and an offer's body have a deadline, open connections a bound, a
client's mistake is one log line (no traceback, none of its bytes), and every response
carries the security headers and no version (the probe: 150 half-open connections still
open after 30 s, tracebacks at ERROR, ``Server: Python/3.11 aiohttp/3.x``)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import pytest
from voxflow_adapters.hosting.wire import ResumeRequest
from voxflow_adapters.webrtc.signaling import (
    CallRefused,
    OfferAnswer,
    ServerSettings,
    SignalingServer,
)

pytestmark = pytest.mark.unit

TOKEN = "limits-test-token"
WITHIN = 5.0  # a generous bound on "closed": the timeouts under test are 0.5 s


class Refusing(SignalingServer):
    """The page and signalling; every checked offer is refused (no call behind it), or
    fails like a bug when its SDP says so."""

    async def answer_offer(self, sdp: str, resume: ResumeRequest | None = None
                           ) -> OfferAnswer:
        if "bug" in sdp:
            raise RuntimeError("a bug in the answering code")
        raise CallRefused(503, "no call here", "busy")


@pytest.fixture
async def server(request: pytest.FixtureRequest) -> AsyncIterator[Refusing]:
    options = getattr(request, "param", {})
    settings = ServerSettings(port=0, token=TOKEN, **{"header_timeout": 0.5,
                                                      "body_timeout": 0.5, **options})
    async with Refusing(settings=settings) as served:
        yield served


async def connect(server: SignalingServer) -> tuple[asyncio.StreamReader,
                                                     asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", server.port)


async def closed_by_server(reader: asyncio.StreamReader) -> bytes:
    """Everything the server sends until it closes the connection (within WITHIN s)."""
    async with asyncio.timeout(WITHIN):
        return await reader.read()


async def exchange(server: SignalingServer, data: bytes) -> tuple[int, dict[str, str], bytes]:
    """One request on its own connection: the status, headers and body of the answer."""
    reader, writer = await connect(server)
    writer.write(data)
    raw = await closed_by_server(reader)
    writer.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
    return int(status_line.split()[1]), headers, body


def get(path: str, *extra: str) -> bytes:
    return "\r\n".join([f"GET {path} HTTP/1.1", "Host: 127.0.0.1", "Connection: close",
                        *extra, "", ""]).encode()


def post_offer(body: bytes, *, length: int | None = None, token: str = TOKEN) -> bytes:
    head = ["POST /offer HTTP/1.1", "Host: 127.0.0.1", f"Authorization: Bearer {token}",
            "Content-Type: application/json", f"Content-Length: {length or len(body)}",
            "Connection: close", "", ""]
    return "\r\n".join(head).encode() + body


async def test_half_sent_and_idle_connections_are_closed_after_the_header_timeout(
    server: Refusing,
) -> None:
    slow = []
    for _ in range(30):  # a slowloris: a header line now and then, never the blank line
        reader, writer = await connect(server)
        writer.write(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        slow.append((reader, writer))
    idle = []
    for _ in range(15):  # a complete request without the token, then kept alive
        reader, writer = await connect(server)
        writer.write(b"GET /ice-servers HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        idle.append((reader, writer))

    async def dribble() -> None:
        for n in range(100):
            for _, writer in slow:
                if not writer.is_closing():
                    writer.write(f"X-Slow-{n}: 1\r\n".encode())
            await asyncio.sleep(0.1)

    dribbling = asyncio.create_task(dribble())
    try:
        answers = await asyncio.gather(*(closed_by_server(r) for r, _ in slow + idle))
    finally:
        dribbling.cancel()
    assert all(a == b"" for a in answers[:30])  # closed without an answer
    assert all(a.startswith(b"HTTP/1.1 401") for a in answers[30:])  # answered, then closed
    assert server._listener is not None and server._listener.open_connections == 0
    for _, writer in slow + idle:
        writer.close()


async def test_an_offer_whose_body_never_arrives_is_answered_408_and_closed(
    server: Refusing,
) -> None:
    reader, writer = await connect(server)
    writer.write(post_offer(b'{"type": "offer", "sdp": "', length=5000))
    answer = await closed_by_server(reader)
    assert answer.startswith(b"HTTP/1.1 408"), answer[:80]
    assert b"did not arrive within 0.5 s" in answer
    writer.close()


@pytest.mark.parametrize("server", [{"max_connections": 4, "header_timeout": 30.0}],
                         indirect=True)
async def test_connections_beyond_the_bound_are_answered_503_at_once(
    server: Refusing,
) -> None:
    held = [await connect(server) for _ in range(4)]
    for _, writer in held:
        writer.write(b"GET / HTTP/1.1\r\n")  # half-sent: each holds its connection
    listener = server._listener
    assert listener is not None
    async with asyncio.timeout(WITHIN):
        while listener.open_connections < 4:  # noqa: ASYNC110  # the server's own count
            await asyncio.sleep(0.01)
    status, headers, body = await exchange(server, get("/"))
    assert (status, headers["server"], body) == (503, "voxflow",
                                                 b"too many connections; retry shortly\n")
    assert headers["retry-after"] == "1" and listener.refused == 1
    held[0][1].close()  # one leaves: a new connection is served again
    async with asyncio.timeout(WITHIN):
        while listener.open_connections > 3:  # noqa: ASYNC110
            await asyncio.sleep(0.01)
    status, _, body = await exchange(server, get("/"))
    assert status == 200 and b"<html" in body
    for _, writer in held[1:]:
        writer.close()


async def test_a_clients_mistake_is_one_line_and_a_bug_keeps_its_traceback(
    server: Refusing, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="aiohttp")
    # a header over 8,190 bytes, holding the token: refused, not quoted in the log
    status, _, _ = await exchange(server, get("/", f"Authorization: Bearer {TOKEN}"
                                                   + "x" * 9000))
    assert status == 400
    # a client gone halfway through its offer's body
    _, writer = await connect(server)
    writer.write(post_offer(b'{"type": "offer"', length=5000))
    await asyncio.sleep(0.1)
    writer.transport.abort()
    await asyncio.sleep(0.3)
    mistakes = [r for r in caplog.records if r.name.startswith("aiohttp")]
    assert [(r.levelname, r.getMessage()) for r in mistakes] == [
        ("WARNING", "refused a malformed HTTP request (LineTooLong, 400)"),
        ("INFO", "a client disconnected before its request was read "
                 "(ConnectionResetError)"),
    ]
    assert not any(r.exc_info for r in mistakes)
    assert TOKEN not in caplog.text and "xxxx" not in caplog.text
    # our own failure is still an ERROR with its traceback
    caplog.clear()
    status, _, _ = await exchange(server, post_offer(b'{"type": "offer", "sdp": "bug"}'))
    [bug] = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert status == 500 and bug.exc_info is not None
    assert isinstance(bug.exc_info[1], RuntimeError)


async def test_every_response_has_the_security_headers_and_no_version(
    server: Refusing,
) -> None:
    answers = {
        "page": await exchange(server, get("/")),
        "script": await exchange(server, get("/static/app.js")),
        "style": await exchange(server, get("/static/style.css")),
        "icon": await exchange(server, get("/favicon.ico")),
        "missing": await exchange(server, get("/static/nope.js")),
        "no token": await exchange(server, get("/ice-servers")),
        "offer refused": await exchange(server, post_offer(b'{"type": "offer", "sdp": "v=0"}')),
        "not HTTP": await exchange(server, b"HELLO\r\n\r\n"),
        "header too long": await exchange(server, get("/", "X-Long: " + "a" * 9000)),
    }
    assert {name: status for name, (status, _, _) in answers.items()} == {
        "page": 200, "script": 200, "style": 200, "icon": 200, "missing": 404,
        "no token": 401, "offer refused": 503, "not HTTP": 400, "header too long": 400}
    for name, (_, headers, _) in answers.items():
        assert headers["server"] == "voxflow", name
        assert headers["x-content-type-options"] == "nosniff", name
        assert "frame-ancestors 'none'" in headers["content-security-policy"], name
        assert headers["x-frame-options"] == "DENY", name
        shown = " ".join(headers.values()).lower()
        assert "aiohttp" not in shown and "python" not in shown, (name, headers)
    page_csp = answers["page"][1]["content-security-policy"]
    assert page_csp.startswith("default-src 'self'") and "object-src 'none'" in page_csp
    script_csp = answers["script"][1]["content-security-policy"]
    assert script_csp == "default-src 'none'; frame-ancestors 'none'"
