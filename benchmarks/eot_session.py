"""End of turn measured through the session (issue 32, item 1): every utterance is a call.

Run: ``uv run python benchmarks/eot_session.py [--half report|tune|all] [--kinds ...]
[--end-of-turn smart-turn|none] [--limit N] [--clock virtual|real]``

Each utterance of the set is played by the simulated caller to a whole
:class:`~voxflow_voice.session.VoiceSession` through ``run_call``: the example flow
(``Teller``: it acknowledges at once), the real reply path with speculative replies,
provisional commits and the engines and voice settings the ``VOXFLOW_*`` variables name
(``--end-of-turn`` overrides that one), on virtual time by default (deterministic: model
compute takes no audio time; ``--clock real`` runs at the machine's speed). Per
utterance it counts the turns the session committed (distinct turns: a continuation merged
into its turn is the same turn, a revoked one none) and when
the first sample of the reply was played.

The set (``eot_session_set``, generated at run time, nothing stored; >= 300 utterances):

* **paused**: one request with a silence of 0.3-1.0 s inside it ("I would like to book a
  table for" <pause> "two people tonight at eight."), two pauses per sentence and voice;
* **short**: complete short answers ("Yes.", "No, thanks.", "Okay, thank you.");
* **statement** / **question**: complete one-clause requests;

each in 5 espeak-ng voices (120-180 words per minute) and Piper at ``length_scale`` 0.8,
1.15 and 1.3, at a level drawn from -30 to -45 dBFS (speech RMS) and half of them with
white noise at 12-25 dB SNR, seeded by the utterance. Plus recordings of real people that
a Debian package ships (``pocketsphinx-testdata``: LibriVox read sentences and command
phrases), if it is installed: each as a statement, and with its longest inner silence
stretched to 0.3-1.0 s as a paused one.

The split is deterministic (a hash of kind, text and voice): ``tune`` and ``report``
halves; tune on ``--half tune``, quote ``--half report``.

Printed for the half: paused utterances split (more than one turn), short answers split
and answered later than 400 ms after the last word, the median last word -> first reply
sample for short answers, and voice to voice (last word -> first reply sample, the
``TurnMetrics`` marks) for statements and questions; medians and p90s.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
import wave
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import NDArray
from voxflow_adapters.testkit.flows import Teller
from voxflow_adapters.testkit.scenario import CallResult, run_call
from voxflow_adapters.testkit.script import CallScript
from voxflow_voice.audio import STT_SAMPLE_RATE, AudioChunk, resample
from voxflow_voice.engines import VoiceEngines
from voxflow_voice.engines.tts import PiperTts, TtsSettings
from voxflow_voice.events import TurnCommitted, TurnMetrics, TurnRevoked
from voxflow_voice.session import VoiceSettings
from voxflow_voice.settings import VoiceSection

from voxflow.clock import MonotonicClock
from voxflow.settings import Settings

sys.path.insert(0, str(Path(__file__).parent))
from _figures import figure

PAUSED = [
    ("Wait, stop.", "Tell me about the train times instead."),
    ("I would like to book a table for", "two people tonight at eight."),
    ("Can you tell me", "what the weather is like in Paris?"),
    ("My account number is", "four five six seven."),
    ("I need a flight to Boston", "and a hotel near the airport."),
    ("Hmm, let me think.", "Actually, make it Tuesday."),
    ("Could you book me a room", "for three nights starting Friday?"),
    ("I want to change my order to", "the large one with extra cheese."),
    ("What time does the", "last bus leave the station?"),
    ("Please send the invoice to", "my office address in Leeds."),
    ("So I was wondering if", "you could move my appointment."),
    ("The package should arrive", "before noon on Thursday."),
    ("Remind me to call", "my sister at six tomorrow."),
    ("I'd like two tickets for", "the nine o'clock show."),
]
SHORT = ["Yes.", "No.", "No, thanks.", "Sure.", "That's all.", "Okay, thank you.",
         "Yes, please.", "Nope.", "Thank you.", "That's right."]
STATEMENTS = ["I need a flight to Boston.", "Book a table for two at eight.",
              "Tell me about the train times.", "Cancel my reservation for Friday.",
              "I lost my credit card yesterday.", "Turn off the lights in the kitchen.",
              "My order never arrived.", "Play some jazz in the living room."]
QUESTIONS = ["What time does the museum open?",
             "What is the weather going to be like in Paris tomorrow?",
             "Can you help me with my booking?", "How much does the large pizza cost?",
             "Is the pharmacy open on Sunday?", "Where is the nearest train station?",
             "Do you have any rooms left for tonight?", "How long will the delivery take?"]
ESPEAK_VOICES = (("en-us+f3", 150), ("en-gb+m3", 130), ("en-us+m7", 175),
                 ("en-gb-x-rp+f2", 120), ("en-029+m1", 180))
PIPER_RATES = (0.8, 1.15, 1.3)
LEAD, TAIL = 0.5, 3.0
LEVELS_DB = (-45.0, -30.0)  # speech RMS, drawn per utterance
SNR_DB = (12.0, 25.0)
TRIM_LEVEL = 10 ** (-50 / 20)  # below the quietest speech level: the speech's ends
REAL_DATA = Path("/usr/share/pocketsphinx/test/data")
LATE_SHORT = 0.4  # a short answer must be answered within this (s) of its last word


@dataclass(frozen=True, slots=True)
class Utterance:
    kind: str  # paused, short, statement, question
    voice: str
    text: str
    parts: tuple[NDArray[np.float32], ...]  # speech, trimmed; paused: two parts
    pause: float
    level_db: float
    snr_db: float | None  # None: clean
    half: str

    @property
    def seconds(self) -> float:
        return sum(p.size for p in self.parts) / STT_SAMPLE_RATE + self.pause


def _half(kind: str, text: str, voice: str) -> str:
    digest = hashlib.sha256(f"{kind}|{text}|{voice}".encode()).digest()
    return "tune" if digest[0] % 2 == 0 else "report"


def _rng(*key: object) -> np.random.Generator:
    digest = hashlib.sha256("|".join(map(str, key)).encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little"))


def _trim(audio: NDArray[np.float32]) -> NDArray[np.float32]:
    peak = float(np.max(np.abs(audio))) if audio.size else 0.0
    loud = np.flatnonzero(np.abs(audio) >= max(TRIM_LEVEL, peak * 0.01))
    return audio[loud[0]: loud[-1] + 1] if loud.size else audio


class Voices:
    def __init__(self) -> None:
        self._piper = {s: PiperTts(settings=TtsSettings(length_scale=s, noise_scale=0.0,
                                                        noise_w_scale=0.0))
                       for s in PIPER_RATES}
        self._tmp = Path(tempfile.mkdtemp(prefix="voxflow-eot-session-"))

    def names(self) -> list[str]:
        return ([f"espeak {v} {r}" for v, r in ESPEAK_VOICES]
                + [f"piper {s}" for s in PIPER_RATES])

    def say(self, voice: str, text: str) -> NDArray[np.float32]:
        if voice.startswith("espeak"):
            _, name, rate = voice.split(" ")
            out = self._tmp / "say.wav"
            subprocess.run(["espeak-ng", "-v", name, "-s", rate, "-w", str(out), text],
                           check=True, capture_output=True)
            with wave.open(str(out), "rb") as w:
                hz = w.getframerate()
                pcm = np.frombuffer(w.readframes(w.getnframes()), np.int16)
            audio = resample(pcm.astype(np.float32) / 32768.0, hz, STT_SAMPLE_RATE)
        else:
            tts = self._piper[float(voice.split(" ")[1])]
            chunks = [np.asarray(c.samples, np.float32) for c in tts.synthesize(text)]
            audio = resample(np.concatenate(chunks) * 0.5, tts.sample_rate, STT_SAMPLE_RATE)
        return _trim(audio.astype(np.float32))


def _real_recordings() -> list[tuple[str, NDArray[np.float32]]]:
    """Recordings of real people in Debian's pocketsphinx-testdata, 16 kHz (if installed)."""
    found: list[tuple[str, NDArray[np.float32]]] = []
    if not REAL_DATA.is_dir():
        return found
    for path in sorted(REAL_DATA.rglob("*.wav")):
        with wave.open(str(path), "rb") as w:
            hz, pcm = w.getframerate(), np.frombuffer(w.readframes(w.getnframes()), np.int16)
        found.append((path.name, resample(pcm.astype(np.float32) / 32768.0, hz,
                                          STT_SAMPLE_RATE).astype(np.float32)))
    for path in sorted(REAL_DATA.glob("*.raw")):  # 16 kHz 16-bit mono
        pcm = np.fromfile(path, np.int16)
        found.append((path.name, pcm.astype(np.float32) / 32768.0))
    return [(name, _trim(audio)) for name, audio in found if 0.8 < audio.size / 16000 < 12]


