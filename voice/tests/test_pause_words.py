"""The words known at the pause feed turn taking (issue 33 item 3).

With the ``whisper-streaming`` engine the speech is decoded once more when it pauses
(the VAD's first silent frame): those words are the utterance's transcript if the user
stays silent. As soon as that decode is done, :meth:`EarlyTranscriber.pause_words`
hands them to the end-of-turn verdict and the speculative reply without waiting for the
transcriptions queued before the pause's. The real Silero VAD, Smart Turn and Whisper tiny.en, on
espeak-ng voices (not the bundled one).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from numpy.typing import NDArray
from voxflow_voice import (
    STT_SAMPLE_RATE,
    AudioChunk,
    EarlyTranscriber,
    SileroVad,
    TurnDetection,
    TurnDetector,
    UtterancePaused,
    UtteranceReady,
)
from voxflow_voice.engines.end_of_turn import SmartTurn
from voxflow_voice.engines.stt import Transcript
from voxflow_voice.engines.stt_streaming import StreamingSttSettings, StreamingWhisperStt

from .conftest import CHUNK, espeak, follow, needs_espeak, padded, words

pytestmark = [pytest.mark.models, needs_espeak]

QUESTION = "What time does the museum open on Sunday morning"


class _HeldWhole(StreamingWhisperStt):
    """The real engine whose whole-utterance decode (``transcribe``) waits for
    :attr:`release`: a transcription of an earlier pause that is still running."""

    def __init__(self) -> None:
        super().__init__(StreamingSttSettings(model="tiny.en"))
        self.release = asyncio.Event()
        self.held = 0

    async def transcribe(self, audio: AudioChunk | NDArray[Any]) -> Transcript | None:
        self.held += 1
        await self.release.wait()
        return await super().transcribe(audio)


async def test_the_words_at_the_pause_are_the_pause_decodes(
    tmp_path: Path, streaming: StreamingWhisperStt
) -> None:
    """Once the decode at the pause is done, pause_words gives its words (those of the
    final transcript) without a transcription of its own; the final reuses that decode
    (covered)."""
    audio = espeak(tmp_path, QUESTION, "en-us+f3", 150)
    said: list[Transcript | None] = []

    async def on_pause(early: EarlyTranscriber, event: UtterancePaused) -> None:
        said.append(await early.pause_words(event))

    _, transcript, _, early = await follow(streaming, audio, on_pause)
    assert early.incremental is not None
    assert early.incremental.statistics().covered == 1
    assert early.statistics().pause_words == 1
    assert len(said) == 1 and said[0] is not None and transcript is not None
    assert words(said[0].text) == words(transcript.text)
    assert words(QUESTION)[:3] == words(said[0].text)[:3]


class _Wordless(StreamingWhisperStt):
    """The real engine whose decode at the pause hears no words (``decode_text`` gives
    ``None``, as for a cough the VAD took for speech); it counts whole transcriptions."""

    def __init__(self) -> None:
        super().__init__(StreamingSttSettings(model="tiny.en"))
        self.transcribed = 0

    def decode_text(self, samples: NDArray[np.float32],
                    whole_window: bool = False) -> Transcript | None:
        return None

    async def transcribe(self, audio: AudioChunk | NDArray[Any]) -> Transcript | None:
        self.transcribed += 1
        return await super().transcribe(audio)


async def test_a_pause_decode_without_words_gives_none(tmp_path: Path) -> None:
    """The decode at the pause heard all the speech and no words in it: pause_words is
    ``None`` at once (the pause's answer, counted), not a transcription of its own; the
    final reuses the same decode (covered, still ``None``)."""
    stt = _Wordless()
    said: list[Transcript | None] = []

    async def on_pause(early: EarlyTranscriber, event: UtterancePaused) -> None:
        said.append(await early.pause_words(event))

    _, transcript, _, early = await follow(stt, espeak(tmp_path, QUESTION, "en-us+f3", 150),
                                           on_pause)
    assert early.incremental is not None
    assert early.incremental.statistics().covered == 1
    assert said == [None] and transcript is None
    assert early.statistics().pause_words == 1
    assert stt.transcribed == 0


async def test_a_cancelled_pause_words_leaves_the_pause_decode_to_the_final(
    tmp_path: Path, streaming: StreamingWhisperStt
) -> None:
    """Cancelling a pause_words waiter (the listen loop's apush, a speculative reply)
    stops the wait only: the pause decode runs on (it is not started again) and the
    final uses it."""
    audio = padded(espeak(tmp_path, QUESTION, "en-us+f3", 150))
    detector = TurnDetector(SileroVad(), TurnDetection())
    early = EarlyTranscriber(streaming)
    cancelled = decodes = 0
    for i in range(0, audio.size, CHUNK):
        frame = audio[i : i + CHUNK]
        for event in detector.push(frame):
            if isinstance(event, UtteranceReady):
                transcript = await early.final(event)
                await early.aclose()
                assert early.incremental is not None
                stats = early.incremental.statistics()
                assert cancelled == 1
                # the pause decode ran once (not cancelled, then started again) and was used
                assert (stats.partial_decodes, stats.covered) == (decodes, 1)
                assert words(QUESTION)[:3] == words(getattr(transcript, "text", None))[:3]
                return
            if isinstance(event, UtterancePaused):
                early.paused(event)
        early.heard(frame, detector)
        assert early.incremental is not None
        running = early.incremental.partial is not None and not cancelled
        if running and detector.position > detector.speech_end:
            # the pause decode just started: a waiter for it, cancelled
            waiter = asyncio.create_task(early.pause_words(UtterancePaused(
                AudioChunk.from_float(audio[: detector.position], STT_SAMPLE_RATE,
                                      start_sample=0),
                detector.active_onset or 0, detector.speech_end)))
            await asyncio.sleep(0)
            waiter.cancel()
            await asyncio.wait({waiter})
            cancelled += 1
            decodes = early.incremental.statistics().partial_decodes
        await early.incremental.decoded()
    raise AssertionError("the turn never ended")


async def test_a_question_closes_the_turn_without_waiting_for_an_earlier_transcription(
    tmp_path: Path,
) -> None:
    """The verdict reads the pause decode's words: a question ends the turn
    (``question_closes``) while a transcription of an earlier pause is still running,
    not once it is done (the speculative transcription of this pause queues behind it)."""
    stt = _HeldWhole()
    early = EarlyTranscriber(stt)
    detector = TurnDetector(SileroVad(), TurnDetection(question_closes=True),
                            end_of_turn_model=SmartTurn())
    # an earlier utterance's pause, not the one the partial decodes follow: decoded whole
    earlier = espeak(tmp_path, "Hello there", "en-gb+m3", 175)
    early.paused(UtterancePaused(AudioChunk.from_float(earlier, STT_SAMPLE_RATE, start_sample=0),
                                 0, earlier.size))
    assert early.incremental is not None
    incremental = early.incremental
    before_release: list[bool] = []  # per verdict: its words came before the release

    async def release() -> None:
        # The earlier transcription ends once nothing else can give the words: the
        # partial decodes are done (each frame waits for them) and the loop has run on.
        # The old path (transcript_of) waits for it; the pause decode's words do not.
        await incremental.decoded()
        for _ in range(20):
            await asyncio.sleep(0)
        stt.release.set()

    async def verdict_words(event: UtterancePaused) -> Transcript | None:
        watchdog = asyncio.create_task(release())
        try:
            said = await early.pause_words(event)
        finally:
            before_release.append(not stt.release.is_set())
            await asyncio.wait({watchdog})
        return said

    audio = padded(espeak(tmp_path, QUESTION, "en-us+f3", 150))
    ended: list[UtteranceReady] = []
    for i in range(0, audio.size, CHUNK):
        frame = audio[i : i + CHUNK]
        async for events in detector.apush(frame, verdict_words):
            for event in events:
                if isinstance(event, UtterancePaused):
                    early.paused(event)
                elif isinstance(event, UtteranceReady):
                    ended.append(event)
        if ended:
            break
        early.heard(frame, detector)
        await incremental.decoded()
    stt.release.set()
    await early.aclose()
    assert len(ended) == 1 and stt.held == 1
    verdict = detector.decisions[-1]
    assert verdict.complete and not verdict.asked  # a question: the model not asked
    assert words(verdict.transcript)[:3] == words(QUESTION)[:3]
    assert before_release == [True]  # decided while the earlier transcription still ran
    assert early.statistics().pause_words == 1


async def test_a_plain_engine_gives_the_pauses_transcription() -> None:
    """Without a streaming engine there are no partial words: pause_words is the pause's
    transcription (transcript_of), nothing read at the pause."""

    class Plain:
        def __init__(self) -> None:
            self.calls = 0

        async def transcribe(self, audio: AudioChunk) -> Transcript | None:
            self.calls += 1
            return Transcript("No, thanks.", audio.duration, 0.0, 0.0)

    plain = Plain()
    early = EarlyTranscriber(plain)
    audio = AudioChunk.from_float(np.zeros(STT_SAMPLE_RATE, np.float32), STT_SAMPLE_RATE,
                                  start_sample=0)
    pause = UtterancePaused(audio, 0, STT_SAMPLE_RATE - 1600)
    early.paused(pause)
    said = await early.pause_words(pause)
    assert said is not None and said.text == "No, thanks."
    assert plain.calls == 1 and early.partial is None
    assert early.statistics().pause_words == 0
    assert await early.final(UtteranceReady(audio, 0, STT_SAMPLE_RATE - 1600)) is said
    with pytest.raises(TypeError, match="UtterancePaused"):
        await early.pause_words(UtteranceReady(audio, 0, 1))  # type: ignore[arg-type]
    await early.aclose()
