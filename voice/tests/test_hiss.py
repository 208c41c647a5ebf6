"""The hiss cue: an 's' counts within its first frames; noise, clicks and breath do not."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from voxflow_voice import HissDetector
from voxflow_voice.audio import resample

pytestmark = pytest.mark.unit

RATE = 16000
RNG_SEED = 11


def seconds(s: float) -> int:
    return round(s * RATE)


def hiss(duration: float, level: float = 0.05, seed: int = RNG_SEED) -> np.ndarray:
    """An 's': noise with its energy over 4 kHz (white noise, first-differenced twice)."""
    noise = np.random.default_rng(seed).standard_normal(seconds(duration) + 2)
    high = np.diff(noise, 2)
    return (level * high / high.std()).astype(np.float32)


def white(duration: float, level: float = 0.05, seed: int = RNG_SEED) -> np.ndarray:
    noise = np.random.default_rng(seed).standard_normal(seconds(duration))
    return (level * noise).astype(np.float32)


def pink(duration: float, level: float = 0.05, seed: int = RNG_SEED) -> np.ndarray:
    spectrum = np.fft.rfft(np.random.default_rng(seed).standard_normal(seconds(duration)))
    spectrum /= np.sqrt(np.arange(1, spectrum.size + 1))
    noise = np.fft.irfft(spectrum, seconds(duration))
    return (level * noise / noise.std()).astype(np.float32)


def silence(duration: float) -> np.ndarray:
    return np.zeros(seconds(duration), np.float32)


def frames_with_hiss(audio: np.ndarray, frame: int = 512) -> list[int]:
    """The indexes of the 512-sample frames (as the turn detector feeds them) that count."""
    detector = HissDetector()
    return [i for i in range(audio.size // frame)
            if detector.push(audio[i * frame:(i + 1) * frame])]


def test_an_s_counts_within_its_first_frames_after_silence_or_a_quiet_room() -> None:
    for room in (silence(0.5), white(0.5, level=0.001)):
        audio = np.concatenate([room, hiss(0.1), silence(0.3)])
        counted = frames_with_hiss(audio)
        start = room.size // 512  # the frame where the 's' begins (0.5 s = 15.6 frames)
        assert counted and counted[0] <= start + 1, counted  # within 32 ms of its start
        assert counted[-1] <= start + 4  # and not after it ended


def test_noise_that_is_not_an_s_never_counts() -> None:
    typing = np.concatenate([np.concatenate([
        (0.5 * np.random.default_rng(i).standard_normal(96)
         * np.exp(-np.arange(96) / 24)).astype(np.float32), silence(0.15)]) for i in range(8)])
    for name, sound in {
        "white noise burst (a bump, a door)": white(0.4, level=0.3),
        "pink noise (breath, a fan)": pink(0.5, level=0.1),
        "keystrokes": typing,
        "one short 's'-like click": hiss(0.012, level=0.3),
    }.items():
        audio = np.concatenate([silence(0.5), sound, silence(0.3)])
        assert frames_with_hiss(audio) == [], name


def test_a_hiss_longer_than_a_word_opens_with_stops_counting() -> None:
    audio = np.concatenate([silence(0.5), hiss(1.0), silence(0.2)])
    counted = frames_with_hiss(audio)
    assert counted, "the start of it counts"
    assert (counted[-1] - counted[0] + 1) * 512 <= seconds(0.3) + 2 * 512
    # and once it has ended, a new 's' counts again
    again = np.concatenate([audio, hiss(0.1, seed=3), silence(0.2)])
    assert frames_with_hiss(again)[-1] > audio.size // 512


def test_the_floor_follows_steady_noise_so_only_a_rise_counts() -> None:
    steady = hiss(2.0, level=0.02)  # a hissing room (an air vent): hiss at a steady level
    assert [i for i in frames_with_hiss(steady) if i * 512 > seconds(0.5)] == []
    louder = np.concatenate([steady, hiss(0.1, level=0.2, seed=5) + hiss(0.1, 0.02, 6)])
    assert frames_with_hiss(louder)[-1] >= steady.size // 512  # an 's' over it counts


@settings(max_examples=60, deadline=None, derandomize=True)
@given(cuts=st.lists(st.integers(min_value=1, max_value=700), min_size=1, max_size=40),
       band=st.sampled_from(["wide", "telephone"]))
def test_the_chunking_of_the_input_never_changes_the_answer(cuts: list[int], band: str) -> None:
    """Fed in any chunks, a push says True exactly when it completed an 8 ms step that
    counts when the same audio is fed one step at a time."""
    audio = np.concatenate([silence(0.3), hiss(0.1), silence(0.2), hiss(0.05, seed=2),
                            line_hiss(0.1, seed=4)])
    steps = HissDetector(band=band)  # type: ignore[arg-type]
    counted = {k for k in range(audio.size // 128) if steps.push(audio[k * 128:(k + 1) * 128])}
    pieces = HissDetector(band=band)  # type: ignore[arg-type]
    position = 0
    for cut in cuts * (audio.size // sum(cuts) + 1):
        chunk = audio[position:position + cut]
        if not chunk.size:
            break
        done_before = position // 128
        position += chunk.size
        completed = set(range(done_before, position // 128))
        assert pieces.push(chunk) == bool(completed & counted), (position, completed)


def test_bad_settings_and_samples_are_refused() -> None:
    for kwargs in ({"rise_db": float("nan")}, {"level_db": 1.0}, {"sustain": -0.1},
                   {"longest": float("inf")}, {"tilt_db": True}):
        with pytest.raises(ValueError):
            HissDetector(**kwargs)  # type: ignore[arg-type]
    detector = HissDetector()
    with pytest.raises(ValueError, match="finite"):
        detector.push(np.array([0.0, np.nan], np.float32))
    assert detector.push(np.concatenate([silence(0.2), hiss(0.1)])) is True  # unchanged


def over_a_line(sound_8k: np.ndarray) -> np.ndarray:
    """8 kHz audio as a phone call hands it on: upsampled to 16 kHz (nothing over 4 kHz)."""
    return resample(sound_8k.astype(np.float32), 8000, RATE).astype(np.float32)


def line_hiss(duration: float, level: float = 0.05, seed: int = RNG_SEED) -> np.ndarray:
    """The part of an 's' a telephone line keeps: noise with its energy near 3-4 kHz."""
    noise = np.random.default_rng(seed).standard_normal(round(duration * 8000) + 2)
    high = np.diff(noise, 2)
    return over_a_line(level * high / high.std())


def test_an_s_over_a_telephone_line_counts_on_the_telephone_band_only() -> None:
    audio = np.concatenate([silence(0.5), line_hiss(0.1), silence(0.3)])
    start = seconds(0.5) // 512
    wide = frames_with_hiss(audio)
    assert wide == []  # nothing over 4 kHz: the wideband split never sees it
    telephone = HissDetector(band="telephone")
    counted = [i for i in range(audio.size // 512)
               if telephone.push(audio[i * 512:(i + 1) * 512])]
    assert counted and start <= counted[0] <= start + 1, counted  # within 32 ms


def test_noise_over_a_telephone_line_never_counts_on_the_telephone_band() -> None:
    rng = np.random.default_rng(RNG_SEED)
    spectrum = np.fft.rfft(rng.standard_normal(4000))
    spectrum /= np.sqrt(np.arange(1, spectrum.size + 1))
    pink8k = np.fft.irfft(spectrum, 4000)
    for name, sound in {
        "white noise burst": over_a_line(0.3 * rng.standard_normal(3200)),
        "pink noise (breath)": over_a_line(0.1 * pink8k / pink8k.std()),
        "hum": over_a_line(0.2 * np.sin(2 * np.pi * 120 * np.arange(4000) / 8000)),
    }.items():
        audio = np.concatenate([silence(0.5), sound, silence(0.3)])
        detector = HissDetector(band="telephone")
        assert not [i for i in range(audio.size // 512)
                    if detector.push(audio[i * 512:(i + 1) * 512])], name
    with pytest.raises(ValueError, match="band"):
        HissDetector(band="radio")  # type: ignore[arg-type]
