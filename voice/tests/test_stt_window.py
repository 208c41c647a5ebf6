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

A window fitted to the utterance (``encoder_window_floor`` / ``encoder_window_margin``) is
chosen by :meth:`SttSettings.window_for`, checked here without a model; a short window
repeats a short turn more often ("Yes. Yes. Yes. ..."), so those turns are transcribed in
one and must still come out right (the loop thrown away, the turn decoded again in the
longer window).
"""

from __future__ import annotations

import logging

import numpy as np
import pytest
from numpy.typing import NDArray
from pydantic import ValidationError
from voxflow_voice import STT_SAMPLE_RATE, SttSettings, WhisperStt
from voxflow_voice.engines.errors import ModelNotFoundError
from voxflow_voice.engines.stt import FITTED_WINDOW_FLOOR, _runs_away, _said_once, _token_budget

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
    return WhisperStt(
        SttSettings(encoder_window=WINDOW, encoder_window_floor=None, encoder_padding="silence")
    )


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
            SttSettings(
                model="base",
                encoder_window=WINDOW,
                encoder_window_floor=None,
                encoder_padding="silence",
            )
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
        # cut short by the token budget, seen in a 4 s window (tiny.en)
        ("Repeat that, please. Repeat that, please. Repeat that, please. Repeat", 2.1, True),
        ("Yes? Yes? Yes? Yes? Yes", 1.2, True),
        ("no no no no", 1.0, True),
        ("Sure. Sure. Sure.", 1.2, True),  # a sentence said again, seen in fitted windows
        ("Yes. Yes.", 1.2, True),
        ("No... No...", 1.4, True),
        ("No, no, no.", 1.2, False),
        ("I said the other one, the other one.", 2.5, False),
    ],
)
def test_a_looping_transcript_is_recognized(text: str, seconds: float, loops: bool) -> None:
    """What makes a windowed decode be done again in the 30 s window."""
    assert _runs_away(text, seconds) is loops


@pytest.mark.parametrize(
    ("text", "first"),
    [
        ("Yes. Yes.", "Yes."),
        ("Sure. Sure. Sure.", "Sure."),
        ("No... No...", "No..."),
        ("Set the volume to 40%. Set the volume to 40%.", "Set the volume to 40%."),
        ("Repeat that, please. Repeat that, please. Repeat", "Repeat that, please."),
        ("Yes please, yes please", "Yes please"),
        ("the " * 30, None),  # a degenerate loop: decoded again, not kept
        ("Stop Stop Stop Stop", None),
        ("No, no, no.", None),
        ("Turn on the lights in the kitchen.", None),
        ("I said the other one, the other one.", None),
    ],
)
def test_a_transcript_that_says_the_turn_again_is_cut_to_its_first_time(
    text: str, first: str | None
) -> None:
    assert _said_once(text) == first


def test_a_looping_windowed_decode_stops_at_its_token_budget(speech: Speech) -> None:
    """tiny.en repeats "Yes." to fill a 3 s window; the decode stops at the budget (left
    alone it goes on to Whisper's 448 tokens) and the first time is kept."""
    stt = WhisperStt(SttSettings(encoder_window=3.0, encoder_window_floor=None))
    audio = turn(speech, "Yes.")
    seconds = audio.size / STT_SAMPLE_RATE
    budget, max_new_tokens = _token_budget(seconds)
    assert max_new_tokens == 2 * budget
    transcript, tokens = stt._windowed(audio, 300, False, seconds, max_new_tokens)
    assert transcript is not None
    assert _said_once(transcript.text) == "Yes."  # it looped ("Yes. Yes. Yes. ...")
    assert tokens <= budget + 1  # 224 tokens without the budget
    kept = stt.transcribe_sync(audio)
    assert kept is not None
    assert words(kept.text) == ["yes"]


FIT = SttSettings(encoder_window_floor=4.0, encoder_window_margin=1.0)


@pytest.mark.parametrize(
    ("settings", "seconds", "window"),
    [
        (FIT, 0.8, 4.0),  # the floor
        (FIT, 2.9, 4.0),  # 3.9 rounded up to a whole second
        (FIT, 3.0, 4.0),
        (FIT, 3.2, 5.0),
        (FIT, 8.7, 10.0),  # clamped to encoder_window
        (FIT, 10.0, 10.0),
        (FIT, 10.2, 30.0),  # longer than encoder_window: Whisper's own 30 s, as before
        (SttSettings(encoder_window_floor=2.0, encoder_window_margin=0.0), 1.0, 2.0),
        (SttSettings(encoder_window_floor=2.0, encoder_window_margin=0.0), 2.4, 3.0),
        (SttSettings(encoder_window=20.0, encoder_window_floor=4.0), 12.5, 16.0),  # + 3 s
        (SttSettings(encoder_window=30.0, encoder_window_floor=4.0), 2.0, 30.0),
        (SttSettings(model="base"), 2.0, 6.0),  # base's default: the turn + 3 s, 6 to 10 s
        (SttSettings(model="base"), 3.2, 7.0),
        (SttSettings(model="base"), 7.5, 10.0),
        (SttSettings(model="base", encoder_window=4.0), 2.0, 4.0),  # its floor follows
        (SttSettings(), 2.0, 10.0),  # tiny.en's default: the fixed 10 s window
        (SttSettings(model="/models/my-whisper"), 3.2, 10.0),  # a directory: fixed too
        (SttSettings(encoder_window_floor=None), 2.0, 10.0),  # a fixed window
        (SttSettings(encoder_window_floor=None), 10.5, 30.0),
    ],
)
def test_the_window_fits_the_utterance_between_the_floor_and_encoder_window(
    settings: SttSettings, seconds: float, window: float
) -> None:
    assert settings.window_for(seconds) == window


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ({"encoder_window_floor": 12.0}, "encoder_window_floor .* must not exceed"),
        ({"encoder_window": 6.0, "encoder_window_floor": 8.0}, "floor .8 s. must not exceed"),
        ({"encoder_window_floor": 0.5}, "encoder_window_floor\n.*greater than or equal to 1"),
        ({"encoder_window_floor": float("nan")}, "encoder_window_floor\n.*less than or equal"),
        ({"encoder_window_floor": "auto"}, "encoder_window_floor\n.*valid number"),
        (
            {"encoder_window_floor": 4.0, "encoder_window_margin": -1.0},
            "encoder_window_margin\n.*greater than or equal to 0",
        ),
        (
            {"encoder_window_floor": 4.0, "encoder_window_margin": float("inf")},
            "encoder_window_margin\n.*less than or equal to 30",
        ),
        # a margin without a fitted window would do nothing: refused, not ignored
        (
            {"encoder_window_floor": None, "encoder_window_margin": 1.0},
            "encoder_window_margin applies to a fitted window only",
        ),
    ],
)
def test_an_impossible_window_policy_is_refused_naming_the_field(
    fields: dict[str, object], error: str
) -> None:
    with pytest.raises(ValidationError, match=error):
        SttSettings(**fields)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def fitted() -> WhisperStt:
    return WhisperStt(SttSettings(encoder_window_floor=4.0, encoder_window_margin=1.0))


