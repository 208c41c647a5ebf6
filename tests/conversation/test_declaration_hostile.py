"""Hostile declarations: templates reach declared data only; parsing is bounded.

The provider side is real litellm (``mock_response=``); a litellm callback records the
messages litellm itself received, so "no secret reached the provider" is checked where
it matters, not in our own code.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import litellm
import pytest
import yaml
from litellm.integrations.custom_logger import CustomLogger

from voxflow import Flow
from voxflow.conversation.declaration import render_template
from voxflow.conversation.declaration_source import (
    MAX_DECLARATION_BYTES,
    MAX_DECLARATION_DEPTH,
    load_declaration_document,
)
from voxflow.errors import DeclarationError

pytestmark = pytest.mark.unit

SECRET = "sk-live-9f8e7d6c5b4a-PROBE"
PROBE = "${state.__class__.__init__.__globals__.sys.modules.os.environ.VOXFLOW_PROBE_KEY}"


class _ProviderSpy(CustomLogger):
    """Keeps every message list litellm was about to send."""

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[Any] = []

    def log_pre_api_call(self, model: Any, messages: Any, kwargs: Any) -> None:
        self.requests.append(messages)


@pytest.fixture
def provider(monkeypatch: pytest.MonkeyPatch) -> Iterator[_ProviderSpy]:
    monkeypatch.setenv("VOXFLOW_PROBE_KEY", SECRET)
    spy = _ProviderSpy()
    monkeypatch.setattr(litellm, "callbacks", [*litellm.callbacks, spy])
    yield spy


@pytest.fixture
def object_tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """Allowed code that hands non-data objects to the next method."""
    (tmp_path / "hostile_tools.py").write_text(
        textwrap.dedent(
            """
            import os

            def give_os(flow, value):
                return os

            def give_environ(flow, value):
                return os.environ

            def give_data(flow, value):
                return {"items": [{"name": "first"}, {"name": "second"}], "n": 2}
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    return "hostile_tools"


def _llm_doc(system: str, prompt: str = "hello", state: str = "") -> str:
    return f"""
schema: voxflow.flow/v1
name: Probe
conversational:
  router: {{llm: {{model: openai/gpt-4o-mini, mock_response: '{{"intent": "x"}}'}}}}
{state}
methods:
  handle_x:
    listen: x
    do:
      call: llm
      with:
        system: {json.dumps(system)}
        prompt: {json.dumps(prompt)}
        llm: {{model: openai/gpt-4o-mini, mock_response: "fine"}}
"""


def _sent(spy: _ProviderSpy) -> str:
    return json.dumps(spy.requests)


@pytest.mark.parametrize("field", ["system", "prompt"])
def test_the_probe_is_refused_at_load_in_every_llm_field(
    provider: _ProviderSpy, field: str
) -> None:
    system, prompt = (PROBE, "hi") if field == "system" else ("Be brief.", PROBE)
    doc = _llm_doc(system, prompt)
    with pytest.raises(DeclarationError) as info:
        Flow.from_declaration(contents=doc)
    assert info.value.path == f"methods.handle_x.do.with.{field}"
    assert "__class__" in str(info.value) and "'_'" in str(info.value)
    assert provider.requests == []


def test_the_probe_is_refused_in_an_agent_input(provider: _ProviderSpy) -> None:
    doc = {
        "schema": "voxflow.flow/v1",
        "name": "X",
        "conversational": {},
        "methods": {
            "h": {
                "listen": "a",
                "do": {"call": "agent", "with": {"role": "r", "goal": "g", "input": PROBE}},
            }
        },
    }
    with pytest.raises(DeclarationError) as info:
        Flow.from_declaration(contents=json.dumps(doc))
    assert info.value.path == "methods.h.do.with.input"


def test_a_turn_sends_declared_data_and_never_the_secret(provider: _ProviderSpy) -> None:
    state = "state: {json_schema: {properties: {tier: {type: string, default: gold}}}}"
    flow = Flow.from_declaration(
        contents=_llm_doc(
            "You serve a ${state.tier} customer.",
            "${state.current_user_message} (last: ${state.messages[-1].content})",
            state,
        )
    )
    assert flow.handle_turn("where is my parcel?") == "fine"
    sent = _sent(provider)
    assert "You serve a gold customer." in sent
    assert "where is my parcel? (last: where is my parcel?)" in sent
    assert SECRET not in sent


