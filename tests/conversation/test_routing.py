"""Route catalog, router prompt, response_format synthesis and classify_intent."""

from __future__ import annotations

import typing
import warnings

import pytest
from pydantic import BaseModel, ValidationError

from voxflow.conversation.config import ConversationalConfig, ConversationConfig, RouterConfig
from voxflow.conversation.routing import (
    DESCRIPTION_ATTR,
    aclassify_intent,
    build_route_catalog,
    build_router_messages,
    classify_intent,
    collapse_to_outcome,
    route_response_format,
    route_with_llm,
)
from voxflow.llm import LLM

pytestmark = pytest.mark.unit


def handle_search() -> str:
    """Fresh web research, current news, real-time lookups.

    More detail that the router never sees.
    """
    return ""


def handle_docs() -> str:
    """Look up the documentation for framework/API questions."""
    return ""


def handle_bare() -> str:
    return ""


def handle_declared() -> str:
    """Docstring loses to the declared description."""
    return ""


setattr(handle_declared, DESCRIPTION_ATTR, "Declared description.")

HANDLERS = {
    "INTERNET_SEARCH": [handle_search],
    "DOCS": [handle_docs],
    "BARE": [handle_bare],
    "DECLARED": [handle_declared],
    "answer_from_history": [handle_bare],
    "some_method": [handle_bare],
}


def test_catalog_infers_routes_from_listeners_and_adds_builtins() -> None:
    catalog = build_route_catalog(HANDLERS, method_names=["some_method"])
    assert catalog.labels == ("BARE", "DECLARED", "DOCS", "INTERNET_SEARCH", "converse", "end")
    assert catalog.custom_labels() == ("BARE", "DECLARED", "DOCS", "INTERNET_SEARCH")


def test_description_precedence() -> None:
    router = RouterConfig(route_descriptions={"DOCS": "Override.", "converse": "Chat."})
    catalog = build_route_catalog(HANDLERS, router=router)
    by = {e.label: e.description for e in catalog.entries}
    assert by["DOCS"] == "Override."  # 1. RouterConfig.route_descriptions
    assert by["converse"] == "Chat."  # ... even for a built-in
    assert by["end"].startswith("User signals the conversation is finished")  # 2. built-in
    assert by["DECLARED"] == "Declared description."  # 3. declared description
    assert by["INTERNET_SEARCH"] == "Fresh web research, current news, real-time lookups."
    assert by["BARE"] == ""  # 5. empty


def test_explicit_routes_limit_the_choices() -> None:
    catalog = build_route_catalog(HANDLERS, router=RouterConfig(routes=["DOCS"]))
    assert catalog.labels == ("DOCS", "converse", "end")


def test_router_prompt_lists_the_catalog_with_framing() -> None:
    catalog = build_route_catalog({"INTERNET_SEARCH": [handle_search], "DOCS": [handle_docs]})
    messages = build_router_messages(
        catalog,
        prompt="You are a support router.",
        current_message="news please",
        recent_history=[{"role": "user", "content": "hi"}],
        last_intent="DOCS",
    )
    system = messages[0]["content"]
    assert system.startswith("You are a support router.")
    assert "Routes:\n- DOCS: Look up the documentation" in system
    assert "- INTERNET_SEARCH: Fresh web research, current news, real-time lookups." in system
    assert "- converse: Ordinary chat" in system
    assert "previous turn was routed to: DOCS" in system
    assert messages[1]["content"].endswith("news please")


def test_synthesized_response_format_accepts_only_the_labels() -> None:
    model = route_response_format(("A", "converse"))
    assert model.model_validate({"intent": "A"}).intent == "A"  # type: ignore[attr-defined]
    with pytest.raises(ValidationError):
        model.model_validate({"intent": "B"})
    assert route_response_format(("A", "converse")) is model  # cached
    custom = route_response_format(("A",), "route")
    hint = typing.get_type_hints(custom)["route"]
    assert typing.get_args(hint) == ("A",)


async def test_llm_router_structured_answer_selects_the_route() -> None:
    catalog = build_route_catalog({"DOCS": [handle_docs]})
    llm = LLM("openai/gpt-4o-mini", mock_response='{"intent": "DOCS"}')
    label = await route_with_llm(
        llm, catalog, RouterConfig(), current_message="docs?", recent_history=[], last_intent=None
    )
    assert label == "DOCS"


