"""``voxflow demo``: a scripted conversation with the example assistant.

With the voice packages installed (the default in this repository), the demo is a
complete simulated voice call (the ``demo`` command of :mod:`voxflow.commands`). Without
them it runs the same conversation as text, so ``voxflow demo`` always shows a working flow.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import sys
import time
from typing import Any

from .commands import MissingCommandError, load_command
from .settings import Settings
from .wiring import AssistantWiring

__all__ = [
    "TEXT_SCRIPT",
    "load_example_module",
    "run_demo",
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


def run_demo(
    *,
    fast: bool = False,
    model: str | None = None,
    json_output: bool = False,
    out: str = "voxflow-demo",
    script: str | None = None,
    settings: Settings | None = None,
) -> int:
    """The voice call demo when voice is installed, else the text demo."""
    try:
        voice = load_command("demo")
    except MissingCommandError as exc:
        print(f"the voice call demo is not installed ({exc}); the same conversation "
              "as text:", file=sys.stderr)
        return run_text_demo(model=model, json_output=json_output)
    return voice.run_voice_demo(
        fast=fast, model=model, json_output=json_output, out=out, script=script,
        settings=settings,
    )
