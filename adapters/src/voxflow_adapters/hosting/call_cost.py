"""What a call costs on this machine, measured: the process's CPU time per call, the CPU
other processes leave it, and how late its event loop runs.

A call's cost is not a constant: it depends on the machine (a faster core, fewer cores),
on the engines (Whisper's size, Piper's voice) and on the calls (dense talkers, mostly
listeners). :class:`CallCostMeter` learns it from the calls this process runs:

* **CPU per call**: the process's CPU time (all threads: the models' executors too,
  ``time.process_time``) over windows of at least :attr:`CostSettings.window_seconds`,
  divided by the call-seconds run in the window (the area under the live-calls curve,
  kept exactly from :meth:`CallCostMeter.call_started` / :meth:`CallCostMeter.call_ended`).
  The process's own idle cost (heartbeat, event loop: a window with no call) is measured
  too and subtracted first. Time before the meter was made, or before its
  :meth:`CallCostMeter.watch_loop` started (:meth:`CallCostMeter.restart`), is never
  counted: the engines' and litellm's one-time start-up, a few seconds of CPU, is
  neither a call's cost nor the process's idle one (``WebRtcServer.start()`` loads
  litellm, then starts the watch).
* **from a prior, slowly**: the estimate starts at the *prior*, the cost of a call
  derived from this machine's models (:func:`derived_call_cost`: the real-time factors
  the engines' warm-up measured, :class:`~voxflow_voice.engines.rates.WarmUpRates`,
  times a :class:`CallProfile`'s seconds of speech, reply and input per second of call,
  plus the call's work outside the models scaled by the same machine's speed);
  :attr:`CallCost.source` says ``models`` until a window is measured. A configured
  :attr:`CostSettings.prior_call_cost` overrides it (source ``prior``), and so does
  :data:`UNMEASURED_CALL_COST` when the engines were never warmed up (no real-time
  factor to derive from). It moves towards each window's figure by
  :attr:`CostSettings.smoothing` (an EWMA over about 20 windows, longer than one call's
  question and answer: a call's first seconds, the caller asking, cost less than its
  reply). A window in which the machine had no idle CPU only raises it: a starved
  process does less work per call than its calls ask for.
* **not forgetting a busy stretch**: the EWMA is the CPU of the calls *held* lately, so
  it falls while they sit silent (callers on hold, reading, thinking: ``capacity.py
  --offered 24`` read 12-15 % a call while 9 calls talked, 6.9 % after 15 s of silence),
  and slots taken from it would admit calls that do not fit once the silent ones talk
  again. The slots are therefore taken from the *highest the EWMA was* over the last
  :attr:`CostSettings.horizon_seconds` (3 minutes; a sliding maximum of its value after
  each measured window, of the measured windows alone: see below): a lull shorter than
  the horizon lowers the EWMA (:attr:`CallCost.recent`), not the slots; a load that
  stays cheaper raises them once its lower EWMA is all the horizon holds, the old peak
  aging out window by window (no ratchet); with no call at all the peak ages out too.
  Why the EWMA's peak and not a high percentile of the raw windows: one window's cost
  per call swings with where the calls are in their question-and-answer cycle
  (``capacity.py --offered 24 --turns 2 --lull 150``, Dec 5, each 5 s's CPU over its
  call-seconds: 5.7-15.1 % while 9 calls talked, the EWMA 9.7-11.6 %; 3.5-29.4 % while 2
  did), so a high percentile would take every call at its costliest seconds and cut a
  steady load's slots by a third or more; the EWMA averages about three cycles, and its
  peak over the horizon is that average while the calls talked (in that run 11.7 % held
  through the lull while the EWMA fell to 1.8 %: 9 silent calls cost 1.8-1.9 % each).
  The estimate starts at the prior, the peak does not: it is fed the EWMA of the
  measured windows alone (the same weights, started at the first window's figure, not
  the prior), or the estimate where that is lower, so a fresh process's slots follow its
  estimate down from the prior within ~40 s, as without a horizon (the prior, set above
  a call's measured cost, is no peak to hold for 3 minutes: a scaled-out worker at
  :data:`UNMEASURED_CALL_COST` would hold about half its slots); restarting the window
  (:meth:`CallCostMeter.restart`) keeps the peak, as it keeps every closed window's
  figure.
* **the machine's other work**: the CPU other processes used over the same windows
  (``/proc/stat``, :func:`machine_busy_seconds`) is not the calls' to use: the first
  window's figure at once, a rise by half, a fall as slowly as the cost.
* **event-loop lag**: :meth:`CallCostMeter.watch_loop` (a task its owner runs) sleeps
  :data:`LAG_PROBE_INTERVAL` again and again and records how late it wakes; every frame
  of every call is handled on that loop, so a late loop is late audio whatever the CPU
  figures say.

:meth:`CallCostMeter.cost` turns it into slots: ``floor(target_utilization * (cores -
other processes' cores) / cost per call)`` (the horizon's highest), at least 1. The
:class:`~voxflow_adapters.hosting.admission.AdmissionController` admits up to that many
(and at most ``max_calls``).
"""

