"""Conversation configuration: ``ConversationConfig``, ``RouterConfig`` and the legacy
``ConversationalConfig``.

``ConversationConfig`` is also a class decorator: ``@ConversationConfig(...)`` on a Flow
subclass attaches the configuration *and* enables conversational mode (as
``conversational = True`` does). All three models are frozen and validated; LLM fields
accept a model id, a config mapping (``{model: ..., max_tokens: 512}``) or a ``BaseLLM``.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Mapping
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from voxflow.llm import BaseLLM, coerce_llm

__all__ = [
    "CONVERSATION_CONFIG_ATTR",
    "DEFAULT_SYSTEM_PROMPT",
    "ConversationConfig",
    "ConversationalConfig",
    "RouterConfig",
    "TraceScope",
    "class_config",
]

_C = TypeVar("_C", bound=type)

CONVERSATION_CONFIG_ATTR = "conversation_config"
"""The class attribute ``@ConversationConfig(...)`` sets on a Flow subclass."""

DEFAULT_SYSTEM_PROMPT = (
    "You are a helpful assistant in a multi-turn conversation. Answer the user's latest "
    "message using the conversation so far. Be concise and accurate; if you do not know, "
    "say so."
)
"""The system prompt ``converse_turn`` uses when ``system_prompt`` is None."""

TraceScope = Literal["turn", "session"]


def _llm(value: Any, name: str) -> BaseLLM | None:
    try:
        return coerce_llm(value, name=name)
    except TypeError as exc:  # pydantic reports ValueErrors with the field's path
        raise ValueError(str(exc)) from exc


def _labels(value: Any, name: str) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str) or not isinstance(value, list | tuple | set | frozenset):
        raise ValueError(f"{name} must be a list of route labels")
    out = tuple(value)
    if not out or not all(isinstance(v, str) and v.strip() for v in out):
        raise ValueError(f"{name} must be a non-empty list of non-empty strings")
    return out


class RouterConfig(BaseModel):
    """How the LLM router picks a route for a turn.

    Routes default to the labels of the flow's ``@listen`` handlers plus the built-in
    ``converse`` and ``end``; descriptions come from ``route_descriptions``, then the
    built-in descriptions, then a declared description, then the handler's docstring.
    """

    model_config = ConfigDict(
        frozen=True, extra="forbid", arbitrary_types_allowed=True, defer_build=True
    )

    prompt: str | None = Field(
        default=None, description="domain framing (persona, policy); never list routes here"
    )
    response_format: type[BaseModel] | dict[str, Any] | None = Field(
        default=None, description="structured answer schema; synthesized when None"
    )
    llm: BaseLLM | None = Field(default=None, description="router LLM; else ConversationConfig.llm")
    routes: tuple[str, ...] | None = Field(
        default=None, description="limit the choices; inferred from listeners when None"
    )
    route_descriptions: dict[str, str] = Field(
        default_factory=dict, description="per-route description overrides"
    )
    default_intent: str = Field(
        default="converse", min_length=1, description="used when the LLM call fails or none"
    )
    fallback_intent: str = Field(
        default="converse", min_length=1, description="used when the LLM answers an invalid route"
    )
    intent_field: str = Field(
        default="intent", min_length=1, description="the route field of the structured answer"
    )

    @field_validator("llm", mode="before")
    @classmethod
    def _coerce_llm(cls, value: Any) -> BaseLLM | None:
        return _llm(value, "router.llm")

    @field_validator("routes", mode="before")
    @classmethod
    def _routes(cls, value: Any) -> tuple[str, ...] | None:
        return _labels(value, "router.routes")

    @field_validator("response_format", mode="before")
    @classmethod
    def _response_format(cls, value: Any) -> Any:
        if value is None or isinstance(value, dict):
            return value
        if isinstance(value, type) and issubclass(value, BaseModel):
            return value
        raise ValueError("router.response_format must be a pydantic model class or a dict")


class ConversationConfig(BaseModel):
    """Per-class chat defaults; as a class decorator it enables conversational mode.

    Example::

        @ConversationConfig(llm="openai/gpt-4o-mini")
        class Support(Flow[ConversationState]): ...
    """

    model_config = ConfigDict(
        frozen=True, extra="forbid", arbitrary_types_allowed=True, defer_build=True
    )

    system_prompt: str | None = Field(
        default=None, description="converse_turn's system message; None = built-in, '' = none"
    )
    llm: BaseLLM | None = Field(default=None, description="conversation LLM (and router fallback)")
    router: RouterConfig | None = Field(default=None, description="LLM router overrides")
    answer_from_history_prompt: str | None = Field(
        default=None, description="deprecated: use system_prompt or override converse_turn()"
    )
    answer_from_history_llm: BaseLLM | None = Field(default=None, description="deprecated: use llm")
    intent_llm: BaseLLM | None = Field(
        default=None, description="LLM for legacy default_intents pre-classification"
    )
    default_intents: tuple[str, ...] | None = Field(
        default=None, description="outcome labels for legacy pre-classification"
    )
    visible_agent_outputs: Literal["all"] | tuple[str, ...] | None = Field(
        default=None, description="'all' or agent names whose results become public replies"
    )
    defer_trace_finalization: bool = Field(
        default=True, description="keep one trace batch open across handle_turn() calls"
    )
    trace_scope: TraceScope | None = Field(
        default=None, description="'turn' or 'session'; None follows defer_trace_finalization"
    )

    @field_validator("llm", "answer_from_history_llm", "intent_llm", mode="before")
    @classmethod
    def _coerce_llm(cls, value: Any, info: Any) -> BaseLLM | None:
        return _llm(value, str(info.field_name))

    @field_validator("router", mode="before")
    @classmethod
    def _router(cls, value: Any) -> Any:
        if isinstance(value, Mapping):
            return RouterConfig(**value)
        return value

    @field_validator("default_intents", mode="before")
    @classmethod
    def _intents(cls, value: Any) -> tuple[str, ...] | None:
        return _labels(value, "default_intents")

    @field_validator("visible_agent_outputs", mode="before")
    @classmethod
    def _visible(cls, value: Any) -> Any:
        if value is None or value == "all":
            return value
        return _labels(value, "visible_agent_outputs")

    @model_validator(mode="after")
    def _warn_deprecated(self) -> ConversationConfig:
        if self.answer_from_history_prompt is not None or self.answer_from_history_llm is not None:
            warnings.warn(
                "answer_from_history_prompt / answer_from_history_llm are deprecated: the "
                "converse route already receives the canonical history; use llm and "
                "system_prompt, or override converse_turn()",
                DeprecationWarning,
                stacklevel=4,
            )
        return self

    def __call__(self, cls: _C) -> _C:
        """Attach this configuration to a Flow subclass and enable conversational mode."""
        if not isinstance(cls, type):
            raise TypeError("@ConversationConfig(...) decorates a Flow subclass")
        enable = getattr(cls, "_enable_conversation", None)
        setattr(cls, CONVERSATION_CONFIG_ATTR, self)
        if callable(enable):
            enable()
        else:
            cls.conversational = True  # type: ignore[attr-defined]
        return cls

    def router_llm(self) -> BaseLLM | None:
        """The LLM the router uses: ``router.llm``, else ``llm``."""
        if self.router is not None and self.router.llm is not None:
            return self.router.llm
        return self.llm

    def agent_is_visible(self, agent_name: str) -> bool:
        """Whether ``append_agent_result`` promotes this agent's results to public."""
        if self.visible_agent_outputs == "all":
            return True
        return self.visible_agent_outputs is not None and agent_name in self.visible_agent_outputs