@pytest.mark.parametrize(
    ("tool", "template"),
    [
        ("give_os", "${input.environ.VOXFLOW_PROBE_KEY}"),
        ("give_environ", "${input.VOXFLOW_PROBE_KEY}"),
        ("give_environ", "${input}"),
    ],
)
def test_a_non_data_input_is_refused_at_render_time(
    provider: _ProviderSpy, object_tools: str, tool: str, template: str
) -> None:
    doc = f"""
schema: voxflow.flow/v1
name: Relay
conversational:
  router: {{llm: {{model: openai/gpt-4o-mini, mock_response: '{{"intent": "x"}}'}}}}
methods:
  handle_x:
    listen: x
    do: {{call: code, python: {object_tools}.{tool}}}
  speak:
    listen: handle_x
    do:
      call: llm
      with:
        system: "Read this out: {template}"
        prompt: "go"
        llm: {{model: openai/gpt-4o-mini, mock_response: "fine"}}
"""
    flow = Flow.from_declaration(contents=doc, allow_python=[object_tools])
    with pytest.raises(DeclarationError) as info:
        flow.handle_turn("hello")
    assert info.value.path == "methods.speak.do.with.system"
    assert template in str(info.value)
    assert SECRET not in _sent(provider)
    assert len(provider.requests) == 1  # the router's call only: speak never called out


def test_input_data_renders_by_names_and_indexes(object_tools: str) -> None:
    from hostile_tools import give_data  # type: ignore[import-not-found]

    data = give_data(None, None)
    text = "${input.items[1].name} ${input.items.0.name} ${input.n} ${input.missing}|${input.items}"
    assert render_template(text, None, data) == (
        'second first 2 |[{"name": "first"}, {"name": "second"}]'
    )
    with pytest.raises(DeclarationError, match="cannot index a str"):
        render_template("${input.items.0.name[0]}", None, data, field="f")


@pytest.mark.parametrize(
    ("template", "message"),
    [
        ("${state.__dict__}", "'_'"),
        ("${state._private}", "'_'"),
        ("${state.tier.__class__}", "'_'"),
        ("${state.tier()}", "cannot read '()'"),
        ("${state.tier[a]}", "cannot read '[a]'"),
        ("${env.HOME}", "unknown root"),
        ("${state}", "name a state field"),
        ("${state.nope}", "'nope' is not a field"),
        ("${state.messages.content}", "cannot read 'content' of a list"),
        ("${state.messages[0].nope}", "'nope' is not a field of ConversationMessage"),
        ("${state.tier" + ".x" * 20 + "}", "more than 16"),
    ],
)
def test_bad_expressions_are_refused_at_load(template: str, message: str) -> None:
    state = "state: {json_schema: {properties: {tier: {type: string}}}}"
    with pytest.raises(DeclarationError) as info:
        Flow.from_declaration(contents=_llm_doc(template, "hi", state))
    assert info.value.path == "methods.handle_x.do.with.system"
    assert message in str(info.value)


@pytest.mark.parametrize("name", ["_x", "__class__", "model_config", "copy", "1", 1, "a-b"])
def test_state_properties_are_plain_names_that_shadow_nothing(name: Any) -> None:
    doc = {
        "schema": "voxflow.flow/v1",
        "name": "X",
        "conversational": {},
        "state": {"json_schema": {"properties": {name: {"type": "string"}}}},
    }
    with pytest.raises(DeclarationError) as info:
        Flow.from_declaration(contents=yaml.safe_dump(doc))
    assert info.value.path == f"state.json_schema.properties.{name}"
    assert "plain identifier" in str(info.value)


def test_a_method_of_a_declared_value_is_refused_at_render_time(provider: _ProviderSpy) -> None:
    state = "state: {json_schema: {properties: {tier: {type: string, default: gold}}}}"
    flow = Flow.from_declaration(contents=_llm_doc("${state.tier.upper}", "hi", state))
    with pytest.raises(DeclarationError, match=r"cannot read 'upper' of a str"):
        flow.handle_turn("hello")
    assert len(provider.requests) == 1  # the router only


# -- parsing limits ----------------------------------------------------------------


