"""Flow.from_declaration: YAML/JSON declarations, validation with paths, python refs."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from voxflow import ConversationState, Flow
from voxflow.conversation import NO_LLM_REPLY
from voxflow.errors import DeclarationError

pytestmark = pytest.mark.unit

SUPPORT_YAML = """
schema: voxflow.flow/v1
name: SupportFlow

conversational:
  system_prompt: You are a terse support assistant.
  llm: {model: openai/gpt-4o-mini, max_tokens: 64, mock_response: "Happy to chat."}
  router:
    llm: {model: openai/gpt-4o-mini, mock_response: '{"intent": "order"}'}

methods:
  handle_order:
    description: Order status, shipping and delivery questions.
    listen: order
    do:
      call: agent
      with:
        role: Support specialist
        goal: Answer order questions accurately
        backstory: Knows the fulfilment pipeline.
        input: "${state.current_user_message}"
        llm: {model: openai/gpt-4o-mini, mock_response: "Order 42 ships tomorrow."}
"""


@pytest.fixture
def tools_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A real importable module for python refs (``decl_tools``)."""
    (tmp_path / "decl_tools.py").write_text(
        textwrap.dedent(
            '''
            from pydantic import BaseModel

            class Extra(BaseModel):
                tier: str = "gold"

            def route(flow, value):
                text = flow.state.current_user_message or ""
                return "refund" if "refund" in text else "converse"

            async def refund(flow, value, amount=0):
                return f"Refunded {amount} for {flow.state.tier}."

            def lookup(order_id: str) -> str:
                """Look up an order."""
                return f"order {order_id}: shipped"

            def pick(flow, value):
                return "left"

            def mark(flow, value, name):
                flow.state.steps.append(name)
                return name

            NOT_CALLABLE = 3
            '''
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    return "decl_tools"


def test_spec_yaml_declaration_runs_with_the_turn_apis(tmp_path: Path) -> None:
    path = tmp_path / "flow.yaml"
    path.write_text(SUPPORT_YAML)
    flow = Flow.from_declaration(path=path)
    try:
        assert flow.handle_turn("Where is my order?", session_id="session-1") == (
            "Order 42 ships tomorrow."
        )
    finally:
        flow.finalize_session_traces()
    assert isinstance(flow.state, ConversationState)
    assert [m.content for m in flow.state.messages] == [
        "Where is my order?",
        "Order 42 ships tomorrow.",
    ]
    catalog = type(flow).route_catalog()
    assert catalog.labels == ("converse", "end", "order")
    described = {e.label: e.description for e in catalog.entries}
    assert described["order"] == "Order status, shipping and delivery questions."
    assert type(flow).__name__ == "SupportFlow"


def test_json_declaration_and_builtin_fallback() -> None:
    doc = {
        "schema": "voxflow.flow/v1",
        "name": "Minimal",
        "conversational": {},
        "methods": {"handle_x": {"listen": "X", "description": "X things."}},
    }
    flow = Flow.from_declaration(contents=json.dumps(doc))
    assert flow.handle_turn("hello") == NO_LLM_REPLY  # custom routes, no LLM: converse


def test_python_refs_need_the_callers_permission(tools_module: str) -> None:
    doc = f"""
schema: voxflow.flow/v1
name: Refunds
conversational: {{}}
state: {{python: {tools_module}.Extra}}
methods:
  route_conversation:
    do: {{call: code, python: {tools_module}.route}}
  handle_refund:
    listen: refund
    do: {{call: code, python: {tools_module}.refund, with: {{amount: 5}}}}
"""
    with pytest.raises(DeclarationError) as info:
        Flow.from_declaration(contents=doc)
    assert info.value.path == "state.python"
    assert {p for p, _ in info.value.errors} == {
        "state.python",
        "methods.route_conversation.do.python",
        "methods.handle_refund.do.python",
    }
    assert "allow_python" in str(info.value)
    flow = Flow.from_declaration(contents=doc, allow_python=[tools_module])
    assert flow.handle_turn("I want a refund") == "Refunded 5 for gold."
    assert flow.handle_turn("just chatting") == NO_LLM_REPLY
    assert isinstance(flow.state, ConversationState) and flow.state.tier == "gold"


def test_agent_tools_from_python_refs(tools_module: str) -> None:
    doc = f"""
schema: voxflow.flow/v1
name: Tools
conversational:
  router: {{llm: {{model: openai/gpt-4o-mini, mock_response: '{{"intent": "order"}}'}}}}
methods:
  handle_order:
    listen: order
    do:
      call: agent
      with:
        role: Clerk
        goal: Look orders up
        tools: [{{python: {tools_module}.lookup}}]
        llm:
          model: openai/gpt-4o-mini
          mock_response:
            - {{tool_calls: [{{id: c1, name: lookup, arguments: {{order_id: "7"}}}}]}}
            - Order 7 has shipped.
"""
    flow = Flow.from_declaration(contents=doc, allow_python=[tools_module])
    assert flow.handle_turn("where is order 7?") == "Order 7 has shipped."


def test_json_schema_state_and_llm_action() -> None:
    doc = """
schema: voxflow.flow/v1
name: Stateful
conversational:
  llm: {model: openai/gpt-4o-mini, mock_response: "unused"}
  router: {llm: {model: openai/gpt-4o-mini, mock_response: '{"intent": "summary"}'}}
state:
  json_schema:
    properties:
      tier: {type: string, default: silver}
      visits: {type: integer}
      tags: {type: array}
methods:
  handle_summary:
    listen: summary
    do:
      call: llm
      with:
        prompt: "Summarise for a ${state.tier} customer: ${state.current_user_message}"
        llm: {model: openai/gpt-4o-mini, mock_response: "A short summary."}
"""
    flow = Flow.from_declaration(contents=doc)
    assert (flow.state.tier, flow.state.visits, flow.state.tags) == ("silver", 0, [])
    assert flow.handle_turn("summarise please") == "A short summary."


def test_disabled_conversational_block_is_a_plain_flow() -> None:
    doc = """
schema: voxflow.flow/v1
name: Plain
conversational: {enabled: false}
methods:
  begin:
    start: true
  after:
    listen: begin
"""
    flow = Flow.from_declaration(contents=doc)
    assert not type(flow).conversational
    assert "route_conversation" not in type(flow).flow_definition().methods
    assert flow.kickoff() is None
    assert flow.completed_methods == {"begin", "after"}
    with pytest.raises(ValueError, match="conversational"):
        flow.handle_turn("hi")


@pytest.mark.parametrize(
    ("doc", "path"),
    [
        ({"schema": "crewai.flow/v2", "name": "X"}, "schema"),
        ({"schema": "voxflow.flow/v1", "name": "not an identifier"}, "name"),
        ({"schema": "voxflow.flow/v1", "name": "X", "bogus": 1}, "bogus"),
        (
            {"schema": "voxflow.flow/v1", "name": "X", "conversational": {"llm": 5}},
            "conversational.llm",
        ),
        (
            {
                "schema": "voxflow.flow/v1",
                "name": "X",
                "conversational": {},
                "methods": {"h": {"listen": "a", "do": {"call": "shell"}}},
            },
            "methods.h.do",
        ),
        (
            {
                "schema": "voxflow.flow/v1",
                "name": "X",
                "conversational": {},
                "methods": {"h": {"listen": "a", "do": {"call": "agent", "with": {"goal": "g"}}}},
            },
            "methods.h.do.with.role",
        ),
        (
            {
                "schema": "voxflow.flow/v1",
                "name": "X",
                "conversational": {},
                "methods": {"create_video": {"listen": "create_video"}},
            },
            "methods.create_video.listen",
        ),
        (
            {
                "schema": "voxflow.flow/v1",
                "name": "X",
                "conversational": {},
                "methods": {"handle_turn": {"listen": "x"}},
            },
            "methods.handle_turn",
        ),
        ({"schema": "voxflow.flow/v1", "name": "X", "methods": {"a": {"listen": "b"}}}, "methods"),
        (
            {
                "schema": "voxflow.flow/v1",
                "name": "X",
                "conversational": {},
                "methods": {
                    "h": {
                        "listen": "a",
                        "do": {
                            "call": "agent",
                            "with": {"role": "r", "goal": "g", "input": "${env.HOME}"},
                        },
                    }
                },
            },
            "methods.h.do.with.input",
        ),
        (
            {
                "schema": "voxflow.flow/v1",
                "name": "X",
                "conversational": {},
                "state": {"json_schema": {"properties": {"n": {"type": "complex"}}}},
            },
            "state.json_schema.properties.n.type",
        ),
        (
            {
                "schema": "voxflow.flow/v1",
                "name": "X",
                "conversational": {"router": {"llm": {"max_tokens": 3}}},
            },
            "conversational.router.llm",
        ),
    ],
)
def test_every_error_names_the_path_of_the_bad_field(doc: dict[str, Any], path: str) -> None:
    with pytest.raises(DeclarationError) as info:
        Flow.from_declaration(contents=json.dumps(doc))
    assert info.value.path == path, info.value.errors
    assert isinstance(info.value, ValueError)


def test_unreadable_sources_and_bad_arguments(tmp_path: Path, tools_module: str) -> None:
    with pytest.raises(DeclarationError, match="cannot read"):
        Flow.from_declaration(path=tmp_path / "missing.yaml")
    with pytest.raises(DeclarationError, match="YAML"):
        Flow.from_declaration(contents="schema: [unclosed")
    with pytest.raises(DeclarationError, match="mapping"):
        Flow.from_declaration(contents="- a list")
    with pytest.raises(ValueError, match="exactly one"):
        Flow.from_declaration()
    with pytest.raises(TypeError, match="allow_python"):
        Flow.from_declaration(contents="{}", allow_python="decl_tools")
    doc = {
        "schema": "voxflow.flow/v1",
        "name": "X",
        "conversational": {},
        "methods": {
            "a": {"listen": "a1", "do": {"call": "code", "python": f"{tools_module}.NOT_CALLABLE"}},
            "b": {"listen": "b1", "do": {"call": "code", "python": f"{tools_module}.missing"}},
            "c": {"listen": "c1", "do": {"call": "code", "python": "no_such_module.f"}},
        },
    }
    with pytest.raises(DeclarationError) as info:
        Flow.from_declaration(
            contents=json.dumps(doc), allow_python=[tools_module, "no_such_module"]
        )
    messages = dict(info.value.errors)
    assert "not callable" in messages["methods.a.do.python"]
    assert "no attribute" in messages["methods.b.do.python"]
    assert "cannot import" in messages["methods.c.do.python"]


def test_plain_declaration_with_router_and_conditions(tools_module: str) -> None:
    doc = f"""
schema: voxflow.flow/v1
name: Pipeline
state:
  json_schema: {{properties: {{steps: {{type: array}}}}}}
methods:
  begin:
    start: true
    do: {{call: code, python: {tools_module}.mark, with: {{name: begin}}}}
  decide:
    listen: begin
    router: true
    labels: [left, right]
    do: {{call: code, python: {tools_module}.pick}}
  on_left:
    listen: left
    do: {{call: code, python: {tools_module}.mark, with: {{name: left}}}}
  joined:
    listen: {{or: [on_left, never]}}
    do: {{call: code, python: {tools_module}.mark, with: {{name: joined}}}}
"""
    flow = Flow.from_declaration(contents=doc, allow_python=[tools_module])
    assert flow.kickoff() == "joined"
    assert flow.state.steps == ["begin", "left", "joined"]
    with pytest.raises(DeclarationError) as info:
        Flow.from_declaration(
            contents=doc.replace("labels: [left, right]", "labels: [on_left]"),
            allow_python=[tools_module],
        )
    assert info.value.path == "methods.decide.labels"
