"""``ScriptedLLM``: a fake provider behind the real :class:`voxflow.llm.LLM`.

A test of a voice assistant needs an LLM whose answer, pace and failures it controls:
a story that streams for six seconds so the user can talk over it, a provider that is
down, a provider that never answers. :class:`ScriptedLLM` *is* an ``LLM`` (litellm,
streaming, cancellation, observers, ``ProviderError`` translation: all the real code);
only the far side of the boundary is fake: it calls a litellm ``CustomLLM`` registered
as the provider ``voxflow-scripted`` that plays one scripted :class:`ScriptedReply` per
call::

    from voxflow.testing import ScriptedLLM, fail, hang, reply, tool_call

    llm = ScriptedLLM(
        reply("Once upon a time ...", tokens_per_second=10, first_token_delay=0.3),
        "Okay.",                                  # a plain string: at once
        fail(status=503),                         # the provider is down (retryable)
        hang(after_tokens=3),                     # three words, then nothing, ever
        tool_call("lookup_order", order_id="A1"), # for agents
    )

    @ConversationConfig(llm=llm)
    class Chat(Flow[TurnState]): ...

Replies are used one per call, in order; the last one repeats. Each call is logged in
:attr:`ScriptedLLM.calls` (:class:`ScriptedCall`: the prompt, whether it streamed, how
many tokens the provider produced, and whether the stream was closed early), so a test
can tell a stream that was cancelled by a barge-in from one that was drained.

Pace is wall-clock time (``asyncio.sleep``) unless ``clock=`` says otherwise. On a
:class:`~voxflow.clock.VirtualClock` a voice session holds the clock while the flow
generates, so generation takes no audio
time there: the pace matters in real-time runs (``pytest --voxflow-realtime``), and a
:func:`hang` in a voice call needs one (on virtual time the call waits for it forever).
A *token* here is a word with its following space.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import threading
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from voxflow.clock import Clock
from voxflow.llm import LLM
from voxflow.llm._litellm import load_litellm

__all__ = [
    "PROVIDER",
    "ScriptedCall",
    "ScriptedLLM",
    "ScriptedReply",
    "fail",
    "hang",
    "reply",
    "tool_call",
]

PROVIDER = "voxflow-scripted"
"""The litellm provider name of scripted models (``voxflow-scripted/<name>``)."""


@dataclass(frozen=True, slots=True)
class ScriptedReply:
    """One scripted provider answer; build it with :func:`reply`, :func:`fail`,
    :func:`hang` or :func:`tool_call`.

    Attributes:
        text: the answer text (streamed a token at a time).
        tool_calls: ``(name, JSON arguments)`` of requested tool calls.
        tokens_per_second: streaming pace; None: every token at once.
        first_token_delay: seconds before the first token.
        outcome: ``answer`` (the whole text), ``fail`` (after ``after_tokens`` tokens the
            provider raises an error with ``status``) or ``hang`` (after ``after_tokens``
            tokens nothing more comes, until the call is cancelled).
        after_tokens: tokens produced before a ``fail`` or ``hang``.
        status: the HTTP status of a ``fail`` (5xx, 408, 409 and 429 are retryable).
    """

    text: str = ""
    tool_calls: tuple[tuple[str, str], ...] = ()
    tokens_per_second: float | None = None
    first_token_delay: float = 0.0
    outcome: Literal["answer", "fail", "hang"] = "answer"
    after_tokens: int = 0
    status: int = 503

    def tokens(self) -> list[str]:
        """The text cut into tokens (words, each with its following space)."""
        if not self.text:
            return []
        parts = self.text.split(" ")
        return [p + " " for p in parts[:-1]] + [parts[-1]]


def _pace(tokens_per_second: float | None, first_token_delay: float) -> None:
    if tokens_per_second is not None and (
        isinstance(tokens_per_second, bool)
        or not isinstance(tokens_per_second, int | float)
        or not math.isfinite(tokens_per_second)
        or tokens_per_second <= 0
    ):
        raise ValueError(f"tokens_per_second must be a number > 0, got {tokens_per_second!r}")
    if (
        isinstance(first_token_delay, bool)
        or not isinstance(first_token_delay, int | float)
        or not math.isfinite(first_token_delay)
        or first_token_delay < 0
    ):
        raise ValueError(f"first_token_delay must be a number >= 0, got {first_token_delay!r}")


def reply(
    text: str, *, tokens_per_second: float | None = None, first_token_delay: float = 0.0
) -> ScriptedReply:
    """An answer of ``text``, streamed at ``tokens_per_second`` after ``first_token_delay`` s.

    Raises:
        TypeError: ``text`` is not a string.
        ValueError: ``text`` is blank, or a pace is not a finite positive number.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, not {type(text).__name__}")
    if not text.strip():
        raise ValueError("text must not be blank (use fail() or hang() for no answer)")
    _pace(tokens_per_second, first_token_delay)
    return ScriptedReply(
        text=text, tokens_per_second=tokens_per_second, first_token_delay=float(first_token_delay)
    )


