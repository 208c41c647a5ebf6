"""The semantic end of turn: Smart Turn v3.2 (real model), the words' verdict, and the turn
detector that asks them at each short pause, in audio time.

Speech comes from the bundled Piper voice at other speaking rates (``length_scale``), not
its own: the benchmark (``benchmarks/end_of_turn.py``) adds espeak-ng voices and noise.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Awaitable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.typing import NDArray
from pydantic import ValidationError
from voxflow_voice import (
    STT_SAMPLE_RATE,
    AudioChunk,
    EndOfTurnVerdict,
    PiperTts,
    SileroVad,
    SmartTurn,
    SpeechEnded,
    Transcript,
    TtsSettings,
    TurnDetection,
    TurnDetector,
    TurnDetectorEvent,
    UtterancePaused,
    UtteranceReady,
    WhisperStt,
    find_smart_turn,
    resample,
    words_verdict,
)
from voxflow_voice.engines.end_of_turn import is_question, log_mel_features
from voxflow_voice.engines.errors import ModelNotFoundError

pytestmark = pytest.mark.models

CHUNK = 320  # 20 ms, as a session pushes
SLOW = TtsSettings(length_scale=1.3, noise_scale=0.0, noise_w_scale=0.0)
FAST = TtsSettings(length_scale=0.8, noise_scale=0.0, noise_w_scale=0.0)
TIMER = TurnDetection(end_of_turn_silence=0.2, min_speech=0.2, min_barge_in=0.2)
SMART = TurnDetection(min_speech=0.2)


@pytest.fixture(scope="module")
def model() -> SmartTurn:
    return SmartTurn()


@pytest.fixture(scope="module")
def voices() -> dict[str, PiperTts]:
    return {"slow": PiperTts(settings=SLOW), "fast": PiperTts(settings=FAST)}


def say(tts: PiperTts, text: str) -> NDArray[np.float32]:
    audio = np.concatenate([np.asarray(c.samples, np.float32) for c in tts.synthesize(text)])
    audio = resample(audio * 0.5, tts.sample_rate, STT_SAMPLE_RATE)
    loud = np.flatnonzero(np.abs(audio) >= 0.01)
    return audio[loud[0] : loud[-1] + 1]


def silence(seconds: float) -> NDArray[np.float32]:
    return np.zeros(round(seconds * STT_SAMPLE_RATE), np.float32)


def call_audio(*parts: NDArray[np.float32]) -> NDArray[np.float32]:
    return np.concatenate([silence(0.5), *parts, silence(2.5)])


async def listen(detector: TurnDetector, audio: NDArray[np.float32],
                 stt: WhisperStt | None = None, piece: int = CHUNK) -> list[TurnDetectorEvent]:
    """Push ``audio`` as a session does: each pause judged (with its words) before more."""
    events: list[TurnDetectorEvent] = []

    def words(pause: UtterancePaused) -> Awaitable[Transcript | None]:
        assert stt is not None
        return stt.transcribe(pause.audio)

    for start in range(0, audio.size, piece):
        async for step in detector.apush(audio[start : start + piece],
                                         words if stt is not None else None):
            events += step
        assert detector.undecided is None
    return events + detector.flush()


def turns(events: list[TurnDetectorEvent]) -> list[UtteranceReady]:
    return [e for e in events if isinstance(e, UtteranceReady)]


# -- the model ------------------------------------------------------------------------


def test_the_model_is_found_in_its_own_package_byte_for_byte() -> None:
    import voxflow_smart_turn

    path = find_smart_turn()
    assert path.name == "smart-turn-v3.2-cpu.onnx" and path.stat().st_size > 8_000_000
    assert hashlib.sha256(path.read_bytes()).hexdigest() == voxflow_smart_turn.MODEL_SHA256
    with pytest.raises(ModelNotFoundError, match="pip install voxflow-no-such-models") as info:
        find_smart_turn("voxflow_no_such_models")
    assert isinstance(info.value.__cause__, ImportError)
    assert "pipecat" not in sys.modules  # another framework is never needed


def test_features_are_whisper_log_mel_of_the_last_8_seconds() -> None:
    rng = np.random.default_rng(0)
    tail = rng.standard_normal(16_000).astype(np.float32) * 0.1
    long = np.concatenate([rng.standard_normal(10 * 16_000).astype(np.float32), tail])
    features = log_mel_features(long)
    assert features.shape == (80, 800) and features.dtype == np.float32
    # Only the last 8 s count: audio before them changes nothing.
    other = np.concatenate([np.zeros(10 * 16_000, np.float32), tail])
    np.testing.assert_array_equal(log_mel_features(other[-8 * 16_000 :]), log_mel_features(other))
    assert not np.array_equal(features, log_mel_features(tail))
    # Clamped to 8 (log10 units) below the peak, then scaled by (x + 4) / 4.
    assert features.max() - features.min() <= 2.0 + 1e-6


def test_a_finished_question_is_complete_and_a_cut_one_is_not(
    model: SmartTurn, voices: dict[str, PiperTts]
) -> None:
    whole = say(voices["slow"], "What is the weather going to be like in Paris tomorrow?")
    cut = say(voices["slow"], "What is the weather going to be like in")
    assert model.probability(np.concatenate([whole, silence(0.2)])) > 0.5
    assert model.probability(np.concatenate([cut, silence(0.2)])) < 0.5
    chunk = AudioChunk.from_float(np.concatenate([whole, silence(0.2)]), STT_SAMPLE_RATE)
    assert model.probability(chunk) == model.probability(chunk.samples())


@pytest.mark.parametrize(
    ("audio", "error", "match"),
    [
        (np.zeros((2, 800), np.float32), ValueError, "one-dimensional"),
        (np.zeros(0, np.float32), ValueError, "empty"),
        (np.array([0.0, np.nan], np.float32), ValueError, "NaN or an infinity"),
        (np.array([0.0, np.inf]), ValueError, "NaN or an infinity"),
        (np.array(["a", "b"]), TypeError, "numbers"),
        ([0.0, 0.1], TypeError, "AudioChunk or a numpy array"),
        (AudioChunk.from_float(np.zeros(800, np.float32), 8000), ValueError, "16000 Hz"),
    ],
)
def test_the_model_refuses_what_is_not_16_khz_mono_audio(
    model: SmartTurn, audio: object, error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        model.probability(audio)  # type: ignore[arg-type]


@settings(max_examples=8, derandomize=True, deadline=None)
@given(
    st.integers(1, 3 * STT_SAMPLE_RATE),
    st.floats(0.0, 2.0),
    st.sampled_from([np.float32, np.float64, np.int16]),
)
def test_any_finite_audio_gets_a_probability(
    model: SmartTurn, size: int, scale: float, dtype: type[np.generic]
) -> None:
    audio = (np.random.default_rng(size).standard_normal(size) * scale).astype(dtype)
    assert 0.0 <= model.probability(audio) <= 1.0


# -- the words ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "verdict"),
    [
        ("I would like to book a table for", False),
        ("I need a flight to Boston and", False),
        ("Can you tell me?", False),
        ("My number is, ", False),
        ("My account number is", False),
        ("My count number is...", False),
        ("So I was thinking\u2026", False),
        ("Wait, stop.", False),
        ("Hmm, let me think.", False),
        ("Hold on.", False),
        ("No.", True),
        ("No, thanks.", True),
        ("Yes, please!", True),
        ("That\u2019s all.", True),
        ("What time does the museum open?", True),
        ("Welcome to Animal 14 and 8.", None),
        ("My count number is 4 5 6 7", None),
        ("Book it for 8 and", False),
        ("Stop.", None),
        ("Tell me about the train times instead.", None),
        ("", None),
        ("...", None),
    ],
)
def test_the_words_say_more_is_coming_or_the_answer_is_closed(
    text: str, verdict: bool | None
) -> None:
    assert words_verdict(text) is verdict


@pytest.mark.parametrize(
    ("fragment", "whole"),
    [
        # Whisper ends a fragment cut at a pause on a "?" or "." of its own (issue 32):
        # the words' verdict is the same with, without or with another mark
        ("What time does the museum open?", "What time does the museum open"),
        ("Could you book me the room?", "Could you book me the room"),
        ("The package should arrive.", "The package should arrive"),
        ("No.", "No"),
        ("Can you tell me?", "Can you tell me."),
        ("I would like to book a table for?", "I would like to book a table for."),
    ],
)
def test_the_final_punctuation_is_not_trusted(fragment: str, whole: str) -> None:
    assert words_verdict(fragment) is words_verdict(whole)
    assert words_verdict(fragment + "!") is words_verdict(whole)
    assert is_question(fragment) is is_question(whole)


def test_a_question_is_known_by_its_words() -> None:
    assert is_question("What time does the museum open")  # no "?" needed
    assert is_question("how much is the large pizza.")
    assert not is_question("No?") and not is_question("The museum opens at nine?")
    assert not is_question("Can you tell me?")  # "tell me" says more is coming
    assert words_verdict("The museum opens at nine?") is None  # the model decides


@settings(max_examples=200, derandomize=True, deadline=None)  # (no wall-clock limit)
@given(st.text(max_size=200))
def test_any_text_gets_a_words_verdict(text: str) -> None:
    assert words_verdict(text) in (True, False, None)


def test_open_words_overrule_the_model_and_the_model_decides_the_rest() -> None:
    assert not EndOfTurnVerdict.of(0, 0.99, "a table for", 0.5).complete
    doubted = EndOfTurnVerdict.of(0, 0.01, "No.", 0.5)  # (a shorter wait: detector)
    assert doubted.words is True and not doubted.complete
    assert EndOfTurnVerdict.of(0, 0.6, "No.", 0.5).complete
    assert EndOfTurnVerdict.of(0, 0.7, "Tell me about the trains.", 0.5).complete
    assert not EndOfTurnVerdict.of(0, 0.3, "Tell me about the trains.", 0.5).complete
    assert EndOfTurnVerdict.of(0, 0.5, None, 0.5).complete
    # Complete, and nothing in the words closes it: it may go on ("and a hotel").
    assert EndOfTurnVerdict.of(0, 0.9, "I need a flight to Boston.", 0.5).may_go_on
    assert not EndOfTurnVerdict.of(0, 0.9, "What time is it?", 0.5).may_go_on
    assert not EndOfTurnVerdict.of(0, 0.9, "No, thanks.", 0.5).may_go_on
    assert not EndOfTurnVerdict.of(0, 0.3, "I need a flight to Boston.", 0.5).may_go_on
    with pytest.raises(TypeError, match="transcript must be a string"):
        words_verdict(b"no")  # type: ignore[arg-type]


# -- the detector ---------------------------------------------------------------------


def test_the_detector_checks_its_model_and_settings(model: SmartTurn) -> None:
    with pytest.raises(TypeError, match="probability"):
        TurnDetector(SileroVad(), SMART, end_of_turn_model=object())  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="max_end_of_turn_silence"):
        TurnDetection(max_end_of_turn_silence=0.1, end_pad=0.2)
    with pytest.raises(ValidationError):
        TurnDetection(complete_threshold=1.0)
    with pytest.raises(ValidationError, match="closed_answer_silence"):
        TurnDetection(closed_answer_silence=0.15, end_pad=0.2)


async def test_a_pause_must_be_judged_before_more_audio_and_verdicts_are_checked(
    model: SmartTurn, voices: dict[str, PiperTts]
) -> None:
    detector = TurnDetector(SileroVad(), SMART, end_of_turn_model=model)
    audio = call_audio(say(voices["slow"], "What time is it?"))
    events: list[TurnDetectorEvent] = []
    start = 0
    while detector.undecided is None:
        events += detector.push(audio[start : start + CHUNK])
        start += CHUNK
    pause = detector.undecided
    assert [e for e in events if isinstance(e, UtterancePaused)] == [pause]  # the same object
    with pytest.raises(RuntimeError, match="decide"):
        detector.push(audio[start : start + CHUNK])
    with pytest.raises(ValueError, match="probability"):
        detector.decide(probability=1.5)
    with pytest.raises(TypeError, match="transcript"):
        detector.decide(transcript=3)  # type: ignore[arg-type]
    assert detector.undecided is pause  # a refused call changes nothing
    ended = detector.decide(probability=0.9)
    assert [e.kind for e in ended] == ["speech_ended", "utterance_ready"]
    assert isinstance(ended[1], UtteranceReady) and pause.matches(ended[1])
    assert detector.decide() == []  # nothing owed any more


async def test_the_verdicts_do_not_depend_on_the_size_of_the_pushes(
    model: SmartTurn, voices: dict[str, PiperTts]
) -> None:
    audio = call_audio(say(voices["slow"], "Can you tell me"), silence(0.5),
                       say(voices["slow"], "what the weather is like in Paris?"))
    small = await listen(TurnDetector(SileroVad(), SMART, end_of_turn_model=model), audio)
    large = await listen(TurnDetector(SileroVad(), SMART, end_of_turn_model=model), audio,
                         piece=16_000)
    assert small == large


async def test_an_utterance_with_a_pause_inside_is_one_turn(
    model: SmartTurn, voices: dict[str, PiperTts], stt: WhisperStt
) -> None:
    for voice in ("slow", "fast"):
        audio = call_audio(say(voices[voice], "I would like to book a table for"), silence(0.5),
                           say(voices[voice], "two people tonight at eight."))
        # The silence timer at the leading framework's 0.2 s cuts it in two ...
        assert len(turns(await listen(TurnDetector(SileroVad(), TIMER), audio))) == 2
        # ... the model, with the pause's words, keeps it whole.
        detector = TurnDetector(SileroVad(), SMART, end_of_turn_model=model)
        [turn] = turns(await listen(detector, audio, stt))
        first = detector.decisions[0]
        assert not first.complete and first.transcript is not None
        assert first.transcript.rstrip(".").endswith("table for")
        assert (await stt.transcribe(turn.audio)) is not None


async def test_a_short_answer_is_committed_at_the_short_pause(
    model: SmartTurn, voices: dict[str, PiperTts], stt: WhisperStt
) -> None:
    for voice in ("slow", "fast"):
        for text in ("No.", "Yes."):
            detector = TurnDetector(SileroVad(), SMART, end_of_turn_model=model)
            events = await listen(detector, call_audio(say(voices[voice], text)), stt)
            [ended] = [e for e in events if isinstance(e, SpeechEnded)]
            [turn] = turns(events)
            # at end_pad (0.2 s) of silence plus at most a frame, not the 1.6 s maximum
            assert ended.at_sample - ended.end_sample <= round(0.2 * STT_SAMPLE_RATE) + 512
            assert detector.decisions[-1].complete
            assert turn.end_sample == ended.end_sample


async def test_a_turn_judged_incomplete_ends_after_the_maximum_silence(
    model: SmartTurn, voices: dict[str, PiperTts]
) -> None:
    detector = TurnDetector(SileroVad(), SMART, end_of_turn_model=model)
    events = await listen(detector, call_audio(say(voices["slow"], "What time is it?")))
    # The same audio, with words that say more is coming: it waits out 1.6 s of silence.
    held = TurnDetector(SileroVad(), SMART, end_of_turn_model=model)
    audio = call_audio(say(voices["slow"], "What time is it?"))
    out: list[TurnDetectorEvent] = []
    for start in range(0, audio.size, CHUNK):
        out += held.push(audio[start : start + CHUNK])
        if held.undecided is not None:
            out += held.decide(transcript="What time is it and")
    [quick] = [e for e in events if isinstance(e, SpeechEnded)]
    [slow] = [e for e in out if isinstance(e, SpeechEnded)]
    assert quick.end_sample == slow.end_sample
    assert quick.at_sample - quick.end_sample <= round(0.2 * STT_SAMPLE_RATE) + 512
    assert slow.at_sample - slow.end_sample >= round(1.6 * STT_SAMPLE_RATE)
    assert [t.audio.num_samples for t in turns(events)] == [
        t.audio.num_samples for t in turns(out)
    ]


async def test_a_closed_answer_the_model_doubts_waits_less_than_an_unfinished_turn(
    model: SmartTurn, voices: dict[str, PiperTts]
) -> None:
    audio = call_audio(say(voices["slow"], "No."))
    ends: dict[str, SpeechEnded] = {}
    for words in ("No.", "No and"):
        detector = TurnDetector(SileroVad(), SMART, end_of_turn_model=model)
        out: list[TurnDetectorEvent] = []
        for start in range(0, audio.size, CHUNK):
            out += detector.push(audio[start : start + CHUNK])
            if detector.undecided is not None:
                out += detector.decide(transcript=words, probability=0.1)
        [ends[words]] = [e for e in out if isinstance(e, SpeechEnded)]
    closed, open_ = ends["No."], ends["No and"]
    assert closed.end_sample == open_.end_sample
    frame = 512
    assert 0 <= closed.at_sample - closed.end_sample - round(0.4 * STT_SAMPLE_RATE) < frame
    assert 0 <= open_.at_sample - open_.end_sample - round(1.6 * STT_SAMPLE_RATE) < frame


async def test_the_speculative_stt_may_start_before_the_model_decides(
    model: SmartTurn, voices: dict[str, PiperTts]
) -> None:
    early = TurnDetection(min_speech=0.2, end_pad=0.1, decision_pause=0.2)
    detector = TurnDetector(SileroVad(), early, end_of_turn_model=model)
    audio = call_audio(say(voices["slow"], "What time is it?"))
    events: list[TurnDetectorEvent] = []
    start = 0
    while detector.undecided is None:
        events += detector.push(audio[start : start + CHUNK])
        start += CHUNK
    [paused] = [e for e in events if isinstance(e, UtterancePaused)]
    assert detector.undecided is paused
    # the pause came 0.1 s into the silence; the verdict is owed 0.2 s in
    assert detector.position - paused.end_sample >= round(0.2 * STT_SAMPLE_RATE)
    assert paused.audio.start_sample + paused.audio.num_samples < detector.position
    ended = detector.decide()
    assert [e.kind for e in ended] == ["speech_ended", "utterance_ready"]
    assert isinstance(ended[1], UtteranceReady) and paused.matches(ended[1])


class _Ordered:
    """The real model, noting whether the pause's transcript was in when it ran."""

    def __init__(self, model: SmartTurn) -> None:
        self.model = model
        self.transcribed: list[bool] = []  # per pause: its words were in first
        self.words_in = False

    def probability(self, audio: NDArray[np.float32]) -> float:
        self.transcribed.append(self.words_in)
        return self.model.probability(audio)


