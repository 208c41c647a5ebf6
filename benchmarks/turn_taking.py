"""Turn taking under overlap: false interruptions, resumes, history vs played, stop times.

Run: ``uv run python benchmarks/turn_taking.py [--clock virtual|real|both] [--runs N] [--gap S]
[--phone wide|telephone] [--voice VOICE@RATE]``

Each call: the user asks for a story; 1.5 s after its audio starts (``--gap``; 0.6 puts
the sound within ``continue_within`` of the story's commit, where the user may go on with
the turn), the user makes one sound over it, from three sets:

* **backchannels** ("Uh-huh.", "Mm-hmm.", "Yeah.", "Okay.", ...): must not cut the reply;
* **noises**: white-noise bursts (a bump, a door), short voiced bursts (a cough, "Hah!"
  cut to 0.15-0.25 s), a throat-clearing "Ahem!": must not cut it either;
* **requests** ("Wait, stop.", "What about tomorrow?", ...): must cut it.

Printed per set, with voxflow's defaults (``ignore_backchannel``, pause on the first
speech frame) on the deterministic :class:`~voxflow.clock.VirtualClock` and in real time
(:class:`~voxflow.clock.MonotonicClock`, Whisper tiny.en, the machine's real speed):

* **wrongly fenced** (backchannels + noises that cut the reply; target < 5 %) and
  **missed requests**;
* **resumes lost**: resumed replies not heard whole, or whose receipts are not contiguous
  sample by sample (a gap or a repeat; target 0);
* **words of difference** between the history's assistant message and the words the
  client's receipts say were played (word timings from a fresh synthesis; target 0);
* **onset → audible pause** (the sound's first sample above -40 dBFS on the tape → the
  end of the last reply sample played; target <= 120 ms; only calls whose reply was
  audible at the onset), **onset → fence** for requests, **pause length** of resumed
  replies;
* **voice to voice** of the story request (session marks: VAD speech end → first reply
  sample played), at the defaults and at the anchor's 0.2 s silence timer.

``--phone``: every sound reaches the session as a phone call hears it (an 8 kHz μ-law
line, then the call's decoder: ``_phone_line.line``), at the phone path's settings
(:func:`~voxflow_adapters.hosting.calls.phone_voice_settings`: no echo gate, the carrier
cancels the echo) with the hiss cue on the ``telephone`` band (``voxflow phone``'s) or
the ``wide`` one at its default rise (the phone path before); the 0.2 s run too, its
own settings so changed. ``--voice en-us+f3@150``: the backchannels and
requests said by that espeak-ng voice (``_espeak.py``) instead of the bundled Piper one.

The defaults are the product's (``VoiceSettings.from_settings``: Smart Turn and the
pause's words, provisional commits, continuations); ``--end-of-turn none`` runs the same
with the 0.6 s silence timer. Medians and p90s of every call;
nothing is asserted (shared machine).
"""

from __future__ import annotations

import argparse
import asyncio
import difflib
import statistics
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from voxflow_adapters.hosting.calls import PHONE_HISS_RISE, phone_voice_settings
from voxflow_adapters.testkit.flows import Teller, played_words, words
from voxflow_adapters.testkit.scenario import CallResult, run_call
from voxflow_adapters.testkit.script import CallScript
from voxflow_voice.audio import STT_SAMPLE_RATE, AudioChunk, resample
from voxflow_voice.engines import VoiceEngines
from voxflow_voice.listen.turn_detector import TurnDetection
from voxflow_voice.session import VoiceSettings

from voxflow.clock import Clock, MonotonicClock, VirtualClock
from voxflow.ids import DeliveryId
from voxflow.settings import Settings
from voxflow.turns import TurnRunner

sys.path.insert(0, str(Path(__file__).parent))
from _espeak import espeak
from _figures import figure
from _phone_line import line

# Its own one-sentence wording, not voxflow_adapters.testkit.flows.STORY: the figures were
# measured with it.
STORY = (
    "Once upon a time, in a small harbour town, there lived a lighthouse keeper named Ada, "
    "who climbed one hundred and twelve steps every night to light the lamp."
)
BACKCHANNELS = ("Uh-huh.", "Mm-hmm.", "Yeah.", "Okay.", "Right.", "I see.", "Yeah, okay.",
                "Sure.", "Got it.", "Mhm.")
REQUESTS = ("Wait, stop.", "What about tomorrow?", "Stop, please.", "Hold on a second.",
            "No, that's wrong.", "Can you repeat that?")
GAP = 1.5


