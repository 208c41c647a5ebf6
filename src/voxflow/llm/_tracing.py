"""The span of one LLM call, in OpenTelemetry's GenAI semantic conventions.

``chat {model}`` (kind CLIENT) with ``gen_ai.operation.name``, ``gen_ai.provider.name``,
``gen_ai.request.*`` (model, temperature, max_tokens, top_p), ``gen_ai.response.*`` (model,
id, finish_reasons) and ``gen_ai.usage.input_tokens`` / ``output_tokens``; the messages
(``gen_ai.input.messages``, ``gen_ai.output.messages``) only when content capture is on
(:func:`voxflow.telemetry.set_capture_content`). Nothing at all when tracing is off.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from voxflow import telemetry

__all__ = ["LLMSpan"]

_REQUEST = (("temperature", "gen_ai.request.temperature"),
            ("max_tokens", "gen_ai.request.max_tokens"),
            ("top_p", "gen_ai.request.top_p"))


def _provider(model: str) -> str | None:
    return model.split("/", 1)[0] if "/" in model else None


class LLMSpan:
    """One call's span (a no-op when tracing is off)."""

    __slots__ = ("_span", "finish_reasons", "response_id", "response_model", "usage")

    def __init__(self, model: str, kwargs: Mapping[str, Any], call_id: str,
                 agent: str | None, has_tools: bool) -> None:
        self.finish_reasons: list[str] = []
        self.response_id: str | None = None
        self.response_model: str | None = None
        self.usage: Any = None
        if not telemetry.tracing_enabled():
            self._span = None
            return
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": _provider(model),
            "gen_ai.system": _provider(model),
            "gen_ai.request.model": model,
            "voxflow.llm.call_id": call_id,
            "voxflow.llm.has_tools": has_tools,
            "gen_ai.agent.name": agent,
        }
        for key, name in _REQUEST:
            value = kwargs.get(key)
            if isinstance(value, int | float):
                attributes[name] = value
        if telemetry.capture_content():
            attributes["gen_ai.input.messages"] = json.dumps(
                kwargs.get("messages", []), default=str)
        self._span = telemetry.start_span(f"chat {model}", attributes, kind="client")

    def response(self, raw: Any) -> None:
        """Read the response's model, id, finish reasons and usage (whole or a chunk)."""
        if self._span is None:
            return
        self.response_model = getattr(raw, "model", None) or self.response_model
        self.response_id = getattr(raw, "id", None) or self.response_id
        for choice in getattr(raw, "choices", None) or ():
            reason = getattr(choice, "finish_reason", None)
            if reason:
                self.finish_reasons.append(str(reason))
        usage = getattr(raw, "usage", None)
        if usage is not None:
            self.usage = usage

    def done(self, content: str | None, tool_calls: Any = ()) -> None:
        """End the span with what the call returned."""
        span, self._span = self._span, None
        if span is None:
            return
        if self.response_model:
            span.set_attribute("gen_ai.response.model", str(self.response_model))
        if self.response_id:
            span.set_attribute("gen_ai.response.id", str(self.response_id))
        if self.finish_reasons:
            span.set_attribute("gen_ai.response.finish_reasons", self.finish_reasons)
        for field, name in (("prompt_tokens", "gen_ai.usage.input_tokens"),
                            ("completion_tokens", "gen_ai.usage.output_tokens")):
            value = getattr(self.usage, field, None)
            if isinstance(value, int):
                span.set_attribute(name, value)
        if telemetry.capture_content():
            message: dict[str, Any] = {"role": "assistant", "content": content}
            if tool_calls:
                message["tool_calls"] = [
                    {"id": c.id, "name": c.name, "arguments": c.arguments} for c in tool_calls]
            span.set_attribute("gen_ai.output.messages", json.dumps([message], default=str))
        span.end(end_time=telemetry.now_ns())

    def failed(self, exc: BaseException) -> None:
        """End the span as failed (``error.type``)."""
        span, self._span = self._span, None
        if span is not None:
            telemetry.fail(span, exc)
            span.end(end_time=telemetry.now_ns())
