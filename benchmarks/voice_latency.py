"""Voice-to-voice and barge-in latency of a whole voice session, in real time.

Run: ``uv run python benchmarks/voice_latency.py [--config default|reference|both]``

A simulated caller (:class:`~voxflow_adapters.testkit.simulated.SimulatedClient` on the
monotonic clock, so everything is paced by the wall clock) talks to a
:class:`~voxflow_voice.session.VoiceSession` running the real models (faster-whisper,
Piper, Silero) and a rule-based flow that answers instantly. The user's lines are
synthesized with the bundled voice. The script has 5 plain questions and 5 story
requests that the user cuts off with "Stop, please." (which is itself answered), so
there are >= 10 turns to time and 5 barge-ins.

Printed (medians and p90s; nothing is asserted, the machine is shared):

* **voice to voice**, measured on the client's tape: the user's last speech sample in
  (the last sample of the utterance above -40 dBFS) → the first reply sample played; and
  the session's own view of it (from the VAD's speech end), with its parts: speech end →
  transcript final (end-of-turn silence + STT), transcript → first text (the flow),
  first text → first audio (TTS of the first clause + playout);
* **barge-in stop**: the barge-in's first speech sample → the last sample of the cut
  reply played (tape), and the session's own figure (from the VAD onset);
* **stale samples**: reply audio played after its fence (must be 0), and fenced chunks;
* **real-time factor** of STT (compute time / utterance length) and TTS (synthesis
  time / audio length), measured around the engines as the session used them.

``default`` is voxflow's defaults (tiny.en, 0.6 s end-of-turn silence, 0.25 s minimum
speech, 0.3 s minimum barge-in). ``reference`` is the setup the leading framework was
measured with on this machine (Whisper base, 0.2 s end-of-turn silence, 0.2 s minimum
speech; its barge-in also needs 0.2 s of speech): it took 1.33 s voice to voice and
385 ms to stop on a barge-in. ``--config smart-turn`` is the reference with the
semantic end of turn (Smart Turn and the pause's words, ``voxflow_voice.engines.end_of_turn``).
(One run at load 2.1, Dec 1: 575 ms voice to voice, p90 767; barge-in stop 162 ms; 0
stale.) ``--config all`` adds both with Whisper's own 30 s window
(zero-padded features) instead of voxflow's silence-padded one (10 s for tiny.en, fitted to
the turn, 6-10 s, for base: ``voxflow_voice.engines.stt``).
Targets: voice to voice <= end-of-turn silence + 500 ms (and the stretch target, + 150
ms); barge-in stop <= minimum barge-in + 40 ms; stale samples 0.

Measured at dbca80b..a0729a8 (speculative replies, 10 s silence-padded STT window), four
runs of ``--config both`` at load average 0.3 to 0.9 (medians of the per-run medians, tape):

============================  ==============  ===============  =====  =============
config                        voice to voice  barge-in stop    stale  STT/utterance
============================  ==============  ===============  =====  =============
default (tiny.en, 0.6 s)      688 ms          157 ms (<= 340)  0      238 ms
reference (base, 0.2 s)       599 ms          160 ms (<= 240)  0      320 ms
============================  ==============  ===============  =====  =============

Speculative replies answered 10 of 15 default turns (the other 5 were spoken over a
reply, which is never speculated on) and 13 to 15 of 15 reference turns; none was
discarded (this script pauses only between lines). Before them and the 10 s window
(cb72298, same script, load 0.5 to 0.7): 811 ms default, 1061 ms reference. Under a load
average of 7 to 10, STT slows about 3x and voice to voice follows; the barge-in stop
does not.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from _figures import figure
from voxflow_adapters.testkit.flows import STORY
from voxflow_adapters.testkit.scenario import CallResult, run_call
from voxflow_adapters.testkit.script import CallScript
from voxflow_voice.audio import STT_SAMPLE_RATE, AudioChunk, ReplyChunk, resample
from voxflow_voice.engines import SpeechToText, SpokenSentence, TextToSpeech, VoiceEngines
from voxflow_voice.engines.stt import SttSettings, Transcript
from voxflow_voice.listen.turn_detector import TurnDetection
from voxflow_voice.session import VoiceSettings
from voxflow_voice.session.metrics import Distribution

from voxflow import ConversationConfig, Flow, listen
from voxflow.clock import MonotonicClock
from voxflow.conversation import RouterContext
from voxflow.ids import DeliveryId
from voxflow.turns import TurnRunner, TurnState

QUESTIONS = (
    "What time is it now?",
    "Can you turn on the lights?",
    "How is the weather today?",
    "Please set a timer for ten minutes.",
    "What is on my calendar?",
)
STORY_REQUESTS = (
    "Tell me a story.",
    "Tell me another story.",
    "Tell me a story please.",
    "Tell me a short story.",
    "Tell me a story again.",
)
SPLIT_QUESTION = ("Can you turn on", "the radio in the kitchen?")
SPLIT_GAP = 0.4  # seconds of silence inside it
PLAIN_SLOT = 5.0  # seconds from one plain question to the next
BARGE_AFTER = 4.5  # the user cuts a story off this long after asking for it
STORY_SLOT = 8.5  # seconds from one story request to the next item
SPEECH_LEVEL = 10 ** (-40 / 20)  # -40 dBFS: the user's speech (the script's track is clean)


@ConversationConfig(system_prompt="")
class Assistant(Flow[TurnState]):
    """Instant rule-based replies: a long story on request, a short answer otherwise."""

    def route_turn(self, context: RouterContext) -> str | None:
        text = (self.state.current_user_message or "").lower()
        if "story" in text:
            return "story"
        return "stop" if "stop" in text else "answer"

    @listen("story")
    def handle_story(self) -> str:
        return STORY

    @listen("stop")
    def handle_stop(self) -> str:
        return "Okay, I stopped."

    @listen("answer")
    def handle_answer(self) -> str:
        return "Sure, I can help with that right away."


@dataclass(slots=True)
class Timings:
    """Compute time and audio length of every STT and TTS call."""

    stt: list[tuple[float, float]] = field(default_factory=list)  # (seconds, audio seconds)
    tts: list[tuple[float, float]] = field(default_factory=list)


class TimedStt:
    """The session's STT, timed (compute time per utterance)."""

    def __init__(self, inner: SpeechToText, timings: Timings) -> None:
        self.inner, self.timings = inner, timings

    async def transcribe(self, audio: AudioChunk) -> Transcript | None:
        start = time.perf_counter()
        result = await self.inner.transcribe(audio)
        self.timings.stt.append((time.perf_counter() - start, audio.duration))
        return result


