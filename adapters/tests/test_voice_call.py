"""End-to-end voice calls on the real models, on deterministic virtual time."""

from __future__ import annotations

import re

import pytest
from voxflow_adapters.testkit.scenario import run_call
from voxflow_adapters.testkit.script import CallScript
from voxflow_voice.engines import VoiceEngines
from voxflow_voice.speak.history import INTERRUPTED_MARK

from voxflow import ConversationConfig, Flow, listen
from voxflow.conversation import RouterContext
from voxflow.turns import TurnRunner, TurnState

pytestmark = pytest.mark.models

LONG = (
    "Once upon a time, in a small harbour town, there lived a lighthouse keeper named Ada. "
    "Every night she climbed one hundred and twelve steps to light the great lamp. "
    "One stormy evening, the lamp went dark, and a fishing boat was still out at sea."
)


@ConversationConfig(system_prompt="")
class Echo(Flow[TurnState]):
    """Rule-based: a story on request, otherwise repeats what it understood."""

    def route_turn(self, context: RouterContext) -> str | None:
        text = (self.state.current_user_message or "").lower()
        return "story" if "story" in text else "echo"

    @listen("story")
    def handle_story(self) -> str:
        return LONG

    @listen("echo")
    def handle_echo(self) -> str:
        return f"You said: {self.state.current_user_message}"


def words(text: str) -> list[str]:
    return re.findall(r"[a-z']+", text.lower())


async def test_two_turns_are_transcribed_answered_and_played_whole(engines: VoiceEngines) -> None:
    turns = TurnRunner(Echo())
    script = CallScript().user_says(0.5, "Good morning.").user_says(5.0, "What is the weather?")
    call = await run_call(turns, script, engines)
    assert [words(t) for t in call.transcripts()] == [
        ["good", "morning"], ["what", "is", "the", "weather"]
    ]
    replies = call.replies()
    assert len(replies) == 2
    assert [call.settled(d) for d in replies] == ["completed", "completed"]
    for delivery in replies:
        assert call.heard_seconds(delivery) > 0.5
    messages = [(m.role, m.content) for m in turns.flow.state.messages]
    assert [r for r, _ in messages] == ["user", "assistant", "user", "assistant"]
    assert "You said" in str(messages[1][1])
    metrics = call.metrics()
    assert len(metrics) == 2
    for m in metrics:
        assert m.first_audio is not None and m.first_audio >= m.speech_end
        assert not m.interrupted
    assert call.stale_samples() == 0


async def test_barge_in_cuts_the_reply_and_history_keeps_what_was_heard(
    engines: VoiceEngines,
) -> None:
    turns = TurnRunner(Echo())
    script = CallScript().user_says(0.3, "Tell me a story.").user_says(5.5, "Stop, please.")
    call = await run_call(turns, script, engines)
    story = call.replies()[0]
    assert call.settled(story) == "interrupted"
    assert call.stale_samples() == 0
    flushes = [f for f in call.tape.flushes if f[1] == story]
    assert len(flushes) == 1 and flushes[0][2] > 0  # queued audio was dropped at once
    fenced_at = flushes[0][0]
    assert all(r.at <= fenced_at for r in call.tape.receipts if r.delivery_id == story)
    interrupted = call.of_kind("reply_interrupted")[0]
    assert interrupted.heard_text and LONG.startswith(interrupted.heard_text.rstrip(".,"))
    assert len(interrupted.heard_text) < len(LONG)
    assert interrupted.stop_latency_ms is not None
    # the history holds exactly what was heard, marked, with the full text kept
    assistant = next(m for m in turns.flow.state.messages if m.role == "assistant")
    assert assistant.content == f"{interrupted.heard_text} {INTERRUPTED_MARK}"
    assert assistant.metadata["interrupted"] is True
    assert assistant.metadata["generated_text"] == LONG
    # the barge-in utterance itself became the next turn
    assert words(call.transcripts()[-1])[:1] == ["stop"]


async def test_noise_alone_commits_no_turn(engines: VoiceEngines) -> None:
    turns = TurnRunner(Echo())
    script = CallScript().with_noise(0.02, seed=7).until(3.0)
    call = await run_call(turns, script, engines)
    assert call.transcripts() == []
    assert turns.flow.state.messages == []


async def test_same_script_gives_the_same_event_log(engines: VoiceEngines) -> None:
    async def once() -> list[tuple[str, float]]:
        script = CallScript().user_says(0.3, "Tell me a story.").user_says(4.0, "Stop.")
        call = await run_call(TurnRunner(Echo()), script, engines)
        return [(e.kind, round(e.at, 6)) for e in call.events]

    assert await once() == await once()


async def test_reactive_steps_wait_for_the_assistant(engines: VoiceEngines) -> None:
    turns = TurnRunner(Echo())
    script = (CallScript().user_says(0.3, "Good morning.")
              .then_says("Tell me a story.", gap=0.5)
              .then_says("Stop, please.", after="reply_start", gap=2.0)
              .then_mutes(1.0, after="reply_end", gap=0.3))
    call = await run_call(turns, script, engines, tail=1.0)
    log = call.client.step_log()
    assert [a for _, a, _ in log] == ["say", "say", "mute"]
    finished = call.of_kind("reply_finished")
    started = call.of_kind("audio_started")
    # the second line came 0.5 s after the first reply's audio ended, not at a fixed time
    assert log[0][0] == pytest.approx(finished[0].at + 0.5, abs=0.05)
    # the barge-in came 2 s into the story's audio and cut it
    assert log[1][0] == pytest.approx(started[1].at + 2.0, abs=0.05)
    assert call.settled(call.replies()[1]) == "interrupted"
    assert [words(t)[:1] for t in call.transcripts()] == [["good"], ["tell"], ["stop"]]
    assert call.of_kind("mute")[0].muted is True