async def test_llm_router_invalid_answer_falls_back_to_fallback_intent() -> None:
    catalog = build_route_catalog({"DOCS": [handle_docs]})
    llm = LLM("openai/gpt-4o-mini", mock_response='{"intent": "NOPE"}')
    config = RouterConfig(fallback_intent="end", default_intent="converse")
    label = await route_with_llm(
        llm, catalog, config, current_message="x", recent_history=[], last_intent=None
    )
    assert label == "end"


async def test_llm_router_failure_falls_back_to_default_intent() -> None:
    catalog = build_route_catalog({"DOCS": [handle_docs]})
    llm = LLM("openai/gpt-4o-mini", mock_response="litellm.RateLimitError")
    config = RouterConfig(fallback_intent="end", default_intent="DOCS")
    label = await route_with_llm(
        llm, catalog, config, current_message="x", recent_history=[], last_intent=None
    )
    assert label == "DOCS"


async def test_custom_response_format_and_intent_field() -> None:
    class MyRoute(BaseModel):
        route: typing.Literal["DOCS", "converse"]

    catalog = build_route_catalog({"DOCS": [handle_docs]})
    llm = LLM("openai/gpt-4o-mini", mock_response='{"route": "DOCS"}')
    config = RouterConfig(response_format=MyRoute, intent_field="route")
    label = await route_with_llm(
        llm, catalog, config, current_message="x", recent_history=[], last_intent=None
    )
    assert label == "DOCS"


def test_collapse_to_outcome() -> None:
    outcomes = ("ORDER", "GOODBYE")
    assert collapse_to_outcome("ORDER", outcomes) == "ORDER"
    assert collapse_to_outcome(" order. ", outcomes) == "ORDER"
    assert collapse_to_outcome('{"intent": "goodbye"}', outcomes) == "GOODBYE"
    assert collapse_to_outcome("I think it is ORDER here", outcomes) == "ORDER"
    assert collapse_to_outcome("ORDER or GOODBYE", outcomes) is None
    assert collapse_to_outcome(None, outcomes) is None


async def test_classify_intent_with_real_litellm() -> None:
    intent = await aclassify_intent(
        "where is my parcel",
        ("ORDER", "GOODBYE"),
        llm=LLM("openai/gpt-4o-mini", mock_response="ORDER"),
    )
    assert intent == "ORDER"
    unmatched = classify_intent(
        "x", ("ORDER", "GOODBYE"), llm=LLM("openai/gpt-4o-mini", mock_response="no idea")
    )
    assert unmatched == "ORDER"


async def test_classify_intent_validates_arguments() -> None:
    llm = LLM("m", mock_response="A")
    with pytest.raises(ValueError, match="outcomes"):
        await aclassify_intent("x", (), llm=llm)
    with pytest.raises(ValueError, match="outcomes"):
        await aclassify_intent("x", "AB", llm=llm)
    with pytest.raises(TypeError, match="text"):
        await aclassify_intent(3, ("A",), llm=llm)  # type: ignore[arg-type]


def test_config_defaults_and_validation() -> None:
    config = ConversationConfig()
    assert config.defer_trace_finalization is True
    assert config.system_prompt is None
    assert config.router is None
    router = RouterConfig()
    assert (router.default_intent, router.fallback_intent, router.intent_field) == (
        "converse",
        "converse",
        "intent",
    )
    with pytest.raises(ValidationError, match=r"router\.llm"):
        RouterConfig(llm=42)
    with pytest.raises(ValidationError, match="default_intents"):
        ConversationConfig(default_intents="ORDER")
    with pytest.raises(ValidationError, match="extra"):
        ConversationConfig(unknown=1)  # type: ignore[call-arg]
    assert ConversationConfig(llm="gpt-4o-mini").llm is not None
    assert ConversationConfig(router={"llm": "m"}).router_llm() is not None
    assert ConversationConfig(llm="a").router_llm().model == "a"  # type: ignore[union-attr]
    assert ConversationConfig(visible_agent_outputs=["x"]).agent_is_visible("x")
    assert not ConversationConfig(visible_agent_outputs=["x"]).agent_is_visible("y")
    assert ConversationConfig(visible_agent_outputs="all").agent_is_visible("y")
    assert ConversationalConfig(intents=["A"], intent_llm="m").intents == ("A",)


def test_deprecated_answer_from_history_fields_warn() -> None:
    with pytest.warns(DeprecationWarning, match="answer_from_history"):
        ConversationConfig(answer_from_history_prompt="old")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ConversationConfig(llm="m")
