"""``chat()``: a local read-eval-print loop over a conversational flow's ``handle_turn``.

One line in, one turn, the reply printed; the loop ends on an exit command, EOF,
Ctrl-C or an ended conversation, and always finalizes the session's traces.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol

from voxflow.conversation.helpers import get_state_field

__all__ = ["DEFAULT_EXIT_COMMANDS", "ChatFlow", "run_chat"]

DEFAULT_EXIT_COMMANDS = ("exit", "quit")
"""What ends ``chat()`` (case-insensitive)."""


class ChatFlow(Protocol):
    """What the loop needs of a conversational flow."""

    defer_trace_finalization: bool | None

    @property
    def flow_id(self) -> str: ...

    @property
    def state(self) -> Any: ...

    def handle_turn(self, message: str, session_id: str | None = None) -> Any: ...

    def finalize_session_traces(self) -> None: ...


def run_chat(
    flow: ChatFlow,
    *,
    session_id: str | None,
    prompt: str,
    assistant_prefix: str,
    exit_commands: Sequence[str],
    input_fn: Callable[[str], str] | None,
    output_fn: Callable[[str], Any] | None,
    defer_trace_finalization: bool | None,
) -> None:
    """The loop of :meth:`voxflow.Flow.chat` (its arguments, documented there)."""
    # Looked up per call, not bound at import: a replaced input/print is honoured.
    input_fn = input if input_fn is None else input_fn
    output_fn = print if output_fn is None else output_fn
    if not callable(input_fn) or not callable(output_fn):
        raise TypeError("input_fn and output_fn must be callable")
    if isinstance(exit_commands, str):
        raise TypeError("exit_commands must be a list of commands, not one string")
    exits = {str(c).strip().lower() for c in exit_commands}
    previous = flow.defer_trace_finalization
    if defer_trace_finalization is not None:
        flow.defer_trace_finalization = defer_trace_finalization
    try:
        for line in _lines(input_fn, prompt):
            if not line:
                continue
            if line.lower() in exits:
                break
            try:
                result = flow.handle_turn(line, session_id=session_id)
            except KeyboardInterrupt:
                break
            session_id = flow.flow_id
            output_fn(f"{assistant_prefix}{result}")
            if get_state_field(flow, "ended", False):
                break
    finally:
        flow.finalize_session_traces()
        flow.defer_trace_finalization = previous


def _lines(input_fn: Callable[[str], str], prompt: str) -> Iterator[str]:
    while True:
        try:
            raw = input_fn(prompt)
        except (EOFError, KeyboardInterrupt):
            return
        yield str(raw).strip()
