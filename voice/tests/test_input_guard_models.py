"""A NaN frame never reaches Silero's recurrent state or Whisper (the real models)."""

from __future__ import annotations

import numpy as np
import pytest
from numpy.typing import NDArray
from voxflow_voice import (
    FRAME_SAMPLES,
    STT_SAMPLE_RATE,
    InputGuard,
    SileroVad,
    VadStream,
    WhisperStt,
)

from .conftest import Speech

pytestmark = pytest.mark.models


def _noise(frames: int, level: float = 0.02, seed: int = 11) -> NDArray[np.float32]:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((frames, FRAME_SAMPLES)) * level).astype(np.float32)


def test_silero_refuses_a_nan_frame_and_its_state_stays_clean() -> None:
    noise = _noise(40)
    reference = SileroVad().process_frames(noise)
    assert reference.max() < 0.3  # noise is not speech
    vad = SileroVad()
    head = vad.process_frames(noise[:10])
    poisoned = noise[10].copy()
    poisoned[200] = np.nan
    for bad in (poisoned, np.full(FRAME_SAMPLES, np.inf, np.float32)):
        with pytest.raises(ValueError, match="finite"):
            vad.process_frames(bad)
    tail = vad.process_frames(noise[10:])
    np.testing.assert_allclose(np.concatenate([head, tail]), reference, atol=1e-6)


def test_vad_stream_refuses_nan_before_buffering_it() -> None:
    noise = _noise(8).reshape(-1)
    stream = VadStream(SileroVad())
    _, first = stream.push(noise[:700])  # one frame scored, 188 samples pending
    bad = noise[700:1000].copy()
    bad[5] = np.nan
    with pytest.raises(ValueError, match="finite"):
        stream.push(bad)
    _, rest = stream.push(noise[700:])
    np.testing.assert_allclose(
        np.concatenate([first, rest]), SileroVad().process_frames(noise.reshape(-1, 512)),
        atol=1e-6,
    )


def _through_the_boundary(audio: NDArray[np.float32], guard: InputGuard) -> NDArray[np.float32]:
    """20 ms device frames through the guard, as a transport hands them on."""
    out = []
    for start in range(0, audio.size, 320):
        chunk = guard.convert(audio[start : start + 320], STT_SAMPLE_RATE)
        assert chunk is not None
        out.append(chunk.samples())
    return np.concatenate(out)


def test_nan_frames_at_the_boundary_never_poison_the_vad() -> None:
    noise = _noise(60).reshape(-1)
    hostile = noise.copy()
    hostile[3200:3520] = np.nan  # a whole NaN frame
    hostile[9000] = np.inf  # and one bad sample in another
    guard = InputGuard()
    passed = _through_the_boundary(hostile, guard)
    assert np.isfinite(passed).all()
    assert guard.statistics().zeroed == 2
    expected = noise.copy()
    expected[3200:3520] = 0.0
    expected[8960:9280] = 0.0  # the frame holding the inf, as silence
    silenced = _through_the_boundary(expected, InputGuard())
    probs = VadStream(SileroVad()).push(passed)[1]
    np.testing.assert_allclose(probs, VadStream(SileroVad()).push(silenced)[1], atol=1e-6)
    assert probs.max() < 0.3  # noise stays noise after the bad frames


def test_speech_with_a_nan_frame_is_still_transcribed(stt: WhisperStt, speech: Speech) -> None:
    audio = np.concatenate([speech("Where is my order?"), np.zeros(8000, np.float32)])
    hostile = audio.copy()
    hostile[6400:6720] = np.nan
    with pytest.raises(ValueError, match="finite"):
        stt.transcribe_sync(hostile)  # never silently "no words"
    guard = InputGuard()
    passed = _through_the_boundary(hostile, guard)
    assert guard.statistics().zeroed == 1
    transcript = stt.transcribe_sync(passed)
    assert transcript is not None and "order" in transcript.text.lower()
