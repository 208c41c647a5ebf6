"""Fuzzing declarations and templates (hypothesis, bounded and derandomized).

Whatever the document or template, the outcome is a built Flow class or a
``DeclarationError``: never another exception, and a rendered template never holds a
secret that only the environment (or a non-data object) knew.
"""

from __future__ import annotations

import json
import os
from typing import Any

import litellm
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from litellm.integrations.custom_logger import CustomLogger
from pydantic import BaseModel

from voxflow import ConversationState, Flow
from voxflow.conversation.declaration import render_template
from voxflow.errors import DeclarationError

pytestmark = pytest.mark.unit

SECRET = "sk-fuzz-4c1d-SECRET"
FUZZ = settings(
    max_examples=300,
    derandomize=True,
    deadline=None,
    database=None,  # no .hypothesis folder in the work tree
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
"""The example counts the README quotes come from here (300 per surface)."""

_WORDS = [
    "state", "input", "__class__", "__init__", "__globals__", "os", "environ", "sys",
    "modules", "tier", "messages", "content", "current_user_message", "id", "0", "-1",
    "x", "_private", "upper", "VOXFLOW_FUZZ_SECRET", "items", "name",
]
_PIECES = st.sampled_from(["${", "}", ".", "[", "]", "(", ")", " ", "$", "{", *_WORDS])
TEMPLATES = st.one_of(
    st.lists(_PIECES, max_size=20).map("".join),
    st.text(max_size=40),
    st.builds(
        lambda root, parts: "${" + root + "".join(parts) + "}",
        st.sampled_from(["state", "input", "env", " state", "state "]),
        st.lists(
            st.one_of(
                st.sampled_from(_WORDS).map(lambda w: "." + w),
                st.integers(-3, 3).map(lambda i: f"[{i}]"),
            ),
            max_size=6,
        ),
    ),
)

SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True), st.text(max_size=20)
)
JSON = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(
            st.one_of(st.text(max_size=8), st.integers(-2, 2), st.booleans(), st.none()),
            inner,
            max_size=4,
        ),
    ),
    max_leaves=20,
)
LLM_SPEC = st.one_of(
    st.just({"model": "openai/gpt-4o-mini", "mock_response": "ok"}),
    st.sampled_from(["openai/gpt-4o-mini", "", "x"]),
    JSON,
)
ACTION = st.one_of(
    st.fixed_dictionaries(
        {"call": st.just("llm"), "with": st.fixed_dictionaries(
            {"prompt": TEMPLATES, "llm": LLM_SPEC},
            optional={"system": TEMPLATES},
        )}
    ),
    st.fixed_dictionaries(
        {"call": st.just("agent"), "with": st.fixed_dictionaries(
            {"role": st.text(max_size=5), "goal": st.sampled_from(["g", ""])},
            optional={"input": TEMPLATES, "llm": LLM_SPEC, "max_iterations": JSON},
        )}
    ),
    st.fixed_dictionaries(
        {"call": st.sampled_from(["code", "shell"]), "python": st.sampled_from(
            ["os.system", "a.b", "", "builtins.eval"]
        )},
        optional={"with": JSON},
    ),
    JSON,
)
CONDITION = st.recursive(
    st.sampled_from(["a", "b", "", "handle_a"]),
    lambda inner: st.one_of(
        st.fixed_dictionaries({"and": st.lists(inner, max_size=3)}),
        st.fixed_dictionaries({"or": st.lists(inner, max_size=3)}),
    ),
    max_leaves=5,
)
METHOD = st.fixed_dictionaries(
    {},
    optional={
        "listen": CONDITION,
        "start": st.one_of(st.booleans(), CONDITION),
        "router": st.booleans(),
        "labels": st.lists(st.sampled_from(["a", "b", "c", "handle_a"]), max_size=3),
        "description": st.text(max_size=10),
        "do": ACTION,
        "human_feedback": JSON,
        "bogus": JSON,
    },
)
PROPERTY = st.one_of(
    st.fixed_dictionaries(
        {"type": st.sampled_from(["string", "integer", "number", "boolean", "array",
                                  "object", "complex"])},
        optional={"default": JSON},
    ),
    JSON,
)
STATE = st.one_of(
    st.fixed_dictionaries({"json_schema": st.fixed_dictionaries({"properties": st.dictionaries(
        st.sampled_from(["tier", "n", "_x", "__class__", "model_config", "messages", "id",
                         "1", "", "schema", "copy", 1, None, True]),
        PROPERTY, max_size=3,
    )})}),
    st.fixed_dictionaries({"python": st.sampled_from(["os.environ", "a.b", "x"])}),
    JSON,
)
CONVERSATIONAL = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={
            "enabled": st.one_of(st.booleans(), JSON),
            "llm": LLM_SPEC,
            "system_prompt": TEMPLATES,
            "router": st.one_of(st.fixed_dictionaries({}, optional={"llm": LLM_SPEC}), JSON),
            "default_intents": JSON,
            "visible_agent_outputs": JSON,
        },
    ),
    JSON,
)
VALID_METHODS = st.dictionaries(
    st.sampled_from(["handle_a", "handle_b", "speak"]),
    st.fixed_dictionaries(
        {"listen": st.sampled_from(["a", "b", "handle_a"]), "do": st.one_of(
            st.builds(
                lambda prompt, system: {"call": "llm", "with": {
                    "prompt": prompt, "system": system,
                    "llm": {"model": "openai/gpt-4o-mini", "mock_response": "ok"},
                }},
                TEMPLATES, TEMPLATES,
            ),
            st.builds(
                lambda text: {"call": "agent", "with": {"role": "r", "goal": "g", "input": text}},
                TEMPLATES,
            ),
        )},
    ),
    max_size=3,
)
NEAR_VALID = st.fixed_dictionaries(
    {"schema": st.just("voxflow.flow/v1"), "name": st.just("Fuzzed"),
     "conversational": st.just({}), "methods": VALID_METHODS},
    optional={"state": STATE},
)
DOCUMENTS = st.one_of(
    NEAR_VALID,
    st.fixed_dictionaries(
        {
            "schema": st.sampled_from(["voxflow.flow/v1", "voxflow.flow/v1", "crewai.flow/v1"]),
            "name": st.sampled_from(["Fuzzed", "not id", "class", "", "Flow"]),
        },
        optional={
            "conversational": CONVERSATIONAL,
            "state": STATE,
            "methods": st.dictionaries(
                st.sampled_from(["handle_a", "begin", "route_conversation", "handle_turn",
                                 "_x", "a", "kickoff", "1bad", "state"]),
                METHOD,
                max_size=3,
            ),
            "description": JSON,
        },
    ),
    JSON,
)