from __future__ import annotations

import asyncio
import math
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from voxflow_voice.engines.rates import ModelRates, WarmUpRates

__all__ = ["DENSE_CALLER", "LAG_PROBE_INTERVAL", "PHONE_CALLER", "REFERENCE_WARM_UP_TTS_RTF",
           "UNMEASURED_CALL_COST", "WEBRTC_CALLER",
           "CallCost", "CallCostMeter", "CallProfile", "CostSettings", "available_cores",
           "derived_call_cost", "machine_busy_seconds"]

UNMEASURED_CALL_COST = 0.28
"""The prior when nothing was measured, not even the models (engines that were never
warmed up: :meth:`~voxflow_voice.engines.VoiceEngines.warm_up`): a cautious share of a
core, measured by nothing, above what a WebRTC call costs the server (17.0-18.5 % in
``webrtc_cpu.py``'s table; ``webrtc_load.py``'s older 24-28 % counted litellm's import,
0b2883d)."""

REFERENCE_WARM_UP_TTS_RTF = 0.087
"""Piper's CPU real-time factor as :meth:`~voxflow_voice.engines.VoiceEngines.warm_up`
measures it on the reference machine (the 2-core development machine of
:class:`CallProfile`'s figures, Dec 5): the median of 5 warm-ups, each in a fresh
process after ``VoiceEngines.load()`` (the bundled voice, tiny.en, Silero; flock'd,
load 3.6-3.8): TTS 0.083-0.099 (median 0.087), STT 0.070-0.082 (0.075), VAD
0.0038-0.0060 (0.0040) CPU s per s of the 2.6 s question."""

LAG_PROBE_INTERVAL = 0.1
"""Seconds between two event-loop lag probes of :meth:`CallCostMeter.watch_loop`."""


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity, else the machine's count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # (not Linux)
        return max(1, os.cpu_count() or 1)


