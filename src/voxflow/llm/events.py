"""What an LLM call reports while it runs: :class:`LLMEvent` and its observers.

Every call of :class:`~voxflow.llm.LLM` (and tool activity of ``voxflow.Agent``) emits
``llm_call_started``, then ``llm_stream_chunk`` per text delta when it streams, then
``llm_call_completed`` or ``llm_call_failed``; the callbacks registered with
:func:`observe_llm` in the calling context receive them (a conversation turns them into
``llm`` frames, tracing into spans). :func:`agent_scope` tags them with the agent that
made the call. Context variables carry both, so they follow tasks.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import itertools
from collections.abc import Callable, Iterator
from typing import Literal

__all__ = [
    "LLMEvent",
    "LLMEventType",
    "agent_scope",
    "current_agent",
    "emit_llm_event",
    "new_call_id",
    "observe_llm",
]

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


def emit_llm_event(event: LLMEvent) -> None:
    """Deliver ``event`` to the current :func:`observe_llm` callbacks."""
    for callback in _observers.get():
        callback(event)


def new_call_id() -> str:
    """A fresh id for one LLM call (``llm-1``, ``llm-2``, ...), unique in this process."""
    return f"llm-{next(_call_ids)}"


def current_agent() -> str | None:
    """The agent named by the innermost :func:`agent_scope`, or None."""
    return _agent_name.get()


@contextlib.contextmanager
def agent_scope(agent_name: str) -> Iterator[None]:
    """Tag LLM events of calls made in this context with ``agent_name``."""
    token = _agent_name.set(agent_name)
    try:
        yield
    finally:
        _agent_name.reset(token)
