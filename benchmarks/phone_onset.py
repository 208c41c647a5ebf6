"""Barge-in onsets over a telephone line, in audio time: how soon the turn detector pauses
a reply for an interruption, and how often noise pauses it, wideband and over μ-law.

Run: ``uv run python benchmarks/phone_onset.py [--half tune|report|both]

Every sound goes through the detector the sessions use (Silero VAD, the hiss cue,
:class:`~voxflow_voice.listen.turn_detector.TurnDetector`), fed in 20 ms chunks after
0.6 s of room (digital silence, or line noise at -50 dBFS), three ways:

* **wide**: the 16 kHz sound (the browser path);
* **phone, wide cue**: the sound over the phone line the phone path hears (resampled to
  8 kHz, μ-law encoded, then :class:`~voxflow_adapters.phone.codec.MulawDecoder`'s 16 kHz)
  with the wideband hiss cue (``hiss_band="wide"``, before);
* **phone, telephone cue**: the same line, the phone path's settings
  (:func:`~voxflow_adapters.hosting.calls.phone_voice_settings`: ``hiss_band="telephone"``,
  ``hiss_rise`` 6 dB).

Printed per way:

* **onset → pause** for requests, those opening on 'st' ("Stop") and on another 's'
  ("Sorry", "So") apart from the others (the first frame that rises or is speech, from the
  sound's first sample above -40 dBFS, counted to the end of that frame: when a session
  pauses the reply), median and p90;
* **noise pauses**: noises (white and pink bursts, keystrokes, clicks, a cough, breath)
  that rose at all (each would pause a reply for ``rise_hold``, 0.1 s, then resume);
* **backchannel onsets** (they pause too, then their words resume the reply).

Voices: espeak-ng voices and rates (never the bundled Piper voice, which the phone
benchmark speaks), split in two halves by voice: ``tune`` (to choose the settings) and
``report`` (the figures quoted). Nothing is timed on the wall clock: the figures are the
same on any machine.

Measured Dec 4 (``--half both``; the tune half chose ``hiss_rise`` 6 for the phone: at
12, as on a microphone, the line noise room kept every 'st' at 136 ms). The **report
half**, 4 voices, each sound after silence and after line noise; onset → pause median
(p90), ms:

========================  ==========  ===============  ====================
sounds                    wide        phone, wide cue  phone, telephone cue
========================  ==========  ===============  ====================
'st' ("Stop", 16)         40 (40)     136 (136)        **40 (136)**
other 's' ("So", 16)      40 (40)     104 (104)        104 (104)
other requests (48)       40 (72)     48 (72)          48 (72)
backchannels (64)         39 (40)     40 (40)          40 (40)
noise pauses (of 20)      4           1                2
========================  ==========  ===============  ====================

The extra noise pause is the 12 ms click after digital silence (on a line with noise
under it, it does not count); the other is Silero rising on a 120 Hz hum over line noise,
with either cue. A noise pause holds the reply ``rise_hold`` (0.1 s), then resumes; it
never cuts it (``turn_taking.py --phone`` counts the cuts). espeak-ng's 's' before a vowel
("So", "Sorry") keeps little of its hiss under 4 kHz (it tilts low on the line, like
breath), so the telephone cue leaves it to the VAD.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np
from numpy.typing import NDArray
from voxflow_adapters.hosting.calls import PHONE_HISS_RISE, phone_voice_settings
from voxflow_voice.audio import STT_SAMPLE_RATE
from voxflow_voice.engines.vad import SileroVad
from voxflow_voice.listen.turn_detection import TurnDetection
from voxflow_voice.listen.turn_detector import TurnDetector

sys.path.insert(0, str(Path(__file__).parent))
from _espeak import espeak
from _phone_line import line

from voxflow.settings import Settings

RATE = STT_SAMPLE_RATE
CHUNK = 320  # 20 ms: one media message
ROOM = 0.6
TUNE_VOICES = (("en+f2", 150), ("en-us+m3", 175), ("en-gb+f4", 130), ("en+m7", 190))
REPORT_VOICES = (("en-us+f3", 150), ("en+m1", 170), ("en-gb-x-rp+f5", 140), ("en+m4", 185))
REQUESTS = ("Stop, please.", "Sorry, wait.", "Stop.", "So what about tomorrow?",
            "Wait, stop.", "Hold on a second.", "Cancel that.", "Please stop.",
            "No, that's wrong.", "Excuse me.")
BACKCHANNELS = ("Uh-huh.", "Mm-hmm.", "Yeah.", "Okay.", "Sure.", "Right.", "I see.",
                "Got it.")


def noises() -> dict[str, NDArray[np.float32]]:
    out: dict[str, NDArray[np.float32]] = {}
    for seed, (seconds, rms) in enumerate([(0.3, 0.1), (0.5, 0.3), (0.2, 0.5), (0.8, 0.05)]):
        rng = np.random.default_rng(seed)
        out[f"white {seconds}s rms {rms}"] = np.clip(
            rng.standard_normal(int(seconds * RATE)) * rms, -1, 1).astype(np.float32)
    for seed, level in enumerate((0.02, 0.1, 0.3)):
        spectrum = np.fft.rfft(np.random.default_rng(10 + seed).standard_normal(RATE // 2))
        spectrum /= np.sqrt(np.arange(1, spectrum.size + 1))
        pink = np.fft.irfft(spectrum, RATE // 2)
        out[f"pink 0.5s rms {level} (breath, fan)"] = (level * pink / pink.std()
                                                        ).astype(np.float32)
    keys = [np.concatenate([(0.5 * np.random.default_rng(i).standard_normal(96)
                             * np.exp(-np.arange(96) / 24)), np.zeros(int(0.15 * RATE))])
            for i in range(8)]
    out["keystrokes"] = np.concatenate(keys).astype(np.float32)
    click = np.diff(np.random.default_rng(3).standard_normal(int(0.012 * RATE) + 2), 2)
    out["12 ms click"] = (0.3 * click / click.std()).astype(np.float32)
    t = np.arange(int(0.4 * RATE)) / RATE
    out["hum 120 Hz"] = (0.2 * np.sin(2 * np.pi * 120 * t)).astype(np.float32)
    return out


def room(kind: str) -> NDArray[np.float32]:
    if kind == "silence":
        return np.zeros(int(ROOM * RATE), np.float32)
    rng = np.random.default_rng(99)
    return (0.00316 * rng.standard_normal(int(ROOM * RATE))).astype(np.float32)


def first_rise(audio: NDArray[np.float32], start: int, settings: TurnDetection
               ) -> int | None:
    """Samples from ``start`` to the end of the first frame that rose or was speech (at or
    after ``start - 512``), or None."""
    detector = TurnDetector(SileroVad(), settings)
    for i in range(0, audio.size, CHUNK):
        detector.push(audio[i : i + CHUNK])
        position = detector.position
        if position <= start - 512:
            continue
        if detector.rising_onset is not None or detector.active_onset is not None:
            return position - start
    return None


WAYS = ("wide", "phone, wide cue", "phone, telephone cue")


def ways(rise: float) -> list[tuple[str, bool, TurnDetection]]:
    """The wideband detector, the phone path before (the wideband cue over the line) and
    after (the phone settings' cue, at ``rise`` dB)."""
    phone = phone_voice_settings(Settings()).turn_detection
    return [("wide", False, TurnDetection()), ("phone, wide cue", True, TurnDetection()),
            ("phone, telephone cue", True, phone.model_copy(update={"hiss_rise": rise}))]


def evaluate(voices: tuple[tuple[str, int], ...], rise: float) -> None:
    results: dict[str, dict[str, list[float | None]]] = {w: {} for w in WAYS}
    with tempfile.TemporaryDirectory() as folder:
        sounds: list[tuple[str, str, NDArray[np.float32]]] = []
        for voice, rate in voices:
            for text in REQUESTS:
                group = ("request 'st'" if text.startswith("St") else "request 's'"
                         if text.startswith("S") else "request")
                sounds.append((group, f"{voice}@{rate} {text}",
                               0.5 * espeak(Path(folder), text, voice, rate)))
            for text in BACKCHANNELS:
                sounds.append(("backchannel", f"{voice}@{rate} {text}",
                               0.5 * espeak(Path(folder), text, voice, rate)))
    sounds += [("noise", name, sound) for name, sound in noises().items()]
    for group, name, sound in sounds:
        for kind in ("silence", "line noise"):
            before = room(kind)
            audio = np.concatenate([before, sound, np.zeros(int(0.3 * RATE), np.float32)])
            loud = np.flatnonzero(np.abs(sound) > 0.01)
            start = before.size + (int(loud[0]) if loud.size else 0)
            for way, phone, cue in ways(rise):
                heard = line(audio) if phone else audio
                rose = first_rise(heard, start, cue)
                ms = None if rose is None else rose * 1000.0 / RATE
                results[way].setdefault(group, []).append(ms)
                results[way].setdefault(f"{group}, {kind}", []).append(ms)
                if group == "noise" and ms is not None:
                    print(f"    noise rose: {way:22s} {name} ({kind}) at {ms:.0f} ms")
    for way in WAYS:
        print(f"  {way}:")
        for group in ("request 'st'", "request 'st', silence", "request 'st', line noise",
                      "request 's'", "request", "backchannel"):
            values = [v for v in results[way][group] if v is not None]
            missing = len(results[way][group]) - len(values)
            xs = sorted(values)
            p90 = xs[min(len(xs) - 1, round(0.9 * (len(xs) - 1)))] if xs else float("nan")
            print(f"    {group:26s} onset -> pause: median {statistics.median(xs):4.0f} ms, "
                  f"p90 {p90:4.0f} (n={len(xs)}, never {missing})")
        noise = results[way]["noise"]
        print(f"    noise pauses: {sum(v is not None for v in noise)} of {len(noise)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--half", choices=["tune", "report", "both"], default="report")
    parser.add_argument("--rise", type=float, nargs="*", default=[])
    args = parser.parse_args()
    halves = ["tune", "report"] if args.half == "both" else [args.half]
    for half in halves:
        voices = TUNE_VOICES if half == "tune" else REPORT_VOICES
        for rise in args.rise or [PHONE_HISS_RISE]:
            print(f"== {half} half ({', '.join(f'{v}@{r}' for v, r in voices)}), "
                  f"the telephone cue's hiss_rise {rise}")
            evaluate(voices, rise)


if __name__ == "__main__":
    main()