class TimedTts:
    """The session's TTS, timed (time spent waiting for synthesized chunks)."""

    def __init__(self, inner: TextToSpeech, timings: Timings) -> None:
        self.inner, self.timings = inner, timings

    @property
    def sample_rate(self) -> int:
        return self.inner.sample_rate

    def synthesize(self, text: str) -> Iterator[SpokenSentence]:
        return self.inner.synthesize(text)

    async def stream(
        self, text: str, *, delivery_id: DeliveryId, segment_id: int
    ) -> AsyncIterator[ReplyChunk]:
        busy = 0.0
        audio = 0.0
        chunks = aiter(self.inner.stream(text, delivery_id=delivery_id, segment_id=segment_id))
        try:
            while True:
                start = time.perf_counter()
                try:
                    chunk = await anext(chunks)
                except StopAsyncIteration:
                    break
                busy += time.perf_counter() - start
                audio += chunk.duration
                yield chunk
        finally:
            if audio > 0:
                self.timings.tts.append((busy, audio))
            close = getattr(chunks, "aclose", None)
            if close is not None:
                await close()


@dataclass(frozen=True, slots=True)
class Config:
    name: str
    stt: SttSettings
    turn_detection: TurnDetection
    end_of_turn: Literal["none", "smart-turn"] = "none"


