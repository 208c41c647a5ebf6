"""A short encoder window with the audio padded by silence (``encoder_padding="silence"``).

faster-whisper pads the log-mel *features* of a short input with zeros, which is louder
than the log-mel floor of real silence; in a window shorter than 30 s that input is far
from what Whisper was trained on and some turns come out wrong or loop. Padding the
*audio* with silence to the window before the mel keeps the words right at a fraction of
the encoder cost (``benchmarks/stt_accuracy.py`` measures it). These tests transcribe
turns the way the turn detector hands them over (0.6 s pre-roll, 0.2 s end pad) with the
real tiny.en model (and base when it is installed). A windowed decode that loops
is done again in the 30 s window; the rule that spots a loop is checked on transcripts
the benchmark saw loop.
"""

from __future__ import annotations

import numpy as np
import pytest
from numpy.typing import NDArray
from pydantic import ValidationError
from voxflow_voice import STT_SAMPLE_RATE, SttSettings, WhisperStt
from voxflow_voice.stt import _runs_away

from voxflow.errors import ModelNotFoundError

from .conftest import Speech

pytestmark = pytest.mark.models

WINDOW = 10.0
"""The window ``benchmarks/stt_accuracy.py`` recommends: the 30 s accuracy, no loops."""


def turn(speech: Speech, text: str) -> NDArray[np.float32]:
    """``text`` as STT receives it: pre-roll before the speech, end pad after it."""
    voice = speech(text)
    loud = np.flatnonzero(np.abs(voice) > 0.01)
    voice = voice[loud[0] : loud[-1] + 1]
    before = np.zeros(round(0.6 * STT_SAMPLE_RATE), np.float32)
    after = np.zeros(round(0.2 * STT_SAMPLE_RATE), np.float32)
    return np.concatenate([before, voice, after])


def words(text: str | None) -> list[str]:
    return "".join(c for c in (text or "").lower() if c.isalnum() or c.isspace()).split()


@pytest.fixture(scope="module")
def windowed() -> WhisperStt:
    return WhisperStt(SttSettings(encoder_window=WINDOW, encoder_padding="silence"))


@pytest.mark.parametrize(
    "text",
    [
        "Turn on the lights in the kitchen.",
        "Send a message to Sarah saying I am running late.",
        "No thanks.",
    ],
)
def test_a_turn_is_transcribed_right_in_a_short_silence_padded_window(
    windowed: WhisperStt, speech: Speech, text: str
) -> None:
    audio = turn(speech, text)
    assert audio.size < WINDOW * STT_SAMPLE_RATE  # so the short window is used
    transcript = windowed.transcribe_sync(audio)
    assert transcript is not None
    assert words(transcript.text) == words(text)


def test_base_transcribes_a_turn_right_in_the_short_window(speech: Speech) -> None:
    try:
        stt = WhisperStt(
            SttSettings(model="base", encoder_window=WINDOW, encoder_padding="silence")
        )
    except ModelNotFoundError:
        pytest.skip("whisper base (the [base] extra) is not installed")
    for text in ("Set a timer for ten minutes.", "Yes please."):
        transcript = stt.transcribe_sync(turn(speech, text))
        assert transcript is not None
        assert words(transcript.text) == words(text.replace("ten", "10"))


def test_the_duration_is_the_turns_not_the_windows(windowed: WhisperStt, speech: Speech) -> None:
    audio = turn(speech, "Stop.")
    transcript = windowed.transcribe_sync(audio)
    assert transcript is not None
    assert words(transcript.text) == ["stop"]
    assert transcript.duration == pytest.approx(audio.size / STT_SAMPLE_RATE)


def test_silence_is_still_no_turn_in_a_short_window(windowed: WhisperStt) -> None:
    assert windowed.transcribe_sync(np.zeros(STT_SAMPLE_RATE, np.float32)) is None


def test_encoder_padding_is_validated() -> None:
    with pytest.raises(ValidationError, match="encoder_padding"):
        SttSettings(encoder_padding="noise")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "seconds", "loops"),
    [
        ("Add milk and eggs to my shopping list. " * 4, 3.0, True),  # seen at 10 s, zeros
        ("Set the volume to 40%. Set the volume to 40%.", 2.5, True),  # seen at beam 2
        ("the " * 30, 3.0, True),
        ("Turn on the lights in the kitchen.", 2.5, False),
        ("No, no.", 1.0, False),
        ("Yes please.", 1.0, False),
    ],
)
def test_a_looping_transcript_is_recognized(text: str, seconds: float, loops: bool) -> None:
    """What makes a windowed decode be done again in the 30 s window."""
    assert _runs_away(text, seconds) is loops
