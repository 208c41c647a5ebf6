"""An OpenAI-compatible LLM provider on loopback that misbehaves on demand: the far side
of the provider boundary for benchmarks/faults.py and the tests of a call through it
(adapters/tests/test_llm_provider_faults.py). litellm reaches it through an endpoint the
code names (``LLM({"model": "openai/...", "api_base": provider.url})``).

Modes (``provider.mode``, per request from then on): ``ok`` streams :data:`ANSWER`;
``hang`` reads the request and never answers (until the server stops); ``reset``
closes the connection with a TCP reset before any byte; ``garbage`` answers 200 with an
event stream whose events are not JSON.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import socket
import struct
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

__all__ = ["ANSWER", "KEY", "MODES", "FaultyProvider", "faulty_provider"]

ANSWER = "Yes, I am still here."
KEY = "sk-faults-" + "0123456789abcdef"
MODES = ("ok", "hang", "reset", "garbage")


@dataclass
class FaultyProvider:
    """The provider's mode, its URL and what it was asked (monotonic request times and
    the mode each met)."""

    mode: str = "ok"
    url: str = ""
    requests: list[tuple[float, str]] = field(default_factory=list)
    stopping: threading.Event = field(default_factory=threading.Event)

    def llm_config(self, *, timeout: float = 2.0, retries: int = 1) -> dict[str, object]:
        """The LLM mapping of a flow that talks to this provider (an endpoint named by
        code; the key is this server's own)."""
        return {"model": "openai/faulty", "api_base": self.url, "api_key": KEY,
                "timeout": timeout, "retries": retries, "retry_backoff": 0.1}

    def count(self, mode: str) -> int:
        return sum(1 for _, m in self.requests if m == mode)


def _handler(provider: FaultyProvider) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            with contextlib.suppress(OSError):  # the client gave up: fine
                self._answer()

        def _answer(self) -> None:
            self.rfile.read(int(self.headers.get("content-length") or 0))
            mode = provider.mode
            provider.requests.append((time.monotonic(), mode))
            if mode == "hang":
                provider.stopping.wait()
                return
            if mode == "reset":
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                           struct.pack("ii", 1, 0))
                self.connection.close()
                self.close_connection = True
                return
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            if mode == "garbage":
                for junk in (b"data: \x00\xff{{not json\n\n", b"data: <html>502</html>\n\n",
                             b"data: [DONE]\n\n"):
                    self._chunk(junk)
            else:
                for piece in ANSWER.split(" "):
                    chunk = {"id": "c", "object": "chat.completion.chunk", "created": 1,
                             "model": "faulty", "choices": [{
                                 "index": 0, "delta": {"content": piece + " "},
                                 "finish_reason": None}]}
                    self._chunk(f"data: {json.dumps(chunk)}\n\n".encode())
                done = {"id": "c", "object": "chat.completion.chunk", "created": 1,
                        "model": "faulty", "choices": [{"index": 0, "delta": {},
                                                        "finish_reason": "stop"}]}
                self._chunk(f"data: {json.dumps(done)}\n\n".encode())
                self._chunk(b"data: [DONE]\n\n")
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

        def _chunk(self, data: bytes) -> None:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

    return Handler


@contextlib.contextmanager
def faulty_provider(mode: str = "ok") -> Iterator[FaultyProvider]:
    """The provider on a free loopback port, in ``mode``, until the block ends."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}")
    provider = FaultyProvider(mode)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler(provider))
    server.daemon_threads = True
    provider.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield provider
    finally:
        provider.stopping.set()
        server.shutdown()
        server.server_close()