def spoken(engines: VoiceEngines, text: str) -> np.ndarray:
    parts = [np.asarray(s.samples, np.float32) for s in engines.tts.synthesize(text)]
    return resample(np.concatenate(parts) * 0.5, engines.tts.sample_rate, STT_SAMPLE_RATE)


def noises(engines: VoiceEngines) -> dict[str, AudioChunk]:
    rate = STT_SAMPLE_RATE
    out: dict[str, AudioChunk] = {}
    for seed, (seconds, rms) in enumerate([(0.3, 0.1), (0.5, 0.3), (0.2, 0.5), (0.8, 0.05)]):
        rng = np.random.default_rng(seed)
        x = np.clip(rng.standard_normal(int(seconds * rate)) * rms, -1, 1)
        out[f"noise {seconds}s rms {rms}"] = AudioChunk.from_float(x.astype(np.float32), rate)
    hah = spoken(engines, "Hah!")
    hah = hah[int(np.argmax(np.abs(hah) > 0.01)):]
    for seconds in (0.15, 0.2, 0.25):
        burst = hah[: int(seconds * rate)] * np.exp(-np.arange(int(seconds * rate)) / (0.12 * rate))
        out[f"cough {seconds}s"] = AudioChunk.from_float(burst.astype(np.float32), rate)
    ahem = spoken(engines, "Ahem!")
    out["ahem"] = AudioChunk.from_float(ahem.astype(np.float32), rate)
    return out


@dataclass(slots=True)
class Outcome:
    label: str
    group: str
    fenced: bool
    resumed: bool
    whole: bool
    contiguous: bool
    word_diff: int
    pause_ms: float | None
    fence_ms: float | None
    paused_for_ms: float | None
    v2v_ms: float | None
    heard_as: str = ""  # the overlap's transcript, as the session got it


@dataclass(slots=True)
class Report:
    outcomes: list[Outcome] = field(default_factory=list)


def contiguous(call: CallResult, delivery: DeliveryId) -> bool:
    position: dict[int | None, int] = {}
    for r in call.tape.receipts:
        if r.delivery_id != delivery:
            continue
        if r.start_sample != position.get(r.segment_id, 0):
            return False
        position[r.segment_id] = r.start_sample + r.num_samples
    return True


def sound_onset(call: CallResult) -> float | None:
    """Call time of the overlapping sound's first sample above -40 dBFS (from the tape)."""
    log = call.client.step_log()
    if not log:
        return None
    fired = log[0][0]
    user = call.tape.track("user")
    begin = int((fired + 0.02) * STT_SAMPLE_RATE)
    loud = np.nonzero(np.abs(user[begin:]) > 0.01)[0]
    if loud.size == 0:
        return None
    return call.tape.start + (begin + int(loud[0])) / STT_SAMPLE_RATE


async def one_call(
    engines: VoiceEngines, label: str, group: str, *, text: str | None = None,
    audio: AudioChunk | None = None, clock: Clock, settings: VoiceSettings | None = None,
    gap: float = GAP,
) -> Outcome:
    turns = TurnRunner(Teller(story=STORY))
    script = CallScript().user_says(0.3, "Tell me a story.")
    script.then_says(text, audio=audio, after="reply_start", gap=gap)
    call = await run_call(turns, script, engines, clock=clock, settings=settings, tail=1.5)
    story = call.replies()[0]
    fenced = call.settled(story) == "interrupted"
    resumed = bool(call.of_kind("barge_in_resumed"))
    whole = call.settled(story) == "completed"
    onset = sound_onset(call)
    receipts = [r for r in call.tape.receipts if r.delivery_id == story]
    pauses = [p for p in call.tape.pauses if p[1] == story]
    pause_ms = fence_ms = paused_for = None
    stop_at = pauses[0][0] if pauses else None
    flushes = [f for f in call.tape.flushes if f[1] == story]
    if flushes and (stop_at is None or flushes[0][0] < stop_at):
        stop_at = flushes[0][0]
    if onset is not None and stop_at is not None:
        before = [r for r in receipts if r.at <= stop_at]
        if before:
            end = before[-1].at + before[-1].num_samples / before[-1].sample_rate
            # Timed only if the reply was audible at the onset (in real time, a slow
            # synthesis may leave a gap in the reply: then there is no stop to time).
            pause_ms = (end - onset) * 1000 if end >= onset else None
        if flushes:
            fence_ms = (flushes[0][0] - onset) * 1000
    if len(pauses) >= 2 and pauses[-1][2] == "resume":
        paused_for = (pauses[-1][0] - pauses[0][0]) * 1000
    assistant = next(m for m in turns.flow.state.messages if m.role == "assistant")
    history = words(str(assistant.content).replace("[interrupted by the user]", ""))
    played = played_words(call, engines, story)
    matcher = difflib.SequenceMatcher(a=history, b=played)
    diff = sum(max(i2 - i1, j2 - j1) for op, i1, i2, j1, j2 in matcher.get_opcodes()
               if op != "equal")
    v2v = call.metrics()[0].voice_to_voice_ms if call.metrics() else None
    texts = [e.text for e in call.of_kind("barge_in_resumed")] + call.transcripts()[1:]
    return Outcome(label, group, fenced, resumed, whole, contiguous(call, story), diff,
                   pause_ms, fence_ms, paused_for, v2v, " | ".join(texts))


