"""Shared helpers for the conversation tests: the spec's flows, an event bus, history.

An LLM that records its prompts is the public kit's :class:`voxflow.testing.ScriptedLLM`.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

from voxflow import Flow
from voxflow.flow import FlowEventBus

ROOT = Path(__file__).resolve().parents[2]


def load_example(name: str) -> Any:
    """Import ``examples/<name>.py`` as a module."""
    path = ROOT / "examples" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"examples_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def bus() -> FlowEventBus:
    """A private event bus per test."""
    return FlowEventBus()


@pytest.fixture(scope="session")
def support_module() -> Any:
    """``examples/support.py``, imported once."""
    return load_example("support")


def history(flow: Flow[Any]) -> list[tuple[str, Any]]:
    """``(role, content)`` of every message of a ConversationState flow."""
    return [(m.role, m.content) for m in flow.state.messages]


@pytest.fixture
def roles() -> Any:
    """The :func:`history` helper."""
    return history
