"""Human feedback on a step's output (``@human_feedback``) and prompts inside a step (``ask``).

``@human_feedback(message=..., emit=[...])`` runs after the decorated method: a
:class:`FeedbackProvider` shows the output and returns the person's free text. With
``emit``, the text is collapsed to one outcome, which becomes a router label (listeners
of the outcome run and receive the :class:`HumanFeedbackResult`): exact match first
(case-insensitive), then an LLM when ``llm=`` is configured, else a
:class:`~voxflow.errors.HumanFeedbackError` listing the outcomes. Without ``emit`` the
method's recorded output is the :class:`HumanFeedbackResult`.

Providers:

* :class:`ConsoleFeedbackProvider` prints the output and the message and reads a line
  (in a worker thread, so the event loop is never blocked).
* :class:`PauseForFeedback` pauses the run: the pending context (method, output, message,
  tracking) and the state are saved to the flow's persistence (the default SQLite store
  when none is configured), ``FlowPaused`` is emitted, and kickoff *returns* the
  :class:`HumanFeedbackPending`. ``flow.resume(feedback)`` — in this process or another,
  given ``flow_id=`` — continues below the paused method. Work queued behind the paused
  method in the same dispatch step is not replayed.

:meth:`Flow.ask` asks a question from inside a step and records it in ``input_history``.

:class:`HumanInput` is the part of the Flow core that owns all of it (the runtime holds
one per Flow): the feedback and ``ask`` histories, the paused step, its save and its
resume. It reaches the Flow through its :class:`~voxflow.flow.host.FlowHost`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from voxflow.errors import FlowRuntimeError, HumanFeedbackError, ProviderError, VoxflowError
from voxflow.flow._engine import current_method
from voxflow.flow.checkpoint import export_execution, import_execution
from voxflow.flow.dsl import Misdecorated, stamp_marks
from voxflow.flow.state import dump_state, load_state_like

if TYPE_CHECKING:
    from voxflow.flow.definition import MethodDefinition
    from voxflow.flow.host import FlowHost

__all__ = [
    "ConsoleFeedbackProvider",
    "FeedbackConfig",
    "FeedbackContext",
    "FeedbackProvider",
    "HumanFeedbackPending",
    "HumanFeedbackResult",
    "HumanInput",
    "InputHistoryEntry",
    "PauseForFeedback",
    "ResumedStep",
    "collapse_feedback",
    "human_feedback",
]

F = TypeVar("F", bound=Callable[..., Any])


class FeedbackContext(BaseModel):
    """What a provider is asked to get feedback on."""

    model_config = ConfigDict(
        frozen=True, extra="forbid", arbitrary_types_allowed=True, defer_build=True
    )

    flow_name: str
    flow_id: str
    method_name: str
    message: str
    output: Any = Field(default=None, description="the method's output (by reference)")
    emit: tuple[str, ...] = ()
    depth: int = 0


class HumanFeedbackResult(BaseModel):
    """The feedback given on one step, and the outcome it collapsed to."""

    model_config = ConfigDict(
        frozen=True, extra="forbid", arbitrary_types_allowed=True, defer_build=True
    )

    method_name: str
    output: Any = None
    feedback: str
    outcome: str | None = None


class InputHistoryEntry(BaseModel):
    """One :meth:`Flow.ask` exchange."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    method_name: str | None
    prompt: str
    response: str | None


class HumanFeedbackPending(VoxflowError):
    """A provider paused the run for feedback; kickoff returns (not raises) this object.

    Attributes:
        context: the :class:`FeedbackContext` of the paused step.
    """

    def __init__(self, context: FeedbackContext) -> None:
        super().__init__(f"{context.flow_name}.{context.method_name} is waiting for human feedback")
        self.context = context

    @property
    def method_name(self) -> str:
        """The paused method."""
        return self.context.method_name

    @property
    def flow_id(self) -> str:
        """The state id to resume (``flow.resume(feedback, flow_id=...)``)."""
        return self.context.flow_id

    @property
    def message(self) -> str:
        """The question shown to the person."""
        return self.context.message


@runtime_checkable
class FeedbackProvider(Protocol):
    """Gets feedback for a step: returns the text, or raises :class:`HumanFeedbackPending`."""

    async def request_feedback(self, context: FeedbackContext) -> str:
        """The person's free-text feedback on ``context.output``."""
        ...


class ConsoleFeedbackProvider:
    """Asks on the terminal (``input_fn``/``output_fn`` are replaceable, e.g. in tests)."""

    def __init__(
        self,
        input_fn: Callable[[str], str] = input,
        output_fn: Callable[[str], None] = print,
    ) -> None:
        if not callable(input_fn) or not callable(output_fn):
            raise TypeError("input_fn and output_fn must be callable")
        self._input = input_fn
        self._output = output_fn

    async def request_feedback(self, context: FeedbackContext) -> str:
        """Print the output and message, then read one line in a worker thread."""
        self._output(f"[{context.method_name}] {context.output}")
        prompt = context.message
        if context.emit:
            prompt += f" ({' / '.join(context.emit)})"
        return await asyncio.to_thread(self._input, prompt + " ")


