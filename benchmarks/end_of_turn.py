"""Semantic end of turn (Smart Turn v3.2) against the silence timer, on voices not ours.

Run: ``uv run python benchmarks/end_of_turn.py [--set paused|short|complete|all] [--quick]
[--hold S ...]``

The evaluation set (``eot_set.py``) is generated at run time (nothing is stored): **espeak-ng**
(Debian's, three voices at 130-175 words per minute) and **Piper** at speaking rates other
than the bundled voice's (``length_scale`` 0.8 and 1.3), each clean and with white noise
at 20 dB SNR (seeded). Two kinds of utterance:

* **paused**: two clauses of one request with 0.3, 0.5 or 0.8 s of silence between them
  ("Wait, stop." <pause> "Tell me about the train times instead.");
* **short**: complete short answers ("Yes.", "No, thanks.", "Sure.").

Each WAV (0.5 s of silence, the utterance, 3 s of silence) is fed to a real
:class:`~voxflow_voice.listen.turn_detector.TurnDetector` (Silero VAD, and Smart Turn when on),
exactly as a voice session feeds it, in audio time, so every figure is deterministic (the
same on any machine, at any load): it counts the turns each utterance was committed as
(an ``UtteranceReady``) and where. Printed, per configuration:

* **split rate**: paused utterances committed as more than one turn (target 0 %),
  overall and per pause length;
* **commit delay**: the last speech sample (-40 dBFS) → the turn's end (audio time,
  excludes the model's compute time, printed apart); for short answers, how many were
  committed later than 0.6 s after the last word ("missed": target none);
* **model time**: the wall time per Smart Turn decision (the only real-time figure here).

Configurations: the silence timer at 0.2 s (the leading framework's VAD stop) and 0.6 s
(voxflow's default), Smart Turn alone, and Smart Turn with the pause's words (Whisper
tiny.en, as a session has them from its speculative STT), deciding at a 0.2 s pause with
a 1.6 s maximum; then the same with **provisional commits** (``--grace``, default 1 s):
a committed turn is sealed ``--heard-after`` seconds (of audio) after its commit, as a
session seals it when the first sample of its reply is heard, and speech resuming it
before then takes it back (``TurnResumed``: one turn of it all). ``--heard-after`` stands
for the reply's latency after the commit (the verdict's compute time plus flow, synthesis
and playout): 0.25 s for a voice to voice of ~500 ms, 0.6 s for ~850 ms.

``--v2v N`` measures voice to voice in **real time** instead, on the leading framework's
own Smart Turn audio (``/work/shared/anchors/pipecat/audio/user_q.wav``, or ``--wav``; if
absent, the same sentence rendered the same way: the bundled Piper voice at 16 kHz): a
simulated caller says it N times to a whole :class:`~voxflow_voice.session.VoiceSession`
(the reference setup: Whisper base, 0.2 s minimum speech and barge-in; instant rule-based
replies), once with the 0.2 s silence timer and once with Smart Turn, and the tape gives
the last speech sample in -> the first reply sample out (as ``voice_latency.py``). Run
it under ``flock /tmp/voxflow-bench.lock`` and note the load average it prints.

Measured (Dec 1, the machine shared by ~9 engineers; the offline figures are exact):

==========================================  ==========  ========================  =======
configuration                               split rate  short answers > 0.6 s     split
                                            (180)       (60; median commit)       answers
==========================================  ==========  ========================  =======
silence timer 0.2 s                         97.8 %      0 (272 ms)                10
silence timer 0.6 s                         33.3 %      57 (656 ms)               0
Smart Turn alone                            76.1 %      24 (299 ms)               3
Smart Turn + the pause's words (tiny.en)    23.9 %      3 (299 ms)                3
==========================================  ==========  ========================  =======

Per pause (Smart Turn + words): 14/60 at 0.3 s, 13/60 at 0.5 s, 16/60 at 0.8 s (the 0.6 s
timer: 0, 0, 60). 27 of its 43 splits are "I need a flight to Boston | and a hotel near
the airport.", whose first clause is a complete request; 10 are "a table for" garbled by
tiny.en on espeak with noise ("I'm a black turmo cafe"). Decision time (Smart Turn with
the STT beside it): median 385 ms, p90 772 ms at a load average of 7.8 (the model alone:
~50 ms on an idle core).

Provisional commits (Dec 1, ``--only-smart --heard-after 0.25 0.4 0.6``, then ``0.3``; a
resumed turn is judged on its continuation's audio, ``judge_continuation``, unless noted):

===========================================  ==========  =================  ===========
sealed after the commit (``--heard-after``)  split rate  per pause 0.3 /    paused: last
                                             (180)       0.5 / 0.8 s (60)   word -> end
===========================================  ==========  =================  ===========
no provisional commits (above)               23.9 %      14 / 13 / 16       994 ms
0.25 s (judged whole)                        18.3 %      4 / 13 / 16        1534 ms
0.3 s (judged whole)                         16.1 %      2 / 12 / 15        1524 ms
0.3 s                                        16.7 %      3 / 12 / 15        994 ms
0.4 s (judged whole)                         15.6 %      2 / 11 / 15        1524 ms
0.6 s (judged whole)                         8.3 %       0 / 0 / 15         1589 ms
===========================================  ==========  =================  ===========

Short answers: 3 of 60 committed later than 0.6 s in every configuration (Whisper tiny.en
mishears espeak's "That's all." and "Okay, thank you."); the 3 short answers split in two
without provisional commits ("No. | Thanks.", "Okay. | Thank you.") are taken back and
made one turn (0 split). What is left is the honest limit: "I need a flight to Boston"
is a complete request, and a user who goes on after 0.5-0.8 s has heard the reply start
whenever the reply came faster than the pause (19 of the 30 splits at 0.3 s; a reply
heard is an interruption, never taken back). Judged whole, a resumed turn (a silence
inside) is doubted by Smart Turn and waits out the 1.6 s maximum (paused utterances
994 -> ~1.5 s median); judged on the continuation, it ends as fast as before.

Holding a complete turn whose words close nothing (``--hold``, ``complete_silence``; a
question or a closed answer is not held) and, from then on, questions closing a turn and
digits counted as words (Dec 1, ``--only-smart --provisional-only --hold 0 0.4 0.6 0.8
--heard-after 0.3 0.1``; the complete set: four statements and two questions):

======  =====================  =================  ===================  ============
hold    split rate (180),      per pause 0.3 /    complete requests:   short answers
(s)     sealed 0.3 / 0.1 s     0.5 / 0.8 s (0.3)  last word -> end,    > 0.6 s (60)
                                                  median (p90)
======  =====================  =================  ===================  ============
0       17.2 % / 24.4 %        3 / 13 / 15        279 ms (572)         3
0.4     8.9 % / 15.0 %         0 / 1 / 15         457 ms (572)         3
0.6     6.7 % / 8.3 %          0 / 0 / 12         643 ms (697)         5
0.8     0.0 % / 0.6 %          0 / 0 / 0          835 ms (889)         5
======  =====================  =================  ===================  ============

Why the words and not the model's confidence choose the wait: Smart Turn's probability
at the first pause (10 renderings each, median (min-max)) is as high on clauses that go
on ("I would like to book a table for" 0.97 (0.50-0.98), "I need a flight to Boston"
0.93 (0.73-0.99)) as on finished requests ("Tell me about the train times." 0.96), and
lower on closed answers ("No." 0.49 (0.01-0.98), "Okay, thank you." 0.27): committing
the confident at once and holding the doubtful would cut the first and hold the second.

Before questions closed a turn, 17 of the 60 complete requests waited the 1.6 s maximum
(p90 1681 ms: Smart Turn doubts espeak's flat questions). The two more late short
answers at a hold are "No, thanks." in noise, heard by tiny.en as "No end." / "No,
aren't." (open words, held). The 0.8 s default buys 0 % at the price of ~0.55 s more
on statements; the 0.6 s timer makes every turn wait ~0.66 s and splits 33.3 %.

In real time, ``--v2v 8 --text "I need a flight to Boston." --hold 0.8`` (Dec 1, one run,
load 7-8.5), medians (p90): the 0.2 s timer 599 ms (924), the 0.6 s timer 796 (1022),
Smart Turn + words, provisional 697 (1155), the same held 0.8 s 837 (869). Held, the
reply is ready at the commit (16 ms to its first sample): the hold costs what the
pause's STT did not take already (~140 ms at this load, up to ~0.5 s on an idle core).
A question is not held: ``--v2v 8 --hold 0.8`` on the anchor's ``user_q.wav`` (load
1.4-3.8): Smart Turn 715 (843), held 757 (847; committed 225 ms after the speech end in
both), the 0.6 s timer 837 (1267), the 0.2 s timer 667 (745).

``--v2v 10``, three runs (load average 4.7, 6.4, 1.4), medians (ms):

==============================================  =====  =====  =====
configuration                                   run 1  run 2  run 3
==============================================  =====  =====  =====
silence timer 0.2 s                             545    928    555
Smart Turn + words, speculative STT from 0.2 s  895    946    686
Smart Turn + words, speculative STT from 0.1 s  646    945    595
the same with a Whisper warm-up at each onset   745    705    585
==============================================  =====  =====  =====

The leading framework takes 1.33 s on this audio. The warm-up does not pay clearly, so
``VoiceSettings.stt_warm_up`` stays off.

With provisional commits, the 0.6 s timer and a voice-to-voice breakdown (Dec 1, 03:25 and
03:45 UTC, each run after the leading framework's own ``harness.py --scenario v2v --turns
10`` under the same lock; load average 5-8.5, then 2-4), medians (p90) in ms:

==================================================  ===========  ==========
configuration                                       run 1        run 2
==================================================  ===========  ==========
silence timer 0.2 s                                 826 (1052)   857 (1035)
silence timer 0.6 s (voxflow's default)             1027 (1411)  820 (1052)
Smart Turn + words, STT from 0.1 s, provisional     1415 (1633)  686 (956)
the same, the verdict at a 0.15 s pause             1149 (1800)  691 (757)
the same (0.2 s), Whisper warm-up at each onset     1075 (2059)  736 (829)
the leading framework (its harness, same run)       8440         4182
==================================================  ===========  ==========

Where it goes (run 2, Smart Turn): the VAD's speech end ~55 ms after the last sample,
Whisper base on the pause's audio (the verdict waits for its words, and the reply for its
text: ~500 ms at this load), then 83 ms (p90 115) from the commit to the first sample
played; the reply's text was never ready before the commit. The session's own marks
(``speech end -> committed``) run late when the listen loop waits for a verdict (its
clock anchor is the frame's processing time), so the tape is the figure. The leading
framework's Whisper took 2.8-5.4 s a turn in these runs (its README's 1.33 s was measured
at a lower load). Neither the 500 ms target nor a clear win over the 0.6 s timer: the
model stays off by default.

Stage by stage (Dec 1, ``--v2v 10 --configs ... smart``; each call's STT, Smart Turn and
first TTS chunk stamped, ms after the last speech sample on the tape, medians, load 1.1-1.3):

=====================================  ==============  ============================
stage                                  model beside    model after the words
                                       the STT         (``TurnDetector.adecide``)
=====================================  ==============  ============================
the pause's STT starts (0.1 s pause)   160             159
Smart Turn (start -> end)              271 -> 584      616 -> 772
STT end (the reply's text)             851             613
turn committed                         853             775
TTS first chunk                        957             797
first sample played                    968 (p90 1275)  805 (p90 973)
silence timer 0.6 s, same run          687 (p90 897)   836 (p90 943)
=====================================  ==============  ============================

A second run after the change (load 1.1-1.3): Smart Turn 945 ms (p90 1261), the 0.6 s timer
1037 (p90 1112); the STT 512 ms (the timer's 666), Smart Turn's end 236 ms after it.

Side by side on two cores, Smart Turn's thread took one of Whisper's two: the STT took
690 ms instead of ~340-450 alone, and the verdict waits for the words anyway. One after
the other, Whisper base on the pause's audio (10 s window, ~450 ms here) is the critical
path; Smart Turn and the first synthesis then run side by side (~150-180 ms each, one
thread each). Tried and dropped: a Whisper window sized to the turn (the turn + 1 to 3 s
of silence, base and tiny.en) repeated the sentence up to the token limit on every turn
tried and was redone in 30 s (since then a windowed decode stops at a token budget and a
repeated turn is cut to its first time, and the window fitted to the turn is the
default: ``stt_accuracy.py``, 0.70x the time of the 10 s window); Whisper on 1 thread
(837 vs 968 ms beside the model); the warm-up at onset (1098 ms); the STT from a 0.05 s
pause (1344 vs 1208 at load 9).

``--v2v-stt whisper-streaming:MODEL`` runs the incremental engine instead (its partial,
closing and tail decodes stamped as STT calls). Dec 4, ``--v2v 8 --configs smart``, one
run each, load 4.2 to 7.9 (medians, ms after the last speech sample):

=========================  ===========  =========  ======  ===========  ==================
STT                        STT start    STT end    Smart   first        transcripts
                           (the pause)             Turn    sample       (8 turns)
                                                   end
=========================  ===========  =========  ======  ===========  ==================
whisper:tiny.en            158          425        623     636          all right
whisper-streaming:tiny.en  186          645        1141    1156         "pairs" in 6
whisper:base               160          453        709     726          all right
whisper-streaming:base     439          985        1046    1055         "are going to be
                                                                        like ..." in 2
=========================  ===========  =========  ======  ===========  ==================

On the anchor's 3.4 s question the streaming engine loses through the product's path: its
partial decodes keep the CPU busy when the speech stops, so the decode at the first silent
frame waits for one, and its short windows mishear the turn's end.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from _eot_v2v import ANCHOR_TEXT, ANCHOR_WAV, V2V_CONFIGS, V2V_DEFAULT, voice_to_voice
from _figures import figure
from eot_set import PAUSES, PROMPT_ANSWER, SNR_DB, Sample, build_set
from voxflow_voice.audio import STT_SAMPLE_RATE, AudioChunk
from voxflow_voice.engines.end_of_turn import EndOfTurnModel, EndOfTurnVerdict, SmartTurn
from voxflow_voice.engines.stt import SttSettings, WhisperStt
from voxflow_voice.engines.vad import SileroVad
from voxflow_voice.listen.turn_detector import (
    SpeechEnded,
    TurnDetection,
    TurnDetector,
    TurnResumed,
    UtteranceReady,
)
from voxflow_voice.session.metrics import Distribution


@dataclass(slots=True)
class Outcome:
    turns: list[UtteranceReady]
    ended_at: list[int]  # the sample at which each turn ended (SpeechEnded.at_sample)
    decide_seconds: list[float]
    verdicts: list[EndOfTurnVerdict]
    resumed: int  # committed turns taken back (TurnResumed)

    def delay(self, sample: Sample) -> float:
        """Seconds of audio from the last word to the end of the last turn."""
        return (self.ended_at[-1] - sample.last_speech) / STT_SAMPLE_RATE


async def run(sample: Sample, settings: TurnDetection, model: EndOfTurnModel | None,
              stt: WhisperStt | None, heard_after: float | None = None) -> Outcome:
    """Feed one sample to a detector in 20 ms chunks, as a session does: at each pause
    the model judges the audio while STT transcribes it (the session's speculative
    transcript), and the verdict takes both.

    With ``settings.resume_grace``, a committed turn is sealed ``heard_after`` seconds
    (of audio) after its commit, as a session seals it when the first sample of its reply
    is heard; speech resuming it before then takes it back (``TurnResumed``)."""
    detector = TurnDetector(SileroVad(), settings, end_of_turn_model=model)
    out = Outcome([], [], [], [], 0)
    seal_at: int | None = None
    step = 320
    for start in range(0, sample.audio.size, step):
        if seal_at is not None and detector.position >= seal_at:
            detector.seal()
            seal_at = None
        events = detector.push(sample.audio[start : start + step])
        while (pause := detector.undecided) is not None:
            began = time.perf_counter()
            words = stt.transcribe(pause.audio) if stt is not None else None
            events += await detector.adecide(words)
            out.decide_seconds.append(time.perf_counter() - began)
        events += [] if start + step < sample.audio.size else detector.flush()
        for event in events:
            if isinstance(event, TurnResumed):
                out.turns.pop()
                out.ended_at.pop()
                out.resumed += 1
                seal_at = None
            elif isinstance(event, SpeechEnded):
                out.ended_at.append(event.at_sample)
                if heard_after is not None:
                    seal_at = event.at_sample + round(heard_after * STT_SAMPLE_RATE)
            elif isinstance(event, UtteranceReady):
                out.turns.append(event)
    out.verdicts += detector.decisions
    return out


async def evaluate(name: str, samples: list[Sample], settings: TurnDetection,
                   model: EndOfTurnModel | None, stt: WhisperStt | None = None,
                   heard_after: float | None = None) -> None:
    paused = [s for s in samples if s.kind == "paused"]
    split_by_pause: Counter[float] = Counter()
    split_by_text: Counter[str] = Counter()
    count_by_pause: Counter[float] = Counter()
    decide: list[float] = []
    paused_delay: list[float] = []
    split_examples: list[str] = []
    slow: list[str] = []
    split_by_voice: Counter[str] = Counter()
    count_by_voice: Counter[str] = Counter()
    resumed = 0
    for s in paused:
        out = await run(s, settings, model, stt, heard_after)
        decide += out.decide_seconds
        resumed += out.resumed
        count_by_pause[s.pause] += 1
        count_by_voice[s.voice] += 1
        if len(out.turns) != 1:
            split_by_voice[s.voice] += 1
            split_by_pause[s.pause] += 1
            split_by_text[s.text] += 1
            if len(split_examples) < 8:
                split_examples.append(f"{s.voice}{' +noise' if s.noisy else ''}: {s.text!r}"
                                      f" ({s.pause} s) -> {len(out.turns)} turns"
                                      f"{_verdicts(out)}")
        if out.turns:
            paused_delay.append(out.delay(s))
            if out.delay(s) > 1.0 and len(slow) < 6:
                slow.append(f"{s.voice}{' +noise' if s.noisy else ''}: {s.text!r} "
                            f"({s.pause} s){_verdicts(out)}")
    print(f"\n== {name}")
    if paused:
        splits = sum(split_by_pause.values())
        rate = 100.0 * splits / len(paused)
        per = ", ".join(f"{p} s: {split_by_pause[p]}/{count_by_pause[p]}" for p in PAUSES
                        if count_by_pause[p])
        print(f"   split rate (paused utterances as > 1 turn)    {rate:.1f} % "
              f"({splits} of {len(paused)}; per pause {per})")
        print("     per voice: " + ", ".join(f"{v} {split_by_voice[v]}/{n}"
                                             for v, n in count_by_voice.items()))
        if settings.resume_grace:
            print(f"     committed turns taken back (TurnResumed, merged): {resumed}")
        per_text = len(paused) // len({s.text for s in paused})
        for text, count in split_by_text.most_common():
            print(f"     {count:>3} of {per_text}: {text!r}")
        for example in split_examples:
            print(f"     e.g. {example}")
        print(f"   paused utterances: last word -> turn end       "
              f"{Distribution.of(d * 1000 for d in paused_delay)}")
        for example in slow:
            print(f"     slower than 1 s: {example}")
        figure(f"split rate, {name}", rate, "%", target="0")
    for kind, label in (("short", "short answers"), ("complete", "complete requests")):
        group = [s for s in samples if s.kind == kind]
        if group:
            decide += await _answers(f"{label}, {name}", label, group, settings, model, stt,
                                     heard_after)
    if decide:
        print(f"   decision time (model with STT beside it, wall) "
              f"{Distribution.of(d * 1000 for d in decide)}  ({len(decide)} decisions, "
              f"load average {os.getloadavg()[0]:.1f})")


async def _answers(name: str, label: str, group: list[Sample], settings: TurnDetection,
                   model: EndOfTurnModel | None, stt: WhisperStt | None,
                   heard_after: float | None) -> list[float]:
    """Complete utterances (short answers, or requests): each must be one turn, committed
    soon after its last word (a short answer within ``PROMPT_ANSWER``)."""
    delays: list[float] = []
    decide: list[float] = []
    split = resumed = 0
    missed: list[str] = []
    for s in group:
        out = await run(s, settings, model, stt, heard_after)
        decide += out.decide_seconds
        resumed += out.resumed
        where = f"{s.text!r} ({s.voice}{' +noise' if s.noisy else ''})"
        if len(out.turns) != 1:
            split += 1
            missed.append(f"{where}: {len(out.turns)} turns{_verdicts(out)}")
        if not out.turns:
            continue
        delays.append(out.delay(s))
        if delays[-1] > PROMPT_ANSWER:
            missed.append(f"{where}: {delays[-1] * 1000:.0f} ms{_verdicts(out)}")
    dist = Distribution.of(d * 1000 for d in delays)
    print(f"   {label}: last word -> turn end{' ' * (27 - len(label))}{dist}")
    late = sum(d > PROMPT_ANSWER for d in delays)
    print(f"   {label} committed later than {PROMPT_ANSWER} s   {late} of {len(group)}; "
          f"split in two: {split}" + (f"; taken back: {resumed}" if settings.resume_grace
                                      else ""))
    for m in missed[:8]:
        print(f"     {m}")
    if dist.median_ms is not None:
        figure(f"{label} commit delay, {name}", dist.median_ms, "ms",
               target=f"<= {PROMPT_ANSWER * 1000:.0f}" if label == "short answers" else "")
    return decide


def _verdicts(out: Outcome) -> str:
    if not out.verdicts:
        return ""
    return "; verdicts: " + ", ".join(
        f"{v.probability:.2f}" + (f" {v.transcript!r}" if v.transcript is not None else "")
        for v in out.verdicts
    )


async def measure(samples: list[Sample], stt_model: str, end_pad: float, only_smart: bool,
                  grace: float, heard_after: list[float], judge_continuation: bool,
                  provisional_only: bool = False, holds: tuple[float, ...] = (0.0,),
                  short_turn: float = 1.0, fixed_window: bool = False,
                  question_closes: bool = True) -> None:
    model = SmartTurn()
    stt = WhisperStt(SttSettings(model=stt_model, **(
        {"encoder_window_floor": None} if fixed_window else {})))
    await stt.transcribe(AudioChunk.from_float(np.zeros(16_000, np.float32), STT_SAMPLE_RATE))
    smart = TurnDetection(min_speech=0.2, max_end_of_turn_silence=1.6, end_pad=end_pad,
                          short_turn=short_turn, question_closes=question_closes)
    name = (f"Smart Turn at a 0.2 s pause + the words ({stt_model}) of a {end_pad} s pause, "
            "1.6 s maximum" + (f", a doubted turn of <= {short_turn} s waits like a closed "
                               "answer" if short_turn else ""))
    if not only_smart:
        timer_02 = TurnDetection(end_of_turn_silence=0.2, min_speech=0.2, min_barge_in=0.2)
        await evaluate("silence timer 0.2 s (the leading framework's VAD stop)", samples,
                       timer_02, None)
        await evaluate("silence timer 0.6 s (voxflow's default, 0.2 s minimum speech)",
                       samples, TurnDetection(min_speech=0.2), None)
        # voxflow's defaults but the reference's 0.2 s minimum speech: a quick "No." from a
        # fast voice holds less than the default 0.25 s of speech and would not be a turn.
        await evaluate("Smart Turn alone at a 0.2 s pause, 1.6 s maximum", samples, smart,
                       model)
    if not provisional_only:
        await evaluate(name, samples, smart, model, stt)
    if grace <= 0:
        return
    for hold in holds:
        for heard in heard_after:
            resumable = smart.model_copy(update={"resume_grace": grace, "complete_silence": hold,
                                                 "judge_continuation": judge_continuation})
            await evaluate(f"{name}; provisional: taken back if resumed within {grace} s, "
                           f"sealed {heard} s after the commit (its reply heard)"
                           + ("" if judge_continuation else "; a resumed turn judged whole")
                           + (f"; a complete turn held {hold} s" if hold else ""),
                           samples, resumable, model, stt, heard)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", choices=["paused", "short", "complete", "all"], default="all")
    parser.add_argument("--quick", action="store_true", help="two voices, half the sentences")
    parser.add_argument("--stt", default="tiny.en", help="Whisper model of the pause's words")
    parser.add_argument("--end-pad", type=float, default=0.1,
                        help="the pause (s) at which the speculative STT starts (Smart Turn "
                        "decides at 0.2 s)")
    parser.add_argument("--only-smart", action="store_true",
                        help="only Smart Turn with the words (not the timers nor the model alone)")
    parser.add_argument("--grace", type=float, default=1.0,
                        help="resume_grace (s) of the provisional configurations (0: none)")
    parser.add_argument("--heard-after", type=float, nargs="+", default=[0.3],
                        help="seconds from a commit to its reply's first sample heard "
                        "(when the turn is sealed); one configuration each")
    parser.add_argument("--provisional-only", action="store_true",
                        help="only the provisional configurations (--grace, --heard-after)")
    parser.add_argument("--judge-whole", action="store_true",
                        help="the provisional configurations judge a resumed turn on all "
                        "its audio (not only the continuation's, the default)")
    parser.add_argument("--hold", type=float, nargs="+", default=[0.0],
                        help="complete_silence (s) of the provisional configurations: a turn "
                        "judged complete (not a closed answer nor a question) ends after it; "
                        "one configuration each")
    parser.add_argument("--short-turn", type=float, default=TurnDetection().short_turn,
                        help="TurnDetection.short_turn (s) of the Smart Turn configurations "
                        "(0: off)")
    parser.add_argument("--fixed-window", action="store_true",
                        help="the pause's STT in Whisper's fixed 10 s window, not one fitted "
                        "to the utterance")
    parser.add_argument("--no-question-closes", action="store_true",
                        help="ask the model about a question too (TurnDetection."
                        "question_closes off)")
    parser.add_argument("--v2v", type=int, metavar="N", default=0,
                        help="instead: voice to voice in real time over N turns")
    parser.add_argument("--wav", type=Path, default=ANCHOR_WAV, help="the --v2v utterance")
    parser.add_argument("--text", help="--v2v: this sentence in the bundled voice instead")
    parser.add_argument("--v2v-stt", default="whisper:base", metavar="ENGINE:MODEL",
                        help="--v2v: the STT (whisper:MODEL or whisper-streaming:MODEL)")
    parser.add_argument("--configs", nargs="+", choices=sorted(V2V_CONFIGS),
                        default=list(V2V_DEFAULT), help="the --v2v configurations, in order")
    args = parser.parse_args()
    if args.v2v:
        wav = args.wav if args.wav.is_file() and args.text is None else None
        asyncio.run(voice_to_voice(args.v2v, wav, args.configs, args.text or ANCHOR_TEXT,
                                   tuple(h for h in args.hold if h), args.v2v_stt))
        return
    kinds = {"paused", "short", "complete"} if args.set == "all" else {args.set}
    began = time.perf_counter()
    samples = build_set(kinds, quick=args.quick)
    voices = sorted({s.voice for s in samples})
    print(f"end-of-turn benchmark: {len(samples)} utterances "
          f"({sum(s.kind == 'paused' for s in samples)} paused, "
          f"{sum(s.kind == 'short' for s in samples)} short answers, "
          f"{sum(s.kind == 'complete' for s in samples)} complete requests), voices: "
          f"{', '.join(voices)}; clean and at {SNR_DB:.0f} dB SNR; built in "
          f"{time.perf_counter() - began:.0f} s")
    asyncio.run(measure(samples, args.stt, args.end_pad, args.only_smart, args.grace,
                        args.heard_after, not args.judge_whole, args.provisional_only,
                        tuple(args.hold), args.short_turn, args.fixed_window,
                        not args.no_question_closes))


if __name__ == "__main__":
    main()