def _dump(document: Any, as_json: bool) -> str:
    if as_json:
        return json.dumps(document)
    return yaml.safe_dump(document, allow_unicode=True)


@FUZZ
@given(document=DOCUMENTS, as_json=st.booleans())
def test_random_documents_build_or_raise_declaration_error(document: Any, as_json: bool) -> None:
    try:
        cls = Flow.from_declaration(contents=_dump(document, as_json))
    except DeclarationError as exc:
        assert exc.errors and str(exc)
    else:
        assert issubclass(cls, Flow) if isinstance(cls, type) else isinstance(cls, Flow)


@FUZZ
@given(text=st.one_of(st.text(max_size=200), st.binary(max_size=200).map(
    lambda b: b.decode("latin-1")
)))
def test_random_text_builds_or_raises_declaration_error(text: str) -> None:
    try:
        Flow.from_declaration(contents=text)
    except DeclarationError as exc:
        assert exc.errors


class _Profile(BaseModel):
    name: str = "Ada"
    tags: list[str] = ["a", "b"]


class _FuzzState(ConversationState):
    tier: str = "gold"
    profile: _Profile = _Profile()
    extra: dict[str, Any] = {"k": [1, 2, {"deep": "v"}]}


class _Holder:
    secret = SECRET

    def __str__(self) -> str:
        return SECRET


@FUZZ
@given(
    template=TEMPLATES,
    value=st.sampled_from([os, os.environ, _Holder(), {"a": _Holder()}, [os.environ], None,
                           "text", {"items": [{"name": "x"}]}]),
)
def test_random_templates_render_declared_data_or_refuse_and_never_a_secret(
    template: str, value: Any
) -> None:
    os.environ["VOXFLOW_FUZZ_SECRET"] = SECRET
    try:
        text = render_template(template, _FuzzState(), value, field="f")
    except DeclarationError as exc:
        assert exc.path == "f"
        assert SECRET not in str(exc)
    else:
        assert SECRET not in text
    finally:
        del os.environ["VOXFLOW_FUZZ_SECRET"]


class _ProviderSpy(CustomLogger):
    """Keeps every message list litellm was about to send."""

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[Any] = []

    def log_pre_api_call(self, model: Any, messages: Any, kwargs: Any) -> None:
        self.requests.append(messages)


@settings(max_examples=40, derandomize=True, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(system=TEMPLATES, prompt=TEMPLATES, agent_input=TEMPLATES)
def test_random_templates_in_a_running_flow_never_send_a_secret(
    system: str, prompt: str, agent_input: str
) -> None:
    llm = {"model": "openai/gpt-4o-mini", "mock_response": "ok"}
    document = {
        "schema": "voxflow.flow/v1",
        "name": "Fuzzed",
        "state": {"json_schema": {"properties": {"tier": {"type": "string", "default": "gold"},
                                                 "items": {"type": "array"}}}},
        "methods": {
            "begin": {"start": True, "do": {"call": "llm", "with": {
                "system": system, "prompt": prompt, "llm": llm}}},
            "then": {"listen": "begin", "do": {"call": "agent", "with": {
                "role": "r", "goal": "g", "input": agent_input, "llm": llm}}},
        },
    }
    spy = _ProviderSpy()
    before = list(litellm.callbacks)
    litellm.callbacks = [*before, spy]
    os.environ["VOXFLOW_FUZZ_SECRET"] = SECRET
    try:
        try:
            flow = Flow.from_declaration(contents=json.dumps(document))
        except DeclarationError:
            return
        try:
            flow.kickoff()
        except DeclarationError as exc:
            assert exc.path.startswith("methods.")
        assert SECRET not in json.dumps(spy.requests)
    finally:
        litellm.callbacks = before
        del os.environ["VOXFLOW_FUZZ_SECRET"]
