"""Provisional commits in a voice session (``TurnDetection.resume_grace``), on the real
models (Silero VAD, Smart Turn v3.2, Whisper tiny.en, Piper), with a caller speaking in an
espeak-ng voice: "I need a flight to Boston" *(pause)* "and a hotel near the airport."

Smart Turn (and the words) judge the first clause complete, so the turn is committed at
the pause. If the user goes on before a sample of its reply was heard, the turn is taken
back (``TurnRevoked``): the reply fenced unheard, the flow rolled back, live and stored,
and the whole utterance answered as one turn. Once a sample of the reply was heard, the
turn stands and the speech over the reply is a barge-in (the history keeps what was heard).

The take-back runs in real time (a flow that takes 3 s to answer keeps its reply unheard
while the user resumes; a virtual clock would stand still while it answers); the heard
case runs on virtual time, where the reply plays the instant the turn is committed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import runpy
import shutil
from pathlib import Path

import numpy as np
import pytest
from voxflow_adapters.testkit.flows import ACKNOWLEDGEMENT, Teller, words
from voxflow_adapters.testkit.scenario import CallResult, run_call
from voxflow_adapters.testkit.script import CallScript
from voxflow_adapters.testkit.timeline import call_timeline
from voxflow_voice.audio import STT_SAMPLE_RATE, AudioChunk
from voxflow_voice.engines import VoiceEngines
from voxflow_voice.engines.end_of_turn import SmartTurn
from voxflow_voice.events import ReplyStarted, TurnCommitted, TurnRevoked
from voxflow_voice.listen.turn_detector import TurnDetection
from voxflow_voice.session import VoiceSettings

from voxflow import SQLiteFlowPersistence, persist
from voxflow.clock import MonotonicClock
from voxflow.flow import listen
from voxflow.turns import TurnRunner

pytestmark = [
    pytest.mark.models,
    pytest.mark.skipif(shutil.which("espeak-ng") is None,
                       reason="espeak-ng is missing: apt-get install espeak-ng (.ci/run does)"),
]

FIRST, SECOND = "I need a flight to Boston", "and a hotel near the airport."
PROVISIONAL = VoiceSettings(turn_detection=TurnDetection(
    min_speech=0.2, end_pad=0.1, max_end_of_turn_silence=1.6, resume_grace=1.0))
# a caller in an espeak-ng voice: benchmarks/_espeak.py, one helper for the benchmarks and tests
_espeak = runpy.run_path(str(Path(__file__).parents[2] / "benchmarks" / "_espeak.py"))["espeak"]


def espeak(tmp_path: Path, text: str) -> np.ndarray:
    return _espeak(tmp_path, text, "en-us+f3")


def utterance(tmp_path: Path, pause: float) -> AudioChunk:
    gap = np.zeros(round(pause * STT_SAMPLE_RATE), np.float32)
    speech = np.concatenate([espeak(tmp_path, FIRST), gap, espeak(tmp_path, SECOND)])
    return AudioChunk.from_float(speech.astype(np.float32), STT_SAMPLE_RATE)


@pytest.fixture(scope="module")
def smart_engines(engines: VoiceEngines) -> VoiceEngines:
    return dataclasses.replace(engines, end_of_turn=SmartTurn())


def heard(call: CallResult, turn_id: str) -> int:
    """Samples the client played of the replies to ``turn_id``."""
    deliveries = {e.delivery_id for e in call.events
                  if isinstance(e, ReplyStarted) and e.turn_id == turn_id}
    return sum(r.num_samples for r in call.tape.receipts if r.delivery_id in deliveries)


class SlowTeller(Teller):
    """Answers after 3 s of real time (a slow model): its reply is unheard that long."""

    @listen("ok")
    async def handle_ok(self) -> str:  # type: ignore[override]
        await asyncio.sleep(3.0)
        return self.acknowledgement


async def test_speech_resuming_before_the_reply_is_heard_takes_the_turn_back(
    smart_engines: VoiceEngines, tmp_path: Path
) -> None:
    backend = SQLiteFlowPersistence(tmp_path / "calls.db")

    class SavedTeller(SlowTeller):
        pass

    turns = TurnRunner(persist(backend)(SavedTeller)())
    script = CallScript().user_says(0.5, audio=utterance(tmp_path, 0.4)).until(12.0)
    call = await run_call(turns, script, smart_engines, settings=PROVISIONAL,
                          clock=MonotonicClock(), tail=1.0)

    # Committed at the pause (a complete clause), then taken back when the user went on.
    provisional, whole = [e for e in call.events if isinstance(e, TurnCommitted)]
    [revoked] = [e for e in call.events if isinstance(e, TurnRevoked)]
    assert revoked.turn_id == provisional.turn_id and revoked.text == provisional.text
    assert "flight" in words(provisional.text) and "hotel" not in words(provisional.text)
    assert call.events.index(provisional) < call.events.index(revoked) < call.events.index(whole)
    # The whole utterance is one turn, under a new identity.
    assert whole.turn_id != provisional.turn_id
    assert "flight" in words(whole.text) and "airport" in words(whole.text)
    # Not a sample of the taken-back turn's reply was heard; nothing stale either.
    assert heard(call, provisional.turn_id) == 0
    assert heard(call, whole.turn_id) > 0
    assert call.stale_samples() == 0
    # History: one user turn (the whole utterance) and its reply, live and stored.
    state = turns.flow.state
    assert [m.role for m in state.messages] == ["user", "assistant"]
    assert state.messages[0].content == whole.text
    assert state.messages[1].content == ACKNOWLEDGEMENT
    assert list(state.turns) == [whole.turn_id]
    stored = backend.load_state(str(state.id))
    assert stored is not None
    assert [m["content"] for m in stored["messages"]] == [m.content for m in state.messages]
    assert list(stored["turns"]) == [whole.turn_id]
    # The call's timeline tells it.
    assert "turn 1 taken back, its answer unheard" in call_timeline(call)


async def test_once_a_sample_of_the_reply_was_heard_the_turn_stands(
    smart_engines: VoiceEngines, tmp_path: Path
) -> None:
    """Virtual time: the reply plays the instant the turn is committed, so 0.8 s later the
    user has heard it: the continuation is a new turn that cuts the reply (a barge-in),
    and the history keeps what was heard of it. (Without continue_complete: with it, the
    default, a complete turn is continued too: test_continuation_session.py.)"""
    turns = TurnRunner(Teller(trigger=None))  # the story: still playing 0.8 s later
    script = CallScript().user_says(0.5, audio=utterance(tmp_path, 0.8)).until(12.0)
    standing = PROVISIONAL.model_copy(update={"turn_detection": PROVISIONAL.turn_detection
                                              .model_copy(update={"continue_complete": False})})
    call = await run_call(turns, script, smart_engines, settings=standing)

    assert not call.of_kind("turn_revoked")
    first, second = [e for e in call.events if isinstance(e, TurnCommitted)]
    assert "flight" in words(first.text) and "flight" not in words(second.text)
    [interrupted] = call.of_kind("reply_interrupted")
    assert interrupted.turn_id == first.turn_id
    assert heard(call, first.turn_id) > 0 and interrupted.heard_text
    assert call.stale_samples() == 0
    state = turns.flow.state
    assert [m.role for m in state.messages] == ["user", "assistant", "user", "assistant"]
    # Only what was heard, marked as cut.
    assert state.messages[1].content == f"{interrupted.heard_text} [interrupted by the user]"
    assert list(state.turns) == [first.turn_id, second.turn_id]


async def test_a_complete_turn_held_goes_on_with_the_speech_after_its_pause(
    smart_engines: VoiceEngines, tmp_path: Path
) -> None:
    """Virtual time, as above, but a complete turn whose words close nothing is held
    ``complete_silence`` (0.8 s): "and a hotel" 0.6 s later goes on in it, so one turn is
    answered, with all the words; nothing of a reply to the first clause alone is heard.
    A question is not held: it is answered at the short pause."""
    held = VoiceSettings(turn_detection=PROVISIONAL.turn_detection.model_copy(
        update={"complete_silence": 0.8}))
    script = CallScript().user_says(0.5, audio=utterance(tmp_path, 0.6)).until(12.0)
    # Not held, the first clause is answered on its own, its reply heard and cut ...
    alone = await run_call(TurnRunner(Teller(trigger=None)), script, smart_engines,
                           settings=PROVISIONAL)
    assert len([e for e in alone.events if isinstance(e, TurnCommitted)]) == 2
    # ... held, it is one turn and one reply.
    turns = TurnRunner(Teller(trigger=None))
    call = await run_call(turns, script, smart_engines, settings=held)
    [whole] = [e for e in call.events if isinstance(e, TurnCommitted)]
    assert "flight" in words(whole.text) and "airport" in words(whole.text)
    assert not call.of_kind("reply_interrupted") and not call.of_kind("turn_revoked")
    assert [e.turn_id for e in call.events if isinstance(e, ReplyStarted)] == [whole.turn_id]
    assert call.stale_samples() == 0
    for dropped in call.of_kind("speculative_reply_discarded"):
        assert dropped.reason == "the user spoke on"
    assert [m.role for m in turns.flow.state.messages] == ["user", "assistant"]
    question = AudioChunk.from_float(espeak(tmp_path, "What time does the museum open?"),
                                     STT_SAMPLE_RATE)
    asked = await run_call(TurnRunner(Teller(trigger=None)),
                           CallScript().user_says(0.5, audio=question).until(6.0),
                           smart_engines, settings=held)
    [turn] = [e for e in asked.events if isinstance(e, TurnCommitted)]
    assert turn.text.rstrip().endswith("?")
    assert turn.at - turn.speech_end_at < 0.8  # not held (at most closed_answer_silence)
