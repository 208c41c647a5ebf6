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
  before the first token are retried with backoff (:mod:`voxflow.llm_policy`).

litellm is imported lazily on the first call (it takes seconds to import), so
``import voxflow`` stays light. ``mock_response=`` is passed through to litellm for
offline, deterministic tests; a list of mock responses is consumed one per call.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import itertools
import json
import operator
import threading
import typing
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, Literal, Protocol, TypeVar, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from voxflow import llm_policy
from voxflow._litellm import load_litellm
from voxflow._loops import run_blocking
from voxflow.errors import ProviderError

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
    "run_sync",
]

_T = TypeVar("_T")

Messages = str | Sequence[Mapping[str, Any] | BaseModel]
"""A prompt: one user string, or chat messages (dicts or ``ConversationMessage``s)."""

LLMEventType = Literal[
    "llm_call_started",
    "llm_stream_chunk",
    "llm_call_completed",
    "llm_call_failed",
    "tool_call_started",
    "tool_call_completed",
]


@dataclasses.dataclass(frozen=True, slots=True)
class LLMEvent:
    """One observable step of an LLM call, delivered to :func:`observe_llm` callbacks."""

    type: LLMEventType
    call_id: str
    model: str
    content: str = ""
    """the text delta (``llm_stream_chunk``) or the whole answer (``llm_call_completed``)"""
    has_tools: bool = False
    """whether the call offered tools (tool-enabled calls are never public speech)"""
    agent_name: str | None = None
    """the ``Agent`` that made the call, if any"""
    tool_name: str | None = None
    """for ``tool_call_*`` events: the tool run on behalf of call ``call_id``"""


_observers: contextvars.ContextVar[tuple[Callable[[LLMEvent], None], ...]] = contextvars.ContextVar(
    "voxflow_llm_observers", default=()
)
_agent_name: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "voxflow_llm_agent", default=None
)
_call_ids = itertools.count(1)


@contextlib.contextmanager
def observe_llm(callback: Callable[[LLMEvent], None]) -> Iterator[None]:
    """Deliver every LLM event of calls made in this context (and its tasks) to ``callback``.

    Callbacks run synchronously on the calling task and must not block; an exception in
    one is not swallowed. Nested contexts add observers; leaving restores the outer set.
    """
    if not callable(callback):
        raise TypeError("callback must be callable")
    token = _observers.set((*_observers.get(), callback))
    try:
        yield
    finally:
        _observers.reset(token)


def _emit(event: LLMEvent) -> None:
    for callback in _observers.get():
        callback(event)


def emit_llm_event(event: LLMEvent) -> None:
    """Deliver ``event`` to the current :func:`observe_llm` callbacks (tool activity)."""
    _emit(event)


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


def _response_format_arg(
    response_format: type[BaseModel] | Mapping[str, Any] | None,
) -> Any:
    if response_format is None:
        return None
    if isinstance(response_format, type) and issubclass(response_format, BaseModel):
        return response_format
    if isinstance(response_format, Mapping):
        return dict(response_format)
    raise TypeError("response_format must be a pydantic model class or a JSON-schema mapping")


