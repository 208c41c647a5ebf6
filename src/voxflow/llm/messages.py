"""The request and the answer of one completion: messages in, :class:`LLMResponse` out.

:data:`Messages` is what a caller passes (a user string, or chat messages as dicts or
message models); :func:`normalize_messages` turns it into the plain dicts litellm takes.
:class:`LLMResponse` is the answer (text, requested :class:`ToolCall` entries, a parsed
``response_format`` model); :func:`response_format_arg` and :func:`parse_response`
handle ``response_format`` on the way in and out, :func:`mock_response_dict` the
``{"content": ..., "tool_calls": [...]}`` shorthand of ``mock_response=``.
"""

from __future__ import annotations

import itertools
import json
import operator
import typing
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

__all__ = [
    "LLMResponse",
    "Messages",
    "ToolCall",
    "mock_response_dict",
    "normalize_messages",
    "parse_response",
    "response_format_arg",
]

Messages = str | Sequence[Mapping[str, Any] | BaseModel]
"""A prompt: one user string, or chat messages (dicts or ``ConversationMessage``s)."""


class ToolCall(BaseModel):
    """A tool call requested by the model."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    id: str = Field(description="the provider's call id; the tool message answers it")
    name: str = Field(description="the tool (function) name")
    arguments: str = Field(default="{}", description="the arguments as a JSON string")

    def parsed_arguments(self) -> dict[str, Any]:
        """The arguments decoded; ``{}`` when empty. Raises ValueError on invalid JSON."""
        if not self.arguments.strip():
            return {}
        value = json.loads(self.arguments)
        if not isinstance(value, dict):
            raise ValueError("tool arguments must be a JSON object")
        return value

    def to_llm(self) -> dict[str, Any]:
        """The OpenAI ``tool_calls`` entry for an assistant message."""
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


class LLMResponse(BaseModel):
    """The result of one completion."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    content: str | None = Field(default=None, description="the answer text")
    tool_calls: tuple[ToolCall, ...] = Field(default=(), description="requested tool calls")
    parsed: Any = Field(
        default=None,
        description="response_format model instance; None when not asked or it did not match",
    )
    model: str = Field(default="", description="the model that answered")
    call_id: str = Field(default="", description="voxflow's id for this call (see LLMEvent)")

    def __str__(self) -> str:
        return self.content or ""


def normalize_messages(messages: Messages) -> list[dict[str, Any]]:
    """Chat messages as plain dicts; a string becomes one user message.

    Raises:
        TypeError: ``messages`` is neither a string nor a sequence of messages.
        ValueError: ``messages`` is empty or a message has no role.
    """
    if isinstance(messages, str):
        if not messages.strip():
            raise ValueError("messages must not be empty")
        return [{"role": "user", "content": messages}]
    if not isinstance(messages, Sequence):
        raise TypeError("messages must be a string or a sequence of chat messages")
    if messages and set(map(type, messages)) == {dict}:
        # The common case (a whole history of dicts): copied at C speed, no Python-level
        # work per message, so a long conversation does not slow every call down.
        copies = list(map(dict.copy, typing.cast("Sequence[dict[str, Any]]", messages)))
        if all(map(operator.contains, copies, itertools.repeat("role"))):
            return copies
    out: list[dict[str, Any]] = []
    for i, message in enumerate(messages):
        if isinstance(message, BaseModel):
            to_llm = getattr(message, "to_llm", None)
            item = to_llm() if callable(to_llm) else message.model_dump(exclude_none=True)
        elif isinstance(message, Mapping):
            item = dict(message)
        else:
            raise TypeError(f"messages[{i}] must be a mapping or a message model")
        if "role" not in item:
            raise ValueError(f"messages[{i}] has no 'role'")
        out.append(item)
    if not out:
        raise ValueError("messages must not be empty")
    return out


def response_format_arg(
    response_format: type[BaseModel] | Mapping[str, Any] | None,
) -> Any:
    """``response_format`` as litellm takes it (a model class, or a JSON-schema dict)."""
    if response_format is None:
        return None
    if isinstance(response_format, type) and issubclass(response_format, BaseModel):
        return response_format
    if isinstance(response_format, Mapping):
        return dict(response_format)
    raise TypeError("response_format must be a pydantic model class or a JSON-schema mapping")


def parse_response(content: str | None, response_format: Any) -> Any:
    """``content`` parsed into a ``response_format`` model class; None when no model
    class was asked for or the answer does not validate."""
    if content is None or not (
        isinstance(response_format, type) and issubclass(response_format, BaseModel)
    ):
        return None
    try:
        return response_format.model_validate_json(content)
    except ValidationError:
        return None


def mock_response_dict(spec: Mapping[str, Any]) -> dict[str, Any]:
    """Expand ``{"content": ..., "tool_calls": [...]}`` into a litellm response dict."""
    calls = [
        {
            "id": c.get("id", f"call_{i}"),
            "type": "function",
            "function": {
                "name": c["name"],
                "arguments": c["arguments"]
                if isinstance(c.get("arguments"), str)
                else json.dumps(c.get("arguments", {})),
            },
        }
        for i, c in enumerate(spec.get("tool_calls", ()))
    ]
    message: dict[str, Any] = {"role": "assistant", "content": spec.get("content")}
    if calls:
        message["tool_calls"] = calls
    finish = "tool_calls" if calls else "stop"
    return {"choices": [{"index": 0, "message": message, "finish_reason": finish}]}