def dist(values: list[float | None]) -> str:
    xs = sorted(v for v in values if v is not None)
    if not xs:
        return "n/a"
    p90 = xs[min(len(xs) - 1, round(0.9 * (len(xs) - 1)))]
    return f"median {statistics.median(xs):7.0f}  p90 {p90:7.0f}  (n={len(xs)})"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def summarize(name: str, outs: list[Outcome]) -> None:
    benign = [o for o in outs if o.group != "request"]
    requests = [o for o in outs if o.group == "request"]
    wrong = [o for o in benign if o.fenced]
    lost = [o for o in outs if o.resumed and not o.fenced and not (o.whole and o.contiguous)]
    missed = [o for o in requests if not o.fenced]
    print(f"\n== {name}: {len(outs)} calls")
    for o in outs:
        verdict = "FENCED" if o.fenced else ("resumed" if o.resumed else "untouched")
        print(f"  {o.group:11s} {o.label:22s} {verdict:9s} whole={o.whole!s:5s} "
              f"contiguous={o.contiguous!s:5s} word_diff={o.word_diff} "
              f"pause_ms={_ms(o.pause_ms)} paused_for_ms={_ms(o.paused_for_ms)} "
              f"heard_as={o.heard_as!r}")
    share = 100.0 * len(wrong) / max(1, len(benign))
    print(f"  wrongly fenced: {len(wrong)}/{len(benign)} = {share:.1f} % (target < 5 %): "
          f"{[o.label for o in wrong]}")
    print(f"  missed requests: {len(missed)}/{len(requests)}: {[o.label for o in missed]}")
    print(f"  resumes lost (not whole or not contiguous): {len(lost)} (target 0)")
    print(f"  words of difference history vs played: total {sum(o.word_diff for o in outs)}, "
          f"max {max((o.word_diff for o in outs), default=0)} (target 0)")
    print(f"  onset -> audible pause/stop (ms): {dist([o.pause_ms for o in outs])}")
    print(f"  onset -> fence, requests (ms):    {dist([o.fence_ms for o in requests])}")
    print(f"  pause length when resumed (ms):   "
          f"{dist([o.paused_for_ms for o in outs if o.resumed and not o.fenced])}")
    print(f"  voice to voice (ms):              {dist([o.v2v_ms for o in outs])}")
    tag = name.split()[0]
    figure(f"{tag} wrongly fenced", share, "%", target="< 5")
    figure(f"{tag} resumes lost", float(len(lost)), "calls", target="0")
    pauses = [o.pause_ms for o in outs if o.pause_ms is not None]
    if pauses:
        figure(f"{tag} onset to audible pause", statistics.median(pauses), "ms", target="<= 120")


def make_clock(kind: str) -> Clock:
    return VirtualClock(autojump=True) if kind == "virtual" else MonotonicClock()


def phoned(settings: VoiceSettings, band: str) -> VoiceSettings:
    """``settings`` as the phone path runs them (no echo gate), the hiss cue on ``band``:
    ``telephone`` (``phone_voice_settings``'), or ``wide`` at its default rise (before)."""
    cue = ({"hiss_band": "telephone", "hiss_rise": PHONE_HISS_RISE} if band == "telephone"
           else {"hiss_band": "wide", "hiss_rise": TurnDetection().hiss_rise})
    return settings.model_copy(update={
        "echo_gate": False, "turn_detection": settings.turn_detection.model_copy(update=cue)})


def said(engines: VoiceEngines, text: str, voice: str | None, folder: Path) -> AudioChunk:
    """``text`` in the bundled voice, or in espeak-ng's ``voice@rate``."""
    if voice is None:
        return AudioChunk.from_float(spoken(engines, text), STT_SAMPLE_RATE)
    name, _, rate = voice.partition("@")
    audio = 0.5 * espeak(folder, text, name, int(rate or 150))
    return AudioChunk.from_float(audio.astype(np.float32), STT_SAMPLE_RATE)


