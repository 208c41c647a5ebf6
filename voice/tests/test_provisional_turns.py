"""Provisional commits in the turn detector (``TurnDetection.resume_grace``), in audio time,
on the real Silero VAD, Smart Turn and Whisper, with speech from espeak-ng voices (not the
bundled one): speech resuming a committed turn before it is sealed takes it back
(``TurnResumed``) and the next utterance carries the whole of it; a sealed turn, a turn
whose grace is over and a detached resumption stand apart.
"""

from __future__ import annotations

from collections.abc import Awaitable

import numpy as np
import pytest
from numpy.typing import NDArray
from pydantic import ValidationError
from voxflow_voice import (
    FRAME_SAMPLES,
    STT_SAMPLE_RATE,
    AudioChunk,
    SileroVad,
    SmartTurn,
    SpeechStarted,
    Transcript,
    TurnDetection,
    TurnDetector,
    TurnDetectorEvent,
    TurnResumed,
    UtterancePaused,
    UtteranceReady,
    WhisperStt,
)

from .conftest import CHUNK, espeak, needs_espeak

pytestmark = [pytest.mark.models, needs_espeak]

FIRST, SECOND = "I need a flight to Boston", "and a hotel near the airport."
# A 0.2 s timer commits at the pause whatever is said: the provisional rules alone decide.
TIMER = TurnDetection(end_of_turn_silence=0.2, min_speech=0.2, min_barge_in=0.2,
                      resume_grace=1.0)


def silence(seconds: float) -> NDArray[np.float32]:
    return np.zeros(round(seconds * STT_SAMPLE_RATE), np.float32)


@pytest.fixture(scope="module")
def halves(tmp_path_factory: pytest.TempPathFactory) -> tuple[NDArray[np.float32], ...]:
    tmp = tmp_path_factory.mktemp("espeak")
    return espeak(tmp, FIRST, "en-us+f3"), espeak(tmp, SECOND, "en-us+f3")


def paused(halves: tuple[NDArray[np.float32], ...], pause: float) -> NDArray[np.float32]:
    return np.concatenate([silence(0.5), halves[0], silence(pause), halves[1], silence(2.5)])


async def listen(detector: TurnDetector, audio: NDArray[np.float32], *,
                 seal_after: float | None = None, detach: bool = False,
                 stt: WhisperStt | None = None, allow: bool = False
                 ) -> list[TurnDetectorEvent]:
    """Push ``audio`` as a session does (each pause judged, with its words if ``stt``);
    ``seal_after``: seal each committed turn that many seconds after its commit (its
    reply heard); ``detach``: detach every resumption (its turn could not be taken back);
    ``allow``: every committed turn may be continued (a session judged it unfinished)."""
    events: list[TurnDetectorEvent] = []
    seal_at: int | None = None

    def words(pause: UtterancePaused) -> Awaitable[Transcript | None]:
        assert stt is not None
        return stt.transcribe(pause.audio)

    for start in range(0, audio.size, CHUNK):
        if seal_at is not None and detector.position >= seal_at:
            detector.seal()
            seal_at = None
        async for step in detector.apush(audio[start : start + CHUNK],
                                         words if stt is not None else None):
            for event in step:
                if isinstance(event, UtteranceReady) and allow:
                    assert detector.allow_continuation(event.end_sample)
                if isinstance(event, UtteranceReady) and seal_after is not None:
                    seal_at = detector.position + round(seal_after * STT_SAMPLE_RATE)
                if isinstance(event, TurnResumed) and detach:
                    detector.detach(event)
            events += step
    return events + detector.flush()


def turns(events: list[TurnDetectorEvent]) -> list[UtteranceReady]:
    """The turns that stand: each taken back is replaced by the utterance resuming it."""
    kept: list[UtteranceReady] = []
    for event in events:
        if isinstance(event, UtteranceReady):
            kept.append(event)
        elif isinstance(event, TurnResumed):
            assert kept and kept[-1].end_sample == event.end_sample
            kept.pop()
    return kept


def second_half(text: str) -> bool:
    """Whether tiny.en heard the second half (it hears "hotel" or "airport", not always
    both, from espeak)."""
    return "hotel" in text or "airport" in text


async def text_of(stt: WhisperStt, turn: UtteranceReady) -> str:
    transcript = await stt.transcribe(turn.audio)
    assert transcript is not None
    return transcript.text.lower()