async def test_the_model_judges_once_the_pauses_words_are_in_not_beside_their_stt(
    model: SmartTurn, voices: dict[str, PiperTts], stt: WhisperStt
) -> None:
    """On two cores the model's thread beside Whisper's two made the STT take twice as
    long, and the verdict (and the reply) wait for the words anyway: one after the other."""
    ordered = _Ordered(model)
    asked = SMART.model_copy(update={"question_closes": False})  # (a question skips it)
    detector = TurnDetector(SileroVad(), asked, end_of_turn_model=ordered)
    audio = call_audio(say(voices["slow"], "What time is it?"))

    async def words(pause: UtterancePaused) -> Transcript | None:
        ordered.words_in = False
        transcript = await stt.transcribe(pause.audio)
        ordered.words_in = True
        return transcript

    events: list[TurnDetectorEvent] = []
    for start in range(0, audio.size, CHUNK):
        async for step in detector.apush(audio[start : start + CHUNK], words):
            events += step
    assert len(turns(events)) == 1
    assert ordered.transcribed and all(ordered.transcribed)
    assert [d.transcript for d in detector.decisions][-1] == "What time is it?"


class _BrokenModel:
    """An end-of-turn model that fails on every pause (a user's model with a bug)."""

    def probability(self, audio: NDArray[np.float32]) -> float:
        raise RuntimeError("model crashed")


