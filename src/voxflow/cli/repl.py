"""``voxflow chat``: the text REPL as a person meets it.

A banner says who answers (the flow, and the LLM or "rule-based") and how to leave. The
chat runs through :func:`voxflow.wiring.chat_text` (jobs and announcements as in a
call). ``exit``/``quit`` or Ctrl-D end it with exit code 0, Ctrl-C with 130; either way
the shell prompt starts on a new line.
"""

from __future__ import annotations

import asyncio
import os
import select
import sys
import threading
from typing import Any

from ..demo import load_example_module
from ..loader import load_flow
from ..wiring import chat_text

__all__ = ["run_repl"]

EXIT_OK, EXIT_INTERRUPTED = 0, 130
_POLL = 0.1


def _make_flow(flow_ref: str | None, model: str | None) -> Any:
    if flow_ref is None:
        return load_example_module().assistant_class(model)()
    return load_flow(flow_ref, model=model)


class _Lines:
    """Reads a line on the chat's reading thread; gives up (EOFError) once ``stop`` is set,
    so Ctrl-C never leaves a thread blocked on the terminal (``input()`` would keep the
    process alive until Enter)."""

    def __init__(self) -> None:
        self.stop = threading.Event()

    def __call__(self, prompt: str) -> str:
        sys.stdout.write(prompt)
        sys.stdout.flush()
        if os.name == "nt":  # no select() on consoles
            return input()
        while not self.stop.is_set():
            ready, _, _ = select.select([sys.stdin], [], [], _POLL)
            if ready:
                line = sys.stdin.readline()
                if not line:  # Ctrl-D / end of input
                    print()  # the shell prompt on its own line
                    raise EOFError
                return line.rstrip("\n")
        raise EOFError


def run_repl(flow_ref: str | None, model: str | None) -> int:
    """Chat with ``flow_ref`` (the example assistant if None) on stdin/stdout."""
    flow = _make_flow(flow_ref, model)
    flow.check_persistence()  # an unusable store: one line now, not every turn lost
    name = type(flow).__name__ if flow_ref is not None else "the example assistant"
    brain = f"open questions go to {model}" if model else (
        "rule-based (no LLM: --model MODEL to add one)" if flow_ref is None else
        "its own configuration")
    print(f"voxflow chat · {name} · {brain}")
    print("type a message and press Enter; exit, quit or Ctrl-D to end, Ctrl-C to abort",
          flush=True)
    lines = _Lines()

    async def chat() -> None:
        try:
            await chat_text(flow, read=lines)
        finally:
            lines.stop.set()  # the reading thread gives the terminal back

    # asyncio.run's own Ctrl-C handling: the chat is cancelled (its wiring closed, the
    # reading thread stopped) and KeyboardInterrupt raised once it has ended. A handler
    # of ours raising KeyboardInterrupt wherever the loop happened to be could leave
    # the process hanging after the ^C (seen once in CI: no new line for 30 s).
    try:
        asyncio.run(chat())
    except KeyboardInterrupt:
        lines.stop.set()
        print(flush=True)
        return EXIT_INTERRUPTED
    return EXIT_OK
