"""``voxflow.blocking.sync_twin``: the one wrapper every exact sync twin is made with."""

from __future__ import annotations

import asyncio
import inspect
import threading

import pytest

from voxflow.agent import Agent
from voxflow.blocking import sync_twin
from voxflow.conversation.routing import aclassify_intent, classify_intent
from voxflow.llm import LLM
from voxflow.testing import ScriptedLLM

pytestmark = pytest.mark.unit


class Greeter:
    async def agreet(self, name: str, *, punctuation: str = "!") -> str:
        """Greet ``name``."""
        await asyncio.sleep(0)
        return f"hello {name}{punctuation}"

    greet = sync_twin(agreet)


class LoudGreeter(Greeter):
    async def agreet(self, name: str, *, punctuation: str = "!") -> str:
        return (await super().agreet(name, punctuation=punctuation)).upper()


async def _where() -> str:
    return threading.current_thread().name


where = sync_twin(_where)


def test_the_twin_has_the_async_ones_parameters_and_documentation() -> None:
    assert Greeter().greet("kim", punctuation="?") == "hello kim?"
    assert Greeter.greet.__name__ == "greet" and Greeter.greet.__qualname__ == "Greeter.greet"
    assert inspect.signature(Greeter.greet) == inspect.signature(Greeter.agreet)
    assert Greeter.greet.__doc__ is not None
    assert Greeter.greet.__doc__.startswith("Blocking: :meth:`agreet` run to completion")
    assert Greeter.greet.__doc__.endswith("Greet ``name``.")
    for sync, made_from in ((LLM.call, LLM.acall), (Agent.kickoff, Agent.akickoff),
                            (classify_intent, aclassify_intent)):
        assert inspect.signature(sync) == inspect.signature(made_from)


def test_a_methods_twin_runs_the_subclasss_override() -> None:
    assert LoudGreeter().greet("kim") == "HELLO KIM!"


def test_the_llms_sync_call_is_its_acall() -> None:
    assert ScriptedLLM("the answer").call("what?").content == "the answer"


async def test_inside_a_running_loop_it_runs_on_a_worker_thread() -> None:
    """A sync twin called from async code (a sync step of an async flow) never re-enters
    the caller's loop."""
    assert where() != threading.current_thread().name
    assert Greeter().greet("kim") == "hello kim!"


def test_only_a_coroutine_function_has_a_twin() -> None:
    with pytest.raises(TypeError, match="needs a coroutine function"):
        sync_twin(len)  # type: ignore[arg-type]