def fail(
    *, status: int = 503, partial: str = "", tokens_per_second: float | None = None,
    first_token_delay: float = 0.0,
) -> ScriptedReply:
    """A provider failure with HTTP ``status``, after streaming ``partial`` (default: none).

    voxflow raises it as :class:`~voxflow.errors.ProviderError` (``retryable`` for 5xx,
    408, 409 and 429).

    Raises:
        ValueError: ``status`` is not an HTTP error status (400-599), or a bad pace.
    """
    if isinstance(status, bool) or not isinstance(status, int) or not 400 <= status <= 599:
        raise ValueError(f"status must be an HTTP error status (400-599), got {status!r}")
    if not isinstance(partial, str):
        raise TypeError(f"partial must be a str, not {type(partial).__name__}")
    _pace(tokens_per_second, first_token_delay)
    made = ScriptedReply(text=partial.strip() and partial)
    return ScriptedReply(
        text=made.text, tokens_per_second=tokens_per_second,
        first_token_delay=float(first_token_delay), outcome="fail",
        after_tokens=len(made.tokens()), status=status,
    )


def hang(
    *, partial: str = "", tokens_per_second: float | None = None, first_token_delay: float = 0.0,
) -> ScriptedReply:
    """A provider that streams ``partial`` (default: nothing) and then never answers.

    The call waits until it is cancelled (a barge-in, a timeout of yours); the stream is
    then closed, as with a real provider.
    """
    if not isinstance(partial, str):
        raise TypeError(f"partial must be a str, not {type(partial).__name__}")
    _pace(tokens_per_second, first_token_delay)
    made = ScriptedReply(text=partial.strip() and partial)
    return ScriptedReply(
        text=made.text, tokens_per_second=tokens_per_second,
        first_token_delay=float(first_token_delay), outcome="hang",
        after_tokens=len(made.tokens()),
    )


def tool_call(name: str, /, **arguments: Any) -> ScriptedReply:
    """A request to call tool ``name`` with ``arguments`` (JSON-serializable), for agents.

    Raises:
        ValueError: ``name`` is not an identifier.
        TypeError: an argument is not JSON-serializable.
    """
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"tool name must be an identifier, got {name!r}")
    try:
        encoded = json.dumps(arguments)
    except TypeError as exc:
        raise TypeError(f"tool_call({name!r}) arguments must be JSON-serializable: {exc}") from None
    return ScriptedReply(tool_calls=((name, encoded),))


@dataclass(slots=True)
class ScriptedCall:
    """What happened in one call to a :class:`ScriptedLLM`.

    Attributes:
        messages: the prompt the provider received (chat messages as dicts).
        stream: whether it was a streamed call.
        reply: the scripted reply it played.
        produced: tokens the provider handed out so far.
        closed_early: the stream was closed (cancelled) before it ended.
        finished: the provider ended the call (answer given, or failure raised).
        waits: the pauses (s) the provider took before each token it handed out: the
            first-token delay, then one gap per token at the scripted pace.
    """

    messages: list[dict[str, Any]]
    stream: bool
    reply: ScriptedReply
    produced: int = 0
    closed_early: bool = False
    finished: bool = False
    waits: list[float] = field(default_factory=list)

    @property
    def total(self) -> int:
        """Tokens of the whole scripted answer."""
        return len(self.reply.tokens())