# Our other settings stay at their defaults. The early utterance (speculative STT and
# replies) comes after end_pad = 0.2 s of silence, or halfway through a shorter
# end-of-turn wait (0.1 s at the reference's 0.2 s).
REFERENCE_TURNS = TurnDetection(end_of_turn_silence=0.2, min_speech=0.2, min_barge_in=0.2)
WHISPER_30S = {"encoder_window": 30.0, "encoder_padding": "zeros"}  # faster-whisper's own
CONFIGS = {
    "default": Config("default (tiny.en, voxflow defaults)", SttSettings(), TurnDetection()),
    "reference": Config(
        "reference (whisper base, 0.2 s end of turn, 0.2 s min speech / barge-in)",
        SttSettings(model="base"),
        REFERENCE_TURNS,
    ),
    "smart-turn": Config(
        "reference, with Smart Turn and the pause's words (speculative STT from 0.1 s), "
        "provisional commits (resume_grace 1 s, as from_settings)",
        SttSettings(model="base"),
        TurnDetection(min_speech=0.2, min_barge_in=0.2, end_pad=0.1, resume_grace=1.0),
        "smart-turn",
    ),
    "default-1-thread": Config(
        "default, but STT on 1 thread", SttSettings(cpu_threads=1), TurnDetection()
    ),
    "reference-1-thread": Config(
        "reference, but STT on 1 thread", SttSettings(model="base", cpu_threads=1),
        REFERENCE_TURNS,
    ),
    "default-30s": Config(
        "default, but Whisper's 30 s window (zero-padded features)",
        SttSettings.model_validate(WHISPER_30S), TurnDetection(),
    ),
    "reference-30s": Config(
        "reference, but Whisper's 30 s window (zero-padded features)",
        SttSettings.model_validate({"model": "base", **WHISPER_30S}),
        REFERENCE_TURNS,
    ),
}


def build_script(tts: TextToSpeech) -> tuple[CallScript, list[float]]:
    """The call script, and the start time of each barge-in line.

    It ends with one question said in two parts, 0.4 s of silence apart (longer than
    the 0.2 s pause that starts a speculative reply, shorter than the end of turn at
    the defaults): the speculation started in that pause must be dropped unheard and
    the question answered as one turn.
    """
    script = CallScript()
    t = 0.5
    barge_ins: list[float] = []
    for question, story in zip(QUESTIONS, STORY_REQUESTS, strict=True):
        script.user_says(t, question)
        t += PLAIN_SLOT
        script.user_says(t, story)
        script.user_says(t + BARGE_AFTER, "Stop, please.")
        barge_ins.append(t + BARGE_AFTER)
        t += STORY_SLOT
    (first, _, first_end), (rest, rest_start, _) = (_speech(tts, x) for x in SPLIT_QUESTION)
    script.user_says(t, audio=first).user_says(t + first_end + SPLIT_GAP - rest_start, audio=rest)
    return script, barge_ins


def _speech(tts: TextToSpeech, text: str) -> tuple[AudioChunk, float, float]:
    """``text`` said by the bundled voice at 16 kHz (as the script renders lines), with
    the times (s) of its first and last sample above -40 dBFS."""
    audio = np.concatenate([np.asarray(x.samples, np.float32) for x in tts.synthesize(text)])
    audio = resample(audio * 0.5, tts.sample_rate, STT_SAMPLE_RATE)
    loud = np.flatnonzero(np.abs(audio) >= SPEECH_LEVEL)
    chunk = AudioChunk.from_float(audio, STT_SAMPLE_RATE)
    return chunk, loud[0] / STT_SAMPLE_RATE, (loud[-1] + 1) / STT_SAMPLE_RATE


def speech_span(track: np.ndarray, start: float, end: float) -> tuple[float, float]:
    """Call times (s) of the first and last speech sample of the user between two times."""
    a, b = round(start * STT_SAMPLE_RATE), round(end * STT_SAMPLE_RATE)
    loud = np.flatnonzero(np.abs(track[a:b]) >= SPEECH_LEVEL)
    if loud.size == 0:
        raise RuntimeError(f"no speech between {start:.2f} s and {end:.2f} s")
    return (a + loud[0]) / STT_SAMPLE_RATE, (a + loud[-1] + 1) / STT_SAMPLE_RATE


