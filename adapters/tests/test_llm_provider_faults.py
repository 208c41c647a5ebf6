"""A call whose LLM provider hangs, resets the connection or answers garbage (issue 29,
fault injection): the faulted turn fails with the provider's cause and says nothing, the
turns before it stay answered and stored in the history, and the call goes on answering
once the provider is back; a background job asking the hung provider settles failed,
never stuck running. The provider is a real HTTP server on loopback on the far side of
the boundary (benchmarks/_llm_faults.py), reached by real litellm through an endpoint
the code names; the call is the test kit's simulated line on the real models (virtual
time: no timing is asserted). The figures (how long the caller waited, what it heard)
are benchmarks/faults.py's."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar

import pytest
from voxflow_adapters.testkit.scenario import run_call
from voxflow_adapters.testkit.script import CallScript
from voxflow_voice.engines import VoiceEngines
from voxflow_voice.session import VoiceSettings

from voxflow import ConversationConfig, Flow, listen
from voxflow.conversation import RouterContext
from voxflow.jobs import JobContext, background_job
from voxflow.llm import LLM
from voxflow.wiring import AssistantState, AssistantWiring

pytestmark = pytest.mark.models

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def _faults() -> ModuleType:
    """benchmarks/_llm_faults.py, imported as the benchmark imports it."""
    name = "voxflow_benchmark_llm_faults"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, BENCHMARKS / "_llm_faults.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def chat_flow(config: dict[str, Any]) -> Flow[AssistantState]:
    @ConversationConfig(llm=LLM(config))
    class Chat(Flow[AssistantState]):
        pass

    return Chat()


@pytest.mark.parametrize("fault", ["hang", "reset", "garbage"])
async def test_a_call_goes_on_through_a_provider_that_hangs_resets_or_answers_garbage(
    engines: VoiceEngines, fault: str
) -> None:
    faults = _faults()
    with faults.faulty_provider() as provider:
        flow = chat_flow(provider.llm_config(timeout=2.0, retries=1))
        modes = iter(["ok", fault, "ok"])

        def on_event(event: Any) -> None:  # each question meets its mode
            if type(event).__name__ == "TurnCommitted":
                provider.mode = next(modes)

        script = (CallScript().user_says(0.3, "Are you there?")
                  .user_says(6.0, "What is the time?")
                  .user_says(14.0, "Are you still there?"))
        # (no answer in the pause: each question's request follows its commit)
        settings = VoiceSettings(speculative_replies=False)
        call = await asyncio.wait_for(run_call(flow, script, engines, on_event=on_event,
                                               settings=settings, tail=4.0), timeout=180)
    first, faulted, after = call.replies()
    state = flow.state
    assert call.settled(first) == "completed" and call.heard_seconds(first) > 0.5
    assert state.replies[faulted].status == "failed"
    turn = state.turns[state.replies[faulted].turn_id]
    assert turn.status == "failed"
    assert call.heard_seconds(faulted) == 0.0  # nothing of a broken answer was said
    assert call.settled(after) == "completed" and call.heard_seconds(after) > 0.5
    said = [m.content for m in state.messages if m.role == "assistant"]
    assert [str(s).strip() for s in said] == [faults.ANSWER, faults.ANSWER]  # none lost
    assert [m.role for m in state.messages] == ["user", "assistant", "user", "user",
                                                "assistant"]
    assert provider.count(fault) >= 1
    assert call.stale_samples() == 0


@background_job(kind="llm_faults.ask")
async def ask_the_provider(job: JobContext, config: dict[str, Any]) -> str:
    reply = await LLM(config).acall("Look it up.")
    return reply.content or "nothing"


class Asks(Flow[AssistantState]):
    conversational = True
    config: ClassVar[dict[str, Any]] = {}

    def route_turn(self, context: RouterContext) -> str | None:
        return "ask"

    @listen("ask")
    def handle(self) -> str:
        ask_the_provider.start(self, config=type(self).config)
        return "Let me check."


async def test_a_job_asking_a_hung_provider_settles_failed_with_the_timeout() -> None:
    faults = _faults()
    with faults.faulty_provider("hang") as provider:
        flow = type("HungAsks", (Asks,), {"config": provider.llm_config(timeout=1.0,
                                                                        retries=0)})()
        async with AssistantWiring(flow) as wiring:
            await wiring.text_turn("check it")
            await wiring.wait_for_jobs(30.0)
    [job] = flow.state.jobs.values()
    assert job.status == "failed", job
    assert job.error is not None and "timed out" in job.error.lower(), job.error