class PauseForFeedback:
    """Always pauses the run; the answer comes later through ``flow.resume(feedback)``."""

    async def request_feedback(self, context: FeedbackContext) -> str:
        """Raise :class:`HumanFeedbackPending`."""
        raise HumanFeedbackPending(context)


class FeedbackConfig(BaseModel):
    """What ``@human_feedback`` stamped on a method."""

    model_config = ConfigDict(
        frozen=True, extra="forbid", arbitrary_types_allowed=True, defer_build=True
    )

    message: str
    emit: tuple[str, ...] | None = None
    llm: Any = Field(default=None, description="a voxflow BaseLLM, model id or config mapping")
    default_outcome: str | None = None
    provider: Any = None


def human_feedback(
    message: str,
    *,
    emit: Sequence[str] | None = None,
    llm: Any = None,
    default_outcome: str | None = None,
    provider: FeedbackProvider | None = None,
) -> Callable[[F], F]:
    """Ask a person about the method's output after it runs.

    Args:
        message: the question shown with the output.
        emit: outcomes the feedback collapses to; each becomes a router label.
        llm: collapse free text with this LLM: a :class:`voxflow.llm.BaseLLM` (e.g.
            ``voxflow.llm.LLM``), a model id or a config mapping.
        default_outcome: used when the feedback is empty.
        provider: where feedback comes from (default: the flow's ``feedback_provider``,
            else :class:`ConsoleFeedbackProvider`).
    """
    if not isinstance(message, str) or not message.strip():
        raise ValueError("human_feedback(): message must be a non-empty string")
    outcomes = None if emit is None else tuple(emit)
    if outcomes is not None and (
        isinstance(emit, str) or not outcomes or not all(isinstance(o, str) and o for o in outcomes)
    ):
        raise ValueError("human_feedback(): emit must be a non-empty list of non-empty strings")
    if default_outcome is not None and (outcomes is None or default_outcome not in outcomes):
        raise ValueError("human_feedback(): default_outcome must be one of emit")
    if llm is not None:
        from voxflow.llm import coerce_llm  # here: the Flow core loads no LLM code

        coerce_llm(llm, name="human_feedback(): llm")  # validate now, at decoration
    if provider is not None and not isinstance(provider, FeedbackProvider):
        raise TypeError("human_feedback(): provider must have async request_feedback(context)")
    config = FeedbackConfig(
        message=message,
        emit=outcomes,
        llm=llm,
        default_outcome=default_outcome,
        provider=provider,
    )

    def decorate(func: F) -> F:
        if not callable(func):
            return Misdecorated("human_feedback", func)
        stamp_marks(func, "human_feedback").feedback = config
        return func

    return decorate


async def _ask_llm(llm: Any, text: str, outcomes: tuple[str, ...]) -> str:
    from voxflow.llm import coerce_llm  # here: the Flow core loads no LLM code

    model = coerce_llm(llm, name="llm")
    assert model is not None
    messages = [
        {
            "role": "system",
            "content": "Classify the person's feedback as exactly one of these outcomes: "
            + ", ".join(outcomes)
            + ". Answer with the outcome only.",
        },
        {"role": "user", "content": text},
    ]
    response = await model.acall(messages)
    return response.content or ""


async def collapse_feedback(
    text: str,
    outcomes: Sequence[str],
    *,
    llm: Any = None,
    default: str | None = None,
) -> str:
    """Map free-text ``text`` to one of ``outcomes`` (see module docs)."""
    if not isinstance(text, str):
        raise TypeError("feedback must be a string")
    allowed = tuple(outcomes)
    by_key = {o.strip().lower(): o for o in allowed}
    key = text.strip().lower()
    if key in by_key:
        return by_key[key]
    if not key and default is not None:
        return default
    if llm is not None:
        try:
            answer = await _ask_llm(llm, text, allowed)
        except (TypeError, ProviderError):
            raise
        except Exception as exc:
            raise ProviderError("feedback classifier failed", provider=str(llm)) from exc
        answer_key = answer.strip().strip(".\"'").lower()
        if answer_key in by_key:
            return by_key[answer_key]
        if default is not None:
            return default
    raise HumanFeedbackError(
        f"feedback does not match any outcome ({', '.join(allowed)})"
        + ("" if llm is not None else "; configure llm= to collapse free text"),
        outcomes=allowed,
    )


@dataclasses.dataclass(frozen=True, slots=True)
class ResumedStep:
    """A paused step given its feedback: what the runtime commits and dispatches."""

    method_name: str
    result: HumanFeedbackResult
    depth: int
    clear: Callable[[], Awaitable[None]]
    """Forget the paused step (here and in the backend), once the run goes on."""


