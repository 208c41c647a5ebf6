"""The calls of ``capacity.py``: its caller (the question, asked again after each reply),
the flow's long fixed reply, N concurrent calls on shared models (:func:`run_calls`) and
the figures one run of them comes to (:class:`CapacityRow`). ``cpu_budget.py`` and
``phone_capacity.py`` run the same calls.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import resource
import statistics
import sys
import time
from dataclasses import dataclass

import numpy as np
from voice_latency import SPEECH_LEVEL, TimedStt, TimedTts, Timings
from voxflow_adapters.hosting.admission import AdmissionController
from voxflow_adapters.hosting.errors import CapacityExceededError
from voxflow_adapters.testkit.flows import Teller
from voxflow_adapters.testkit.scenario import CallResult, run_call
from voxflow_adapters.testkit.script import CallScript
from voxflow_voice.audio import STT_SAMPLE_RATE, AudioChunk, resample
from voxflow_voice.engines import VoiceEngines
from voxflow_voice.events import SessionEvent, TurnMetrics
from voxflow_voice.session import VoiceSettings

from voxflow.clock import Clock, MonotonicClock
from voxflow.ids import DeliveryId
from voxflow.llm import preload

__all__ = ["AFTER", "BEFORE", "CALL_LIMIT", "CYCLE", "GAP", "P95_TARGET_MS", "QUESTION",
           "REPLY", "TAIL", "CapacityRow", "caller_script", "heard_right", "load_engines",
           "question_audio", "run_calls", "second_wave", "voice_to_voice"]

QUESTION = "Can you tell me what is on my calendar this afternoon?"
REPLY = (
    "Sure. This afternoon you have a design review at two, with the whole product team. "
    "At four you are meeting Ada about the harbour project, and at five thirty "
    "you have a call with the bank."
)
"""The flow's reply to every question: about 9 s with the bundled voice."""
GAP = 0.8  # s: the caller asks again this long after the reply ran dry
CYCLE = 12.0  # s: about one question and its reply; the first questions spread over it
TAIL = 10.0  # s: how long a call waits after the last audio (a slow last reply is heard)
CALL_LIMIT = 300.0  # s: a call ends by then whatever it waits for
P95_TARGET_MS = 1000.0
BEFORE = VoiceSettings(synthesis_ahead=0.0)
"""The session as it was before the scheduler (``--scheduler off``): each sentence
synthesized only once the one before was handed to playback."""
AFTER = VoiceSettings(synthesis_ahead=3.0)
"""``--scheduler on``: later sentences synthesized up to 3 s ahead of playback."""


@dataclass(frozen=True, slots=True)
class CapacityRow:
    """The figures of one run of N concurrent calls."""

    calls: int
    scheduler: bool  # model work on the deadline-aware ModelScheduler (else first come)
    asked: int  # questions the callers asked (scripted)
    committed: int  # user turns the sessions committed
    v2v_p50_ms: float | None
    v2v_p95_ms: float | None
    cpu_per_call_pct: float
    rss_peak_mb: float
    rss_per_extra_call_mb: float
    stale_samples: int
    turns_lost: int  # questions no reply was heard to
    barge_ins: int  # replies the caller spoke over (it took an underrun for their end)
    stt_ms_p50: float | None
    tts_rtf_p50: float | None
    seconds: float  # wall time of the run
    transcribed_right: int = 0  # committed turns whose words are QUESTION's (normalized)
    offered: int = 0  # calls offered (with admission; else = calls)
    refused: int = 0  # of those, refused by the AdmissionController
    reasons: tuple[str, ...] = ()  # the refusals' reasons, in order
    cpu_seconds: float = 0.0  # the process's CPU time over the run (all threads)
    heard_seconds: float = 0.0  # the calls' seconds, each to its last reply sample
    held_seconds: float = 0.0  # with admission: the calls' seconds admitted -> released
    late_turns: int = 0  # turns answered later than P95_TARGET_MS (voice to voice)
    resumed_turns: int = 0  # with a lull: turns answered after it (see run_calls)
    resumed_late: int = 0  # of those, answered later than P95_TARGET_MS
    resumed_p95_ms: float | None = None  # their voice-to-voice p95

    @property
    def within_target(self) -> bool:
        """p95 <= 1 s, every question committed, no stale sample, no turn lost."""
        return self.meets(P95_TARGET_MS)

    def meets(self, p95_ms: float) -> bool:
        """p95 <= ``p95_ms``, every question committed, no stale sample, no turn lost."""
        return (self.v2v_p95_ms is not None and self.v2v_p95_ms <= p95_ms
                and self.committed == self.asked and self.stale_samples == 0
                and self.turns_lost == 0)