_Spec = str | ScriptedReply
_registry: weakref.WeakValueDictionary[str, ScriptedLLM] = weakref.WeakValueDictionary()
_names = itertools.count(1)
_setup_lock = threading.Lock()
_registered = False


class ScriptedLLM(LLM):
    """A real :class:`~voxflow.llm.LLM` whose provider plays scripted replies.

    Args:
        replies: one per call (a string is ``reply(text)``); the last one repeats.
        name: the model name after ``voxflow-scripted/`` (default: a unique one).
        clock: the clock the pace is kept on (default: the wall clock, ``asyncio.sleep``);
            a :class:`~voxflow.clock.VirtualClock` makes the pace exact and instant.
        **params: other :class:`~voxflow.llm.LLM` options (``temperature=`` ...).

    Raises:
        ValueError: no replies, or a name already used by a live ScriptedLLM.
        TypeError: a reply is neither a string nor a :class:`ScriptedReply`.
    """

    def __init__(self, *replies: _Spec, name: str | None = None, clock: Clock | None = None,
                 **params: Any) -> None:
        if not replies:
            raise ValueError("ScriptedLLM needs at least one reply")
        script = [self._coerce(i, r) for i, r in enumerate(replies)]
        if name is None:
            name = f"llm-{next(_names)}"
        if not isinstance(name, str) or not name or "/" in name or not name.isprintable():
            raise ValueError(f"name must be a non-empty printable string without '/', got {name!r}")
        model = f"{PROVIDER}/{name}"
        if "mock_response" in params:
            raise ValueError("ScriptedLLM plays its replies; do not pass mock_response")
        super().__init__(model, **params)
        # Now, not on the first call: importing litellm takes seconds, and a first call
        # made inside a real-time voice call would stall the event loop that long.
        _register_provider()
        with _setup_lock:
            if model in _registry:
                raise ValueError(f"a ScriptedLLM named {name!r} exists already")
            _registry[model] = self
        self._script = script
        self._sleep = clock.sleep if clock is not None else asyncio.sleep
        self._script_lock = threading.Lock()
        self.calls: list[ScriptedCall] = []
        """every call, in order"""

    @staticmethod
    def _coerce(index: int, value: object) -> ScriptedReply:
        if isinstance(value, ScriptedReply):
            return value
        if isinstance(value, str):
            return reply(value)
        raise TypeError(
            f"replies[{index}] must be a str or a ScriptedReply (reply(), fail(), hang(), "
            f"tool_call()), not {type(value).__name__}"
        )

    def __repr__(self) -> str:
        return f"ScriptedLLM(model={self.model!r}, calls={len(self.calls)})"

    def _begin(self, messages: list[Any], stream: bool) -> ScriptedCall:
        with self._script_lock:
            scripted = self._script.pop(0) if len(self._script) > 1 else self._script[0]
            call = ScriptedCall(
                messages=[dict(m) for m in messages if isinstance(m, Mapping)],
                stream=stream, reply=scripted,
            )
            self.calls.append(call)
        return call


def _register_provider() -> None:
    """Import litellm and register the ``voxflow-scripted`` provider (once per process)."""
    global _registered
    with _setup_lock:
        if _registered:
            return

        litellm = load_litellm()
        # here: litellm loads only when a scripted LLM is first used (import-time cost)
        from litellm.llms.custom_llm import CustomLLM

        handler = _make_handler(CustomLLM, litellm)
        litellm.custom_provider_map = [
            *(p for p in litellm.custom_provider_map if p.get("provider") != PROVIDER),
            {"provider": PROVIDER, "custom_handler": handler},
        ]
        setup: Any = litellm.utils.custom_llm_setup  # untyped in litellm
        setup()
        _registered = True


