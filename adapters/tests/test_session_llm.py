"""A voice session over a streaming LLM: barge-in while it generates, and its failures.

The LLM is the public kit's :class:`voxflow.testing.ScriptedLLM`: the real ``LLM`` over
litellm, whose provider (a litellm custom provider) streams a scripted answer a word at
a time at a given pace, or fails. It logs what each provider stream produced, so a test
can tell a stream that was closed from one that was drained.

The barge-in-during-generation test runs on the real-time clock: on virtual time the
session holds the clock while the flow generates (generation takes no audio time, so a
result never depends on the machine's speed), so the user could never speak *during*
generation there. It asserts no timing, only what happened, and nothing it checks
depends on how fast the machine is: the user barges in 1.5 s after the reply's audio
started (however late that is), and the provider, having streamed the story, keeps its
stream open (it would never end on its own: the barge-in is during generation).
"""

from __future__ import annotations

import asyncio

import pytest
from voxflow_adapters.testkit.assertions import (
    assert_completed,
    assert_history_is_heard,
    assert_interrupted,
    assert_no_stale_audio,
)
from voxflow_adapters.testkit.call_runner import CallRunner
from voxflow_adapters.testkit.scenario import run_call
from voxflow_adapters.testkit.script import CallScript
from voxflow_voice.engines import VoiceEngines
from voxflow_voice.listen.turn_detector import TurnDetection
from voxflow_voice.session import VoiceSettings
from voxflow_voice.speak.history import INTERRUPTED_MARK

from voxflow import ConversationConfig, Flow
from voxflow.clock import MonotonicClock
from voxflow.testing import ScriptedLLM, fail, hang, reply
from voxflow.turns import TurnRunner, TurnState

pytestmark = pytest.mark.models

STORY = (
    "Once upon a time, in a small harbour town, there lived a lighthouse keeper named Ada. "
    "Every night she climbed one hundred and twelve steps to light the great lamp. "
    "One stormy evening, the lamp went dark, and a fishing boat was still out at sea. "
    "Ada ran down the steps, found the old oil lantern, and climbed back up in the dark."
)


def chat_flow(llm: ScriptedLLM) -> Flow[TurnState]:
    @ConversationConfig(llm=llm)
    class Chat(Flow[TurnState]):
        pass

    return Chat()


@pytest.mark.voxflow_realtime  # the plugin's voice_call runs it on the wall clock
async def test_barge_in_during_generation_closes_the_provider_stream(
    voice_call: CallRunner,
) -> None:
    # The story streams for about 6.5 s, then the provider keeps the stream open.
    llm = ScriptedLLM(hang(partial=STORY, tokens_per_second=10, first_token_delay=0.1), "Okay.")
    generating_when_cut: list[bool] = []
    turns = TurnRunner(chat_flow(llm), on_interrupt=lambda: generating_when_cut.append(True))
    # "Stop, please." 1.5 s after the story's audio started (an absolute time failed
    # under load: the story's first audio came after it, nothing of it heard).
    script = (CallScript().user_says(0.3, "Tell me a story.")
              .then_says("Stop, please.", after="reply_start", gap=1.5))
    assert voice_call.realtime
    call = await voice_call.arun(turns, script, tail=5.0)
    story = call.replies()[0]
    barge_in = call.of_kind("barge_in")[0]
    assert barge_in.delivery_id == story
    # The provider stream was cancelled, not drained.
    first = llm.calls[0]
    assert first.closed_early is True and not first.finished
    assert 0 < first.produced <= first.total
    assert generating_when_cut == [True]  # on_interrupt runs only while generating
    state = turns.flow.state
    assert state.replies[story].status == "interrupted"  # the runner's terminal event
    assert state.turns[state.replies[story].turn_id].status == "interrupted"
    # Audio had started, and not one sample of the story was played after the fence.
    assert call.heard_seconds(story) > 0.3
    assert call.stale_samples() == 0
    (flush,) = [f for f in call.tape.flushes if f[1] == story]
    assert all(r.at <= flush[0] for r in call.tape.receipts if r.delivery_id == story)
    # History holds what was heard (the flow recorded no reply: generation was cancelled).
    cut = call.of_kind("reply_interrupted")[0]
    assert cut.heard_text and STORY.startswith(cut.heard_text)
    assert STORY.startswith(cut.full_text) and len(cut.full_text) < len(STORY)
    roles = [m.role for m in state.messages]
    assert roles == ["user", "assistant", "user", "assistant"]
    assistant = state.messages[1]
    assert assistant.content == f"{cut.heard_text} {INTERRUPTED_MARK}"
    assert assistant.metadata["interrupted"] is True
    # The barge-in was answered, and that answer's stream ran to its end.
    assert call.settled(call.replies()[1]) == "completed"
    assert state.messages[3].content == "Okay."
    assert llm.calls[1].produced == llm.calls[1].total and llm.calls[1].finished