def question_audio(engines: VoiceEngines) -> AudioChunk:
    """:data:`QUESTION` said by the bundled voice at 16 kHz (as scripts render lines)."""
    tts = engines.tts
    audio = np.concatenate([np.asarray(x.samples, np.float32) for x in tts.synthesize(QUESTION)])
    return AudioChunk.from_float(resample(audio * 0.5, tts.sample_rate, STT_SAMPLE_RATE),
                                 STT_SAMPLE_RATE)


def caller_script(question: AudioChunk, turns: int, start: float,
                  lull: float = 0.0) -> CallScript:
    """Ask at ``start``, then again :data:`GAP` s after each reply, ``turns`` times; with a
    ``lull`` (s), then stay on the line silent that long after the last reply and ask
    ``turns`` times more (a caller on hold, reading, thinking)."""
    script = CallScript().user_says(start, audio=question)
    for _ in range(turns - 1):
        script.then_says(audio=question, after="reply_end", gap=GAP, max_wait=8.0)
    if lull > 0:
        script.then_says(audio=question, after="reply_end", gap=lull, max_wait=8.0 + lull)
        for _ in range(turns - 1):
            script.then_says(audio=question, after="reply_end", gap=GAP, max_wait=8.0)
    return script


def voice_to_voice(call: CallResult) -> list[float]:
    """Per committed turn whose reply was heard (ms): the user's last speech sample up to
    the turn's speech end (the VAD's, which follows it) → the reply's first sample played,
    on the caller's tape."""
    tape = call.tape
    loud = np.flatnonzero(np.abs(tape.track("user")) >= SPEECH_LEVEL)
    first_heard: dict[DeliveryId, float] = {}
    for r in tape.receipts:
        first_heard.setdefault(r.delivery_id, r.at - tape.start)
    speech_end = {e.turn_id: e.speech_end_at - tape.start for e in call.of_kind("turn_committed")}
    out: list[float] = []
    for started in call.of_kind("reply_started"):
        end, heard = speech_end.get(started.turn_id), first_heard.get(started.delivery_id)
        if end is None or heard is None:
            continue
        before = loud[loud < round(end * STT_SAMPLE_RATE)]
        if before.size:
            out.append((heard - (before[-1] + 1) / STT_SAMPLE_RATE) * 1000.0)
    return out


def heard_right(text: str) -> bool:
    """Whether a committed turn's ``text`` is :data:`QUESTION`'s words (case, punctuation
    and the whitespace between words aside; "what's" read as "what is")."""
    return _words(text) == _words(QUESTION)


_SPELLED_OUT = {"what's": ("what", "is")}  # QUESTION's words a transcript may contract


def _words(text: str) -> list[str]:
    words: list[str] = []
    for word in re.findall(r"[a-z0-9']+", text.lower()):
        word = word.strip("'")
        words.extend(_SPELLED_OUT.get(word, (word,) if word else ()))
    return words


def check_stt(spec: str) -> None:
    """Raise the typed error :func:`load_engines` would raise for the STT ``spec``
    (malformed, no such engine, a bad option, a Whisper model that is not there), without
    loading a model: so a command line can refuse it before the slow start-up.

    Raises:
        voxflow.errors.VoxflowError: the spec's error (its message says the fix)."""
    from voxflow_voice.engines.models import find_whisper_model
    from voxflow_voice.engines.registry import choose_engine
    from voxflow_voice.engines.stt import SttSettings

    chosen = choose_engine("stt", spec)
    if isinstance(chosen.options, SttSettings):
        find_whisper_model(chosen.options.model)


def _call_seconds(call: CallResult) -> float:
    """How long ``call`` lasted: from its start to the end of the last reply sample played
    (its final wait for a reply that never came excluded)."""
    tape = call.tape
    ends = [r.at - tape.start + r.num_samples / r.sample_rate for r in tape.receipts]
    return max(ends, default=len(tape.track("user")) / STT_SAMPLE_RATE)


