"""The Speculation record: one verdict, given once, and typed input."""

from __future__ import annotations

import numpy as np
import pytest
from voxflow_voice.audio import STT_SAMPLE_RATE, AudioChunk
from voxflow_voice.listen.turn_detector import UtterancePaused, UtteranceReady
from voxflow_voice.session.continuation import words_after
from voxflow_voice.speak.speculation import Speculation

pytestmark = pytest.mark.unit


def paused(end: int) -> UtterancePaused:
    audio = AudioChunk.from_float(np.zeros(end + 800, np.float32), STT_SAMPLE_RATE,
                                  start_sample=0)
    return UtterancePaused(audio, 100, end)


async def test_the_first_verdict_stands() -> None:
    spec = Speculation(paused(4000))
    assert not spec.decided
    spec.discard("the user spoke on")
    spec.confirm()  # too late: a discarded reply stays discarded
    assert spec.decided and spec.discarded and spec.reason == "the user spoke on"
    assert await spec.verdict() is False
    kept = Speculation(paused(4000))
    kept.confirm()
    kept.discard("late")
    assert await kept.verdict() is True and kept.reason == ""


async def test_it_matches_only_the_same_audio_and_sees_speech_after_the_pause() -> None:
    pause = paused(4000)
    spec = Speculation(pause)
    assert spec.matches(UtteranceReady(pause.audio, pause.onset_sample, pause.end_sample))
    longer = paused(6000)
    assert not spec.matches(UtteranceReady(longer.audio, longer.onset_sample, 6000))
    assert not spec.spoken_over(4000) and spec.spoken_over(4320)


async def test_it_takes_only_a_pause() -> None:
    with pytest.raises(TypeError, match="UtterancePaused"):
        Speculation("What time is it?")  # type: ignore[arg-type]


def test_the_words_a_continuation_adds_are_read_after_the_turns_own() -> None:
    assert words_after("Tell me a story, stop!", "Tell me a story.") == "stop!"
    assert words_after("tell me a STORY. Wait, stop.", "Tell me a story") == "Wait, stop."
    assert words_after("Tell me a story.", "Tell me a story.") == ""
    assert words_after("Tell me the story, stop.", "Tell me a story.") is None  # heard apart
    assert words_after("Stop.", "Tell me a story.") is None
    assert words_after("Tell me a story.", "") is None