@dataclass(slots=True)
class TapeFigures:
    """Figures measured on the client's tape (ms), and how far the VAD was off."""

    v2v: list[float] = field(default_factory=list)
    stops: list[float] = field(default_factory=list)
    end_lag: list[float] = field(default_factory=list)  # VAD speech end - last sample
    onset_lag: list[float] = field(default_factory=list)  # VAD onset - first sample
    silent_cuts: int = 0  # scripted barge-ins with no reply playing


def tape_figures(call: CallResult, barge_ins: list[float]) -> TapeFigures:
    """Voice-to-voice and barge-in stop (ms) measured on the client's tape.

    A stop is timed for each scripted barge-in line that starts while a reply is
    playing: from the line's first speech sample to the last sample of that reply.
    """
    tape = call.tape
    user = tape.track("user")
    rendered = call.client._rendered  # the script's own timeline (start, end per line)
    assert rendered is not None
    spans = [(s, e) for _, s, e in rendered.utterances]
    first_receipt: dict[DeliveryId, float] = {}
    last_sample: dict[DeliveryId, float] = {}
    for r in tape.receipts:
        first_receipt.setdefault(r.delivery_id, r.at - tape.start)
        last_sample[r.delivery_id] = r.at - tape.start + r.num_samples / r.sample_rate
    out = TapeFigures()
    started_for = {e.turn_id: e for e in call.of_kind("reply_started")}
    for committed in call.of_kind("turn_committed"):  # (a turn taken back: none heard)
        started = started_for.get(committed.turn_id)
        heard = first_receipt.get(started.delivery_id) if started is not None else None
        if heard is None:
            continue
        speech_end = committed.speech_end_at - tape.start
        line = min(spans, key=lambda s: abs(s[1] - speech_end))
        _, last_in = speech_span(user, *line)
        out.v2v.append((heard - last_in) * 1000.0)
        out.end_lag.append((speech_end - last_in) * 1000.0)
    cut = {e.delivery_id for e in call.of_kind("barge_in")}
    for at in barge_ins:
        line = min(spans, key=lambda s: abs(s[0] - at))
        first_in, _ = speech_span(user, *line)
        playing = [r for r in tape.receipts if r.at - tape.start <= first_in]
        delivery = playing[-1].delivery_id if playing else None
        if delivery is None or last_sample[delivery] < first_in - 0.1:
            out.silent_cuts += 1  # nothing was playing when the user cut in: no stop to time
            continue
        if delivery in cut:
            out.stops.append((last_sample[delivery] - first_in) * 1000.0)
    for barge in call.of_kind("barge_in"):
        onset = barge.onset_at - tape.start
        line = min(spans, key=lambda s: abs(s[0] - onset))
        first_in, _ = speech_span(user, *line)
        out.onset_lag.append((onset - first_in) * 1000.0)
    return out