@pytest.fixture(scope="module")
def fitted_default() -> WhisperStt:
    """tiny.en in the window base has by default (fitted: the turn + 3 s, 6 to 10 s)."""
    return WhisperStt(SttSettings(encoder_window_floor=FITTED_WINDOW_FLOOR["base"]))


@pytest.mark.parametrize(
    "text",
    [
        "Yes.",  # tiny.en repeats these to fill a 3-5 s window ("Yes. Yes. Yes. ...")
        "Stop.",
        "Repeat that, please.",
        "Navigate to Golden Gate Park.",
        "Set the volume to forty percent.",
        "Turn on the lights in the kitchen.",
    ],
)
@pytest.mark.parametrize("which", ["fitted", "fitted_default"])  # floor 4 + 1 s; base's
def test_a_short_turn_is_transcribed_right_in_a_window_fitted_to_it(
    which: str,
    request: pytest.FixtureRequest,
    speech: Speech,
    text: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    fitted: WhisperStt = request.getfixturevalue(which)
    audio = turn(speech, text)
    assert fitted.settings.window_for(audio.size / STT_SAMPLE_RATE) < WINDOW
    with caplog.at_level(logging.WARNING, logger="voxflow_voice.engines.stt"):
        transcript = fitted.transcribe_sync(audio)
    assert transcript is not None
    heard = words(transcript.text)
    assert heard == words(text.replace("forty percent", "40%")), caplog.messages
    assert transcript.duration == pytest.approx(audio.size / STT_SAMPLE_RATE)


def test_a_long_vocabulary_hint_leaves_the_budget_room_for_the_prompt(speech: Speech) -> None:
    """A long ``initial_prompt`` and a long window: the budget fits in Whisper's 448 tokens.

    faster-whisper refuses a decode whose prompt and ``max_new_tokens`` pass 448 (a
    ValueError from inside the decode, so every such turn was lost); the prompt it keeps
    is up to 223 tokens of the hint, and a 20 s turn's budget asks for 256.
    """
    hint = " ".join(f"Word{i}" for i in range(400))  # far over the 223 tokens kept
    stt = WhisperStt(
        SttSettings(encoder_window=25.0, encoder_window_floor=None, initial_prompt=hint)
    )
    voice = turn(speech, "Turn on the lights in the kitchen.")
    audio = np.concatenate([voice, np.zeros(20 * STT_SAMPLE_RATE - voice.size, np.float32)])
    assert _token_budget(20.0)[1] > 448 - 223  # the case: the budget alone would not fit
    transcript = stt.transcribe_sync(audio)
    assert transcript is not None
    assert {"lights", "kitchen"} <= set(words(transcript.text))
