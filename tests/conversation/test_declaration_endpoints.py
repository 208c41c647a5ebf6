"""A declaration cannot send the provider's credentials anywhere: where a declared LLM
goes, and what it carries, come from code or from ``VOXFLOW_LLM_ENDPOINTS``.

Real litellm and a real HTTP server on loopback that records every request it gets (the
far side of the provider boundary): a refused declaration must never reach it, and the
allowed one shows it would have seen the environment's key.
"""

from __future__ import annotations

import http.server
import json
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from voxflow import Flow
from voxflow.conversation.config import class_config
from voxflow.endpoints import endpoint_allowed, normalize_endpoint
from voxflow.errors import DeclarationError
from voxflow.llm.endpoints import DECLARABLE_LLM_PARAMETERS, llm_endpoints, set_llm_endpoints

pytestmark = pytest.mark.unit

KEY = "sk-env-" + "0f1e2d3c4b5a6978"


@dataclass
class Recorder:
    """An OpenAI-compatible server that answers every chat completion and keeps each
    request's path and headers."""

    requests: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    port: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    seen = Recorder()

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length") or 0))
            seen.requests.append((self.path, {k.lower(): v for k, v in self.headers.items()}))
            body = json.dumps({
                "id": "c", "object": "chat.completion", "created": 1, "model": "m",
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": "from the recorder"}}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}
            ).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    seen.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield seen
    server.shutdown()
    server.server_close()


@pytest.fixture(autouse=True)
def environment_key(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("HUGGINGFACE_API_KEY", KEY)
    monkeypatch.setenv("HF_TOKEN", KEY)
    previous = set_llm_endpoints(())
    yield
    set_llm_endpoints(previous)


def _declaration(llm: Any) -> dict[str, Any]:
    return {
        "schema": "voxflow.flow/v1", "name": "Redirected",
        "conversational": {"llm": llm},
        "methods": {"handle_x": {"listen": "x", "do": {"call": "llm", "with": {
            "prompt": "${state.current_user_message}"}}}},
    }


def _load(llm: Any, **kwargs: Any) -> Any:
    return Flow.from_declaration(contents=json.dumps(_declaration(llm)), **kwargs)


def _llm(flow: Any) -> Any:
    return class_config(type(flow)).llm


def _ask(flow: Any) -> Any:
    return _llm(flow).call("hello")


# -- the endpoint: from code or VOXFLOW_LLM_ENDPOINTS, never the declaration alone -----


@pytest.mark.parametrize("key", ["api_base", "base_url"])
def test_a_declared_endpoint_is_refused_naming_the_field_and_nothing_is_sent(
    recorder: Recorder, key: str
) -> None:
    with pytest.raises(DeclarationError) as refused:
        _load({"model": "openai/gpt-4o-mini", key: recorder.url})
    assert refused.value.path == f"conversational.llm.{key}"
    assert "VOXFLOW_LLM_ENDPOINTS" in str(refused.value)
    assert "llm_endpoints=" in str(refused.value)
    assert recorder.requests == []


def test_an_endpoint_hidden_in_params_is_refused(recorder: Recorder) -> None:
    with pytest.raises(DeclarationError) as refused:
        _load({"model": "openai/gpt-4o-mini", "params": {"api_base": recorder.url}})
    assert refused.value.path == "conversational.llm.params.api_base"
    assert recorder.requests == []


def test_an_endpoint_allowed_in_code_gets_the_request(recorder: Recorder) -> None:
    # The control: the recorder does see a request, with the environment's key, when
    # the endpoint is allowed: what every refusal here keeps from it.
    flow = _load({"model": "openai/gpt-4o-mini", "api_base": recorder.url},
                 llm_endpoints=[f"http://127.0.0.1:{recorder.port}"])
    assert _ask(flow).content == "from the recorder"
    ((path, headers),) = recorder.requests
    assert path == "/v1/chat/completions"
    assert headers.get("authorization") == f"Bearer {KEY}"


def test_an_endpoint_allowed_by_the_setting_gets_the_request(recorder: Recorder) -> None:
    from voxflow.settings import Settings

    settings = Settings.from_env({"VOXFLOW_LLM_ENDPOINTS": f" {recorder.url}/ , "
                                  "https://llm.example.com/v1"})
    assert settings.llm_endpoints == (recorder.url, "https://llm.example.com/v1")
    set_llm_endpoints(settings.llm_endpoints)  # what the CLI does at start-up
    assert llm_endpoints() == settings.llm_endpoints
    flow = _load({"model": "openai/gpt-4o-mini", "api_base": recorder.url + "/"})
    assert _ask(flow).content == "from the recorder"
    assert len(recorder.requests) == 1


@pytest.mark.parametrize("declared", [
    "http://127.0.0.1:{port}/v2",  # another path than the allowed one
    "http://127.0.0.1:{other}/v1",  # another port
    "https://127.0.0.1:{port}/v1",  # another scheme
    "http://localhost:{port}/v1",  # another name for the host: not the allowed one
    "http://127.0.0.1:{port}/v1/../../elsewhere",
    "http://127.0.0.1:{port}/v1x",  # a prefix, not a path segment
])
def test_only_the_allowed_endpoint_and_paths_under_it_pass(
    recorder: Recorder, declared: str
) -> None:
    url = declared.format(port=recorder.port, other=recorder.port + 1)
    with pytest.raises(DeclarationError) as refused:
        _load({"model": "openai/gpt-4o-mini", "api_base": url},
              llm_endpoints=[recorder.url])
    assert refused.value.path == "conversational.llm.api_base"
    assert recorder.requests == []


def test_a_url_with_credentials_is_refused_without_echoing_them(recorder: Recorder) -> None:
    with pytest.raises(DeclarationError) as refused:
        _load({"model": "openai/gpt-4o-mini",
               "api_base": f"http://me:hunter2@127.0.0.1:{recorder.port}/v1"},
              llm_endpoints=[recorder.url])
    assert "hunter2" not in str(refused.value)
    assert recorder.requests == []


def test_voxflow_chat_refuses_the_endpoint_in_one_line_unless_the_setting_allows_it(
    recorder: Recorder, tmp_path: Path
) -> None:
    import subprocess
    import sys

    doc = json.dumps({"schema": "voxflow.flow/v1", "name": "Redirected", "conversational": {
        "llm": {"model": "openai/gpt-4o-mini", "api_base": recorder.url, "retries": 0}}})
    (tmp_path / "declared.py").write_text(
        "from voxflow import Flow\n"
        f"Redirected = type(Flow.from_declaration(contents={doc!r}))\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("VOXFLOW_")}
    env["OPENAI_API_KEY"] = KEY

    def chat(**extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "voxflow.cli", "chat", "declared.py:Redirected"],
            cwd=tmp_path, input="what is the meaning of life?\nexit\n",
            env={**env, **extra}, capture_output=True, text=True, timeout=120, check=False)

    refused = chat()
    assert refused.returncode == 2, refused.stderr
    first, *fields = refused.stderr.strip().splitlines()  # a line per refused field
    assert first.startswith("error: ") and "DeclarationError" in first
    (field,) = fields
    assert field.strip().startswith("conversational.llm.api_base: ")
    assert "VOXFLOW_LLM_ENDPOINTS" in field and "Traceback" not in refused.stderr
    assert recorder.requests == []
    allowed = chat(VOXFLOW_LLM_ENDPOINTS=recorder.url)
    assert allowed.returncode == 0, allowed.stderr
    assert "Assistant: from the recorder" in allowed.stdout
    assert len(recorder.requests) == 1


# -- credentials and everything else that could redirect a request --------------------


@pytest.mark.parametrize("extra", [
    {"api_key": "sk-declared-key-123456"},
    {"headers": {"Authorization": "Bearer x"}},
    {"extra_headers": {"Host": "evil.example"}},
    {"api_version": "2024-01-01"},
    {"custom_llm_provider": "openai"},
    {"aws_access_key_id": "AKIA0000"},
    {"vertex_credentials": "{}"},
    {"azure_ad_token": "t"},
    {"organization": "org-x"},
    {"extra_body": {"x": 1}},
    {"proxy": "http://127.0.0.1:1"},
    {"metadata": {"a": 1}},
    {"callbacks": ["langfuse"]},
])
def test_a_parameter_that_may_redirect_or_carry_credentials_is_refused(
    recorder: Recorder, extra: dict[str, Any]
) -> None:
    ((name, _),) = extra.items()
    with pytest.raises(DeclarationError) as refused:
        _load({"model": "openai/gpt-4o-mini", "api_base": recorder.url, **extra},
              llm_endpoints=[recorder.url])
    assert refused.value.path == f"conversational.llm.{name}"
    assert recorder.requests == []


@pytest.mark.parametrize("model", [
    "huggingface/http://127.0.0.1:{port}/v1",  # litellm sends HF's key to a URL model
    "oobabooga/https://127.0.0.1:{port}",
    "openai/gpt-4o-mini\nx",
    " openai/gpt-4o-mini",
])
def test_a_model_id_that_is_an_address_is_refused(recorder: Recorder, model: str) -> None:
    with pytest.raises(DeclarationError) as refused:
        _load(model.format(port=recorder.port))
    assert refused.value.path == "conversational.llm"
    with pytest.raises(DeclarationError) as refused:
        _load({"model": model.format(port=recorder.port)})
    assert refused.value.path == "conversational.llm.model"
    assert recorder.requests == []


def test_every_declared_llm_is_checked(recorder: Recorder) -> None:
    doc = {
        "schema": "voxflow.flow/v1", "name": "Everywhere",
        "conversational": {
            "router": {"llm": {"model": "openai/gpt-4o-mini", "api_key": "k1-0123456789"}},
            "intent_llm": {"model": "openai/gpt-4o-mini", "base_url": recorder.url},
            "answer_from_history_llm": {"model": "openai/gpt-4o-mini",
                                        "extra_headers": {"x": "y"}},
        },
        "methods": {
            "a": {"listen": "x", "do": {"call": "agent", "with": {
                "role": "r", "goal": "g", "llm": {"model": "openai/x", "api_base": "http://x"}}}},
            "b": {"listen": "y", "do": {"call": "llm", "with": {
                "prompt": "p", "llm": {"model": "huggingface/https://x.example/m"}}}},
            "c": {"listen": "z", "human_feedback": {"message": "ok?", "llm": {
                "model": "openai/x", "params": {"base_url": "http://x"}}}},
        },
    }
    with pytest.raises(DeclarationError) as refused:
        Flow.from_declaration(contents=json.dumps(doc))
    assert {path for path, _ in refused.value.errors} == {
        "conversational.router.llm.api_key", "conversational.intent_llm.base_url",
        "conversational.answer_from_history_llm.extra_headers",
        "methods.a.do.with.llm.api_base", "methods.b.do.with.llm.model",
        "methods.c.human_feedback.llm.params.base_url"}
    assert recorder.requests == []


def test_generation_parameters_and_mock_responses_stay_declarable() -> None:
    flow = _load({"model": "openai/gpt-4o-mini", "temperature": 0.2, "max_tokens": 64,
                  "top_p": 0.9, "stop": ["\n"], "seed": 7, "timeout": 5, "retries": 0,
                  "mock_response": "mocked"})
    assert _ask(flow).content == "mocked"


# -- fuzz: any declared llm mapping is a built LLM that stays home, or a DeclarationError --

_KEYS = st.sampled_from(["model", "api_base", "base_url", "api_key", "temperature",
                         "headers", "params", "mock_response", "max_tokens", "seed",
                         "custom_llm_provider", "x"])
_VALUES = st.one_of(
    st.text(max_size=30), st.integers(-5, 5), st.floats(allow_nan=True), st.none(),
    st.sampled_from(["openai/gpt-4o-mini", "http://127.0.0.1:9/v1", "huggingface/https://e",
                     "https://llm.example.com/v1", "http://u:p@127.0.0.1:9", "mocked"]),
    st.dictionaries(st.sampled_from(["api_base", "base_url", "seed", "api_key"]),
                    st.sampled_from(["http://127.0.0.1:9/v1", "x", "1"]), max_size=2),
)


@settings(max_examples=300, derandomize=True, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(llm=st.one_of(st.text(max_size=40), st.dictionaries(_KEYS, _VALUES, max_size=5)))
def test_fuzz_a_declared_llm_is_refused_or_goes_only_where_allowed(llm: Any) -> None:
    allowed = ["https://llm.example.com/v1"]
    try:
        flow = _load(llm, llm_endpoints=allowed)
    except DeclarationError as exc:
        assert exc.path.startswith("conversational.llm")
        assert "u:p@" not in str(exc)
        return
    config = _llm(flow).config
    sent = {**config.params, "api_base": config.api_base}
    for key in ("api_base", "base_url"):
        assert sent.get(key) is None or sent[key] == normalize_endpoint(sent[key]), sent
        assert sent.get(key) is None or endpoint_allowed(sent[key], allowed), sent
    assert set(sent) <= DECLARABLE_LLM_PARAMETERS | {"api_base", "base_url"}
    assert "://" not in config.model


@settings(max_examples=500, derandomize=True, deadline=None, database=None)
@given(url=st.one_of(
    st.text(max_size=60),
    st.builds(lambda scheme, host, port, path, tail: f"{scheme}://{host}{port}{path}{tail}",
              st.sampled_from(["http", "HTTPS", "ftp", "javascript", ""]),
              st.sampled_from(["127.0.0.1", "LLM.example.com", "[::1]", "u:p@h", "", "h\\x"]),
              st.sampled_from(["", ":8080", ":0", ":99999", ":x", ":443"]),
              st.text(st.sampled_from("/v1.%@?#: \n"), max_size=12),
              st.sampled_from(["", "/", "?q=1", "#f"]))))
def test_fuzz_an_endpoint_is_normalized_once_or_refused(url: str) -> None:
    try:
        normalized = normalize_endpoint(url)
    except ValueError as exc:
        assert "p@" not in str(exc) and (len(url) < 8 or url not in str(exc))
        return
    assert normalize_endpoint(normalized) == normalized
    assert normalized.startswith(("http://", "https://"))
    assert not set("@?#% \\") & set(normalized) and not normalized.endswith("/")
    assert endpoint_allowed(url, [normalized]) and endpoint_allowed(normalized, [url])
    assert not endpoint_allowed(normalized + "x", [normalized])


@pytest.mark.parametrize("url", ["HTTP://%", "http://h%41st/v1", "http://[::1x]/", "http://a..b/",
                                 "http://exa mple.com", "http://ex~ample.com/v1"])
def test_a_host_that_is_no_name_or_address_is_refused(url: str) -> None:
    # 'HTTP://%' was normalized to 'http://%' (found by the fuzz test below in CI)
    with pytest.raises(ValueError, match=r"host|spaces|URL"):
        normalize_endpoint(url)


def test_a_bad_allowed_endpoint_is_named_by_its_position() -> None:
    """The endpoints allowed in code and at start-up are refused, one bad entry named by
    where it is (and nothing changes)."""
    with pytest.raises(ValueError, match=r"^llm_endpoints\[1\] must start with http"):
        _load("openai/gpt-4o-mini", llm_endpoints=["http://127.0.0.1:9", "ftp://x"])
    before = llm_endpoints()
    with pytest.raises(ValueError, match=r"^LLM endpoint 2 names no host$"):
        set_llm_endpoints(["http://127.0.0.1:9", "http://"])
    assert llm_endpoints() == before