def machine_busy_seconds() -> float | None:
    """CPU seconds every process of the machine has run so far (Linux ``/proc/stat``:
    user, nice, system, irq, softirq and steal time); None where it cannot be read, or
    where it counts other cores than this process may use (a container's CPU set: the
    rest of the machine's work is not taken from its cores)."""
    try:
        with open("/proc/stat", encoding="ascii") as stat:
            lines = stat.read().splitlines()
        ticks = os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, AttributeError):
        return None
    per_cpu = sum(1 for line in lines if line.startswith("cpu") and line[3:4].isdigit())
    if not lines or not lines[0].startswith("cpu ") or per_cpu != available_cores():
        return None
    fields = [int(v) for v in lines[0].split()[1:9]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields + [0] * (8 - len(fields))
    return (user + nice + system + irq + softirq + steal) / ticks


class CallProfile(BaseModel):
    """What a call asks of the models per second of call, and what it costs besides.

    The defaults are :data:`DENSE_CALLER`, ``benchmarks/capacity.py``'s caller as
    ``benchmarks/cpu_budget.py`` measured it (README, Dec 4: a 3 s question every 13.6 s,
    a 9.6 s reply; the whole call 13.0 % of a core, 7.5 % of it neither model nor codec).
    The models' shares are multiplied by the *warm-up's* real-time factors, measured on a
    ~2.6 s sentence: above a long reply's (on the reference machine Piper 0.087 at warm-up
    against 0.058 per s of a 9.6 s reply, Whisper 0.075 against 0.041 per s of a 3 s
    question), so the prior over-states a call's model work by about 3 points of a core
    (0.71 x 0.029 + 0.22 x 0.034): there it derives 15.7 % for a dense call where
    ``benchmarks/webrtc_cpu.py`` measured 13.3-13.6 %, 19.9 % over WebRTC against
    17.0-18.5 %. A prior above the measured cost, not below it.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    speech: float = Field(
        0.22, ge=0, le=1, description="seconds the caller speaks per second of call "
        "(3.0 s per 13.6 s cycle): each is decoded by the STT",
    )
    stt_passes: float = Field(
        1.0, ge=0, le=10, description="times each second of speech is decoded (a pause's "
        "early decode and the turn's)",
    )
    reply: float = Field(
        0.71, ge=0, le=1, description="seconds of reply synthesized per second of call "
        "(9.6 s per 13.6 s cycle)",
    )
    heard: float = Field(
        1.0, ge=0, le=1, description="seconds of the caller's audio the VAD hears per "
        "second of call (all of it)",
    )
    overhead: float = Field(
        0.075, ge=0, le=64, description="share of a core a call costs outside the models "
        "(session, event loop, playout, resampling, transport) on the reference machine",
    )
    reference_tts_rtf: float = Field(
        REFERENCE_WARM_UP_TTS_RTF, gt=0, le=100, description="the TTS's CPU real-time "
        "factor as the warm-up measures it on the reference machine "
        "(REFERENCE_WARM_UP_TTS_RTF): the overhead is scaled by this machine's warm-up "
        "figure over it (a slower core, a costlier call)",
    )


DENSE_CALLER = CallProfile()
"""The dense caller of ``benchmarks/capacity.py`` on the simulated transport (see
:class:`CallProfile`)."""
WEBRTC_CALLER = CallProfile(overhead=0.117)
"""The same caller over WebRTC: aiortc's per-packet work (RTP, SRTP, jitter buffer,
pacing, Opus) on top. ``benchmarks/webrtc_cpu.py`` measured the same dense call in one
server process over WebRTC and on the simulated transport, twice at 99cfcc8 (its table;
medians of 3 runs each): 17.0 against 13.6 % (load 3.5-6.6), 18.5 against 13.3 % (load
1.3-3.6), +3.3 and +5.2 points, so the overhead is taken at 0.075 + 0.042 (their mean).
(An older 0.20 came from WebRTC calls measured at 25-28 %, a figure that held litellm's
import: 0b2883d.)"""
PHONE_CALLER = CallProfile(overhead=0.083)
"""The same caller over the phone (``voxflow phone``, a phone call worker): the media
WebSocket's JSON and base64 every 20 ms, 8 kHz mu-law both ways and the resampling to
and from it on top. ``benchmarks/webrtc_cpu.py --kinds simulated,phone`` measured the
dense call in one server process both ways, three runs (Dec 5, its table; medians of 3,
4 and 4 each): +1.6 (load 0.3-1.1), +0.8 (load 1.7-7.6) and +0.0 points (load 1.0-2.1)
over the phone, within each kind's own spread of 1-3 points; so the overhead is 0.075 +
0.008, the median (and mean) of the three (the simulated caller lives in the server
process and is counted there, the carrier is not: the phone's own work is if anything
a little more)."""


def derived_call_cost(rates: WarmUpRates, profile: CallProfile = DENSE_CALLER) -> float:
    """The share of a core a call of ``profile`` costs on the machine whose models ran
    at ``rates`` (CPU seconds per second of audio): ``stt x speech x stt_passes + tts x
    reply + vad x heard + overhead x (tts / reference_tts_rtf)``."""
    if not isinstance(rates, WarmUpRates):
        raise TypeError(f"rates must be WarmUpRates, got {type(rates).__name__}")
    if not isinstance(profile, CallProfile):
        raise TypeError(f"profile must be a CallProfile, got {type(profile).__name__}")
    p = profile
    models = rates.stt * p.speech * p.stt_passes + rates.tts * p.reply + rates.vad * p.heard
    return models + p.overhead * rates.tts / p.reference_tts_rtf


class CostSettings(BaseModel):
    """How a call's cost is measured, and how many calls it allows."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    target_utilization: float = Field(
        0.7, gt=0, le=1, description="share of the cores the calls may use together: "
        "the rest absorbs bursts (every caller's turn ending at once), so answers stay fast",
    )
    prior_call_cost: float | None = Field(
        None, gt=0, le=64, description="share of a core one call is taken to cost before "
        "any was measured (None: derived from the models' real-time factors and the "
        "profile)",
    )
    profile: CallProfile = Field(
        default_factory=CallProfile, description="the call the prior is derived for",
    )
    window_seconds: float = Field(
        2.0, gt=0, le=3600, description="CPU time is measured over windows at least this long",
    )
    min_call_seconds: float = Field(
        1.0, gt=0, le=86_400, description="a window counts for the cost per call once it "
        "ran this many call-seconds",
    )
    smoothing: float = Field(
        0.1, gt=0, le=1, description="weight of the newest window in the EWMAs of the cost "
        "per call (which starts at the prior) and of the other processes' CPU",
    )
    lag_window_seconds: float = Field(
        5.0, gt=0, le=3600, description="event-loop lag is judged over this many seconds",
    )
    horizon_seconds: float = Field(
        180.0, ge=0, le=3600, description="the slots are set from the highest the cost "
        "per call was over this many seconds (0: from its EWMA now): calls held silent "
        "lower the EWMA, not the slots, until the lull has lasted this long",
    )


