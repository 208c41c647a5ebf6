"""LLM access: ``LLM`` over litellm, and the ``BaseLLM`` protocol the runtime calls.

Everything in voxflow that talks to a model (``converse_turn``, the router,
``classify_intent``, ``Agent``) goes through ``BaseLLM.acall``. ``LLM`` implements it
with ``litellm.acompletion``:

* async first: ``acall`` / ``astream``; ``call`` is a sync wrapper for scripts;
* streaming: ``acall(..., stream=True)`` streams internally (observers see every chunk,
  see :func:`observe_llm`) and returns the whole answer; ``astream`` hands chunks to the
  caller and is cancellable mid-stream: cancelling the consuming task, or leaving the
  ``async with`` block early, closes the provider stream instead of draining it;
* structured output: ``response_format=`` a pydantic model class (parsed into
  ``LLMResponse.parsed``) or a JSON-schema dict;
* tool calls: ``tools=`` OpenAI-style tool specs; requested calls come back in
  ``LLMResponse.tool_calls`` (``voxflow.Agent`` runs the loop);
* provider failures become :class:`voxflow.errors.ProviderError` with ``retryable`` and
  a message that states the cause; every request has a timeout, and transient failures
  before the first token are retried with backoff (:mod:`voxflow.llm.policy`).

The parts: :mod:`voxflow.llm.messages` (what goes in and comes out of a call),
:mod:`voxflow.llm.events` (what a call reports while it runs), :mod:`voxflow.llm.stream`
(a streamed call); their public names are re-exported here.

litellm is imported off the event loop, on a thread of its own, when an entry point
starts (:func:`voxflow.llm.preload`) or on the first call, which waits for it without
blocking the loop (it takes seconds), so ``import voxflow`` stays light.
``mock_response=`` is passed through to litellm for offline, deterministic tests; a list
of mock responses is consumed one per call.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, TypeVar, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from voxflow.blocking import sync_twin
from voxflow.llm import policy as llm_policy
from voxflow.llm._attempts import Attempts, cause_of
from voxflow.llm._litellm import aload_litellm
from voxflow.llm._tracing import LLMSpan
from voxflow.llm.events import (
    LLMEvent,
    LLMEventType,
    agent_scope,
    current_agent,
    emit_llm_event,
    new_call_id,
    observe_llm,
)
from voxflow.llm.messages import (
    LLMResponse,
    Messages,
    ToolCall,
    mock_response_dict,
    normalize_messages,
    parse_response,
    response_format_arg,
)
from voxflow.llm.stream import LLMStream

__all__ = [
    "LLM",
    "BaseLLM",
    "LLMConfig",
    "LLMEvent",
    "LLMEventType",
    "LLMResponse",
    "LLMStream",
    "Messages",
    "ToolCall",
    "agent_scope",
    "coerce_llm",
    "emit_llm_event",
    "normalize_messages",
    "observe_llm",
]

_T = TypeVar("_T")


class LLMConfig(BaseModel):
    """How to call one model: a litellm model id plus completion parameters."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    model: str = Field(min_length=1, description="litellm model id, e.g. 'openai/gpt-4o-mini'")
    temperature: float | None = Field(default=None, ge=0, le=2)
    max_tokens: int | None = Field(default=None, gt=0)
    timeout: float | None = Field(
        default=None, gt=0, le=3600,
        description="seconds per request (None: llm_policy's default, 30 s unless configured)",
    )
    retries: int | None = Field(
        default=None, ge=0, le=10,
        description="extra attempts after a transient failure before the first token "
        "(None: llm_policy's default, 2)",
    )
    retry_backoff: float | None = Field(
        default=None, ge=0, le=60, description="seconds before the first retry, then doubled"
    )
    api_base: str | None = Field(default=None, description="custom endpoint (e.g. a local server)")
    params: dict[str, Any] = Field(
        default_factory=dict, description="other litellm.acompletion keyword arguments"
    )

    @classmethod
    def from_value(cls, value: str | Mapping[str, Any] | LLMConfig) -> LLMConfig:
        """Build from a model id string or a mapping like ``{model: ..., max_tokens: 512}``.

        Unknown mapping keys go to ``params``.
        """
        if isinstance(value, LLMConfig):
            return value
        if isinstance(value, str):
            return cls(model=value)
        if isinstance(value, Mapping):
            known = {k: value[k] for k in value if k in cls.model_fields and k != "params"}
            extra = {k: v for k, v in value.items() if k not in cls.model_fields}
            extra.update(dict(value.get("params") or {}))
            return cls(**known, params=extra)
        raise TypeError(f"llm must be a model id string or a mapping, not {type(value).__name__}")


