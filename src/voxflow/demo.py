"""``voxflow demo``: a scripted conversation with the example assistant.

With the voice packages installed (the default in this repository), the demo is a
complete simulated voice call (the ``demo`` mode of :mod:`voxflow.commands`). Without
them the CLI runs the same conversation as text (:func:`run_text_demo`), so
``voxflow demo`` always shows a working flow.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import time
from typing import Any

from .wiring import AssistantWiring

__all__ = [
    "TEXT_SCRIPT",
    "load_example_module",
    "run_text_demo",
]

TEXT_SCRIPT = (
    "Hello there!",
    "What can you do?",
    "Tell me a story.",
    "Goodbye.",
)


def load_example_module(name: str = "assistant") -> Any:
    """The example module ``voxflow.examples.<name>`` (shipped in the package)."""
    return importlib.import_module(f"voxflow.examples.{name.removesuffix('.py')}")


def run_text_demo(*, model: str | None = None, json_output: bool = False) -> int:
    """Run :data:`TEXT_SCRIPT` through the example assistant as text; print each turn."""
    from rich.console import Console  # here: only the text demo prints through rich

    module = load_example_module("assistant")
    flow = module.assistant_class(model)()
    console = Console()
    turns: list[dict[str, Any]] = []

    async def talk() -> None:
        wiring = AssistantWiring(flow)
        for line in TEXT_SCRIPT:
            began = time.perf_counter()
            reply = await wiring.text_turn(line)
            ms = (time.perf_counter() - began) * 1000
            turns.append({"user": line, "assistant": str(reply), "route": flow.state.last_intent,
                          "ms": round(ms, 3)})
            if not json_output:
                console.print(f"[bold cyan]user[/]      {line}")
                console.print(f"[bold green]assistant[/] {reply}  "
                              f"[dim]({flow.state.last_intent}, {ms:.2f} ms)[/]")
        await wiring.aclose()

    asyncio.run(talk())
    if json_output:
        print(json.dumps({"mode": "text", "turns": turns}, indent=2))
    return 0