async def test_speech_resuming_a_committed_turn_takes_it_back_and_makes_one_turn(
    halves: tuple[NDArray[np.float32], ...], stt: WhisperStt
) -> None:
    detector = TurnDetector(SileroVad(), TIMER)
    events = await listen(detector, paused(halves, 0.4))
    ready = [e for e in events if isinstance(e, UtteranceReady)]
    [resumed] = [e for e in events if isinstance(e, TurnResumed)]
    first, whole = ready  # the commit at the pause, then the whole utterance
    assert resumed.end_sample == first.end_sample
    assert first.end_sample < resumed.onset_sample < whole.end_sample
    # The resumption starts the utterance again from the committed turn's onset ...
    started = [e for e in events if isinstance(e, SpeechStarted)]
    assert started[-1].onset_sample == first.onset_sample
    assert events.index(resumed) == events.index(started[-1]) - 1
    # ... and its audio holds the committed turn's, the pause and the rest.
    assert whole.audio.start_sample == first.audio.start_sample
    np.testing.assert_array_equal(whole.audio.samples()[: first.audio.num_samples - 1_600],
                                  first.audio.samples()[:-1_600])  # (less its end pad)
    assert turns(events) == [whole]
    text = await text_of(stt, whole)
    assert "flight" in text and second_half(text)
    assert detector.provisional is None  # sealed by the flush: the call is over


async def test_a_sealed_turn_stands_and_the_speech_after_it_is_a_new_turn(
    halves: tuple[NDArray[np.float32], ...], stt: WhisperStt
) -> None:
    detector = TurnDetector(SileroVad(), TIMER)
    events = await listen(detector, paused(halves, 0.4), seal_after=0.1)
    assert not [e for e in events if isinstance(e, TurnResumed)]
    first, second = turns(events)
    # Exactly the turns of a detector without provisional commits (the new one has its
    # own pre-roll only).
    plain = TurnDetector(SileroVad(), TIMER.model_copy(update={"resume_grace": 0.0}))
    assert turns(await listen(plain, paused(halves, 0.4))) == [first, second]
    text = await text_of(stt, second)
    assert second_half(text) and "flight" not in text


async def test_speech_after_the_grace_is_a_new_turn(
    halves: tuple[NDArray[np.float32], ...]
) -> None:
    short_grace = TIMER.model_copy(update={"resume_grace": 0.3})
    detector = TurnDetector(SileroVad(), short_grace)
    events = await listen(detector, paused(halves, 0.8))
    assert not [e for e in events if isinstance(e, TurnResumed)]
    first, second = turns(events)
    assert second.onset_sample - first.end_sample > round(0.3 * STT_SAMPLE_RATE)
    assert detector.provisional is None
    # Without a grace, a committed turn is never provisional.
    detector = TurnDetector(SileroVad(), TIMER.model_copy(update={"resume_grace": 0.0}))
    events = await listen(detector, paused(halves, 0.4))
    assert len(turns(events)) == 2 and not [e for e in events if isinstance(e, TurnResumed)]


async def test_a_detached_resumption_is_a_new_utterance_from_its_onset(
    halves: tuple[NDArray[np.float32], ...], stt: WhisperStt
) -> None:
    detector = TurnDetector(SileroVad(), TIMER)
    events = await listen(detector, paused(halves, 0.4), detach=True)
    [resumed] = [e for e in events if isinstance(e, TurnResumed)]
    ready = [e for e in events if isinstance(e, UtteranceReady)]
    first, second = ready
    assert second.onset_sample == resumed.onset_sample
    assert second.audio.start_sample >= resumed.onset_sample - round(
        TIMER.pre_roll * STT_SAMPLE_RATE) - FRAME_SAMPLES  # whole frames are dropped
    text = await text_of(stt, second)
    assert second_half(text) and "flight" not in text
    with pytest.raises(TypeError, match="TurnResumed"):
        detector.detach(first)  # type: ignore[arg-type]