@runtime_checkable
class BaseLLM(Protocol):
    """What voxflow needs from a language model. ``LLM`` implements it; so can your own."""

    @property
    def model(self) -> str:
        """A model name, for errors and traces."""
        ...

    async def acall(
        self,
        messages: Messages,
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        response_format: type[BaseModel] | Mapping[str, Any] | None = None,
        stream: bool = False,
    ) -> LLMResponse:
        """Complete ``messages``; with ``stream=True`` observers see chunks as they arrive.

        ``messages`` is read-only: copy a message before changing it (conversational
        flows pass their cached history dicts, see ``get_conversation_messages``).
        """
        ...


class LLM:
    """A litellm-backed model. ``LLM("openai/gpt-4o-mini")`` or ``LLM({"model": ...})``.

    Args:
        model: a model id, a config mapping (``{model: ..., max_tokens: 512}``) or an
            ``LLMConfig``.
        mock_response: passed to litellm for offline tests: a string, an exception, a
            response dict (``{"choices": [...]}``), ``{"content": ..., "tool_calls":
            [...]}``, or a list of these consumed one per call (the last one repeats). A
            ``mock_response`` key of a config mapping is used the same way.
        **params: extra ``litellm.acompletion`` keyword arguments (``temperature=`` ...).
    """

    def __init__(
        self,
        model: str | Mapping[str, Any] | LLMConfig,
        *,
        mock_response: Any = None,
        **params: Any,
    ) -> None:
        config = LLMConfig.from_value(model)
        if params:
            merged = {**config.model_dump(exclude={"params"}), **config.params, **params}
            config = LLMConfig.from_value({k: v for k, v in merged.items() if v is not None})
        if "mock_response" in config.params:  # e.g. from a declaration's llm mapping
            rest = {k: v for k, v in config.params.items() if k != "mock_response"}
            if mock_response is None:
                mock_response = config.params["mock_response"]
            config = LLMConfig(**{**config.model_dump(exclude={"params"}), "params": rest})
        self.config = config
        self._mocks: list[Any] | None = None
        self._mock: Any = None
        if isinstance(mock_response, list | tuple):
            if not mock_response:
                raise ValueError("mock_response must not be an empty list")
            self._mocks = list(mock_response)
        else:
            self._mock = mock_response
        self._mock_lock = threading.Lock()

    @property
    def model(self) -> str:
        """The litellm model id."""
        return self.config.model

    def __repr__(self) -> str:
        return f"LLM(model={self.model!r})"

    def _next_mock(self) -> Any:
        with self._mock_lock:
            if self._mocks is None:
                return self._mock
            return self._mocks.pop(0) if len(self._mocks) > 1 else self._mocks[0]

    def _kwargs(
        self,
        messages: Messages,
        tools: Sequence[Mapping[str, Any]] | None,
        response_format: Any,
        stream: bool,
    ) -> dict[str, Any]:
        config = self.config
        kwargs: dict[str, Any] = {"model": config.model, "messages": normalize_messages(messages)}
        for name in ("temperature", "max_tokens", "timeout", "api_base"):
            value = getattr(config, name)
            if value is not None:
                kwargs[name] = value
        kwargs.setdefault("timeout", llm_policy.llm_defaults().timeout)
        kwargs["max_retries"] = 0  # voxflow retries (before the first token only)
        kwargs.update(config.params)
        if tools:
            kwargs["tools"] = [dict(t) for t in tools]
        rf = response_format_arg(response_format)
        if rf is not None:
            kwargs["response_format"] = rf
        if stream:
            kwargs["stream"] = True
        mock = self._next_mock()
        if mock is not None:
            if isinstance(mock, Mapping) and "choices" not in mock:
                mock = mock_response_dict(mock)
            kwargs["mock_response"] = mock
        return kwargs

    def _attempts(self) -> Attempts:
        defaults = llm_policy.llm_defaults()
        retries = self.config.retries if self.config.retries is not None else defaults.retries
        backoff = (self.config.retry_backoff if self.config.retry_backoff is not None
                   else defaults.backoff)
        return Attempts(self.model, retries, backoff,
                         secrets=(self.config.params.get("api_key"),))

    async def acall(
        self,
        messages: Messages,
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        response_format: type[BaseModel] | Mapping[str, Any] | None = None,
        stream: bool = False,
    ) -> LLMResponse:
        """Complete ``messages`` and return the whole answer.

        Args:
            messages: a user string or chat messages.
            tools: OpenAI-style tool specs the model may call.
            response_format: a pydantic model class (its instance lands in ``parsed``) or
                a JSON-schema mapping.
            stream: stream from the provider, so observers get ``llm_stream_chunk``
                events as text arrives; the return value is the same.

        Raises:
            ProviderError: the provider failed (after the retries of a transient failure);
                the message states the cause, ``retryable`` whether to try again later.
        """
        if stream:
            async with self.astream(messages, tools=tools, response_format=response_format) as s:
                async for _ in s:
                    pass
            assert s.response is not None
            return s.response
        kwargs = self._kwargs(messages, tools, response_format, stream=False)
        call_id = new_call_id()
        agent = current_agent()
        emit_llm_event(
            LLMEvent(
                "llm_call_started", call_id, self.model, has_tools=bool(tools), agent_name=agent
            )
        )
        span = LLMSpan(self.model, kwargs, call_id, agent, bool(tools))
        litellm = await aload_litellm()
        attempts = self._attempts()
        while True:
            try:
                attempts.check_credentials(kwargs)
                raw = await litellm.acompletion(**kwargs)
                break
            except asyncio.CancelledError as exc:
                span.failed(exc)
                raise
            except Exception as exc:
                error = await attempts.failed(exc)
                if error is not None:
                    span.failed(error)
                    emit_llm_event(
                        LLMEvent("llm_call_failed", call_id, self.model, agent_name=agent)
                    )
                    raise error from cause_of(exc)
            kwargs = self._kwargs(messages, tools, response_format, stream=False)
        span.response(raw)
        message = raw.choices[0].message
        calls = tuple(
            ToolCall(
                id=c.id or f"call_{i}", name=c.function.name, arguments=c.function.arguments or "{}"
            )
            for i, c in enumerate(getattr(message, "tool_calls", None) or ())
        )
        content = message.content
        response = LLMResponse(
            content=content,
            tool_calls=calls,
            parsed=parse_response(content, kwargs.get("response_format")),
            model=self.model,
            call_id=call_id,
        )
        span.done(content, calls)
        emit_llm_event(
            LLMEvent("llm_call_completed", call_id, self.model, content or "", bool(tools), agent)
        )
        return response

    def astream(
        self,
        messages: Messages,
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        response_format: type[BaseModel] | Mapping[str, Any] | None = None,
    ) -> LLMStream:
        """Stream text deltas: ``async with llm.astream(msgs) as s: async for text in s``.

        Leaving the block early, or cancelling the task that iterates, closes the
        provider stream without draining it. ``s.response`` holds the whole answer once
        the stream is exhausted.
        """
        return LLMStream(
            self.model,
            lambda: self._kwargs(messages, tools, response_format, stream=True),
            has_tools=bool(tools),
            attempts=self._attempts(),
        )

    call = sync_twin(acall)


def coerce_llm(
    value: BaseLLM | str | Mapping[str, Any] | None, *, name: str = "llm"
) -> BaseLLM | None:
    """An LLM from a model id, a config mapping, an ``LLM``/``BaseLLM``, or None.

    Raises:
        TypeError: ``value`` is none of these; the message names ``name``.
    """
    if value is None:
        return None
    if isinstance(value, str | Mapping | LLMConfig):
        try:
            return LLM(value)
        except (TypeError, ValidationError) as exc:
            raise TypeError(f"{name}: invalid LLM configuration ({exc})") from exc
    if isinstance(value, BaseLLM):
        return value
    raise TypeError(
        f"{name} must be a model id, a config mapping or a BaseLLM, not {type(value).__name__}"
    )