def _rss_mb() -> float:
    """The current resident set (MB): /proc on Linux, else the peak so far."""
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            pages = int(statm.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 1e6
    except (OSError, ValueError, IndexError):
        scale = 1.0 if sys.platform == "darwin" else 1024.0  # bytes on macOS, KiB elsewhere
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale / 1e6


def _percentile(values: list[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


async def run_calls(
    engines: VoiceEngines, calls: int, turns: int, *, clock: Clock | None = None,
    baseline: tuple[int, float] | None = None, admission: AdmissionController | None = None,
    settings: VoiceSettings | None = None, reply: str = REPLY, arrivals: float = CYCLE,
    lull: float = 0.0,
) -> tuple[CapacityRow, list[CallResult]]:
    """Run ``calls`` concurrent callers of ``turns`` questions each on shared ``engines``,
    the flow answering every question with ``reply`` (the benchmark's: :data:`REPLY`).

    ``clock`` is the calls' clock (monotonic, i.e. real time, unless given: a
    :class:`~voxflow.clock.VirtualClock` works for one call only, and its CPU and
    latency figures are then meaningless). ``baseline`` is (calls, peak RSS in MB) of the
    previous row, for the RSS per extra call: (0, the RSS now) if None.

    With ``admission``, the ``calls`` are *offered*: one arrives every ``arrivals`` /
    calls seconds (``arrivals``: CYCLE unless given) and asks 0.5 s after it is admitted,
    or goes away refused (its reason kept in the row); the controller hears every turn's
    voice to voice (as ``voxflow serve`` does) and probes the event loop's lag. The row
    is the admitted calls'.

    With a ``lull`` (s, and ``admission``): every admitted caller asks its ``turns``
    questions, stays on the line silent ``lull`` s, then asks ``turns`` more
    (:func:`caller_script`); the first half of the offers arrive over ``arrivals`` s,
    the second half while the first wave sits silent (:func:`second_wave`), each of
    those asking twice ``turns`` questions at once, with no lull, so they still talk
    when the first wave talks again. The row's *resumed* turns are those answered
    after the lull: the first wave's last ``turns`` each, and every turn of the second
    wave.
    """
    if calls < 1 or turns < 1:
        raise ValueError(f"calls and turns must be >= 1, got {calls} and {turns}")
    clock = clock if clock is not None else MonotonicClock()
    base_calls, base_rss = baseline if baseline is not None else (0, _rss_mb())
    idle = _rss_mb()
    timings = Timings()
    timed = VoiceEngines(stt=TimedStt(engines.stt, timings), tts=TimedTts(engines.tts, timings),
                         make_vad=engines.make_vad, end_of_turn=engines.end_of_turn,
                         scheduler=engines.scheduler)
    question = question_audio(engines)
    peak = idle
    done = asyncio.Event()
    reasons: list[str] = []
    held: list[float] = []  # each admitted call's seconds from admission to release

    async def sample_rss() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, _rss_mb())
            await asyncio.sleep(0.25)

    def record(event: SessionEvent) -> None:
        if (admission is not None and isinstance(event, TurnMetrics)
                and (ms := event.voice_to_voice_ms) is not None):
            admission.record(ms)

    first = (calls + 1) // 2 if lull > 0 and admission is not None else calls
    wave_at, wave_over = second_wave(arrivals, turns, lull)

    def asks(i: int) -> int:  # (the first wave asks as many after its lull)
        return turns if i < first or lull <= 0 else 2 * turns

    def offered_at(i: int) -> float:
        if i < first:
            return i * arrivals / first
        return wave_at + (i - first) * wave_over / max(1, calls - first)

    async def offer(i: int) -> CallResult | None:
        if admission is None:
            return await run_call(Teller(story=reply, trigger=None),
                                  caller_script(question, turns, 0.5 + i * CYCLE / calls),
                                  timed, clock=clock, tail=TAIL, settings=settings)
        await asyncio.sleep(offered_at(i))
        try:
            slot = admission.admit(f"call-{i}")
        except CapacityExceededError as exc:
            reasons.append(str(exc))
            return None
        admitted = time.perf_counter()
        try:
            with slot:
                return await run_call(Teller(story=reply, trigger=None),
                                      caller_script(question, asks(i), 0.5,
                                                    lull if i < first else 0.0), timed,
                                      clock=clock,
                                      tail=TAIL, on_event=record, settings=settings)
        finally:
            held.append(time.perf_counter() - admitted)

    cpu0, wall0 = time.process_time(), time.perf_counter()
    sampler = asyncio.create_task(sample_rss())
    # the admission's event-loop lag probe, as voxflow serve runs it
    probe = (asyncio.create_task(admission.meter.watch_loop()) if admission is not None
             else None)
    try:
        offered = await asyncio.gather(*(offer(i) for i in range(calls)))
    finally:
        done.set()
        await sampler
        if probe is not None:
            probe.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await probe
    results = [call for call in offered if call is not None]
    resumed = [ms for i, call in enumerate(offered) if call is not None
               for ms in voice_to_voice(call)[turns if i < first else 0:]] if lull > 0 else []
    refused, calls = calls - len(results), len(results)
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    peak = max(peak, _rss_mb())
    v2v = [ms for call in results for ms in voice_to_voice(call)]
    # (with a lull each call asks twice its turns)
    asked_by = [turns * (2 if lull > 0 else 1) for call in offered if call is not None]
    asked = sum(asked_by)
    lost = sum(max(0, ask - len({r.delivery_id for r in call.tape.receipts}))
               for ask, call in zip(asked_by, results, strict=True))
    heard = sum(_call_seconds(call) for call in results)
    stt = [busy * 1000.0 for busy, _ in timings.stt]
    tts = [busy / audio for busy, audio in timings.tts if audio > 0]
    row = CapacityRow(
        calls=calls, scheduler=engines.scheduler is not None, asked=asked,
        committed=sum(len(call.of_kind("turn_committed")) for call in results),
        transcribed_right=sum(heard_right(e.text) for call in results
                              for e in call.of_kind("turn_committed")),
        v2v_p50_ms=_percentile(v2v, 50), v2v_p95_ms=_percentile(v2v, 95),
        cpu_per_call_pct=100.0 * cpu / max(heard, 1e-9),
        rss_peak_mb=peak, rss_per_extra_call_mb=(peak - base_rss) / max(1, calls - base_calls),
        stale_samples=sum(call.stale_samples() for call in results),
        turns_lost=lost,
        barge_ins=sum(len(call.of_kind("barge_in")) for call in results),
        stt_ms_p50=statistics.median(stt) if stt else None,
        tts_rtf_p50=statistics.median(tts) if tts else None,
        seconds=wall, offered=calls + refused, refused=refused, reasons=tuple(reasons),
        cpu_seconds=cpu, heard_seconds=heard, held_seconds=sum(held),
        late_turns=sum(ms > P95_TARGET_MS for ms in v2v), resumed_turns=len(resumed),
        resumed_late=sum(ms > P95_TARGET_MS for ms in resumed),
        resumed_p95_ms=_percentile(resumed, 95),
    )
    return row, results


def second_wave(arrivals: float, turns: int, lull: float) -> tuple[float, float]:
    """When :func:`run_calls`' second wave of offers begins with a ``lull``, and the
    seconds it is spread over: from two thirds of the lull to eleven twelfths as the
    first caller admitted lives it (at 0 s, talking ``turns`` cycles of about CYCLE +
    1.5 s, a question, its reply, the gap and the answer's latency, then silent
    ``lull`` s), so the whole first wave (admitted by ``arrivals`` s) has been silent a
    while (for a lull over 1.5 x ``arrivals``), none talks again yet, and the second
    wave, talking 2 x ``turns`` cycles, still talks when the first wave does again (for
    a lull under 6 x ``turns`` cycles: 162 s at 2 turns)."""
    talk = turns * (CYCLE + 1.5)
    return talk + 2 * lull / 3, lull / 4


async def load_engines(*, scheduling: bool = True,
                       stt: str | None = None) -> tuple[VoiceEngines, float]:
    """The shared models, warmed up (``VoiceEngines.warm_up``: the first inference
    allocates, and it measures the models' real-time factors), and the idle RSS (MB).

    With ``scheduling`` their work runs on the deadline-aware ModelScheduler; without,
    on the default executor, first come first served (the models themselves are the
    same objects either way: loaded once per process; Piper without its speech cache,
    as the module says; ``stt``: the STT spec, ``whisper:tiny.en`` if None). litellm is
    loaded too, as every entry point does at start-up: its import and warm-up (~4.6 s of
    CPU, once per process) would otherwise be counted as the first row's calls' CPU."""
    engines, _ = await asyncio.gather(
        asyncio.to_thread(VoiceEngines.load, stt=stt, tts="piper:cache_mb=0",
                          scheduling=scheduling),
        preload())
    await engines.warm_up()  # as every entry point: the models' real-time factors measured
    return engines, _rss_mb()
