"""The words known at the pause feed turn taking (issue 33 item 3).

With the ``whisper-streaming`` engine the speech is decoded once more when it pauses
(the VAD's first silent frame): those words are the utterance's transcript if the user
stays silent. They are the partial words (:attr:`EarlyTranscriber.partial`) as soon as
that decode is done, and :meth:`EarlyTranscriber.pause_words` hands them to the
end-of-turn verdict and the speculative reply without waiting for the transcriptions
queued before the pause's. The real Silero VAD, Smart Turn and Whisper tiny.en, on
espeak-ng voices (not the bundled one).
"""

from __future__ import annotations

import asyncio
import re
import runpy
import shutil
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
from voxflow_voice.listen.incremental_stt import PartialWords

pytestmark = [
    pytest.mark.models,
    pytest.mark.skipif(shutil.which("espeak-ng") is None,
                       reason="espeak-ng is missing: apt-get install espeak-ng (.ci/run does)"),
]

CHUNK = 320  # 20 ms, as a session pushes
QUESTION = "What time does the museum open on Sunday morning"

_espeak = runpy.run_path(str(Path(__file__).parents[2] / "benchmarks" / "_espeak.py"))["espeak"]


def words(text: str | None) -> list[str]:
    return re.sub(r"[^a-z0-9' ]+", " ", (text or "").lower()).split()


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


@pytest.fixture(scope="module")
def streaming() -> StreamingWhisperStt:
    return StreamingWhisperStt(StreamingSttSettings(model="tiny.en"))


def _padded(speech: NDArray[np.float32]) -> NDArray[np.float32]:
    silence = np.zeros(STT_SAMPLE_RATE // 2, np.float32)
    return np.concatenate([silence, speech, silence, silence, silence])


async def _decoded(early: EarlyTranscriber) -> None:
    """Wait for the running partial decode (a machine fast enough to keep up)."""
    assert early.incremental is not None
    running = early.incremental._task
    if running is not None:
        await asyncio.gather(running)


async def test_the_partial_at_the_pause_holds_the_pause_decodes_words(
    tmp_path: Path, streaming: StreamingWhisperStt
) -> None:
    """Once the decode at the pause is done, the partial words are its words (those of
    the final transcript), typed as final for that pause; before it, only the committed
    and tentative words of the decodes during speech (their last ones unheard)."""
    audio = _padded(_espeak(tmp_path, QUESTION, "en-us+f3", 150))
    detector = TurnDetector(SileroVad(), TurnDetection())
    early = EarlyTranscriber(streaming)
    at_pause: PartialWords | None = None
    for i in range(0, audio.size, CHUNK):
        frame = audio[i : i + CHUNK]
        for event in detector.push(frame):
            if isinstance(event, UtterancePaused):
                at_pause = early.partial
                early.paused(event)
            elif isinstance(event, UtteranceReady):
                transcript = await early.final(event)
                await early.aclose()
                assert transcript is not None and at_pause is not None
                assert early.incremental is not None
                assert early.incremental.statistics().covered == 1
                assert words(at_pause.text) == words(transcript.text)
                assert at_pause.at_pause is not None
                assert at_pause.final_at(event.end_sample)
                assert not at_pause.final_at(at_pause.upto_sample + 1)  # speech after it
                assert words(QUESTION)[:3] == words(at_pause.text)[:3]
                return
        early.heard(frame, detector)
        await _decoded(early)
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
    earlier = _espeak(tmp_path, "Hello there", "en-gb+m3", 175)
    early.paused(UtterancePaused(AudioChunk.from_float(earlier, STT_SAMPLE_RATE, start_sample=0),
                                 0, earlier.size))
    # the fallback: never hang if the verdict waits for it (as it did)
    asyncio.get_running_loop().call_later(20, stt.release.set)
    audio = _padded(_espeak(tmp_path, QUESTION, "en-us+f3", 150))
    ended: list[tuple[UtteranceReady, bool]] = []
    for i in range(0, audio.size, CHUNK):
        frame = audio[i : i + CHUNK]
        async for events in detector.apush(frame, early.pause_words):
            for event in events:
                if isinstance(event, UtterancePaused):
                    early.paused(event)
                elif isinstance(event, UtteranceReady):
                    ended.append((event, stt.release.is_set()))
        if ended:
            break
        early.heard(frame, detector)
        await _decoded(early)
    stt.release.set()
    await early.aclose()
    assert len(ended) == 1 and stt.held == 1
    verdict = detector.decisions[-1]
    assert verdict.complete and not verdict.asked  # a question: the model not asked
    assert words(verdict.transcript)[:3] == words(QUESTION)[:3]
    assert ended[0][1] is False  # decided while the earlier transcription still ran
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