async def test_a_failed_provider_call_ends_the_turn_not_the_call(engines: VoiceEngines) -> None:
    # retries=0: a failure that outlasts voxflow.llm.policy's retries (2 by default)
    llm = ScriptedLLM(fail(status=503), "Yes, I am still here.", retries=0)
    turns = TurnRunner(chat_flow(llm))
    script = CallScript().user_says(0.3, "What is the time?").user_says(4.0, "Are you still there?")
    call = await asyncio.wait_for(run_call(turns, script, engines), timeout=120)
    first, second = call.replies()
    state = turns.flow.state
    assert state.replies[first].status == "failed"
    assert state.turns[state.replies[first].turn_id].status == "failed"
    assert call.settled(first) is None  # neither played whole nor cut: nothing was said
    assert call.heard_seconds(first) == 0.0
    assert call.settled(second) == "completed"
    assert call.heard_seconds(second) > 0.5
    assert [m.role for m in state.messages] == ["user", "user", "assistant"]
    assert state.messages[-1].content == "Yes, I am still here."
    metrics = call.metrics()
    assert [m.first_audio is None for m in metrics] == [True, False]
    assert call.stale_samples() == 0


async def test_a_speculative_reply_spoken_over_mid_generation_closes_its_stream_unheard(
    engines: VoiceEngines,
) -> None:
    # Real time: "Tell me" [1 s pause] "a story." with a 1.6 s end of turn. The reply to
    # "Tell me" starts streaming in the pause (0.1 s a word, ~6.5 s in all); the user's
    # next words discard it: its stream is cancelled, nothing of it is heard or kept.
    llm = ScriptedLLM(reply(STORY, tokens_per_second=10, first_token_delay=0.1), "Okay.")
    turns = TurnRunner(chat_flow(llm))
    first = "Tell me"
    seconds = sum(s.samples.size for s in engines.tts.synthesize(first)) / engines.tts.sample_rate
    script = CallScript().user_says(0.3, first).user_says(0.3 + seconds + 1.0, "a story.")
    patient = VoiceSettings(turn_detection=TurnDetection(end_of_turn_silence=1.6))
    call = await asyncio.wait_for(
        run_call(turns, script, engines, clock=MonotonicClock(), settings=patient, tail=3.0),
        timeout=120,
    )
    [discarded] = call.of_kind("speculative_reply_discarded")
    assert discarded.reason == "the user spoke on"
    spoken_over = llm.calls[0]
    assert spoken_over.closed_early is True
    assert 0 < spoken_over.produced < spoken_over.total
    [committed] = call.of_kind("turn_committed")
    assert committed.turn_id != discarded.turn_id
    [answer] = call.replies()
    assert {r.delivery_id for r in call.tape.receipts} == {answer}
    assert call.settled(answer) == "completed"
    state = turns.flow.state
    assert [(m.role, m.content) for m in state.messages][1:] == [("assistant", "Okay.")]
    assert list(state.turns) == [committed.turn_id]