@dataclass(frozen=True, slots=True)
class CallCost:
    """What a call costs here, and the calls that allows.

    Attributes:
        per_call: share of a core one call is taken to cost (0.13: 13 % of a core):
            :attr:`recent`, or where higher the highest the measured windows' EWMA (at
            most :attr:`recent` each time) was over the last
            :attr:`CostSettings.horizon_seconds` (the slots are set from it).
        recent: the cost per call now: the EWMA of the recent windows (the prior before
            one), below :attr:`per_call` while the calls are cheaper than they were
            within the horizon (a lull).
        source: ``"measured"`` (from this process's calls), ``"models"`` (none measured
            yet: the prior derived from the models' real-time factors) or ``"prior"``
            (none measured yet: :attr:`CostSettings.prior_call_cost`, else
            :data:`UNMEASURED_CALL_COST`).
        prior: the prior the measured cost started from.
        idle: share of a core the process spends with no call.
        cores: the cores it may run on.
        others: cores other processes of the machine keep busy (0 where unknown).
        slots: calls the cores hold at the target utilisation (at least 1).
        windows: windows the measured cost is taken over.
        loop_lag_ms: how late the event loop woke (the 90th percentile of the probes of
            the last :attr:`CostSettings.lag_window_seconds`; None: no probe yet).
    """

    per_call: float
    source: Literal["measured", "models", "prior"]
    prior: float
    recent: float
    idle: float
    cores: int
    others: float
    slots: int
    windows: int
    loop_lag_ms: float | None


