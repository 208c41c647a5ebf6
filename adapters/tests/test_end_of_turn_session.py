"""A voice session with the semantic end of turn (Smart Turn + the pause's words), on the
real models and deterministic virtual time, with speech from the bundled Piper voice at
other speaking rates.

An utterance with a pause inside it is one turn (the 0.2 s silence timer makes it two);
a short complete answer is committed at the short pause and answered at once.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from numpy.typing import NDArray
from voxflow_adapters.testkit.flows import Teller, words
from voxflow_adapters.testkit.scenario import CallResult, run_call
from voxflow_adapters.testkit.script import CallScript
from voxflow_voice.audio import STT_SAMPLE_RATE, AudioChunk, resample
from voxflow_voice.engines import VoiceEngines
from voxflow_voice.engines.end_of_turn import SmartTurn
from voxflow_voice.engines.tts import PiperTts, TtsSettings
from voxflow_voice.events import TurnCommitted
from voxflow_voice.listen.turn_detector import TurnDetection
from voxflow_voice.session import VoiceSettings

from voxflow.turns import TurnRunner

pytestmark = pytest.mark.models

# The leading framework's timing (0.2 s minimum speech; 0.2 s end of turn for the timer),
# and as it does, no turn taken back or continued once committed.
TIMER = VoiceSettings(turn_detection=TurnDetection(end_of_turn_silence=0.2, min_speech=0.2,
                                                   min_barge_in=0.2, resume_grace=0,
                                                   continue_within=0))
SMART = VoiceSettings(turn_detection=TurnDetection(min_speech=0.2, max_end_of_turn_silence=1.6))


@pytest.fixture(scope="module")
def smart_engines(engines: VoiceEngines) -> VoiceEngines:
    return dataclasses.replace(engines, end_of_turn=SmartTurn())


@pytest.fixture(scope="module")
def slow_voice() -> PiperTts:
    return PiperTts(settings=TtsSettings(length_scale=1.3, noise_scale=0.0, noise_w_scale=0.0))


def say(tts: PiperTts, text: str) -> AudioChunk:
    audio = np.concatenate([np.asarray(c.samples, np.float32) for c in tts.synthesize(text)])
    audio = resample(audio * 0.5, tts.sample_rate, STT_SAMPLE_RATE)
    loud: NDArray[np.intp] = np.flatnonzero(np.abs(audio) >= 0.01)
    return AudioChunk.from_float(audio[loud[0] : loud[-1] + 1], STT_SAMPLE_RATE)


def committed(call: CallResult) -> list[TurnCommitted]:
    return [e for e in call.events if isinstance(e, TurnCommitted)]


async def test_an_utterance_with_a_pause_inside_is_answered_once(
    engines: VoiceEngines, smart_engines: VoiceEngines, slow_voice: PiperTts
) -> None:
    first, second = "I would like to book a table for", "two people tonight at eight."
    head, tail = say(slow_voice, first), say(slow_voice, second)
    resume = 0.5 + head.num_samples / STT_SAMPLE_RATE + 0.5  # a 0.5 s pause inside

    def script() -> CallScript:
        return CallScript().user_says(0.5, audio=head).user_says(resume, audio=tail).until(9.0)

    # The silence timer answers the first half on its own ...
    timer = await run_call(TurnRunner(Teller()), script(),
                           dataclasses.replace(engines, end_of_turn=None), settings=TIMER)
    assert len(committed(timer)) == 2
    # ... the end-of-turn model waits for the rest: one turn, one reply.
    call = await run_call(TurnRunner(Teller()), script(), smart_engines, settings=SMART)
    [turn] = committed(call)
    assert words(turn.text) == words(f"{first} {second}")
    assert len(call.of_kind("reply_started")) == 1
    assert call.stale_samples() == 0
    # A reply prepared in the pause, if any, was dropped unheard.
    for dropped in call.of_kind("speculative_reply_discarded"):
        assert dropped.reason == "the user spoke on"


async def test_a_short_answer_is_committed_at_the_short_pause_and_answered_at_once(
    smart_engines: VoiceEngines, slow_voice: PiperTts
) -> None:
    for text in ("No.", "That's all."):
        script = CallScript().user_says(0.5, audio=say(slow_voice, text)).until(5.0)
        call = await run_call(TurnRunner(Teller()), script, smart_engines, settings=SMART)
        [turn] = committed(call)
        [metrics] = call.metrics()
        assert words(turn.text) == words(text)
        # Committed at the 0.2 s pause (virtual time: compute takes none), or after 0.4 s
        # if the model doubts the closed answer, never after the 1.6 s maximum; its
        # speculative reply plays at once.
        assert turn.at - turn.speech_end_at <= 0.4 + 0.04
        assert metrics.speculative and metrics.first_audio is not None
        assert metrics.first_audio - metrics.speech_end <= 0.6
