"""Shared helpers for the conversation tests: the spec's flows and a recording LLM."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from voxflow import Flow
from voxflow.flow import FlowEventBus
from voxflow.llm import LLM, LLMResponse, Messages, normalize_messages

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


class RecordingLLM:
    """A real ``voxflow.LLM`` (litellm ``mock_response``) that keeps the prompts it got."""

    def __init__(self, mock_response: Any, model: str = "openai/gpt-4o-mini") -> None:
        self._llm = LLM(model, mock_response=mock_response)
        self.calls: list[list[dict[str, Any]]] = []
        self.streamed: list[bool] = []

    @property
    def model(self) -> str:
        return self._llm.model

    async def acall(
        self,
        messages: Messages,
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        response_format: type[BaseModel] | Mapping[str, Any] | None = None,
        stream: bool = False,
    ) -> LLMResponse:
        self.calls.append(normalize_messages(messages))
        self.streamed.append(stream)
        return await self._llm.acall(
            messages, tools=tools, response_format=response_format, stream=stream
        )


@pytest.fixture
def bus() -> FlowEventBus:
    """A private event bus per test."""
    return FlowEventBus()


@pytest.fixture
def recording_llm() -> type[RecordingLLM]:
    """The :class:`RecordingLLM` class (fixtures are how tests share helpers here)."""
    return RecordingLLM


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
