"""Whisper accuracy against speed on this machine: which settings keep the words right.

Run: ``uv run python benchmarks/stt_accuracy.py [--quick] [--runs N] [--models tiny.en base]
[--policies-only]`` (``--quick``: half the utterances, windows 30 and 10 s only, no
threads/beam variants, two window policies; ``--policies-only``: only the window policies).

A fixed list of voice-assistant utterances (:data:`UTTERANCES`: 1-2 word replies,
commands, questions, numbers, names and 6-8 s sentences) is spoken by the bundled Piper
voice and handed to :class:`WhisperStt` the way the turn detector hands it over:

* three speaking rates (Piper ``length_scale`` 0.9, 1.0, 1.15), noise-free Piper sampling
  so the audio is the same every run;
* Piper's own leading/trailing silence trimmed, then ``pre_roll`` (0.6 s) of silence before
  the speech and ``end_pad`` after it (0.2 s, the default, or 0.1 s, the fast settings),
  like the :class:`UtteranceReady` audio of ``turn_detector.py``;
* every other utterance mixed with white or pink noise at 20 dB SNR (over the whole
  clip, pre-roll included; fixed numpy seed);
* resampled to 16 kHz with :func:`voxflow_voice.resample`.

For each model it prints the word error rate (WER) and per-utterance latency (median and
p90 over all utterances, one timing each) across ``encoder_window`` 30/20/15/12/10/8 s
with two ways of padding the window:

* ``zeros``: faster-whisper's own way: the log-mel features are padded with 0 (which is
  *louder* than the log-mel floor of real silence);
* ``silence``: the *audio* is padded with digital silence to the window before the mel,
  as OpenAI's Whisper does for its 30 s (the padded frames get the log-mel floor, the
  input the model was trained on).

Then, at the two fastest (window, padding) pairs whose errors stay within two words of
faster-whisper's own 30 s, ``beam_size`` 2 (and at the fastest, ``cpu_threads`` 1), and
the latency of those two and of the 30 s one, as the median of ``--runs`` timings of
every third utterance. The utterances these got wrong are listed, with how many
transcripts repeat themselves (a word or pair of words three times in a row, or 50% more
words than said) and how many came back empty.

WER normalizer (:func:`normalize`): lowercase; ``$N`` -> ``N dollars``, ``%`` -> percent,
``°`` -> degrees, ``10:15`` -> ``10 15``, hyphens and other punctuation -> spaces,
apostrophes dropped (``what's`` = ``whats``); ``ok`` = ``okay``, ``alright`` = ``all right``;
numbers written in digits become words, as a cardinal (``4592`` -> four thousand five
hundred ninety two), digit by digit (four five nine two) or as a time (``730`` -> seven
thirty), and a transcript scores with whichever reading has fewer errors (one reading for
the whole transcript); ordinals (``23rd``) become words. The references are
written in words the way the voice speaks them.

"loops" counts transcripts that still loop, "redone" the windowed decodes that ran away
and were done again in a longer window (:class:`WhisperStt` does that on its own).

Measured on this 2-core machine on 2026-11-30, shared with other engineers' work (load
average about 2; each WER moves by +-1 word between runs: CTranslate2's multi-threaded
int8 is not bit-exact), 67 utterances, 472 words, greedy, 2 threads, one timing each,
before windowed decodes had a token budget (a loop then ran to 448 tokens before it was
redone in 30 s), all with a fixed window (``encoder_window_floor=None``)::

    model    window padding  WER (words)  median  p90 ms  redone
    tiny.en  30 s   zeros    3.0% (14)    432 ms   532    0   (faster-whisper's own)
    tiny.en  30 s   silence  2.3% (11)    417 ms   536    0
    tiny.en  15 s   silence  2.8% (13)    195 ms   264    0
    tiny.en  12 s   silence  3.0% (14)    130 ms   192    0
    tiny.en  10 s   zeros    3.6% (17)     94 ms   150    1   (a 100+ word loop without it)
    tiny.en  10 s   silence  2.8% (13)    100 ms   150    0   (voxflow's default)
    tiny.en   8 s   zeros    3.4% (16)     85 ms   146    3
    tiny.en   8 s   silence  3.0% (14)     82 ms   168    2
    base     30 s   zeros    2.1% (10)    755 ms  1011    0   (faster-whisper's own)
    base     30 s   silence  1.9% (9)     760 ms   912    0
    base     15 s   silence  1.5% (7)     330 ms   469    0
    base     10 s   zeros    1.9% (9)     231 ms   375    0
    base     10 s   silence  1.7% (8)     242 ms   378    0   (its fixed window: below)
    base      8 s   silence  1.9% (9)     173 ms   326    1

No configuration left a transcript looping ("loops" 0): every loop was caught and redone
in 30 s. Latency as the median of 3 runs (every third utterance): tiny.en 30 s 372 ms, 8
s silence 82 ms; base 30 s 739 ms, 8 s silence 184 ms. Earlier runs at a heavier load (3
to 4) gave the same picture: tiny.en 10 s silence 3.0-3.2% vs 3.4% at 30 s, base 1.7% vs
2.3%. With the audio padded by silence a 10 s window keeps the 30 s accuracy of both
models (it is even a word or two better) at a quarter to a third of the time; at 8 s the
decoder starts to loop (redone at the cost of a second decode). Beam 2 at 8 s: 3 fewer
errors for tiny.en, none for base, and 3 to 5 loops redone. 1 thread vs 2 at 8 s: 71 vs
82 ms (tiny.en), 146 vs 173 ms (base): with the cores shared with other work a second
thread mostly waits; ``voice_models.py`` times it on its own. The full run took about 12
minutes at that load (``--quick``: 82 s).

**Window policies** (``_stt_policies.py``): the window fitted to the utterance (its
length + ``encoder_window_margin``, rounded up to a whole second, between
``encoder_window_floor`` and the 10 s ``encoder_window``) against the fixed 10 s, on the
67 utterances above and the same 67 in voices that are not the bundled one
(:func:`_stt_clips.build_other_voices`: espeak-ng en-us+f3 150 wpm, en-gb+m3 130 wpm,
en-us+m7 175 wpm, Piper ``length_scale`` 0.8 and 1.3, in turn; the same noise and pads),
134 clips of 1.0 to 8.3 s (median 2.3 s; 117 of at most 4 s). Each clip is transcribed by
every policy in turn (the order rotating), so the machine's load falls on all of them
alike; "x ref" is the median over clips of a policy's time over the fixed 10 s one's on
the same clip, "short" the median of the clips of at most 4 s, "kept" the transcripts
that said the turn again and were cut to their first time, "redone" the decodes done
again in a longer window (their time counted). Then the leading framework's question
(``/work/shared/anchors/pipecat/audio/user_q.wav``, 2.4 s, with 0.6 s pre-roll and 0.1 s
end pad), median of 7 runs per policy. Measured 2026-12-01, shared machine, load average
3.4 (tiny.en) and 5.0 (base), greedy, 2 threads, one timing each::

    model    policy               WER bundled  WER others  median  p90 ms  x ref  kept  redone
    tiny.en  fixed 10 s           2.8% (13)    12.7% (60)   91 ms   175    1.00     0      0  *
    tiny.en  fit +1 s, floor 4    3.2% (15)    14.0% (66)   60 ms   149    0.60    32      3
    tiny.en  fit +3 s, floor 4    2.8% (13)    13.6% (64)   66 ms   153    0.70    20      3
    tiny.en  fit +2 s, floor 5    3.2% (15)    13.1% (62)   61 ms   147    0.64    25      3
    tiny.en  fit +3 s, floor 5    2.8% (13)    13.6% (64)   67 ms   163    0.69    20      3
    tiny.en  fit +2 s, floor 6    3.4% (16)    13.1% (62)   64 ms   147    0.68    17      1
    tiny.en  fit +3 s, floor 6    3.0% (14)    13.3% (63)   63 ms   144    0.69    17      1
    base     fixed 10 s           1.7% (8)     10.4% (49)  216 ms   385    1.00     2      0
    base     fit +1 s, floor 4    2.3% (11)    11.2% (53)  155 ms   319    0.70    45      7
    base     fit +3 s, floor 4    1.7% (8)     10.8% (51)  166 ms   333    0.74    30      5
    base     fit +2 s, floor 5    1.9% (9)     11.9% (56)  160 ms   332    0.70    35      6
    base     fit +3 s, floor 5    1.7% (8)     10.8% (51)  169 ms   338    0.70    30      5
    base     fit +2 s, floor 6    1.7% (8)     11.4% (54)  155 ms   301    0.71    29      5
    base     fit +3 s, floor 6    1.7% (8)     10.4% (49)  166 ms   318    0.70    27      4  *

(``*``: the default) of 472 words each; no transcript left looping, none empty. An
earlier run at load 4.7-5.9 gave the same words for the default (base 8 and 49, tiny.en
14 and 63) at 0.73x and 0.71x (base 147 vs 196 ms, p90 292 vs 300). The anchor question,
base: 183 ms fitted (7 s) vs 220 ms at 10 s; tiny.en 86 vs 108 ms, the same words. So
the fitted window (floor 6 s, margin 3 s) is base's default (``FITTED_WINDOW_FLOOR``): it
keeps its words on both voice sets at 0.70x the time per turn and no worse p90. tiny.en
was within one word on the bundled voice and three on the others, but on
``end_of_turn.py``'s noisy short answers in five other voices it misheard more of them
(late 3 -> 5 of 60) and split a paused request once: it keeps the fixed 10 s. Less
margin loses words, mostly on the other voices (base 5 to 8 more errors in all at a 1
or 2 s margin). Before the token budget
and the first time kept, the same policies were redone on 13% to 39% of the turns (a
loop ran to 448 tokens, about 3 s for base, before its second decode): base fit +3 s,
floor 6 was 0.76x at the median but its p90 1.5x the fixed window's (764 vs 495 ms, load
8.7). Decoding with timestamps (``without_timestamps=False``) loops less in a fitted
window but loses words (base +4 to +7) and, once, a whole turn. The policies take about
5 minutes at load 3 (``--quick``: about 2).
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass

from _figures import figure
from _stt_clips import Clip, build_clips, build_other_voices
from _stt_policies import POLICIES, QUICK_POLICIES, Redone, compare_policies
from _wer import normalize, repeats, word_errors
from voxflow_voice import (
    STT_SAMPLE_RATE,
    SttSettings,
    WhisperStt,
    find_whisper_model,
)
from voxflow_voice.engines.errors import ModelNotFoundError

UTTERANCES: tuple[str, ...] = (
    # short replies
    "Yes.",
    "No.",
    "Stop.",
    "No thanks.",
    "Yes please.",
    "Cancel.",
    "Okay.",
    "Wait.",
    "Sure.",
    "Thank you.",
    "Next.",
    "Go back.",
    "Never mind.",
    "Pause.",
    # commands
    "Turn on the lights in the kitchen.",
    "Set a timer for five minutes.",
    "Play some jazz in the living room.",
    "Turn the volume down a little.",
    "Call my mother on her mobile.",
    "Add milk and eggs to my shopping list.",
    "Remind me to water the plants at six.",
    "Set an alarm for seven thirty tomorrow morning.",
    "Switch off the bedroom lamp.",
    "Send a message to Sarah saying I am running late.",
    "Skip this song.",
    "Open the garage door.",
    "Lock the front door.",
    "Book a table for four at eight o'clock.",
    "Read me the news headlines.",
    "Tell me a joke.",
    # questions
    "What's the weather like tomorrow?",
    "How long will it take to drive to Boston?",
    "What time is it in Tokyo?",
    "Who wrote Pride and Prejudice?",
    "How many ounces are in a pound?",
    "Is the pharmacy on Main Street open now?",
    "What is the capital of Australia?",
    "When does the next train to London leave?",
    "How far is the moon from the earth?",
    "What's on my calendar today?",
    "How do you say good morning in French?",
    "Hey, what can you do?",
    # numbers
    "Set the thermostat to sixty eight degrees.",
    "Call me back in fifteen minutes.",
    "Set the volume to forty percent.",
    "Transfer two hundred fifty dollars to my savings account.",
    "The meeting is on the twenty third of March.",
    "My flight leaves at ten fifteen.",
    "Add three apples and twelve eggs.",
    # names
    "Text Priya that dinner is ready.",
    "Email Jonathan Miller about the budget.",
    "Play the latest album by Taylor Swift.",
    "Navigate to Golden Gate Park.",
    "Ask Alexander if he wants to come tonight.",
    # conversational
    "No, I said the other one.",
    "Actually, make that ten minutes instead.",
    "Repeat that, please.",
    "Can you speak a bit slower?",
    "I don't know, maybe later.",
    # long sentences (6-8 s)
    "Could you remind me tomorrow morning to pick up the dry cleaning before I go to the "
    "office, and also buy some bread?",
    "I would like to book a hotel room in Chicago for two nights starting next Friday, "
    "preferably somewhere close to the lake.",
    "Please read me the last three emails from my manager and tell me if any of them need "
    "a reply today.",
    "Turn off all the lights downstairs, lock the back door, and set the alarm for six "
    "thirty in the morning.",
    "What is the best way to get from the airport to the city center if I arrive late at "
    "night on a Sunday?",
    "Can you find a good Italian restaurant nearby that is open until eleven and has a "
    "table for three people?",
    "Tell my wife that I will be home around eight because the train is delayed by about "
    "forty minutes.",
    "I need a recipe for a quick vegetarian dinner that uses spinach, chickpeas, and "
    "whatever rice we have left.",
)
"""The test utterances (fixed: figures are comparable between runs and commits)."""

WINDOWS = (30.0, 20.0, 15.0, 12.0, 10.0, 8.0)
QUICK_WINDOWS = (30.0, 10.0)
PADDINGS = ("zeros", "silence")

# ---------------------------------------------------------------- measurement


@dataclass(frozen=True, slots=True)
class Result:
    """One configuration over all clips."""

    label: str
    errors: int
    words: int
    times: tuple[float, ...]
    heard: tuple[str, ...]
    repeats: int
    empty: int
    worst: int
    redone: int

    @property
    def wer(self) -> float:
        return 100.0 * self.errors / self.words

    @property
    def median_ms(self) -> float:
        return 1000 * statistics.median(self.times)

    @property
    def p90_ms(self) -> float:
        ordered = sorted(self.times)
        return 1000 * ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]


def measure(
    clips: Sequence[Clip],
    model: str,
    window: float,
    padding: str,
    runs: int,
    *,
    threads: int = 2,
    beam: int = 1,
) -> Result:
    """Transcribe every clip ``runs`` times; errors from the first, time the median."""
    stt = WhisperStt(
        SttSettings(
            model=model,
            encoder_window=window,
            encoder_window_floor=None,  # a fixed window
            encoder_padding=padding,  # type: ignore[arg-type]
            cpu_threads=threads,
            beam_size=beam,
        )
    )
    inputs = [c.audio for c in clips]
    redone = Redone()
    logging.getLogger("voxflow_voice.engines.stt").addHandler(redone)
    stt.transcribe_sync(inputs[-1])  # warm-up
    timings: list[list[float]] = [[] for _ in clips]
    heard: list[str] = []
    for run in range(runs):
        for index, samples in enumerate(inputs):
            start = time.perf_counter()
            transcript = stt.transcribe_sync(samples)
            timings[index].append(time.perf_counter() - start)
            if run == 0:
                heard.append(transcript.text if transcript else "")
    logging.getLogger("voxflow_voice.engines.stt").removeHandler(redone)
    errors = sum(word_errors(c.text, h) for c, h in zip(clips, heard, strict=True))
    label = f"{model:<7} window {window:4.0f} s  {padding:<7}  threads {threads}  beam {beam}"
    return Result(
        label=label,
        errors=errors,
        words=sum(len(normalize(c.text)) for c in clips),
        times=tuple(statistics.median(t) for t in timings),
        heard=tuple(heard),
        repeats=sum(repeats(c.text, h) for c, h in zip(clips, heard, strict=True) if h),
        empty=sum(1 for h in heard if not h),
        worst=max(word_errors(c.text, h) for c, h in zip(clips, heard, strict=True)),
        redone=redone.count // runs,
    )


def show(result: Result, clips: Sequence[Clip]) -> None:
    """One table row, then every transcript that loops (a run-away decode)."""
    print(
        f"  {result.label}  WER {result.wer:5.1f}% ({result.errors:3d} words)  "
        f"median {result.median_ms:5.0f} ms  p90 {result.p90_ms:5.0f} ms  "
        f"loops {result.repeats}  redone {result.redone}  empty {result.empty}  "
        f"worst {result.worst}",
        flush=True,
    )
    for clip, heard in zip(clips, result.heard, strict=True):
        if heard and repeats(clip.text, heard):
            print(f"      loop: {clip.condition} {clip.text!r} -> {heard[:90]!r}...")


def show_wrong(result: Result, clips: Sequence[Clip]) -> None:
    print(f"  wrong at {result.label}:")
    for clip, heard in zip(clips, result.heard, strict=True):
        errors = word_errors(clip.text, heard)
        if errors:
            print(f"    [{errors}] {clip.condition:<22} {clip.text!r} -> {heard!r}")


def sweep(clips: Sequence[Clip], model: str, windows: Sequence[float], runs: int) -> None:
    """Windows x paddings for one model, then threads and beam at the best two."""
    print(f"\n{model}: {len(clips)} utterances, one timed run each")
    results: dict[tuple[float, str], Result] = {}
    for window in windows:
        for padding in PADDINGS:
            if window >= 30 and padding == "silence" and len(windows) < len(WINDOWS):
                continue  # --quick: the 30 s silence variant is the slowest, skip it
            result = measure(clips, model, window, padding, 1)
            results[window, padding] = result
            show(result, clips)
    baseline = results[30.0, "zeros"]
    figure(f"{model} WER, 30 s window (faster-whisper's own)", round(baseline.wer, 2), "%")
    figure(f"{model} median latency, 30 s window", round(baseline.median_ms), "ms")
    keeping = [
        key for key, r in results.items() if r.errors <= baseline.errors + 2 and key[0] < 30
    ]
    best = sorted(keeping, key=lambda key: results[key].median_ms)[:2]
    if not best:
        print(f"  no window below 30 s keeps {model}'s errors within two words of 30 s")
        show_wrong(baseline, clips)
        return
    for window, padding in best:
        kept = results[window, padding]
        print(
            f"  KEEPS ACCURACY: window {window:g} s, {padding} padding: {kept.errors} word errors "
            f"vs {baseline.errors} at 30 s; median {kept.median_ms:.0f} ms vs "
            f"{baseline.median_ms:.0f} ms ({baseline.median_ms - kept.median_ms:.0f} ms saved)"
        )
        figure(f"{model} WER, {window:g} s window, {padding} padding", round(kept.wer, 2), "%")
        figure(
            f"{model} median latency, {window:g} s window, {padding} padding",
            round(kept.median_ms),
            "ms",
        )
    if len(windows) < len(WINDOWS):  # --quick
        show_wrong(baseline, clips)
        show_wrong(results[best[0]], clips)
        return
    print(f"  threads and beam at the best windows ({model}):")
    for rank, (window, padding) in enumerate(best):
        show(results[window, padding], clips)
        if rank == 0:
            show(measure(clips, model, window, padding, 1, threads=1), clips)
        show(measure(clips, model, window, padding, 1, beam=2), clips)
    if runs > 1:
        subset = clips[::3]
        print(f"  latency, median of {runs} runs per utterance ({len(subset)} utterances):")
        for window, padding in [(30.0, "zeros"), *best]:
            show(measure(subset, model, window, padding, runs), subset)
    show_wrong(baseline, clips)
    for window, padding in best:
        show_wrong(results[window, padding], clips)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--runs", type=int, default=3, help="timings per utterance for the latency check"
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="half the utterances, windows 30/10, no threads/beam variants (< 2 min)",
    )
    parser.add_argument("--models", nargs="+", default=["tiny.en", "base"])
    parser.add_argument(
        "--policies-only",
        action="store_true",
        help="only the window policies (fixed 10 s vs fitted), not the fixed-window sweep",
    )
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be >= 1, such as --runs 3")
    texts = UTTERANCES[::2] if args.quick else UTTERANCES
    runs = 1 if args.quick else args.runs
    windows = QUICK_WINDOWS if args.quick else WINDOWS
    policies = QUICK_POLICIES if args.quick else POLICIES
    started = time.perf_counter()
    clips = build_clips(texts)
    others = build_other_voices(texts)
    seconds = [c.audio.size / STT_SAMPLE_RATE for c in clips + others]
    print(
        f"STT accuracy benchmark: {os.cpu_count()} CPUs, {len(clips)} utterances in the "
        f"bundled voice and {len(others)} in others ({min(seconds):.1f} to {max(seconds):.1f} "
        f"s of audio, median {statistics.median(seconds):.1f} s), built in "
        f"{time.perf_counter() - started:.1f} s; load average {os.getloadavg()[0]:.1f}"
    )
    for model in args.models:
        try:
            find_whisper_model(model)
        except ModelNotFoundError:
            print(f"\n{model}: not installed, skipped")
            continue
        if not args.policies_only:
            sweep(clips, model, windows, runs)
        sets = {"bundled": clips, "other voices": others}
        compare_policies(sets, model, policies, anchor_runs=3 if args.quick else 7)
    print(f"\ntotal {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