class CallCostMeter:
    """Measures this process's CPU per call and its event-loop lag (thread-safe).

    Args:
        settings: the windows, the prior and the target utilisation.
        cores: the cores the calls may use (default :func:`available_cores`).
        cpu_time: the process's CPU seconds so far (default ``time.process_time``).
        machine_time: every process's CPU seconds so far (default
            :func:`machine_busy_seconds`; None from it: unknown, no other process counted).
        clock: monotonic seconds (default ``time.monotonic``).
        rates: the engines' real-time factors (``VoiceEngines.rates``): the prior is
            derived from their warm-up's, read when the cost is (a warm-up after the
            meter was made counts).
    """

    def __init__(self, settings: CostSettings | None = None, *, cores: int | None = None,
                 cpu_time: Callable[[], float] = time.process_time,
                 machine_time: Callable[[], float | None] = machine_busy_seconds,
                 clock: Callable[[], float] = time.monotonic,
                 rates: ModelRates | None = None) -> None:
        if settings is not None and not isinstance(settings, CostSettings):
            raise TypeError(f"settings must be CostSettings, got {type(settings).__name__}")
        if rates is not None and not isinstance(rates, ModelRates):
            raise TypeError(f"rates must be ModelRates, got {type(rates).__name__}")
        self.rates = rates
        if cores is not None and (isinstance(cores, bool) or not isinstance(cores, int)
                                  or cores < 1):
            raise ValueError(f"cores must be an int of at least 1, got {cores!r}")
        self.settings = settings if settings is not None else CostSettings()
        self.cores = cores if cores is not None else available_cores()
        self._cpu_time = cpu_time
        self._machine_time = machine_time
        self._clock = clock
        self._lock = threading.Lock()
        self._live = 0
        now = clock()
        self._window_start = now
        self._window_cpu = cpu_time()
        self._window_machine = machine_time()
        self._call_seconds = 0.0  # in the current window, up to _marked
        self._marked = now
        self._per_call: float | None = None  # (None: no window measured, the prior)
        self._idle: float = 0.0
        self._idle_measured = False
        self._others: float | None = None  # (None: not measured yet)
        self._windows = 0
        # the EWMA of the measured windows alone (not started at the prior): its sum of
        # weighted figures and their total weight, so sum / weight is their average
        self._measured_sum = 0.0
        self._measured_weight = 0.0
        self._lags: deque[tuple[float, float]] = deque(maxlen=1000)
        # (clock, the measured windows' EWMA after one, at most the EWMA), the values
        # falling from the oldest:
        # the first is the highest of the horizon (a sliding maximum); pruned as each
        # window closes, so at most one entry per window of the horizon (the cap: a
        # safety net, the pruning keeps it below)
        horizon, window = self.settings.horizon_seconds, self.settings.window_seconds
        self._peaks: deque[tuple[float, float]] = deque(  # (a tiny window: no cap past
            maxlen=min(math.floor(horizon / window) + 2, sys.maxsize))  # what deque holds)

    # -- calls ----------------------------------------------------------------------

    def call_started(self) -> None:
        """One more live call (from now on)."""
        with self._lock:
            self._advance()
            self._live += 1

    def call_ended(self) -> None:
        """One live call fewer (from now on)."""
        with self._lock:
            self._advance()
            self._live = max(0, self._live - 1)

    # -- the event loop ---------------------------------------------------------------

    def record_loop_lag(self, seconds: float) -> None:
        """One probe: the loop woke ``seconds`` later than asked."""
        value = float(seconds)
        if not value >= 0.0 or math.isinf(value):
            raise ValueError(f"seconds must be a finite number >= 0, got {value!r}")
        with self._lock:
            self._lags.append((self._clock(), value))

    async def watch_loop(self, interval: float = LAG_PROBE_INTERVAL) -> None:
        """Probe the running loop's lag every ``interval`` seconds until cancelled (its
        owner runs it as a task, on the loop the calls run on, once it has loaded what
        it loads: the CPU window restarts here, :meth:`restart`), and close each CPU
        window when it is due, whether or not anyone looks at the cost."""
        if not 0 < interval < float("inf"):
            raise ValueError("interval must be a positive, finite number of seconds")
        loop = asyncio.get_running_loop()
        self.restart()
        while True:
            asked = loop.time()
            await asyncio.sleep(interval)
            self.record_loop_lag(max(0.0, loop.time() - asked - interval))
            self.tick()

    def restart(self) -> None:
        """Begin the current CPU window now, forgetting the CPU and call-seconds of its
        part so far (the figures of closed windows stay): start-up work since the meter
        was made (litellm's import, a model loaded) would otherwise be taken as the
        process's idle cost, and subtracted from every call's."""
        with self._lock:
            now = self._clock()
            self._window_start, self._marked = now, now
            self._window_cpu = self._cpu_time()
            self._window_machine = self._machine_time()
            self._call_seconds = 0.0

    def tick(self) -> None:
        """Close the CPU window if it is due (:meth:`cost` does it too): windows of
        about ``window_seconds`` however seldom the cost is looked at."""
        with self._lock:
            self._advance()
            now = self._clock()
            if now - self._window_start >= self.settings.window_seconds:
                self._close_window(now)

    # -- the estimate -----------------------------------------------------------------

    def cost(self) -> CallCost:
        """The cost per call now, and the slots it allows (closes a window when one is
        due)."""
        s = self.settings
        self.tick()
        prior, prior_source = self.prior()
        with self._lock:
            now = self._clock()
            recent = prior if self._per_call is None else self._per_call
            per_call = max(recent, self._peak(now))
            others = self._others or 0.0
            source: Literal["measured", "models", "prior"] = (
                "measured" if self._windows else prior_source)
            lag = self._lag_p90(now)
            windows, idle = self._windows, self._idle
        budget = s.target_utilization * max(0.0, self.cores - others)
        slots = max(1, math.floor(budget / per_call + 1e-9))
        return CallCost(per_call=per_call, source=source, prior=prior, recent=recent,
                        idle=idle, cores=self.cores,
                        others=others, slots=slots, windows=windows,
                        loop_lag_ms=None if lag is None else lag * 1000.0)

    def prior(self) -> tuple[float, Literal["models", "prior"]]:
        """The cost of a call before one was measured, and where it comes from:
        :attr:`CostSettings.prior_call_cost` if set (``prior``), else derived from the
        warm-up's real-time factors (``models``), else :data:`UNMEASURED_CALL_COST`."""
        s = self.settings
        if s.prior_call_cost is not None:
            return s.prior_call_cost, "prior"
        warmed = self.rates.warmed_up if self.rates is not None else None
        if warmed is None:
            return UNMEASURED_CALL_COST, "prior"
        return max(derived_call_cost(warmed, s.profile), 1e-3), "models"

    # -- internals (under the lock) ---------------------------------------------------

    def _advance(self) -> None:
        now = self._clock()
        self._call_seconds += self._live * max(0.0, now - self._marked)
        self._marked = now

    def _close_window(self, now: float) -> None:
        s = self.settings
        seconds = now - self._window_start
        cpu, machine = self._cpu_time(), self._machine_time()
        used = max(0.0, cpu - self._window_cpu)
        starved = False
        if machine is not None and self._window_machine is not None:
            busy = max(0.0, machine - self._window_machine)
            others = max(0.0, busy - used) / seconds
            # the first window's figure at once, and a rise by half: a test suite or a
            # build starting takes its cores now; a fall is believed slowly
            weight = (1.0 if self._others is None else
                      max(s.smoothing, 0.5) if others > self._others else s.smoothing)
            self._others = weight * others + (1 - weight) * (self._others or 0.0)
            starved = busy >= 0.95 * self.cores * seconds  # no idle CPU was left
        call_seconds = self._call_seconds
        self._window_start, self._window_cpu, self._call_seconds = now, cpu, 0.0
        self._window_machine = machine
        if call_seconds <= 0.0:  # no call at all: the process's own idle cost
            rate = used / seconds
            self._idle = rate if not self._idle_measured else (
                s.smoothing * rate + (1 - s.smoothing) * self._idle)
            self._idle_measured = True
            return
        if call_seconds < s.min_call_seconds:
            return  # too little of a call to say what one costs
        sample = max(0.0, used - self._idle * seconds) / call_seconds
        before = self._per_call
        if before is None:  # the first measured window moves from the prior
            before = self.prior()[0]
        if starved:  # the calls asked for more than the process got
            sample = max(sample, before)
        self._per_call = s.smoothing * sample + (1 - s.smoothing) * before
        self._windows += 1
        self._measured_sum = s.smoothing * sample + (1 - s.smoothing) * self._measured_sum
        self._measured_weight = s.smoothing + (1 - s.smoothing) * self._measured_weight
        # the peak is of what the calls measured, not of the prior (a fresh process's
        # slots follow its EWMA down from the prior, as without a horizon), never above
        # the EWMA (a prior below the calls' cost: as before; one window's swing)
        if s.horizon_seconds <= 0:
            return
        measured = min(self._measured_sum / self._measured_weight, self._per_call)
        while self._peaks and self._peaks[-1][1] <= measured:
            self._peaks.pop()  # (never the highest again before it ages out)
        self._peaks.append((now, measured))
        self._peak(now)  # (pruned here too: a meter nobody asks the cost of stays small)

    def _peak(self, now: float) -> float:
        """The highest EWMA of the horizon (0.0: no measured window in it)."""
        horizon = now - self.settings.horizon_seconds
        while self._peaks and self._peaks[0][0] < horizon:
            self._peaks.popleft()
        return self._peaks[0][1] if self._peaks else 0.0

    def _lag_p90(self, now: float) -> float | None:
        horizon = now - self.settings.lag_window_seconds
        while self._lags and self._lags[0][0] < horizon:
            self._lags.popleft()
        if not self._lags:
            return None
        values = sorted(lag for _, lag in self._lags)
        return values[min(len(values) - 1, int(0.9 * len(values)))]

    def __repr__(self) -> str:
        cost = self.cost()
        return (f"CallCostMeter({cost.per_call:.1%} of a core per call ({cost.source}), "
                f"{cost.slots} slots on {cost.cores} cores)")
