"""The end-of-turn evaluation set, generated at run time (nothing is stored): voices not
the bundled one.

**espeak-ng** (Debian's, three voices at 130-175 words per minute) and **Piper** at speaking
rates other than the bundled voice's (``length_scale`` 0.8 and 1.3), each clean and with
white noise at 20 dB SNR (seeded). Two kinds of utterance:

* **paused**: two clauses of one request with 0.3, 0.5 or 0.8 s of silence between them
  ("Wait, stop." <pause> "Tell me about the train times instead.");
* **short**: complete short answers ("Yes.", "No, thanks.", "Sure.");
* **complete**: complete one-clause requests, statements and questions ("I need a flight
  to Boston.", "What time does the museum open?").

Each sample is 0.5 s of silence, the utterance, 3 s of silence, at 16 kHz.
"""

from __future__ import annotations

import subprocess
import tempfile
import wave
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import NDArray
from voxflow_voice.audio import STT_SAMPLE_RATE, resample
from voxflow_voice.engines.tts import PiperTts, TtsSettings

PAUSED = [
    ("Wait, stop.", "Tell me about the train times instead."),
    ("I would like to book a table for", "two people tonight at eight."),
    ("Can you tell me", "what the weather is like in Paris?"),
    ("My account number is", "four five six seven."),
    ("I need a flight to Boston", "and a hotel near the airport."),
    ("Hmm, let me think.", "Actually, make it Tuesday."),
]
SHORT = ["Yes.", "No.", "No, thanks.", "Sure.", "That's all.", "Okay, thank you."]
# Complete one-clause requests, statements and questions: what holding a complete turn
# (``TurnDetection.complete_silence``) costs in dead air.
COMPLETE = ["I need a flight to Boston.", "Book a table for two at eight.",
            "Tell me about the train times.", "What time does the museum open?",
            "What is the weather going to be like in Paris tomorrow?",
            "Cancel my reservation for Friday."]
PAUSES = (0.3, 0.5, 0.8)
ESPEAK_VOICES = (("en-us+f3", 150), ("en-gb+m3", 130), ("en-us+m7", 175))
PIPER_RATES = (0.8, 1.3)  # length_scale: faster and slower than the bundled voice's 1.0
SNR_DB = 20.0
LEAD, TAIL = 0.5, 3.0  # seconds of silence before and after each utterance
SPEECH_LEVEL = 10 ** (-40 / 20)
PROMPT_ANSWER = 0.6  # a short answer must be committed within this (s) of its last word


@dataclass(frozen=True, slots=True)
class Sample:
    """One utterance of the evaluation set (16 kHz, with silence around it)."""

    kind: str  # "paused", "short" or "complete"
    voice: str
    noisy: bool
    pause: float  # internal silence (s); 0 for short answers
    text: str
    audio: NDArray[np.float32]
    last_speech: int  # sample after the last one above -40 dBFS


class Voices:
    """Speech from espeak-ng and from Piper at other rates, 16 kHz float32."""

    def __init__(self) -> None:
        self._piper = {
            scale: PiperTts(settings=TtsSettings(length_scale=scale, noise_scale=0.0,
                                                 noise_w_scale=0.0))
            for scale in PIPER_RATES
        }
        self._tmp = Path(tempfile.mkdtemp(prefix="voxflow-eot-"))

    def names(self) -> list[str]:
        return [f"espeak {v} {r} wpm" for v, r in ESPEAK_VOICES] + [
            f"piper length_scale {s}" for s in PIPER_RATES
        ]

    def say(self, voice: str, text: str) -> NDArray[np.float32]:
        if voice.startswith("espeak"):
            _, name, rate, _ = voice.split(" ")
            out = self._tmp / "say.wav"
            subprocess.run(["espeak-ng", "-v", name, "-s", rate, "-w", str(out), text],
                           check=True, capture_output=True)
            with wave.open(str(out), "rb") as w:
                rate_hz = w.getframerate()
                pcm = np.frombuffer(w.readframes(w.getnframes()), np.int16)
            audio = resample(pcm.astype(np.float32) / 32768.0, rate_hz, STT_SAMPLE_RATE)
        else:
            tts = self._piper[float(voice.rsplit(" ", 1)[1])]
            parts = [np.asarray(c.samples, np.float32) for c in tts.synthesize(text)]
            audio = resample(np.concatenate(parts) * 0.5, tts.sample_rate, STT_SAMPLE_RATE)
        return trim(audio.astype(np.float32))


def trim(audio: NDArray[np.float32]) -> NDArray[np.float32]:
    loud = np.flatnonzero(np.abs(audio) >= SPEECH_LEVEL)
    return audio[loud[0] : loud[-1] + 1] if loud.size else audio


def _silence(seconds: float) -> NDArray[np.float32]:
    return np.zeros(round(seconds * STT_SAMPLE_RATE), np.float32)


def _with_noise(audio: NDArray[np.float32], seed: int) -> NDArray[np.float32]:
    loud = audio[np.abs(audio) >= SPEECH_LEVEL]
    level = float(np.sqrt(np.mean(loud**2))) / 10 ** (SNR_DB / 20)
    noise = np.random.default_rng(seed).standard_normal(audio.size).astype(np.float32)
    return (audio + noise * level).astype(np.float32)


def build_set(kinds: set[str], *, quick: bool = False) -> list[Sample]:
    voices = Voices()
    names = voices.names()[:2] if quick else voices.names()
    samples: list[Sample] = []
    seed = 0
    for voice in names:
        for noisy in (False, True):
            if "paused" in kinds:
                for first, second in PAUSED[:3] if quick else PAUSED:
                    a, b = voices.say(voice, first), voices.say(voice, second)
                    for pause in PAUSES:
                        speech = np.concatenate([a, _silence(pause), b])
                        samples.append(_sample("paused", voice, noisy, pause,
                                               f"{first} | {second}", speech, seed))
                        seed += 1
            if "short" in kinds:
                for text in SHORT[:3] if quick else SHORT:
                    samples.append(_sample("short", voice, noisy, 0.0, text,
                                           voices.say(voice, text), seed))
                    seed += 1
    if "complete" in kinds:  # (seeded apart: the other samples stay as they were)
        for voice in names:
            for noisy in (False, True):
                for text in COMPLETE[:3] if quick else COMPLETE:
                    samples.append(_sample("complete", voice, noisy, 0.0, text,
                                           voices.say(voice, text), 10_000 + seed))
                    seed += 1
    return samples


def _sample(kind: str, voice: str, noisy: bool, pause: float, text: str,
            speech: NDArray[np.float32], seed: int) -> Sample:
    audio = np.concatenate([_silence(LEAD), speech, _silence(TAIL)])
    last = round(LEAD * STT_SAMPLE_RATE) + speech.size
    if noisy:
        audio = _with_noise(audio, seed)
    return Sample(kind, voice, noisy, pause, text, audio, last)