class HumanInput:
    """A Flow's human input (see the module docs).

    Args:
        host: the Flow, as its parts see it.

    Attributes:
        input_history: every :meth:`ask` exchange (``InputHistoryEntry``), oldest first.
        feedback_history: every feedback result, oldest first.
        last_feedback: the most recent feedback result.
    """

    __slots__ = ("_host", "_pending", "feedback_history", "input_history", "last_feedback")

    def __init__(self, host: FlowHost) -> None:
        self._host = host
        self.input_history: list[InputHistoryEntry] = []
        self.feedback_history: list[HumanFeedbackResult] = []
        self.last_feedback: HumanFeedbackResult | None = None
        self._pending: HumanFeedbackPending | None = None

    async def _finish(
        self, config: FeedbackConfig, method_name: str, output: Any, text: str
    ) -> HumanFeedbackResult:
        """Collapse ``text`` (when outcomes are declared) and record the result."""
        outcome = None
        if config.emit:
            outcome = await collapse_feedback(
                text,
                config.emit,
                llm=config.llm,
                default=config.default_outcome,
            )
        result = HumanFeedbackResult(
            method_name=method_name, output=output, feedback=text, outcome=outcome
        )
        self.last_feedback = result
        self.feedback_history.append(result)
        return result

    async def run_step(
        self, method: MethodDefinition, output: Any, depth: int
    ) -> HumanFeedbackResult:
        """The feedback step after ``method``: ask the provider, then collapse (may
        raise :class:`HumanFeedbackPending`)."""
        flow = self._host.flow
        config: FeedbackConfig = method.feedback
        provider = config.provider or flow.feedback_provider or ConsoleFeedbackProvider()
        context = FeedbackContext(
            flow_name=type(flow).__name__,
            flow_id=flow.flow_id,
            method_name=method.name,
            message=config.message,
            output=output,
            emit=config.emit or (),
            depth=depth,
        )
        text = await provider.request_feedback(context)
        if not isinstance(text, str):
            raise TypeError(f"{type(provider).__name__}.request_feedback must return a str")
        return await self._finish(config, method.name, output, text)

    async def save_pending(self, pending: HumanFeedbackPending) -> None:
        """Save the paused step (context, tracking, state) so any process can resume it."""
        host = self._host
        self._pending = pending
        context = pending.context.model_dump(mode="json", fallback=repr)
        context["execution"] = export_execution(host.execution)
        backend = host.backend()
        await asyncio.to_thread(
            backend.save_pending_feedback, host.flow.flow_id, context, dump_state(host.state)
        )

    async def resume(self, feedback: str) -> ResumedStep:
        """Give the paused step of this flow id its ``feedback``: the state and tracking
        stored with it are restored, the feedback collapsed and recorded."""
        if not isinstance(feedback, str):
            raise TypeError("feedback must be a string")
        host = self._host
        flow = host.flow
        flow_id = flow.flow_id
        backend = host.backend()
        stored = await asyncio.to_thread(backend.load_pending_feedback, flow_id)
        pending = self._pending
        if stored is None and pending is None:
            raise FlowRuntimeError(
                f"{type(flow).__name__}: no paused feedback step for this flow id"
            )
        if stored is not None:
            context_data, state_data = stored
            host.state = load_state_like(host.state, state_data)
            host.execution = import_execution(context_data.pop("execution", {}), replay=False)
            if pending is None or pending.flow_id != flow_id:
                pending = HumanFeedbackPending(FeedbackContext.model_validate(context_data))
        assert pending is not None
        context = pending.context
        method = type(flow).flow_definition().methods.get(context.method_name)
        if method is None or method.feedback is None:
            raise FlowRuntimeError(
                f"{type(flow).__name__}: paused method {context.method_name!r} has no "
                "@human_feedback"
            )
        result = await self._finish(method.feedback, method.name, context.output, feedback)

        async def clear() -> None:
            self._pending = None
            await asyncio.to_thread(backend.clear_pending_feedback, flow_id)

        return ResumedStep(method.name, result, context.depth, clear)

    def _provider(self) -> Callable[[str], Any]:
        provider: Callable[[str], Any] | None = self._host.flow.input_provider
        return input if provider is None else provider

    def _record(self, prompt: str, response: Any) -> str | None:
        if response is not None and not isinstance(response, str):
            raise TypeError("input_provider must return a str or None")
        self.input_history.append(
            InputHistoryEntry(method_name=current_method.get(), prompt=prompt, response=response)
        )
        return response

    async def ask_async(self, prompt: str) -> str | None:
        """:meth:`Flow.ask_async`: ask through the flow's ``input_provider``, record it."""
        if not isinstance(prompt, str) or not prompt:
            raise ValueError("prompt must be a non-empty string")
        provider = self._provider()
        if inspect.iscoroutinefunction(provider):
            response = await provider(prompt)
        else:
            response = await asyncio.to_thread(provider, prompt)
            if inspect.isawaitable(response):
                response = await response
        return self._record(prompt, response)

    def ask(self, prompt: str) -> str | None:
        """:meth:`Flow.ask`: blocks the sync step until the provider answers."""
        if not isinstance(prompt, str) or not prompt:
            raise ValueError("prompt must be a non-empty string")
        response = self._provider()(prompt)
        if asyncio.iscoroutine(response):
            response.close()
            raise TypeError("input_provider is async: call `await self.ask_async(prompt)`")
        return self._record(prompt, response)