HEAD = "schema: voxflow.flow/v1\nname: X\nconversational: {}\n"


def _nested_with(depth: int) -> str:
    text = HEAD + "methods:\n  h:\n    listen: a\n    do:\n      call: code\n      python: m.f\n"
    indent = "      "
    for _ in range(depth):
        text += indent + "with:\n"
        indent += "  "
    return text + indent + "x: 1\n"


@pytest.mark.parametrize(
    ("contents", "where"),
    [
        (HEAD + "methods: " + "[" * 5000 + "]" * 5000, "line 4"),
        (_nested_with(900), "line 7"),
        (HEAD + "x: " + "1" * 5000, "line 4"),
        (HEAD + "x: 2001-13-45", "line 4"),
        (HEAD + "x: \x00", "position"),
        (HEAD + "x: !!python/object/apply:os.system [echo]", "line 4"),
    ],
)
def test_malformed_contents_are_declaration_errors_naming_the_line(
    contents: str, where: str
) -> None:
    with pytest.raises(DeclarationError) as info:
        Flow.from_declaration(contents=contents)
    assert "<contents>" in str(info.value) and where in str(info.value)


def test_malformed_files_are_declaration_errors_naming_the_file(tmp_path: Path) -> None:
    deep_json = tmp_path / "deep.json"
    deep_json.write_text("{\n" + '"a": [' * 5000 + "]" * 5000 + "}")
    binary = tmp_path / "flow.yaml"
    binary.write_bytes(b"schema: voxflow.flow/v1\n" + bytes(range(256)) * 4)
    huge = tmp_path / "huge.yaml"
    huge.write_text(HEAD + "description: " + "x" * MAX_DECLARATION_BYTES + "\n")
    big_int = tmp_path / "int.json"
    big_int.write_text('{"x": ' + "9" * 5000 + "}")
    cases = {
        deep_json: f"line 2: nested deeper than {MAX_DECLARATION_DEPTH}",
        binary: "not UTF-8 text (byte 0x80 on line 3)",
        huge: f"larger than {MAX_DECLARATION_BYTES} bytes",
        big_int: "not valid JSON",
        tmp_path: "cannot read it",
    }
    for path, message in cases.items():
        with pytest.raises(DeclarationError) as info:
            Flow.from_declaration(path=path)
        assert str(path) in str(info.value) and message in str(info.value), info.value


def test_an_endless_device_is_read_only_up_to_the_limit() -> None:
    with pytest.raises(DeclarationError, match="larger than"):
        load_declaration_document(path="/dev/zero")


def test_aliases_cannot_expand_past_the_value_limit() -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 8):
        prev = f"*a{i - 1}"
        lines.append(f"a{i}: &a{i} [{', '.join([prev] * 10)}]")
    with pytest.raises(DeclarationError, match="more than 100000 values"):
        load_declaration_document(contents="\n".join(lines))
    # each alias nests the one before 20 levels deeper: only l3 (80 levels) is too deep
    chain = ["l0: &l0 " + "[" * 20 + "]" * 20]
    chain += [f"l{i}: &l{i} " + "[" * 20 + f"*l{i - 1}" + "]" * 20 for i in range(1, 4)]
    with pytest.raises(DeclarationError) as info:
        load_declaration_document(contents="\n".join(chain))
    assert f"nested deeper than {MAX_DECLARATION_DEPTH}" in str(info.value)
    assert info.value.path == "l3" + ".0" * (MAX_DECLARATION_DEPTH - 1)


def test_an_agent_input_that_renders_empty_names_its_field(provider: _ProviderSpy) -> None:
    doc = {
        "schema": "voxflow.flow/v1",
        "name": "Empty",
        "state": {"json_schema": {"properties": {"topic": {"type": "string"}}}},
        "methods": {
            "begin": {
                "start": True,
                "do": {"call": "agent", "with": {
                    "role": "r", "goal": "g", "input": "${state.topic}",
                    "llm": {"model": "openai/gpt-4o-mini", "mock_response": "ok"},
                }},
            }
        },
    }
    flow = Flow.from_declaration(contents=json.dumps(doc))
    with pytest.raises(DeclarationError) as info:
        flow.kickoff()
    assert info.value.path == "methods.begin.do.with.input"
    assert "rendered to empty text" in str(info.value)
    assert provider.requests == []