async def test_a_failing_model_never_ends_the_call_the_turn_ends_after_the_maximum(
    voices: dict[str, PiperTts], caplog: pytest.LogCaptureFixture
) -> None:
    audio = call_audio(say(voices["slow"], "What time is it?"), silence(2.0))
    detector = TurnDetector(SileroVad(), SMART, end_of_turn_model=_BrokenModel())
    with caplog.at_level("WARNING", logger="voxflow_voice.listen.turn_detector"):
        events = await listen(detector, audio)
    [ended] = [e for e in events if isinstance(e, SpeechEnded)]
    assert len(turns(events)) == 1
    # judged incomplete at the short pause, so it ended at the maximum silence
    waited = (ended.at_sample - ended.end_sample) / STT_SAMPLE_RATE
    assert waited >= SMART.max_end_of_turn_silence - 0.05
    assert [d.complete for d in detector.decisions] == [False]
    assert "end-of-turn model failed" in caplog.text


async def test_a_complete_turn_holds_for_complete_silence_and_a_closed_answer_does_not(
    model: SmartTurn, voices: dict[str, PiperTts], stt: WhisperStt
) -> None:
    # "I need a flight to Boston" is a complete request to the model and to its words: at
    # the verdict it is a turn, and "and a hotel" 0.5 s later another one ...
    audio = call_audio(say(voices["slow"], "I need a flight to Boston"), silence(0.5),
                       say(voices["slow"], "and a hotel near the airport."))
    at_once = TurnDetector(SileroVad(), SMART, end_of_turn_model=model)
    assert len(turns(await listen(at_once, audio, stt))) == 2
    assert at_once.decisions[0].complete and at_once.decisions[0].words is None
    # ... held for complete_silence, the speech goes on in the same turn: one turn.
    hold = SMART.model_copy(update={"complete_silence": 0.8})
    held = TurnDetector(SileroVad(), hold, end_of_turn_model=model)
    [turn] = turns(await listen(held, audio, stt))
    assert held.decisions[0].complete
    whole = await stt.transcribe(turn.audio)
    assert whole is not None and "hotel" in whole.text.lower()
    assert "boston" in whole.text.lower()
    # A complete turn alone ends after complete_silence, on the very audio of the pause.
    alone = TurnDetector(SileroVad(), hold, end_of_turn_model=model)
    events = await listen(alone, call_audio(say(voices["slow"], "I need a flight to Boston")),
                          stt)
    [ended] = [e for e in events if isinstance(e, SpeechEnded)]
    frame = 512
    assert 0 <= ended.at_sample - ended.end_sample - round(0.8 * STT_SAMPLE_RATE) < frame
    # A closed answer ("No.") is not held: it ends at the verdict.
    closed = TurnDetector(SileroVad(), hold, end_of_turn_model=model)
    events = await listen(closed, call_audio(say(voices["slow"], "No.")), stt)
    [ended] = [e for e in events if isinstance(e, SpeechEnded)]
    assert closed.decisions[-1].words is True
    assert ended.at_sample - ended.end_sample <= round(0.2 * STT_SAMPLE_RATE) + frame