async def test_smart_turn_commits_a_complete_clause_and_the_continuation_takes_it_back(
    halves: tuple[NDArray[np.float32], ...], stt: WhisperStt
) -> None:
    """The split the model alone cannot avoid: "I need a flight to Boston" is a complete
    request (the model and the words say so), and the user goes on after 0.3 s."""
    smart = TurnDetection(min_speech=0.2, end_pad=0.1, resume_grace=1.0)
    model = HeardSizes(SmartTurn())
    without = await listen(
        TurnDetector(SileroVad(), smart.model_copy(update={"resume_grace": 0.0}),
                     end_of_turn_model=model), paused(halves, 0.3), stt=stt)
    assert len(turns(without)) == 2  # committed at the pause, then the rest apart
    detector = TurnDetector(SileroVad(), smart, end_of_turn_model=model)
    events = await listen(detector, paused(halves, 0.3), stt=stt)
    assert [e.kind for e in events].count("turn_resumed") == 1
    [whole] = turns(events)
    text = await text_of(stt, whole)
    assert "flight" in text and second_half(text)
    # The resumed turn was judged again at its end: the model on the continuation's
    # audio (judge_continuation: from the resumption's pre-roll on, none of the committed
    # turn's), the words on all of it.
    [resumed] = [e for e in events if isinstance(e, TurnResumed)]
    last = detector.decisions[-1]
    assert last.end_sample == whole.end_sample and last.transcript is not None
    assert "flight" in last.transcript.lower()
    continuation = whole.end_sample - max(resumed.committed_at,
                                          resumed.onset_sample - round(0.6 * STT_SAMPLE_RATE))
    assert 0 < model.sizes[-1] - continuation < round(0.3 * STT_SAMPLE_RATE)  # + its pause
    assert model.sizes[-1] < whole.end_sample - whole.audio.start_sample
    # Judged whole instead, the model hears all of it.
    whole_model = HeardSizes(model.model)
    judged_whole = TurnDetector(SileroVad(), smart.model_copy(
        update={"judge_continuation": False}), end_of_turn_model=whole_model)
    await listen(judged_whole, paused(halves, 0.3), stt=stt)
    assert whole_model.sizes[-1] > whole.end_sample - whole.audio.start_sample


class HeardSizes:
    """The real model, recording how many samples it was asked to judge each time."""

    def __init__(self, model: SmartTurn) -> None:
        self.model = model
        self.sizes: list[int] = []

    def probability(self, audio: AudioChunk | NDArray[np.float32]) -> float:
        self.sizes.append(audio.num_samples if isinstance(audio, AudioChunk) else audio.size)
        return self.model.probability(audio)


def test_resume_grace_is_validated() -> None:
    for bad in (-0.1, 3.5, float("nan")):
        with pytest.raises(ValidationError, match="resume_grace"):
            TurnDetection(resume_grace=bad)
    assert TurnDetection().resume_grace == 1.0  # on by default (VOXFLOW_RESUME_GRACE)


@pytest.mark.parametrize("piece", [480, 1_000, 4_096])
def test_the_take_back_is_the_same_whatever_the_size_of_the_pushes(
    halves: tuple[NDArray[np.float32], ...], piece: int
) -> None:
    """Audio time: the same audio gives the same events (resumption, merged audio) however
    it is cut into pushes."""
    audio = paused(halves, 0.4)

    def events_of(size: int) -> list[TurnDetectorEvent]:
        detector = TurnDetector(SileroVad(), TIMER)
        out: list[TurnDetectorEvent] = []
        for start in range(0, audio.size, size):
            out += detector.push(audio[start : start + size])
        return out + detector.flush()

    reference = events_of(CHUNK)
    assert [e.kind for e in reference].count("turn_resumed") == 1
    assert events_of(piece) == reference


async def test_an_unfinished_turn_is_continued_within_continue_within_of_its_commit(
    halves: tuple[NDArray[np.float32], ...], stt: WhisperStt
) -> None:
    """No grace: a committed turn is taken back by nothing, unless the caller judged it
    unfinished (allow_continuation): then speech within ``continue_within`` of its commit
    continues it, the next utterance carrying the whole; past the window it is a new turn."""
    rules = TIMER.model_copy(update={"resume_grace": 0.0, "continue_within": 1.0})
    plain = await listen(TurnDetector(SileroVad(), rules), paused(halves, 0.8))
    assert len(turns(plain)) == 2 and not [e for e in plain if isinstance(e, TurnResumed)]
    detector = TurnDetector(SileroVad(), rules)
    events = await listen(detector, paused(halves, 0.8), allow=True)
    [resumed] = [e for e in events if isinstance(e, TurnResumed)]
    first, whole = [e for e in events if isinstance(e, UtteranceReady)]
    assert resumed.end_sample == first.end_sample
    assert resumed.onset_sample - resumed.committed_at > round(0.5 * STT_SAMPLE_RATE)
    assert whole.audio.start_sample == first.audio.start_sample
    assert turns(events) == [whole]
    text = await text_of(stt, whole)
    assert "flight" in text and second_half(text)
    # Past the window: a new turn, even allowed.
    late = await listen(TurnDetector(SileroVad(), rules), paused(halves, 1.6), allow=True)
    assert len(turns(late)) == 2 and not [e for e in late if isinstance(e, TurnResumed)]
    # Off: never.
    off = TurnDetector(SileroVad(), rules.model_copy(update={"continue_within": 0.0}))
    assert not off.allow_continuation(0)
    assert len(turns(await listen(off, paused(halves, 0.8)))) == 2
