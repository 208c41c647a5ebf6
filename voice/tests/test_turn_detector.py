"""Turn taking in audio time: onset, barge-in, end of turn, bounded utterances."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError
from voxflow_voice import (
    FRAME_SAMPLES,
    AudioChunk,
    BargeInDetected,
    EnergyVad,
    SileroVad,
    SpeechEnded,
    SpeechStarted,
    TurnDetection,
    TurnDetector,
    TurnDetectorEvent,
    UtterancePaused,
    UtteranceReady,
    WhisperStt,
)

from .conftest import Speech

pytestmark = pytest.mark.models

RATE = 16000
LOUD = 0.3  # a -10 dBFS tone: "speech" to an EnergyVad at -40 dBFS
SETTINGS = TurnDetection(min_speech=0.1, end_of_turn_silence=0.4, pre_roll=0.2, end_pad=0.1)


def tone(frames: int) -> np.ndarray:
    t = np.arange(frames * FRAME_SAMPLES) / RATE
    return (LOUD * np.sin(2 * np.pi * 220 * t)).astype(np.float32)


def quiet(frames: int) -> np.ndarray:
    return np.zeros(frames * FRAME_SAMPLES, dtype=np.float32)


def run(detector: TurnDetector, audio: np.ndarray, piece: int = 480) -> list[TurnDetectorEvent]:
    events: list[TurnDetectorEvent] = []
    for i in range(0, audio.size, piece):
        events += detector.push(audio[i : i + piece])
    return events


def kinds(events: list[TurnDetectorEvent]) -> list[str]:
    return [e.kind for e in events]


def test_one_utterance_gives_start_barge_in_end_and_audio() -> None:
    detector = TurnDetector(EnergyVad(), SETTINGS)
    events = run(detector, np.concatenate([quiet(16), tone(32), quiet(20)]))
    assert kinds(events) == [
        "speech_started",
        "barge_in_detected",
        "utterance_paused",
        "speech_ended",
        "utterance_ready",
    ]
    started, barge, paused, ended, utterance = events
    assert isinstance(paused, UtterancePaused) and paused.end_sample == 48 * FRAME_SAMPLES
    assert isinstance(started, SpeechStarted) and started.onset_sample == 16 * FRAME_SAMPLES
    assert 0.1 * RATE <= started.at_sample - started.onset_sample < 0.1 * RATE + FRAME_SAMPLES
    assert isinstance(barge, BargeInDetected)
    assert barge.at_sample - barge.onset_sample >= SETTINGS.min_barge_in * RATE
    assert isinstance(ended, SpeechEnded) and ended.end_sample == 48 * FRAME_SAMPLES
    assert 0.4 * RATE <= ended.at_sample - ended.end_sample < 0.4 * RATE + FRAME_SAMPLES
    assert isinstance(utterance, UtteranceReady) and not utterance.truncated
    audio = utterance.audio
    assert audio.sample_rate == RATE and audio.start_sample is not None
    assert audio.start_sample <= started.onset_sample - 0.2 * RATE  # pre-roll kept
    assert audio.start_sample + audio.num_samples == ended.end_sample + round(0.1 * RATE)
    assert not detector.speaking


def test_turn_commits_after_the_configured_silence_and_not_before() -> None:
    detector = TurnDetector(EnergyVad(), SETTINGS)
    started = detector.push(np.concatenate([quiet(4), tone(10)]))
    assert kinds(started) == ["speech_started", "barge_in_detected"]
    assert detector.speaking
    silence_frames = int(np.ceil(0.4 * RATE / FRAME_SAMPLES))  # 13 frames of 32 ms
    pause_frames = int(np.ceil(0.1 * RATE / FRAME_SAMPLES))  # end_pad: 4 frames
    for frame in range(1, silence_frames):
        expected = ["utterance_paused"] if frame == pause_frames else []
        assert kinds(detector.push(quiet(1))) == expected
    assert kinds(detector.push(quiet(1))) == ["speech_ended", "utterance_ready"]


def test_events_do_not_depend_on_how_the_audio_is_cut() -> None:
    audio = np.concatenate([quiet(7), tone(20), quiet(5), tone(9), quiet(30), tone(3), quiet(2)])
    results = [
        run(TurnDetector(EnergyVad(), SETTINGS), audio, piece) for piece in (1, 333, 512, 99999)
    ]
    assert all(r == results[0] for r in results)
    assert kinds(results[0]).count("utterance_ready") == 1  # the 5-frame gap is not a turn end


def test_a_blip_shorter_than_min_speech_is_ignored() -> None:
    detector = TurnDetector(EnergyVad(), TurnDetection(min_speech=0.25))
    assert run(detector, np.concatenate([quiet(5), tone(3), quiet(40)])) == []


def test_short_speech_starts_a_turn_but_is_no_barge_in() -> None:
    settings = TurnDetection(min_speech=0.1, min_barge_in=0.5, end_of_turn_silence=0.3)
    events = run(TurnDetector(EnergyVad(), settings), np.concatenate([tone(10), quiet(20)]))
    assert "barge_in_detected" not in kinds(events)
    assert kinds(events)[0] == "speech_started" and kinds(events)[-1] == "utterance_ready"


def test_long_speech_is_cut_at_max_utterance() -> None:
    settings = TurnDetection(max_utterance=1.0, end_of_turn_silence=0.3, pre_roll=0.1)
    events = run(
        TurnDetector(EnergyVad(), settings), np.concatenate([quiet(10), tone(100), quiet(20)])
    )
    utterances = [e for e in events if isinstance(e, UtteranceReady)]
    assert [u.truncated for u in utterances] == [True, True, True, False]
    assert all(u.audio.duration <= 1.0 + FRAME_SAMPLES / RATE for u in utterances)
    starts = [u.audio.start_sample for u in utterances]
    ends = [(u.audio.start_sample or 0) + u.audio.num_samples for u in utterances]
    assert all(s == e for s, e in zip(starts[1:], ends[:-1], strict=False))  # nothing lost
    assert kinds(events).count("speech_started") == 1


def test_flush_ends_an_utterance_in_progress() -> None:
    detector = TurnDetector(EnergyVad(), SETTINGS)
    run(detector, tone(20))
    assert detector.speaking
    assert kinds(detector.flush()) == ["speech_ended", "utterance_ready"]
    assert detector.flush() == []


class _Unasked:
    """An end-of-turn model the test never asks (each pause's probability is given)."""

    def probability(self, audio: object) -> float:
        raise AssertionError("the test gives every verdict's probability")


def test_reset_forgets_the_wait_a_verdict_set() -> None:
    """A closed answer the model doubts shortens the turn's wait to closed_answer_silence;
    reset() in that wait forgets it: the next utterance's pause is judged where a fresh
    detector's is (here 0.21 s, within the frame where the verdict is owed, 0.2 s: a
    wait left over would end that turn before the model was asked)."""
    settings = SETTINGS.model_copy(update={"closed_answer_silence": 0.21})
    audio = np.concatenate([quiet(10), tone(20), quiet(60)])

    def listen(detector: TurnDetector) -> list[TurnDetectorEvent]:
        events: list[TurnDetectorEvent] = []
        for i in range(0, audio.size, 320):
            events += detector.push(audio[i:i + 320])
            if detector.undecided is not None:
                events += detector.decide(transcript="Okay and", probability=0.1)
        return events

    fresh = listen(TurnDetector(EnergyVad(), settings, end_of_turn_model=_Unasked()))
    [ended] = [e for e in fresh if isinstance(e, SpeechEnded)]
    assert ended.at_sample - ended.end_sample >= round(1.6 * RATE)  # judged incomplete
    detector = TurnDetector(EnergyVad(), settings, end_of_turn_model=_Unasked())
    pushed = 0
    while detector.undecided is None:
        detector.push(audio[pushed:pushed + 320])
        pushed += 320
    assert detector.decide(transcript="No.", probability=0.1) == []  # waits 0.21 s now
    detector.reset()
    assert listen(detector) == fresh
    assert [d.transcript for d in detector.decisions][-1] == "Okay and"


def test_settings_and_inputs_are_validated() -> None:
    with pytest.raises(ValidationError):
        TurnDetection(threshold=0.3, neg_threshold=0.5)
    with pytest.raises(ValidationError):
        TurnDetection(end_of_turn_silence=0)
    with pytest.raises(ValidationError):
        TurnDetection(max_utterance=0.2, pre_roll=0.3)
    with pytest.raises(ValueError, match="16000"):
        TurnDetector(EnergyVad(sample_rate=8000))
    with pytest.raises(ValueError, match="InputConverter"):
        TurnDetector(EnergyVad()).push(AudioChunk(b"\x00\x00" * 10, 48000))


def test_silero_turn_detection_on_speech_then_transcription(
    speech: Speech, stt: WhisperStt
) -> None:
    text = "Please turn on the kitchen lights."
    audio = np.concatenate([np.zeros(8000, np.float32), speech(text), np.zeros(RATE, np.float32)])
    events = run(TurnDetector(SileroVad()), audio, piece=320)
    utterances = [e for e in events if isinstance(e, UtteranceReady)]
    assert kinds(events)[0] == "speech_started" and len(utterances) == 1
    transcript = stt.transcribe_sync(utterances[0].audio)
    assert transcript is not None
    assert transcript.text.lower().rstrip(".") == text.lower().rstrip(".")


def test_silero_turn_detection_ignores_noise() -> None:
    rng = np.random.default_rng(1)
    noise = (rng.standard_normal(3 * RATE) * 0.05).astype(np.float32)
    assert run(TurnDetector(SileroVad()), noise) == []


def test_the_early_utterance_carries_the_very_audio_of_the_turn() -> None:
    detector = TurnDetector(EnergyVad(), SETTINGS)
    events = run(detector, np.concatenate([quiet(10), tone(20), quiet(20)]))
    (paused,) = [e for e in events if isinstance(e, UtterancePaused)]
    (ready,) = [e for e in events if isinstance(e, UtteranceReady)]
    assert paused.matches(ready) and paused.audio == ready.audio
    assert kinds(events).index("utterance_paused") < kinds(events).index("speech_ended")


def test_a_pause_then_more_speech_supersedes_the_early_utterance() -> None:
    detector = TurnDetector(EnergyVad(), SETTINGS)
    events = run(detector, np.concatenate([tone(15), quiet(6), tone(15), quiet(20)]))
    paused = [e for e in events if isinstance(e, UtterancePaused)]
    (ready,) = [e for e in events if isinstance(e, UtteranceReady)]
    assert len(paused) == 2
    assert not paused[0].matches(ready) and paused[1].matches(ready)
    assert paused[0].end_sample < ready.end_sample


def test_early_utterances_can_be_switched_off() -> None:
    settings = TurnDetection(
        min_speech=0.1, end_of_turn_silence=0.4, pre_roll=0.2, end_pad=0.1, early_utterance=False
    )
    events = run(TurnDetector(EnergyVad(), settings), np.concatenate([tone(15), quiet(20)]))
    assert "utterance_paused" not in kinds(events)


def level(frames: int, rms: float) -> np.ndarray:
    return np.full(frames * FRAME_SAMPLES, rms, dtype=np.float32)


def test_the_onset_is_backdated_over_rising_frames() -> None:
    # EnergyVad(-40 dB, width 3 dB): 0.0075 RMS scores about 0.3, 0.0047 about 0.1.
    rising = np.concatenate([quiet(10), level(1, 0.0047), level(2, 0.0075), tone(10), quiet(20)])
    started = run(TurnDetector(EnergyVad(), SETTINGS), rising)[0]
    assert isinstance(started, SpeechStarted) and started.onset_sample == 11 * FRAME_SAMPLES
    strict = TurnDetection(
        min_speech=0.1, end_of_turn_silence=0.4, pre_roll=0.2, end_pad=0.1, onset_threshold=0.5
    )
    started = run(TurnDetector(EnergyVad(), strict), rising)[0]
    assert isinstance(started, SpeechStarted) and started.onset_sample == 13 * FRAME_SAMPLES
    with pytest.raises(ValidationError):
        TurnDetection(onset_threshold=0.6)


def test_the_rising_onset_is_where_the_onset_will_be_backdated_to() -> None:
    # EnergyVad(-40 dB, width 3 dB): 0.0075 RMS scores about 0.3, 0.0047 about 0.1.
    detector = TurnDetector(EnergyVad(), SETTINGS)
    risings = []
    for piece in (quiet(10), level(1, 0.0047), level(1, 0.0075), level(1, 0.0075)):
        run(detector, piece, piece=FRAME_SAMPLES)
        risings.append(detector.rising_onset)
    assert risings == [None, None, 11 * FRAME_SAMPLES, 11 * FRAME_SAMPLES]
    started = run(detector, tone(10), piece=FRAME_SAMPLES)[0]
    assert isinstance(started, SpeechStarted) and started.onset_sample == 11 * FRAME_SAMPLES
    assert detector.rising_onset is None  # speech now: active_onset takes over
    # A long sub-threshold sound keeps its first frame (the backdating looks 3 back).
    hum = TurnDetector(EnergyVad(), SETTINGS)
    run(hum, np.concatenate([quiet(10), level(8, 0.0075)]), piece=FRAME_SAMPLES)
    assert hum.rising_onset == 10 * FRAME_SAMPLES and hum.active_onset is None
    run(hum, quiet(1), piece=FRAME_SAMPLES)
    assert hum.rising_onset is None
    run(hum, level(1, 0.0075), piece=FRAME_SAMPLES)
    assert hum.rising_onset == 19 * FRAME_SAMPLES


def test_silero_onsets_come_earlier_with_backdating(speech: Speech) -> None:
    # Deterministic synthesis: the frame before the first >= 0.5 scores about 0.25.
    audio = np.concatenate([np.zeros(8123, np.float32), speech("Hey, hold on.")])
    onsets = []
    for onset_threshold in (0.15, 0.5):  # (the VAD's own rise: no hiss cue)
        settings = TurnDetection(onset_threshold=onset_threshold, hiss_rise=None)
        events = run(TurnDetector(SileroVad(), settings), audio)
        onsets.append(next(e for e in events if isinstance(e, SpeechStarted)).onset_sample)
    voiced = int(np.argmax(np.abs(audio) > 0.02))
    assert onsets[0] < onsets[1]
    assert onsets[0] - voiced < onsets[1] - voiced <= 0.1 * RATE


def test_apush_runs_a_cheap_vad_on_the_loop_and_a_slow_one_in_a_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A session pushes 20 ms at a time. A cheap VAD (Silero: ~0.2 ms a frame) runs on the
    event loop: a hop to a worker thread and back for each push cost the loop more than
    the push itself. A VAD engine slower than ``INLINE_PUSH`` a run moves to a worker
    thread after its first slow runs, so it never stalls every call's audio. Either
    way the events are those of plain :meth:`TurnDetector.push`."""
    import asyncio
    import threading
    import time

    from voxflow_voice.listen import turn_detector

    class Recording(EnergyVad):
        def __init__(self, delay: float = 0.0) -> None:
            super().__init__()
            self.delay = delay
            self.threads: list[int] = []

        def process_frames(self, frames: np.ndarray) -> np.ndarray:
            self.threads.append(threading.get_ident())
            time.sleep(self.delay)
            return super().process_frames(frames)

    audio = np.concatenate([quiet(10), tone(40), quiet(40)])
    expected = kinds(run(TurnDetector(EnergyVad(), SETTINGS), audio, piece=320))
    assert "utterance_ready" in expected

    def feed(vad: Recording) -> tuple[list[str], int]:
        detector = TurnDetector(vad, SETTINGS)

        async def go() -> tuple[list[str], int]:
            events: list[TurnDetectorEvent] = []
            for i in range(0, audio.size, 320):
                async for step in detector.apush(audio[i:i + 320]):
                    events += step
            return kinds(events), threading.get_ident()

        return asyncio.run(go())

    # (a busy machine can stretch any push: "cheap" is judged against a bound no energy
    # VAD's push reaches, so the test does not depend on the machine's speed)
    with monkeypatch.context() as patched:
        patched.setattr(turn_detector, "INLINE_PUSH", 1.0)
        cheap = Recording()
        events, loop_thread = feed(cheap)
    assert events == expected and set(cheap.threads) == {loop_thread}
    # a run sleeping 3x the bound (a sleep never ends early): the average of two passes it
    slow = Recording(delay=3 * turn_detector.INLINE_PUSH)
    events, loop_thread = feed(slow)
    assert events == expected
    on_loop = sum(1 for t in slow.threads if t == loop_thread)
    assert 1 <= on_loop <= 2 < len(slow.threads)  # then every run in a worker thread
    assert loop_thread not in slow.threads[on_loop:]