def test_a_complete_turn_cannot_wait_longer_than_an_incomplete_one() -> None:
    with pytest.raises(ValidationError, match="complete_silence"):
        TurnDetection(complete_silence=2.0, max_end_of_turn_silence=1.6)
    assert TurnDetection(complete_silence=1.6).complete_silence == 1.6


async def test_a_short_turn_the_model_doubts_waits_like_a_closed_answer(
    model: SmartTurn, voices: dict[str, PiperTts]
) -> None:
    """``short_turn``: a short answer the pause's STT misheard ("That's all." as "Next
    all": words that neither close nor open anything) and the model doubts ends after
    ``closed_answer_silence``, not the maximum; a longer turn with the same verdict, or
    the short one with words that say more is coming, still waits the maximum."""
    def waited(text: str, words: str, short_turn: float) -> int:
        detector = TurnDetector(SileroVad(), SMART.model_copy(update={"short_turn": short_turn}),
                                end_of_turn_model=model)
        audio = call_audio(say(voices["fast"], text))
        out: list[TurnDetectorEvent] = []
        for start in range(0, audio.size, CHUNK):
            out += detector.push(audio[start : start + CHUNK])
            if detector.undecided is not None:
                out += detector.decide(transcript=words, probability=0.05)
        [ended] = [e for e in out if isinstance(e, SpeechEnded)]
        return ended.at_sample - ended.end_sample

    frame, rate = 512, STT_SAMPLE_RATE
    assert 0 <= waited("That's all.", "Next all", 1.0) - round(0.4 * rate) < frame
    assert waited("That's all.", "Next all", 0.0) >= round(1.6 * rate)  # (off)
    assert waited("That's all.", "That's all and", 1.0) >= round(1.6 * rate)  # open words
    long = "Tell me about the train times to Boston on Tuesday morning."
    assert waited(long, "Tell me about the trains to Boston on Tuesday", 1.0) >= round(
        1.6 * rate)  # longer than short_turn: the model's doubt stands


