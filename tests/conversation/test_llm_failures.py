"""How an LLM call fails: timeouts, retries before the first token only, errors that say why.

Real litellm throughout: ``mock_response=`` (exceptions and strings) for the offline
cases, and a small OpenAI-compatible HTTP server on loopback (the far side of the
provider boundary) where a test must count requests, hold a reply back past the timeout,
or cut a stream after its first tokens.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from litellm.exceptions import BadRequestError, RateLimitError

from voxflow.errors import ProviderError
from voxflow.llm import LLM
from voxflow.llm import policy as llm_policy

pytestmark = pytest.mark.unit

KEY = "sk-test-" + "9f8e7d6c5b4a3210"


@dataclass
class Provider:
    """A scripted OpenAI-compatible provider: one step per request (the last repeats).

    Steps: ``("status", code)``, ``("stream", [pieces], complete)`` (``complete=False``
    cuts the connection after the pieces), ``("sleep", seconds)``.
    """

    steps: list[tuple[Any, ...]]
    requests: list[float] = field(default_factory=list)
    url: str = ""

    def next_step(self) -> tuple[Any, ...]:
        self.requests.append(time.monotonic())
        index = min(len(self.requests), len(self.steps)) - 1
        return self.steps[index]


def _handler(provider: Provider) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            with contextlib.suppress(OSError):  # the client gave up (timeout): fine
                self._answer()

        def _answer(self) -> None:
            self.rfile.read(int(self.headers.get("content-length") or 0))
            step = provider.next_step()
            if step[0] == "sleep":
                time.sleep(step[1])
                step = ("stream", ["late"], True)
            if step[0] == "status":
                body = json.dumps({"error": {"message": f"Incorrect API key provided: {KEY}",
                                             "type": "server_error"}}).encode()
                self.send_response(step[1])
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            for i, piece in enumerate(step[1]):
                chunk = {"id": "c", "object": "chat.completion.chunk", "created": 1,
                         "model": "m", "choices": [{"index": 0, "delta": {"content": piece},
                                                    "finish_reason": None}]}
                self._chunk(f"data: {json.dumps(chunk)}\n\n".encode())
                if i == 0:
                    time.sleep(0.05)
            if step[2]:
                done = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
                        "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
                self._chunk(f"data: {json.dumps(done)}\n\n".encode())
                self._chunk(b"data: [DONE]\n\n")
                self.wfile.write(b"0\r\n\r\n")
            else:  # a broken chunk, then the connection drops mid-body
                self.wfile.write(b"ff\r\ndata: {")
                self.wfile.flush()
                self.connection.shutdown(2)

        def _chunk(self, data: bytes) -> None:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

    return Handler


@contextlib.contextmanager
def provider(*steps: tuple[Any, ...]) -> Iterator[Provider]:
    p = Provider(list(steps))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler(p))
    server.daemon_threads = True
    p.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield p
    finally:
        server.shutdown()
        server.server_close()


def served(p: Provider, **config: Any) -> LLM:
    return LLM({"model": "openai/test-model", "api_base": p.url, "api_key": KEY, **config})


@pytest.fixture(autouse=True)
def _no_provider_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY"):
        monkeypatch.delenv(name, raising=False)


# -- the cause in the message ------------------------------------------------------------


async def test_a_missing_key_is_named_in_the_message_before_any_request() -> None:
    with pytest.raises(ProviderError) as info:
        await LLM("openai/gpt-4o-mini").acall("hi")
    message = str(info.value)
    assert "OPENAI_API_KEY is not set" in message
    assert "export OPENAI_API_KEY=" in message
    assert info.value.retryable is False
    assert info.value.__cause__ is None  # no provider error: the check came first


async def test_a_missing_key_is_named_for_streams_and_other_providers() -> None:
    llm = LLM("anthropic/claude-3-5-haiku-latest")
    with pytest.raises(ProviderError, match="ANTHROPIC_API_KEY is not set"):
        async with llm.astream("hi") as stream:
            async for _ in stream:
                pass


async def test_the_provider_message_is_in_the_top_level_error_without_the_key() -> None:
    with provider(("status", 401)) as p, pytest.raises(ProviderError) as info:
        await served(p).acall("hi")
    message = str(info.value)
    assert "AuthenticationError" in message and "Incorrect API key provided" in message
    assert KEY not in message and "***" in message
    assert len(p.requests) == 1  # not transient: not retried


def test_redact_hides_environment_secrets_and_key_shapes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MY_SERVICE_TOKEN", "tok-123456789")
    text = llm_policy.redact(
        "tok-123456789 and sk-abcdefghijkl and Bearer abc.def.ghi and api_key='zzzzzzzz'"
    )
    assert "tok-123456789" not in text and "sk-abcdefghijkl" not in text
    assert "abc.def.ghi" not in text and "zzzzzzzz" not in text


# -- retries before the first token ---------------------------------------------------------


async def test_transient_failures_are_retried_until_an_answer() -> None:
    rate = RateLimitError(message="slow down", llm_provider="openai", model="m")
    llm = LLM({"model": "openai/gpt-4o-mini", "retry_backoff": 0.01},
              mock_response=[rate, "litellm.InternalServerError", "third time"])
    assert (await llm.acall("hi")).content == "third time"


async def test_retries_stop_after_the_configured_number() -> None:
    llm = LLM({"model": "openai/gpt-4o-mini", "retries": 1, "retry_backoff": 0.01},
              mock_response=["litellm.RateLimitError", "litellm.RateLimitError", "never"])
    with pytest.raises(ProviderError) as info:
        await llm.acall("hi")
    assert "after 2 attempts" in str(info.value) and "RateLimitError" in str(info.value)
    assert info.value.retryable is True


async def test_a_non_transient_failure_is_not_retried() -> None:
    bad = BadRequestError(message="bad prompt", llm_provider="openai", model="m")
    llm = LLM({"model": "openai/gpt-4o-mini", "retry_backoff": 0.01},
              mock_response=[bad, "never"])
    with pytest.raises(ProviderError, match="bad prompt"):
        await llm.acall("hi")


async def test_a_stream_failing_before_its_first_token_is_retried() -> None:
    llm = LLM({"model": "openai/gpt-4o-mini", "retry_backoff": 0.01},
              mock_response=["Exception: mock_streaming_error", "streamed fine"])
    async with llm.astream("hi") as stream:
        pieces = [piece async for piece in stream]
    assert "".join(pieces) == "streamed fine"


async def test_retries_wait_with_backoff_and_each_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with provider(("status", 503), ("status", 429), ("stream", ["o", "k"], True)) as p:
        llm = served(p, retry_backoff=0.2)
        with caplog.at_level(logging.WARNING, logger="voxflow.llm"):
            response = await llm.acall("hi", stream=True)
    assert response.content == "ok"
    assert len(p.requests) == 3
    gaps = [b - a for a, b in zip(p.requests, p.requests[1:], strict=False)]
    assert gaps[0] >= 0.2 * 0.75 and gaps[1] >= 0.4 * 0.75  # base, then doubled (±25 %)
    retries = [r.getMessage() for r in caplog.records if "retrying in" in r.getMessage()]
    assert len(retries) == 2
    assert all(KEY not in line for line in retries)


async def test_a_stream_cut_after_its_first_tokens_is_never_streamed_again() -> None:
    with provider(("stream", ["Hello", " there"], False), ("stream", ["again"], True)) as p:
        llm = served(p, retry_backoff=0.01)
        pieces: list[str] = []
        with pytest.raises(ProviderError) as info:
            async with llm.astream("hi") as stream:
                async for piece in stream:
                    pieces.append(piece)
    assert pieces == ["Hello", " there"]
    assert len(p.requests) == 1  # one request: the answer already spoken is not redone
    assert info.value.retryable is True  # transient, but the caller decides (e.g. next turn)


# -- the request timeout --------------------------------------------------------------------


async def test_a_silent_provider_fails_at_the_timeout_and_is_retried() -> None:
    with provider(("sleep", 3.0)) as p:
        llm = served(p, timeout=0.3, retries=1, retry_backoff=0.01)
        with pytest.raises(ProviderError) as info:
            await llm.acall("hi")
    assert "Timeout" in str(info.value) and "after 2 attempts" in str(info.value)
    assert len(p.requests) == 2


async def test_the_process_default_timeout_applies_to_models_without_one() -> None:
    previous = llm_policy.set_llm_defaults(timeout=0.3, retries=0)
    try:
        with provider(("sleep", 3.0)) as p, pytest.raises(ProviderError, match="Timeout"):
            await served(p).acall("hi")
        assert len(p.requests) == 1
    finally:
        llm_policy.set_llm_defaults(timeout=previous.timeout, retries=previous.retries)
    assert llm_policy.llm_defaults() == previous


@pytest.mark.parametrize(
    "values",
    [{"timeout": 0}, {"timeout": -1.0}, {"timeout": "30"}, {"retries": 11}, {"retries": 1.5},
     {"backoff": -0.1}, {"timeout": True}],
)
def test_invalid_defaults_are_rejected_and_change_nothing(values: dict[str, Any]) -> None:
    before = llm_policy.llm_defaults()
    with pytest.raises((ValueError, TypeError)):
        llm_policy.set_llm_defaults(**values)
    assert llm_policy.llm_defaults() == before


def test_default_policy_is_a_timeout_and_two_retries() -> None:
    defaults = llm_policy.LLMDefaults()
    assert (defaults.timeout, defaults.retries) == (llm_policy.DEFAULT_TIMEOUT, 2)
    assert 0 < defaults.timeout <= 60


@settings(max_examples=200, derandomize=True, deadline=None)
@given(secret=st.text(st.characters(min_codepoint=33, max_codepoint=126),
                      min_size=6, max_size=40),
       before=st.text(max_size=30), after=st.text(max_size=30))
def test_a_secret_never_survives_redaction(secret: str, before: str, after: str) -> None:
    error = BadRequestError(message=f"{before}{secret}{after}", llm_provider="openai",
                            model="m")
    message = str(llm_policy.provider_error(error, "openai/m", secrets=[secret]))
    assert secret not in message
    assert secret not in llm_policy.redact(before + secret + after + secret, secrets=[secret])
