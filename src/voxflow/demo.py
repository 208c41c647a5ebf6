"""``voxflow demo``: a scripted conversation with the example assistant.

With the voice packages installed (the default in this repository), the demo is a
complete simulated voice call (see :mod:`voxflow_adapters.demo`). Without them it runs
the same conversation as text, so ``voxflow demo`` always shows a working flow.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import json
import sys
import time
from pathlib import Path
from typing import Any

from ._loader import load_flow_class, module_name_for
from .settings import Settings

__all__ = [
    "TEXT_SCRIPT",
    "example_path",
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


def example_path(name: str) -> Path:
    """The path of a file in the repository's ``examples/`` folder."""
    path = Path(__file__).resolve().parents[2] / "examples" / name
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} not found: run the demo from a voxflow checkout (examples/ is not installed)"
        )
    return path


def load_example_module(name: str) -> Any:
    """Import ``examples/<name>`` (once) and return the module."""
    file = example_path(name)
    load_flow_class(f"{file}:Assistant")  # imports it, checking it defines a Flow
    return sys.modules[module_name_for(file)]


def run_text_demo(*, model: str | None = None, json_output: bool = False) -> int:
    """Run :data:`TEXT_SCRIPT` through the example assistant as text; print each turn."""
    from rich.console import Console

    module = load_example_module("assistant.py")
    flow = module.assistant_class(model)()
    console = Console()
    turns: list[dict[str, Any]] = []

    async def talk() -> None:
        for line in TEXT_SCRIPT:
            began = time.perf_counter()
            reply = await flow.ahandle_turn(line)
            ms = (time.perf_counter() - began) * 1000
            turns.append({"user": line, "assistant": str(reply), "route": flow.state.last_intent,
                          "ms": round(ms, 3)})
            if not json_output:
                console.print(f"[bold cyan]user[/]      {line}")
                console.print(f"[bold green]assistant[/] {reply}  "
                              f"[dim]({flow.state.last_intent}, {ms:.2f} ms)[/]")

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
    if (
        importlib.util.find_spec("voxflow_adapters") is not None
        and importlib.util.find_spec("voxflow_adapters.demo") is not None
    ):
        voice = importlib.import_module("voxflow_adapters.demo")
        code: int = voice.run_voice_demo(
            fast=fast, model=model, json_output=json_output, out=out, script=script,
            settings=settings,
        )
        return code
    return run_text_demo(model=model, json_output=json_output)
