"""Speculative transcription on pauses, reused only for the very same audio."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from voxflow_voice import (
    FRAME_SAMPLES,
    AudioChunk,
    EarlyTranscriber,
    EnergyVad,
    SileroVad,
    Transcript,
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
SETTINGS = TurnDetection(min_speech=0.1, end_of_turn_silence=0.4, pre_roll=0.2, end_pad=0.1)


class GatedStt:
    """A fake transcriber: names each utterance by its length, finishes when released."""

    def __init__(self) -> None:
        self.calls: list[int] = []
        self.gate = asyncio.Event()

    async def transcribe(self, audio: AudioChunk) -> Transcript | None:
        self.calls.append(audio.num_samples)
        await self.gate.wait()
        return Transcript(f"{audio.num_samples} samples", audio.duration, 0.0, 0.0)


def tone(frames: int) -> np.ndarray:
    t = np.arange(frames * FRAME_SAMPLES) / RATE
    return (0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32)


def quiet(frames: int) -> np.ndarray:
    return np.zeros(frames * FRAME_SAMPLES, dtype=np.float32)


def detect(audio: np.ndarray) -> list[TurnDetectorEvent]:
    return TurnDetector(EnergyVad(), SETTINGS).push(audio)


async def test_the_pause_transcript_answers_the_turn() -> None:
    events = detect(np.concatenate([tone(20), quiet(20)]))
    (paused,) = [e for e in events if isinstance(e, UtterancePaused)]
    (ready,) = [e for e in events if isinstance(e, UtteranceReady)]
    stt = GatedStt()
    early = EarlyTranscriber(stt)
    early.paused(paused)
    await asyncio.sleep(0)
    stt.gate.set()
    transcript = await early.final(ready)
    assert transcript is not None and transcript.text == f"{ready.audio.num_samples} samples"
    assert stt.calls == [ready.audio.num_samples]  # transcribed once, in the pause
    assert (early.statistics().used, early.statistics().missed) == (1, 0)
    await early.aclose()


async def test_speech_after_the_pause_means_a_fresh_transcription() -> None:
    events = detect(np.concatenate([tone(15), quiet(6), tone(15), quiet(20)]))
    first_pause, second_pause = [e for e in events if isinstance(e, UtterancePaused)]
    (ready,) = [e for e in events if isinstance(e, UtteranceReady)]
    stt = GatedStt()
    early = EarlyTranscriber(stt)
    early.paused(first_pause)
    early.paused(second_pause)  # waits behind the first, which is still running
    await asyncio.sleep(0)
    assert stt.calls == [first_pause.audio.num_samples]
    stt.gate.set()
    transcript = await early.final(ready)
    assert transcript is not None and transcript.text == f"{ready.audio.num_samples} samples"
    assert stt.calls == [first_pause.audio.num_samples, ready.audio.num_samples]
    assert early.statistics().used == 1
    await early.aclose()


async def test_without_a_matching_pause_the_turn_is_transcribed() -> None:
    events = detect(np.concatenate([tone(15), quiet(6), tone(15), quiet(20)]))
    first_pause = next(e for e in events if isinstance(e, UtterancePaused))
    (ready,) = [e for e in events if isinstance(e, UtteranceReady)]
    stt = GatedStt()
    stt.gate.set()
    early = EarlyTranscriber(stt)
    early.paused(first_pause)
    transcript = await early.final(ready)
    assert transcript is not None and transcript.text == f"{ready.audio.num_samples} samples"
    assert early.statistics().missed == 1
    await early.aclose()
    with pytest.raises(RuntimeError, match="closed"):
        early.paused(first_pause)
    with pytest.raises(TypeError, match="UtteranceReady"):
        await EarlyTranscriber(stt).final(first_pause)  # type: ignore[arg-type]


async def test_aclose_cancels_a_running_speculation() -> None:
    events = detect(np.concatenate([tone(20), quiet(20)]))
    paused = next(e for e in events if isinstance(e, UtterancePaused))
    early = EarlyTranscriber(GatedStt())  # never released
    early.paused(paused)
    await asyncio.sleep(0)
    await early.aclose()
    assert early.statistics().started == 1


async def test_with_whisper_the_speculative_transcript_is_the_turns(
    speech: Speech, stt: WhisperStt
) -> None:
    text = "Set an alarm for seven tomorrow."
    audio = np.concatenate([np.zeros(4000, np.float32), speech(text), np.zeros(RATE, np.float32)])
    detector = TurnDetector(SileroVad())
    early = EarlyTranscriber(stt)
    transcripts = []
    for i in range(0, audio.size, 1600):
        for event in detector.push(audio[i : i + 1600]):
            if isinstance(event, UtterancePaused):
                early.paused(event)
            elif isinstance(event, UtteranceReady):
                transcripts.append(await early.final(event))
        await asyncio.sleep(0)
    await early.aclose()
    assert len(transcripts) == 1 and transcripts[0] is not None
    assert transcripts[0] == stt.transcribe_sync(audio_of(detector, audio))
    assert early.statistics().used == 1


def audio_of(detector: TurnDetector, audio: np.ndarray) -> AudioChunk:
    """The utterance a fresh detector finds in ``audio`` (to transcribe it directly)."""
    fresh = TurnDetector(SileroVad(), detector.settings)
    ready = [e for e in fresh.push(audio) if isinstance(e, UtteranceReady)]
    return ready[0].audio


async def test_a_warm_up_runs_one_dummy_transcription_when_none_is_running() -> None:
    stt = GatedStt()
    early = EarlyTranscriber(stt)
    assert early.warm_up()
    await asyncio.sleep(0)
    assert stt.calls == [RATE // 2]  # 0.5 s of silence
    assert not early.warm_up()  # one at a time
    events = detect(np.concatenate([tone(20), quiet(20)]))
    (paused,) = [e for e in events if isinstance(e, UtterancePaused)]
    early.paused(paused)  # the pause does not wait for the warm-up
    await asyncio.sleep(0)
    assert stt.calls == [RATE // 2, paused.audio.num_samples]
    assert not early.warm_up()  # a real transcription is running: no need
    stt.gate.set()
    (ready,) = [e for e in events if isinstance(e, UtteranceReady)]
    assert await early.final(ready) is not None
    assert early.statistics().started == 1  # the warm-up is not a speculation
    await early.aclose()
    assert not early.warm_up()  # closed


class WorkSpy(GatedStt):
    """GatedStt that also keeps the scheduler ticket each transcription was submitted with."""

    def __init__(self) -> None:
        super().__init__()
        self.works: list[object] = []

    async def transcribe(self, audio: AudioChunk) -> Transcript | None:
        from voxflow_voice.scheduler import current_work

        self.works.append(current_work())
        return await super().transcribe(audio)


async def test_a_pause_transcription_is_speculative_until_the_turn_ends_on_its_audio() -> None:
    events = detect(np.concatenate([tone(15), quiet(6), tone(15), quiet(20)]))
    first_pause, second_pause = [e for e in events if isinstance(e, UtterancePaused)]
    (ready,) = [e for e in events if isinstance(e, UtteranceReady)]
    stt = WorkSpy()
    early = EarlyTranscriber(stt, call="call-1")
    early.paused(first_pause)
    await asyncio.sleep(0)
    (work,) = stt.works
    assert (work.call, work.urgency) == ("call-1", "speculative")  # type: ignore[attr-defined]
    assert not early.turn_ended(ready)  # the turn ended on other (longer) audio
    assert work.urgency == "speculative"  # type: ignore[attr-defined]
    stt.gate.set()
    for _ in range(5):  # the first transcription finishes
        await asyncio.sleep(0)
    stt.gate.clear()
    early.paused(second_pause)
    await asyncio.sleep(0)
    assert len(stt.works) == 2
    assert stt.works[1].urgency == "speculative"  # type: ignore[attr-defined]
    assert early.turn_ended(ready)  # a speculative reply waits on it: urgent now
    assert stt.works[1].urgency == "urgent"  # type: ignore[attr-defined]
    stt.gate.set()
    transcript = await early.final(ready)
    assert transcript is not None and early.statistics().used == 1
    await early.aclose()


async def test_a_pause_whose_words_were_asked_first_is_not_transcribed_again() -> None:
    """A continuation's words are read from its whole utterance before the session hands
    the pause to :meth:`EarlyTranscriber.paused`: that pause, and the speech decoded apart
    after it, are transcribed once each, and the turn is answered from the first."""
    events = detect(np.concatenate([tone(20), quiet(20)]))
    (paused,) = [e for e in events if isinstance(e, UtterancePaused)]
    (ready,) = [e for e in events if isinstance(e, UtteranceReady)]
    own = UtterancePaused(
        AudioChunk.from_float(paused.audio.samples()[-8000:], RATE,
                              start_sample=(paused.audio.start_sample or 0)
                              + paused.audio.num_samples - 8000),
        paused.onset_sample, paused.end_sample)
    stt = GatedStt()
    stt.gate.set()
    early = EarlyTranscriber(stt)
    whole = await early.transcript_of(paused)
    assert await early.transcript_of(own) is not None
    early.paused(paused)  # (before: a second transcription of the same audio)
    await asyncio.sleep(0)
    assert await early.transcript_of(paused) == whole
    assert await early.final(ready) == whole
    assert stt.calls == [paused.audio.num_samples, 8000]
    await early.aclose()