def _split_at_gap(audio: NDArray[np.float32]) -> tuple[NDArray[np.float32],
                                                        NDArray[np.float32]] | None:
    """The audio cut at its quietest 100 ms in the middle 60 % (between two words)."""
    hop = STT_SAMPLE_RATE // 100
    frames = audio[: audio.size // hop * hop].reshape(-1, hop)
    energy = np.sqrt(np.mean(frames**2, axis=1))
    smooth = np.convolve(energy, np.ones(10) / 10, mode="same")
    lo, hi = int(len(smooth) * 0.2), int(len(smooth) * 0.8)
    if hi - lo < 10:
        return None
    cut = (lo + int(np.argmin(smooth[lo:hi]))) * hop
    return _trim(audio[:cut]), _trim(audio[cut:])


def build_set() -> list[Utterance]:
    voices = Voices()
    out: list[Utterance] = []

    def add(kind: str, voice: str, text: str, parts: tuple[NDArray[np.float32], ...],
            pause: float = 0.0, salt: int = 0) -> None:
        rng = _rng(kind, voice, text, salt)
        level = float(rng.uniform(*LEVELS_DB))
        snr = float(rng.uniform(*SNR_DB)) if rng.random() < 0.5 else None
        out.append(Utterance(kind, voice, text, parts, pause, level, snr,
                             _half(kind, text, voice)))

    for voice in voices.names():
        for first, second in PAUSED:
            parts = (voices.say(voice, first), voices.say(voice, second))
            for salt, (lo, hi) in enumerate(((0.3, 0.6), (0.6, 1.0))):
                pause = round(float(_rng("pause", voice, first, salt).uniform(lo, hi)), 2)
                add("paused", voice, f"{first} | {second}", parts, pause, salt)
        for text in SHORT:
            add("short", voice, text, (voices.say(voice, text),))
        for text in STATEMENTS:
            add("statement", voice, text, (voices.say(voice, text),))
        for text in QUESTIONS:
            add("question", voice, text, (voices.say(voice, text),))
    for name, audio in _real_recordings():
        add("statement", "real", name, (audio,))
        cut = _split_at_gap(audio)
        if cut is not None:
            for salt, (lo, hi) in enumerate(((0.3, 0.6), (0.6, 1.0))):
                pause = round(float(_rng("pause", "real", name, salt).uniform(lo, hi)), 2)
                add("paused", "real", f"{name} (cut)", cut, pause, salt)
    return out


def script_of(u: Utterance) -> tuple[CallScript, float]:
    """The call's script and the time (s) of the utterance's last sample."""
    gain = 10 ** (u.level_db / 20) / max(
        float(np.sqrt(np.mean(np.concatenate(u.parts) ** 2))), 1e-9)
    chunks = [AudioChunk.from_float(np.clip(p * gain, -1, 1).astype(np.float32),
                                    STT_SAMPLE_RATE) for p in u.parts]
    script = CallScript().user_says(LEAD, audio=chunks[0])
    end = LEAD + u.parts[0].size / STT_SAMPLE_RATE
    if len(chunks) == 2:
        start = end + u.pause
        script.user_says(start, audio=chunks[1])
        end = start + u.parts[1].size / STT_SAMPLE_RATE
    script.until(end + TAIL)
    if u.snr_db is not None:
        rms = 10 ** (u.level_db / 20) / 10 ** (u.snr_db / 20)
        script.with_noise(rms, seed=int(_rng("noise", u.kind, u.voice, u.text).integers(1e9)))
    return script, end


@dataclass(slots=True)
class Outcome:
    u: Utterance
    turns: int
    answered_after: float | None  # last word -> first reply sample played (s)
    texts: list[str]


async def measure(u: Utterance, engines: VoiceEngines, settings: VoiceSettings,
                  real: bool) -> Outcome:
    script, end = script_of(u)
    call: CallResult = await run_call(Teller(trigger=None, story="Okay."), script, engines,
                                      settings=settings,
                                      clock=MonotonicClock() if real else None)
    committed = [e for e in call.events if isinstance(e, TurnCommitted)]
    revoked = [e for e in call.events if isinstance(e, TurnRevoked)]
    metrics = [e for e in call.events if isinstance(e, TurnMetrics)]
    played = [m.first_audio for m in metrics if m.first_audio is not None]
    origin = _origin(call)
    answered = (min(played) - origin - end) if played else None
    # a continuation merged into its turn commits it again (the same turn_id, a higher
    # input_revision): one turn; a revoked one is none
    gone = {r.turn_id for r in revoked}
    kept = {c.turn_id: c.text for c in committed if c.turn_id not in gone}
    return Outcome(u, len(kept), answered, list(kept.values()))


def _origin(call: CallResult) -> float:
    """The clock reading of the call's start (the script's time 0)."""
    return float(call.client.tape.start)


def _ms(values: list[float]) -> str:
    if not values:
        return "-"
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
    return f"median {statistics.median(values) * 1000:.0f} ms, p90 {p90 * 1000:.0f} ms"


def report(outcomes: list[Outcome], label: str) -> None:
    by: dict[str, list[Outcome]] = {}
    for o in outcomes:
        by.setdefault(o.u.kind, []).append(o)
    print(f"\n== {label}: {len(outcomes)} utterances ==")
    paused = by.get("paused", [])
    if paused:
        split = [o for o in paused if o.turns > 1]
        print(f"paused: {len(split)}/{len(paused)} split "
              f"({100 * len(split) / len(paused):.1f} %); never committed: "
              f"{sum(o.turns == 0 for o in paused)}")
        for lo, hi in ((0.3, 0.6), (0.6, 1.01)):
            group = [o for o in paused if lo <= o.u.pause < hi]
            print(f"  pause {lo:.1f}-{min(hi, 1.0):.1f} s: "
                  f"{sum(o.turns > 1 for o in group)}/{len(group)} split")
        real = [o for o in paused if o.u.voice == "real"]
        if real:
            print(f"  real people: {sum(o.turns > 1 for o in real)}/{len(real)} split")
        figure("paused split", 100 * len(split) / len(paused), "%", target="<= 1")
        for o in split[:12]:
            print(f"    split: {o.u.voice} pause {o.u.pause}: {o.texts}")
    short = by.get("short", [])
    if short:
        split = [o for o in short if o.turns != 1]
        times = [o.answered_after for o in short if o.answered_after is not None]
        late = [o for o in short if o.answered_after is None or o.answered_after > LATE_SHORT]
        print(f"short answers: {len(split)}/{len(short)} not one turn; answered > "
              f"{LATE_SHORT * 1000:.0f} ms after the last word: {len(late)}/{len(short)}; "
              f"last word -> reply: {_ms(times)}")
        if times:
            figure("short answer to reply", statistics.median(times) * 1000, "ms",
                   target="<= 400")
        for o in split[:8]:
            print(f"    not one turn: {o.u.voice}: {o.texts}")
    for kind in ("statement", "question"):
        group = by.get(kind, [])
        if group:
            times = [o.answered_after for o in group if o.answered_after is not None]
            print(f"{kind}s: voice to voice (last word -> first reply sample) {_ms(times)}"
                  f"; split {sum(o.turns > 1 for o in group)}/{len(group)}")
            real = [o.answered_after for o in group
                    if o.u.voice == "real" and o.answered_after is not None]
            if real:
                print(f"  real people: {_ms(real)} ({len(real)})")
            if times:
                figure(f"v2v {kind}s", statistics.median(times) * 1000, "ms",
                       target="<= 450" if kind == "question" else "<= 600")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--half", choices=("report", "tune", "all"), default="report")
    parser.add_argument("--kinds", nargs="*", default=["paused", "short", "statement",
                                                       "question"])
    parser.add_argument("--end-of-turn", default=None,
                        help="override VOXFLOW_END_OF_TURN (smart-turn, none)")
    parser.add_argument("--limit", type=int, default=0, help="at most N utterances (0: all)")
    parser.add_argument("--clock", choices=("virtual", "real"), default="virtual")
    parser.add_argument("--sizes", action="store_true", help="print the set's sizes and exit")
    parser.add_argument("--turn", nargs="*", default=[], metavar="FIELD=VALUE",
                        help="TurnDetection fields to try (tuning, on the tune half)")
    args = parser.parse_args()
    settings = Settings.from_env()
    if args.end_of_turn is not None:
        settings = settings.with_options(end_of_turn=args.end_of_turn)
    started = time.monotonic()
    utterances = build_set()
    if args.sizes:
        for half in ("tune", "report"):
            chosen = [u for u in utterances if u.half == half]
            kinds = {k: sum(u.kind == k for u in chosen)
                     for k in ("paused", "short", "statement", "question")}
            print(half, len(chosen), kinds, "real:", sum(u.voice == "real" for u in chosen))
        print("all", len(utterances))
        return
    chosen = [u for u in utterances if (args.half == "all" or u.half == args.half)
              and u.kind in args.kinds]
    if args.limit:
        chosen = chosen[:: max(1, len(chosen) // args.limit)][: args.limit]
    engines = VoiceEngines.from_settings(settings, deterministic=True)
    voice = VoiceSettings.from_settings(settings)
    if args.turn:
        tried = dict(item.split("=", 1) for item in args.turn)
        voice = voice.model_copy(update={"turn_detection": type(voice.turn_detection)
                                         .model_validate({**voice.turn_detection.model_dump(),
                                                          **tried})})
    chose = settings.section(VoiceSection)
    print(f"end of turn: {chose.end_of_turn} {' '.join(args.turn)}; stt {chose.stt}; "
          f"{args.clock} time; "
          f"{len(chosen)} utterances of the {args.half} half (set: {len(utterances)}); "
          f"load {os.getloadavg()[0]:.1f}", flush=True)
    outcomes = []
    for number, u in enumerate(chosen, 1):
        outcomes.append(await measure(u, engines, voice, args.clock == "real"))
        if number % 25 == 0:
            print(f"  {number}/{len(chosen)} ({time.monotonic() - started:.0f} s)", flush=True)
    report(outcomes, f"{args.half} half, end of turn {chose.end_of_turn}")
    print(f"\n{time.monotonic() - started:.0f} s wall; load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    asyncio.run(main())