async def measure(config: Config) -> None:
    timings = Timings()
    loaded = await asyncio.to_thread(VoiceEngines.load, stt=config.stt,
                                     end_of_turn=config.end_of_turn)
    engines = VoiceEngines(
        stt=TimedStt(loaded.stt, timings), tts=TimedTts(loaded.tts, timings),
        make_vad=loaded.make_vad, end_of_turn=loaded.end_of_turn,
    )
    # Warm both models up (first inference allocates), off the measured call.
    await loaded.stt.transcribe(AudioChunk.from_float(np.zeros(16_000, np.float32), 16_000))
    async for _ in loaded.tts.stream("Warming up.", delivery_id=DeliveryId("warm-up"),
                                     segment_id=1):
        pass
    script, barge_ins = build_script(loaded.tts)
    settings = VoiceSettings(turn_detection=config.turn_detection)
    turns = TurnRunner(Assistant(suppress_flow_events=True))
    started = time.perf_counter()
    call = await run_call(turns, script, engines, clock=MonotonicClock(), settings=settings,
                          tail=3.0)
    wall = time.perf_counter() - started
    summary = call.session.summary()
    tape = tape_figures(call, barge_ins)
    td = config.turn_detection
    print(f"\n== {config.name} ({len(script.utterances)} user lines)")
    print(f"   call of {wall:.0f} s, {len(call.transcripts())} turns committed, "
          f"{len(call.of_kind('barge_in'))} barge-ins ({len(barge_ins)} scripted, "
          f"{tape.silent_cuts} with no reply playing), "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    wait = td.end_of_turn_silence if config.end_of_turn == "none" else td.decision_pause
    v2v_target = wait * 1000 + 500
    v2v_stretch = wait * 1000 + 150
    stop_target = td.min_barge_in * 1000 + 40
    speculative = sum(1 for m in call.metrics() if m.speculative)
    discarded = len(call.of_kind("speculative_reply_discarded"))
    split = [t for t in call.transcripts() if "radio" in t.lower()]
    begun = {e.delivery_id for e in call.of_kind("reply_started")}
    unstarted = sum(r.num_samples for r in call.tape.receipts if r.delivery_id not in begun)
    rows = [
        (f"voice to voice, tape (targets <= {v2v_target:.0f} / {v2v_stretch:.0f} ms)",
         str(Distribution.of(tape.v2v))),
        *summary.rows()[:4],
        ("  VAD speech end - last speech sample", str(Distribution.of(tape.end_lag))),
        (f"barge-in stop, tape, scripted (target <= {stop_target:.0f} ms)",
         str(Distribution.of(tape.stops))),
        ("barge-in stop, session (VAD onset → last sample)", str(summary.barge_in_stop)),
        ("  VAD onset - first speech sample", str(Distribution.of(tape.onset_lag))),
        ("stale samples after a fence (must be 0)", str(call.stale_samples())),
        ("fenced chunks (dropped before playout)", str(summary.fenced_chunks)),
        ("turns answered by a speculative reply", f"{speculative} of {len(call.metrics())}"),
        ("speculative replies discarded with a reply ready", str(discarded)),
        ("  the split question, committed as", f"{split}"),
        ("  samples played of replies never started (must be 0)", str(unstarted)),
    ]
    stt_rtf = [busy / audio for busy, audio in timings.stt if audio > 0]
    tts_rtf = [busy / audio for busy, audio in timings.tts if audio > 0]
    stt_ms = Distribution.of(busy * 1000 for busy, _ in timings.stt)
    rows += [
        ("STT compute per utterance", str(stt_ms)),
        ("STT real-time factor (compute / audio)", _ratio(stt_rtf)),
        ("TTS real-time factor (synthesis / audio)", _ratio(tts_rtf)),
    ]
    for label, value in rows:
        print(f"   {label:<52} {value}")
    transcripts = call.transcripts()
    print(f"   transcripts: {transcripts[:4]} ...")
    v2v = Distribution.of(tape.v2v)
    if v2v.median_ms is not None:
        figure(f"voice to voice, {config.name}", v2v.median_ms, "ms",
               target=f"<= {v2v_target:.0f} (stretch {v2v_stretch:.0f})")


def _ratio(values: list[float]) -> str:
    if not values:
        return "n/a"
    d = Distribution.of(values)
    assert d.median_ms is not None and d.p90_ms is not None
    return f"median {d.median_ms:.3f}, p90 {d.p90_ms:.3f} (n={d.count})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--config", choices=[*CONFIGS, "both", "all"], default="both",
        help="both: default and reference; all: also both with Whisper's 30 s window",
    )
    args = parser.parse_args()
    names = {"both": ["default", "reference"], "all": list(CONFIGS)}.get(
        args.config, [args.config]
    )
    print("voice latency benchmark: real time, one scripted call per configuration")
    for name in names:
        asyncio.run(measure(CONFIGS[name]))


if __name__ == "__main__":
    main()