class ConversationalConfig(BaseModel):
    """Legacy configuration for the lower-level ``ChatState`` helpers.

    Read by :func:`voxflow.conversation.prepare_conversational_turn` from a flow class's
    ``conversational_config`` attribute.
    """

    model_config = ConfigDict(
        frozen=True, extra="forbid", arbitrary_types_allowed=True, defer_build=True
    )

    intents: tuple[str, ...] | None = Field(
        default=None, description="outcome labels to classify each user message into"
    )
    intent_llm: BaseLLM | None = Field(default=None, description="LLM for that classification")
    system_prompt: str | None = Field(default=None, description="system message, if any")

    @field_validator("intent_llm", mode="before")
    @classmethod
    def _coerce_llm(cls, value: Any) -> BaseLLM | None:
        return _llm(value, "intent_llm")

    @field_validator("intents", mode="before")
    @classmethod
    def _intents(cls, value: Any) -> tuple[str, ...] | None:
        return _labels(value, "intents")


@functools.cache
def _default_config() -> ConversationConfig:
    """The config of a conversational flow that declares none (built on first use)."""
    return ConversationConfig()


def class_config(flow_cls: type[Any]) -> ConversationConfig:
    """The ``ConversationConfig`` of a Flow class: the one it was decorated with (its
    ``conversation_config``), else the defaults."""
    config = getattr(flow_cls, CONVERSATION_CONFIG_ATTR, None)
    return config if isinstance(config, ConversationConfig) else _default_config()
