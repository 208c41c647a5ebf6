"""The STT encoder window (``SttSettings.encoder_window``) that keeps voice turns fast.

Whisper pads every input to 30 s; padding a short voice turn to a 10 s window instead
cuts the encoder's cost several times on a CPU (see the ``stt`` module docstring: the
default fits the window to the turn, 6 to 10 s). These tests check that a windowed transcription
works, that longer utterances keep the 30 s window, and that faster-whisper behaves as
before outside a voxflow transcription.
"""

from __future__ import annotations

import numpy as np
import pytest
from voxflow_voice.audio import STT_SAMPLE_RATE, resample
from voxflow_voice.engines import VoiceEngines
from voxflow_voice.engines.stt import SttSettings, WhisperStt

pytestmark = pytest.mark.models

SHORT = "What is on my calendar?"
LONG = (
    "Once upon a time, in a small harbour town, there lived a lighthouse keeper named Ada, "
    "who climbed one hundred steps every night to light the lamp, and one stormy evening "
    "the lamp went dark while a fishing boat was still out at sea."
)


def speech(engines: VoiceEngines, text: str) -> np.ndarray:
    tts = engines.tts
    samples = np.concatenate([s.samples for s in tts.synthesize(text)])
    audio = resample(samples * 0.5, tts.sample_rate, STT_SAMPLE_RATE)
    pad = np.zeros(STT_SAMPLE_RATE // 2, np.float32)
    return np.concatenate([pad, audio, pad])


def words(text: str | None) -> list[str]:
    return "".join(c for c in (text or "").lower() if c.isalnum() or c.isspace()).split()


def test_a_short_turn_is_transcribed_in_a_10_s_window(engines: VoiceEngines) -> None:
    audio = speech(engines, SHORT)
    assert audio.size < 10 * STT_SAMPLE_RATE  # so the 10 s window is used
    fixed = SttSettings(encoder_window=10.0, encoder_window_floor=None)
    windowed = WhisperStt(fixed).transcribe_sync(audio)
    assert windowed is not None
    assert words(windowed.text) == ["what", "is", "on", "my", "calendar"]


def test_an_utterance_longer_than_the_window_is_transcribed_whole(
    engines: VoiceEngines,
) -> None:
    audio = speech(engines, LONG)
    assert audio.size > 10 * STT_SAMPLE_RATE  # so the 30 s window is used
    windowed = WhisperStt(SttSettings(encoder_window=10.0)).transcribe_sync(audio)
    full = WhisperStt(SttSettings()).transcribe_sync(audio)
    assert windowed is not None and full is not None
    assert windowed.text == full.text  # both decoded in the 30 s window
    assert words(windowed.text)[:3] == ["once", "upon", "a"]
    assert words(windowed.text)[-1] == "sea"


def test_faster_whisper_pads_to_30_s_outside_a_transcription(engines: VoiceEngines) -> None:
    import faster_whisper.transcribe as fw

    stt = WhisperStt(SttSettings(encoder_window=10.0))
    stt.transcribe_sync(np.zeros(STT_SAMPLE_RATE, np.float32))  # the hook is installed
    assert getattr(fw.pad_or_trim, "voxflow_window", False)
    padded = fw.pad_or_trim(np.ones((80, 200), np.float32))
    assert padded.shape == (80, 3000)


def test_encoder_window_is_validated() -> None:
    with pytest.raises(ValueError, match="encoder_window"):
        SttSettings(encoder_window=0.5)
    with pytest.raises(ValueError, match="encoder_window"):
        SttSettings(encoder_window=31.0)