class _Counting:
    """Smart Turn, counting how often it is asked."""

    def __init__(self, model: SmartTurn) -> None:
        self.model, self.asked = model, 0

    def probability(self, audio: NDArray[np.float32]) -> float:
        self.asked += 1
        return self.model.probability(audio)


async def test_a_question_ends_the_turn_without_asking_the_model(
    model: SmartTurn, voices: dict[str, PiperTts]
) -> None:
    """``question_closes``: the pause's words are a question, so the turn ends at the
    verdict and the model's 50-110 ms are not spent on the reply's path; words that say
    more is coming ("Can you tell me?") still go to the model, and with the setting off
    every pause does."""
    audio = call_audio(say(voices["slow"], "What time is it?"))
    for words, closes, asked in (("What time is it?", True, 0), ("What time is it?", False, 1),
                                 ("Can you tell me?", True, 1)):
        counting = _Counting(model)
        settings = SMART.model_copy(update={"question_closes": closes})
        detector = TurnDetector(SileroVad(), settings, end_of_turn_model=counting)

        async def heard(text: str = words) -> Transcript:
            return Transcript(text=text, duration=1.0, no_speech_prob=0.0, avg_logprob=-0.1)

        out: list[TurnDetectorEvent] = []
        for start in range(0, audio.size, CHUNK):
            async for events in detector.apush(audio[start : start + CHUNK], lambda _: heard()):
                out += events
        assert counting.asked == asked, (words, closes)
        [verdict] = detector.decisions
        assert verdict.asked is bool(asked)
        if words.startswith("What"):
            assert verdict.complete and len(turns(out)) == 1
            [ended] = [e for e in out if isinstance(e, SpeechEnded)]
            assert ended.at_sample - ended.end_sample <= round(0.2 * STT_SAMPLE_RATE) + 512