def _parse(content: str | None, response_format: Any) -> Any:
    if content is None or not (
        isinstance(response_format, type) and issubclass(response_format, BaseModel)
    ):
        return None
    try:
        return response_format.model_validate_json(content)
    except ValidationError:
        return None


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
        rf = _response_format_arg(response_format)
        if rf is not None:
            kwargs["response_format"] = rf
        if stream:
            kwargs["stream"] = True
        mock = self._next_mock()
        if mock is not None:
            if isinstance(mock, Mapping) and "choices" not in mock:
                mock = _mock_dict(mock)
            kwargs["mock_response"] = mock
        return kwargs

    def _attempts(self) -> _Attempts:
        defaults = llm_policy.llm_defaults()
        retries = self.config.retries if self.config.retries is not None else defaults.retries
        backoff = (self.config.retry_backoff if self.config.retry_backoff is not None
                   else defaults.backoff)
        return _Attempts(self.model, retries, backoff,
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
        call_id = f"llm-{next(_call_ids)}"
        agent = _agent_name.get()
        _emit(
            LLMEvent(
                "llm_call_started", call_id, self.model, has_tools=bool(tools), agent_name=agent
            )
        )
        litellm = load_litellm()
        attempts = self._attempts()
        while True:
            try:
                attempts.check_credentials(kwargs)
                raw = await litellm.acompletion(**kwargs)
                break
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                error = await attempts.failed(exc)
                if error is not None:
                    _emit(LLMEvent("llm_call_failed", call_id, self.model, agent_name=agent))
                    raise error from _cause_of(exc)
            kwargs = self._kwargs(messages, tools, response_format, stream=False)
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
            parsed=_parse(content, kwargs.get("response_format")),
            model=self.model,
            call_id=call_id,
        )
        _emit(
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

    def call(
        self,
        messages: Messages,
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        response_format: type[BaseModel] | Mapping[str, Any] | None = None,
    ) -> LLMResponse:
        """Sync wrapper of :meth:`acall` for scripts; prefer ``acall`` in async code."""
        return run_sync(lambda: self.acall(messages, tools=tools, response_format=response_format))


def _mock_dict(spec: Mapping[str, Any]) -> dict[str, Any]:
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


class _Attempts:
    """The attempts of one call: credentials checked first, transient failures retried
    with backoff while attempts remain; the caller decides what "before the first token"
    means and calls :meth:`failed` only then."""

    def __init__(self, model: str, retries: int, backoff: float, *,
                 secrets: Sequence[object] = ()) -> None:
        self.model = model
        self.retries = retries
        self.backoff = backoff
        self.secrets = tuple(secrets)
        self.made = 0

    def check_credentials(self, kwargs: Mapping[str, Any]) -> None:
        """Raise (no request made) when the provider's key variable is not set."""
        self.made += 1
        if self.made == 1:
            missing = llm_policy.missing_credentials(self.model, kwargs)
            if missing:
                raise _CredentialsMissing(llm_policy.credentials_error(self.model, missing))

    async def failed(self, exc: Exception) -> ProviderError | None:
        """The error to raise, or None after waiting for the next attempt."""
        if isinstance(exc, _CredentialsMissing):
            return exc.error
        error = llm_policy.provider_error(exc, self.model, attempts=self.made,
                                          secrets=self.secrets)
        if not error.retryable or self.made > self.retries:
            return error
        delay = llm_policy.backoff_delay(self.made, self.backoff, exc)
        llm_policy.log_retry(self.model, self.made, self.retries + 1, delay, exc, self.secrets)
        await asyncio.sleep(delay)
        return None

    def final(self, exc: Exception) -> ProviderError:
        """The error for a failure that must not be retried (tokens were already out)."""
        if isinstance(exc, _CredentialsMissing):
            return exc.error
        return llm_policy.provider_error(exc, self.model, attempts=self.made,
                                         secrets=self.secrets)


def _cause_of(exc: Exception) -> Exception | None:
    """The exception to chain: none for a check voxflow made itself."""
    return None if isinstance(exc, _CredentialsMissing) else exc


class _CredentialsMissing(Exception):
    def __init__(self, error: ProviderError) -> None:
        super().__init__(str(error))
        self.error = error


class LLMStream:
    """An in-flight streamed completion; an async iterator of text deltas.

    Use it as an async context manager so the provider stream is always closed. A
    transient failure before the first token is retried (:mod:`voxflow.llm_policy`); one
    after it ends the stream with :class:`~voxflow.errors.ProviderError`.
    """

    def __init__(
        self, model: str, make_kwargs: Callable[[], dict[str, Any]], *, has_tools: bool,
        attempts: _Attempts,
    ) -> None:
        self._model = model
        self._make_kwargs = make_kwargs
        self._kwargs = make_kwargs()
        self._attempts = attempts
        self._has_tools = has_tools
        self._provider: Any = None
        self._iter: AsyncIterator[str] | None = None
        self.call_id = f"llm-{next(_call_ids)}"
        self.response: LLMResponse | None = None
        """the whole answer, set once the stream is exhausted"""
        self.chunks_received = 0
        """provider chunks read so far (a closed-early stream stops counting)"""
        self.closed = False

    async def __aenter__(self) -> LLMStream:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    def __aiter__(self) -> AsyncIterator[str]:
        if self._iter is None:
            self._iter = self._run()
        return self._iter

    async def aclose(self) -> None:
        """Close the provider stream now, without draining it. Idempotent."""
        if self._iter is not None:
            closer = getattr(self._iter, "aclose", None)
            if closer is not None:
                await closer()
        await self._close_provider()

    async def _close_provider(self) -> None:
        if self.closed:
            return
        self.closed = True
        provider, self._provider = self._provider, None
        if provider is not None and hasattr(provider, "aclose"):
            await provider.aclose()

    async def _retry(self, exc: Exception) -> ProviderError | None:
        """Before the first token: close this attempt's stream, then the error to raise,
        or None once the backoff has passed and the next attempt is ready."""
        await self._close_provider()
        error = await self._attempts.failed(exc)
        if error is None:
            self.closed = False
            self.chunks_received = 0
            self._kwargs = self._make_kwargs()
        return error

    async def _run(self) -> AsyncIterator[str]:
        agent = _agent_name.get()
        _emit(
            LLMEvent(
                "llm_call_started",
                self.call_id,
                self._model,
                has_tools=self._has_tools,
                agent_name=agent,
            )
        )
        litellm = load_litellm()
        text: list[str] = []
        calls: dict[int, dict[str, str]] = {}
        try:
            while True:
                try:
                    self._attempts.check_credentials(self._kwargs)
                    self._provider = await litellm.acompletion(**self._kwargs)
                    async for chunk in self._provider:
                        self.chunks_received += 1
                        delta = chunk.choices[0].delta if chunk.choices else None
                        if delta is None:
                            continue
                        for tc in getattr(delta, "tool_calls", None) or ():
                            slot = calls.setdefault(
                                tc.index or 0, {"id": "", "name": "", "arguments": ""}
                            )
                            slot["id"] = tc.id or slot["id"]
                            if tc.function is not None:
                                slot["name"] += tc.function.name or ""
                                slot["arguments"] += tc.function.arguments or ""
                        piece = delta.content
                        if piece:
                            text.append(piece)
                            _emit(
                                LLMEvent(
                                    "llm_stream_chunk",
                                    self.call_id,
                                    self._model,
                                    piece,
                                    self._has_tools,
                                    agent,
                                )
                            )
                            yield piece
                        # A checkpoint per chunk: listeners (TurnRunner, TTS) see text live
                        # and a cancel lands between chunks even when the provider's
                        # iterator never suspends (mock streams, SDKs that buffer a whole
                        # response).
                        await asyncio.sleep(0)
                    break
                except (asyncio.CancelledError, GeneratorExit):
                    raise
                except Exception as exc:
                    # Tokens are out (spoken, shown): never stream a second answer.
                    error = (self._attempts.final(exc) if text or calls
                             else await self._retry(exc))
                    if error is not None:
                        _emit(LLMEvent("llm_call_failed", self.call_id, self._model,
                                       agent_name=agent))
                        raise error from _cause_of(exc)
        finally:
            # Shielded so a cancelled consumer still releases the provider connection.
            await asyncio.shield(self._close_provider())
        content = "".join(text) if text else None
        self.response = LLMResponse(
            content=content,
            tool_calls=tuple(
                ToolCall(
                    id=c["id"] or f"call_{i}", name=c["name"], arguments=c["arguments"] or "{}"
                )
                for i, c in sorted(calls.items())
            ),
            parsed=_parse(content, self._kwargs.get("response_format")),
            model=self._model,
            call_id=self.call_id,
        )
        _emit(
            LLMEvent(
                "llm_call_completed",
                self.call_id,
                self._model,
                content or "",
                self._has_tools,
                agent,
            )
        )


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


@contextlib.contextmanager
def agent_scope(agent_name: str) -> Iterator[None]:
    """Tag LLM events of calls made in this context with ``agent_name``."""
    token = _agent_name.set(agent_name)
    try:
        yield
    finally:
        _agent_name.reset(token)


def run_sync(make: Callable[[], Awaitable[_T]]) -> _T:
    """Run the coroutine ``make()`` to completion from sync code.

    It runs on the calling thread's cached loop, the one sync ``kickoff()`` and
    ``handle_turn()`` use (:func:`voxflow._loops.run_blocking`): litellm keeps
    per-loop workers, so a new loop per call would strand them ("event loop changed",
    "Task was destroyed" at exit). Inside a running loop (a sync method called from
    async code) it runs on a worker thread's cached loop, so the caller's loop is never
    re-entered.
    """
    return run_blocking(lambda: _await(make))


async def _await(make: Callable[[], Awaitable[_T]]) -> _T:
    return await make()
