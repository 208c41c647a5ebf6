"""The STT benchmarks' audio: utterances spoken and padded as STT receives them.

:func:`build_clips` speaks them with the bundled Piper voice at three speaking rates
(noise-free sampling, so the same audio every run); :func:`build_other_voices` with
voices that are not the bundled one (``eot_set.Voices``: three espeak-ng voices, Piper
at ``length_scale`` 0.8 and 1.3, in turn). Each is trimmed, given ``PRE_ROLL`` of
silence before and an end pad of 0.2 or 0.1 s after (like the turn detector's
``UtteranceReady`` audio), and every other clip is mixed with white or pink noise at
``SNR_DB`` over the whole clip (fixed seeds), at 16 kHz.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from eot_set import Voices
from numpy.typing import NDArray
from voxflow_voice import DETERMINISTIC_TTS_SETTINGS, STT_SAMPLE_RATE, PiperTts, resample

__all__ = ["PRE_ROLL", "Clip", "build_clips", "build_other_voices"]

SPEEDS = (0.9, 1.0, 1.15)
NOISES = ("clean", "white", "clean", "pink")
END_PADS = (0.2, 0.1)
PRE_ROLL = 0.6
SNR_DB = 20.0
SEED = 20261130

@dataclass(frozen=True, slots=True)
class Clip:
    """One test utterance as STT receives it."""

    text: str
    audio: NDArray[np.float32]
    condition: str


def _trim(samples: NDArray[np.float32], threshold: float = 0.01) -> NDArray[np.float32]:
    loud = np.flatnonzero(np.abs(samples) > threshold)
    if loud.size == 0:
        return samples
    return samples[loud[0] : loud[-1] + 1]


def _noise(kind: str, size: int, rng: np.random.Generator) -> NDArray[np.float64]:
    white = rng.standard_normal(size)
    if kind == "white":
        return white
    spectrum = np.fft.rfft(white)
    freqs = np.arange(spectrum.size, dtype=np.float64)
    freqs[0] = 1.0
    pink = np.fft.irfft(spectrum / np.sqrt(freqs), n=size)
    return np.asarray(pink, dtype=np.float64)


def _as_turn(
    speech: NDArray[np.float32], index: int, rng: np.random.Generator, voice: str
) -> tuple[NDArray[np.float32], str]:
    """``speech`` padded as the turn detector hands it over, every other clip noisy."""
    noise = NOISES[index % len(NOISES)]
    end_pad = END_PADS[index // len(NOISES) % len(END_PADS)]  # every noise, both pads
    before = np.zeros(round(PRE_ROLL * STT_SAMPLE_RATE), np.float32)
    after = np.zeros(round(end_pad * STT_SAMPLE_RATE), np.float32)
    audio = np.concatenate([before, speech, after]).astype(np.float64)
    if noise != "clean":
        shape = _noise(noise, audio.size, rng)
        power = float(np.mean(speech.astype(np.float64) ** 2))
        shape *= np.sqrt(power / 10 ** (SNR_DB / 10) / np.mean(shape**2))
        audio = audio + shape
    return np.clip(audio, -1, 1).astype(np.float32), f"{voice} {noise} pad{end_pad:g}"


def build_clips(texts: Sequence[str]) -> list[Clip]:
    """Speak, pad and (for half of them) add noise to every utterance; deterministic."""
    rng = np.random.default_rng(SEED)
    voices = {
        speed: PiperTts(
            settings=DETERMINISTIC_TTS_SETTINGS.model_copy(
                update={"length_scale": speed, "alignments": False}
            )
        )
        for speed in SPEEDS
    }
    clips = []
    for index, text in enumerate(texts):
        speed = SPEEDS[index % len(SPEEDS)]
        tts = voices[speed]
        spoken = np.concatenate([s.samples for s in tts.synthesize(text)])
        speech = _trim(resample(spoken, tts.sample_rate, STT_SAMPLE_RATE))
        audio, condition = _as_turn(speech, index, rng, f"x{speed:g}")
        clips.append(Clip(text, audio, condition))
    return clips


def build_other_voices(texts: Sequence[str]) -> list[Clip]:
    """The same utterances in voices that are not the bundled one (``eot_set.Voices``):
    three espeak-ng voices and Piper at ``length_scale`` 0.8 and 1.3, in turn; the noise
    and end pads as :func:`build_clips`."""
    rng = np.random.default_rng(SEED + 1)
    voices = Voices()
    names = voices.names()
    clips = []
    for index, text in enumerate(texts):
        name = names[index % len(names)]
        short = name.replace("espeak ", "").replace(" wpm", "wpm").replace("piper length_scale ",
                                                                           "piper x")
        audio, condition = _as_turn(voices.say(name, text), index, rng, short)
        clips.append(Clip(text, audio, condition))
    return clips
