"""Silero v6 streamed frame by frame, and the energy detector."""

from __future__ import annotations

import numpy as np
import pytest
from voxflow_voice import (
    FRAME_SAMPLES,
    EnergyVad,
    SileroVad,
    VadStream,
    VoiceActivityDetector,
)

from .conftest import Speech

pytestmark = pytest.mark.models

RATE = 16000


def noise(seconds: float, level: float, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(round(seconds * RATE)) * level).astype(np.float32)


def probabilities(vad: VoiceActivityDetector, audio: np.ndarray, piece: int = 700) -> np.ndarray:
    stream = VadStream(vad)
    out = [stream.push(audio[i : i + piece])[1] for i in range(0, audio.size, piece)]
    return np.concatenate(out)


def test_both_detectors_implement_the_protocol() -> None:
    assert isinstance(SileroVad(), VoiceActivityDetector)
    assert isinstance(EnergyVad(), VoiceActivityDetector)


def test_streaming_matches_faster_whispers_batched_silero(speech: Speech) -> None:
    from faster_whisper.vad import get_vad_model

    audio = np.concatenate([np.zeros(8000, np.float32), speech("Turn the lights off, please.")])
    audio = audio[: audio.size - audio.size % FRAME_SAMPLES]
    reference = np.asarray(get_vad_model()(audio)).reshape(-1)
    streamed = probabilities(SileroVad(), audio, piece=333)
    assert streamed.shape == reference.shape
    assert np.allclose(streamed, reference, atol=1e-4)


def test_silero_hears_speech_and_not_silence_or_noise(speech: Speech) -> None:
    vad = SileroVad()
    spoken = probabilities(vad, speech("What is the weather like in Paris tomorrow?"))
    assert np.mean(spoken > 0.5) > 0.5  # most frames of a sentence are voiced
    vad.reset()
    assert np.max(probabilities(vad, np.zeros(RATE, np.float32))) < 0.1
    vad.reset()
    assert np.mean(probabilities(vad, noise(2.0, 0.05)) > 0.5) < 0.05


def test_reset_restarts_the_stream(speech: Speech) -> None:
    audio = speech("Hello there.")[: 20 * FRAME_SAMPLES]
    vad = SileroVad()
    first = probabilities(vad, audio)
    vad.reset()
    assert np.allclose(probabilities(vad, audio), first)


def test_energy_vad_scores_loudness() -> None:
    vad = EnergyVad(threshold_db=-30.0)
    quiet = noise(0.5, 0.001)  # about -60 dBFS
    loud = noise(0.5, 0.3)  # about -10 dBFS
    assert np.max(probabilities(vad, quiet)) < 0.01
    assert np.min(probabilities(vad, loud)) > 0.99
    at_threshold = np.full(FRAME_SAMPLES, 10 ** (-30 / 20), dtype=np.float32)
    assert vad.process_frames(at_threshold)[0] == pytest.approx(0.5, abs=1e-3)


def test_frames_are_validated() -> None:
    with pytest.raises(ValueError, match="shape"):
        SileroVad().process_frames(np.zeros((2, 100), np.float32))
    with pytest.raises(ValueError, match="width_db"):
        EnergyVad(width_db=0)
    with pytest.raises(TypeError, match="VoiceActivityDetector"):
        VadStream(object())  # type: ignore[arg-type]


def test_vad_stream_holds_partial_frames() -> None:
    stream = VadStream(EnergyVad())
    frames, probs = stream.push(np.zeros(FRAME_SAMPLES - 1, np.float32))
    assert frames.shape == (0, FRAME_SAMPLES) and probs.size == 0
    frames, probs = stream.push(np.zeros(FRAME_SAMPLES + 1, np.float32))
    assert frames.shape == (2, FRAME_SAMPLES) and probs.size == 2
    assert stream.frames_done == 2