@pytest.mark.voxflow_realtime  # a hung generation holds a virtual clock: real time only
async def test_a_hung_provider_is_cut_when_the_user_speaks_again(voice_call: CallRunner) -> None:
    # The provider streams a few words (no sentence end yet: nothing to say) and hangs.
    llm = ScriptedLLM(hang(partial="Let me think about"), "Yes, I am here.")
    script = (CallScript().user_says(0.3, "What is the meaning of life?")
              .user_says(6.0, "Hello, are you there?"))
    call = await voice_call.arun(chat_flow(llm), script)
    # (no word of a reply is heard over "Hello, are you there?": its pause after "Hello,"
    # may commit it, and the rest then takes it back, its answer unheard: revoked, or,
    # when the rest begins within continue_within of that commit, the turn continued and
    # committed again with all its words (a CI run on Dec 5 took that path). When that
    # answer's audio starts as the rest begins, a frame or two of it plays before the
    # onset pauses it (a CI run on Dec 4: 0.02 s, "heard: nothing"), never a word.)
    first, *taken_back, second = call.replies()
    cut = assert_interrupted(call, first)
    assert cut.heard_text == "" and call.heard_seconds(first) == 0.0
    for back in taken_back:
        if call.heard_seconds(back) > 0.0:
            assert assert_interrupted(call, back).heard_text == ""
            assert call.heard_seconds(back) < 0.1
    continued = [e for e in call.of_kind("turn_committed") if e.input_revision > 1]
    assert len(call.of_kind("turn_revoked")) + len(continued) == len(taken_back) <= 1
    hung = llm.calls[0]
    assert hung.closed_early and not hung.finished and hung.produced == 4
    assert assert_completed(call, second).text == "Yes, I am here."
    assert_no_stale_audio(call)
    assert_history_is_heard(call)


# A fresh interpreter: every import of litellm's (or of what its first call imports) is
# recorded with the moment it happened; run_call's call starts at on_session.
RUN_CALL_FIRST_TURN = """
import asyncio, sys, time
FAMILIES = ("litellm", "openai", "tiktoken", "tiktoken_ext", "anyio")
imports = []

def record(event, args):
    if event == "import" and args[0].split(".")[0] in FAMILIES:
        imports.append((time.perf_counter(), args[0]))

sys.addaudithook(record)
from voxflow import ConversationConfig, Flow
from voxflow.llm import LLM
from voxflow.wiring import AssistantState
from voxflow_adapters.testkit.scenario import run_call
from voxflow_adapters.testkit.script import CallScript
from voxflow_voice.engines import VoiceEngines

@ConversationConfig(llm=LLM("openai/gpt-4o-mini", mock_response="Anything else?"))
class Chat(Flow[AssistantState]):
    pass

async def main():
    engines = await asyncio.to_thread(VoiceEngines.from_environment, deterministic=True)
    started = []
    call = await run_call(Chat(), CallScript().user_says(0.3, "Where is my parcel?"),
                          engines, on_session=lambda _: started.append(time.perf_counter()))
    late = sorted({name for at, name in imports if at > started[0]})
    replies = [e.text for e in call.events if e.kind == "reply_finished"]
    print(replies, len(late), late[:8])

asyncio.run(main())
"""


def test_run_call_loads_litellm_before_the_call_starts() -> None:
    """An entry point loads litellm, and what its first call imports, before its call
    starts (run_call: with the caller's audio), so the first turn neither waits for it
    nor imports it on the loop the call runs on (issue 29). The serve, call worker and
    phone commands load it the same way, with their models."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", RUN_CALL_FIRST_TURN], capture_output=True,
                         text=True, check=True, timeout=300)
    assert out.stdout.strip().splitlines()[-1] == "['Anything else?'] 0 []", out.stderr[-2000:]