async def run(clock_kind: str, runs: int, quick: bool, end_of_turn: str,
              gap: float = GAP, phone: str | None = None, voice: str | None = None) -> None:
    smart = end_of_turn == "smart-turn"
    # The settings every entry point takes (Settings -> VoiceSettings.from_settings).
    settings = Settings().with_options(end_of_turn=end_of_turn)
    engines = VoiceEngines.from_settings(settings, deterministic=True)
    defaults = VoiceSettings.from_settings(settings)
    tag = ", Smart Turn" if smart else ", the silence timer"
    if phone is not None:
        defaults = phoned(phone_voice_settings(settings), phone)
        tag += f", phone line (hiss cue: {phone} band)"
    if voice is not None:
        tag += f", voice {voice}"
    sounds: list[tuple[str, str, str | None, AudioChunk | None]] = []
    backchannels = BACKCHANNELS[:4] if quick else BACKCHANNELS
    requests = REQUESTS[:3] if quick else REQUESTS
    sounds += [(t, "backchannel", t, None) for t in backchannels]
    noise_items = list(noises(engines).items())
    sounds += [(k, "noise", None, a) for k, a in (noise_items[::2] if quick else noise_items)]
    sounds += [(t, "request", t, None) for t in requests]
    if phone is not None or voice is not None:
        with tempfile.TemporaryDirectory() as folder:
            sounds = [(label, group, text, audio if text is None
                       else said(engines, text, voice, Path(folder)))
                      for label, group, text, audio in sounds]
    if phone is not None:
        sounds = [(label, group, text, None if audio is None else AudioChunk.from_float(
            line(audio.samples()), STT_SAMPLE_RATE)) for label, group, text, audio in sounds]
    kinds = ["virtual", "real"] if clock_kind == "both" else [clock_kind]
    for kind in kinds:
        outs: list[Outcome] = []
        for _ in range(runs if kind == "real" else 1):  # virtual time is deterministic
            for label, group, text, audio in sounds:
                clock = make_clock(kind)
                outs.append(await one_call(engines, label, group, text=text, audio=audio,
                                           clock=clock, settings=defaults, gap=gap))
        summarize(f"{kind} clock, defaults{tag}, sound {gap} s into the reply", outs)
    # At the anchor's end-of-turn silence (0.2 s): three backchannels, three requests.
    fast = VoiceSettings(turn_detection=TurnDetection(end_of_turn_silence=0.2, min_speech=0.2,
                                                      min_barge_in=0.2))
    if smart:  # the model decides at 0.2 s instead
        fast = VoiceSettings(turn_detection=TurnDetection(min_speech=0.2, min_barge_in=0.2,
                                                          end_pad=0.1, resume_grace=1.0,
                                                          complete_silence=0.8))
    if phone is not None:
        fast = phoned(fast, phone)
    for kind in kinds:
        outs = []
        subset = ([s for s in sounds if s[1] == "backchannel"][:3]
                  + [s for s in sounds if s[1] == "request"][:3])
        for label, group, text, audio in subset:
            clock = make_clock(kind)
            outs.append(await one_call(engines, label, group, text=text, audio=audio,
                                       clock=clock, settings=fast, gap=gap))
        summarize(f"{kind}-0.2s end-of-turn silence{tag}", outs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clock", choices=["virtual", "real", "both"], default="both")
    parser.add_argument("--runs", type=int, default=1, help="repeats of the real-time set")
    parser.add_argument("--quick", action="store_true", help="a smaller set of sounds")
    parser.add_argument("--end-of-turn", choices=["none", "smart-turn"], default="smart-turn",
                        help="smart-turn (the default): the semantic end of turn "
                        "(voxflow_voice.engines.end_of_turn); none: the silence timer")
    parser.add_argument("--gap", type=float, default=GAP,
                        help="seconds from the reply's start to the sound (default 1.5)")
    parser.add_argument("--phone", choices=["wide", "telephone"], default=None,
                        help="the sounds over a phone line, at the phone path's settings "
                        "with the hiss cue on that band")
    parser.add_argument("--voice", default=None,
                        help="an espeak-ng voice@rate for the spoken sounds (en-us+f3@150)")
    args = parser.parse_args()
    asyncio.run(run(args.clock, args.runs, args.quick, args.end_of_turn, args.gap,
                    args.phone, args.voice))


if __name__ == "__main__":
    main()