def _lookup(model: str) -> ScriptedLLM:
    llm = _registry.get(model) or _registry.get(f"{PROVIDER}/{model}")
    if llm is None:
        raise LookupError(f"no live ScriptedLLM for model {model!r}")
    return llm


def _make_handler(base: type[Any], litellm: Any) -> Any:
    """The litellm ``CustomLLM`` that plays each ScriptedLLM's replies."""
    from litellm.llms import custom_llm  # here: loaded with litellm, on first use

    make_error: Any = custom_llm.CustomLLMError  # untyped in litellm

    def error(call: ScriptedCall) -> Exception:
        call.finished = True
        made: Exception = make_error(status_code=call.reply.status, message=(
            f"scripted failure (HTTP {call.reply.status}) after {call.produced} tokens"
        ))
        return made

    async def play(call: ScriptedCall,
                   sleep: Callable[[float], Awaitable[None]]) -> AsyncIterator[str]:
        """The tokens of ``call``'s reply at its pace; fails or hangs where it says."""
        scripted = call.reply
        tokens = scripted.tokens()
        limit = len(tokens) if scripted.outcome == "answer" else scripted.after_tokens
        if scripted.first_token_delay:
            call.waits.append(scripted.first_token_delay)
            await sleep(scripted.first_token_delay)
        gap = 1.0 / scripted.tokens_per_second if scripted.tokens_per_second else 0.0
        for i, token in enumerate(tokens[:limit]):
            if i and gap:
                call.waits.append(gap)
                await sleep(gap)
            call.produced += 1
            yield token
        if scripted.outcome == "fail":
            raise error(call)
        if scripted.outcome == "hang":
            await asyncio.Event().wait()  # until cancelled
        call.finished = True

    def response(scripted: ScriptedReply, model: str, text: str) -> Any:
        message: dict[str, Any] = {"role": "assistant", "content": text or None}
        if scripted.tool_calls:
            message["tool_calls"] = [
                {"id": f"call_{i}", "type": "function",
                 "function": {"name": name, "arguments": arguments}}
                for i, (name, arguments) in enumerate(scripted.tool_calls)
            ]
        finish = "tool_calls" if scripted.tool_calls else "stop"
        return litellm.ModelResponse(
            model=model, choices=[{"index": 0, "message": message, "finish_reason": finish}]
        )

    class ScriptedProvider(base):  # type: ignore[misc]
        async def acompletion(self, model: str, messages: list[Any], *args: Any,
                              **kwargs: Any) -> Any:
            llm = _lookup(model)
            call = llm._begin(messages, stream=False)
            text: list[str] = []
            try:
                async for token in play(call, llm._sleep):
                    text.append(token)
            except asyncio.CancelledError:
                call.closed_early = True
                raise
            return response(call.reply, model, "".join(text))

        async def astreaming(self, model: str, messages: list[Any], *args: Any,
                             **kwargs: Any) -> AsyncIterator[dict[str, Any]]:
            llm = _lookup(model)
            call = llm._begin(messages, stream=True)
            try:
                async for token in play(call, llm._sleep):
                    yield {"text": token, "is_finished": False, "finish_reason": "",
                           "usage": None, "index": 0, "tool_use": None}
                for i, (name, arguments) in enumerate(call.reply.tool_calls):
                    yield {"text": "", "is_finished": False, "finish_reason": "", "usage": None,
                           "index": 0, "tool_use": {
                               "id": f"call_{i}", "type": "function", "index": i,
                               "function": {"name": name, "arguments": arguments}}}
                finish = "tool_calls" if call.reply.tool_calls else "stop"
                yield {"text": "", "is_finished": True, "finish_reason": finish, "usage": None,
                       "index": 0, "tool_use": None}
            except (asyncio.CancelledError, GeneratorExit):
                if not call.finished:
                    call.closed_early = True
                raise

    return ScriptedProvider()

