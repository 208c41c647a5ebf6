"""What a call costs on this machine, measured: the process's CPU time per call and how
late its event loop runs.

A call's cost is not a constant: it depends on the machine (a faster core, fewer cores),
on the engines (Whisper's size, Piper's voice) and on the calls (dense talkers, mostly
listeners). :class:`CallCostMeter` learns it from the calls this process runs:

* **CPU per call**: the process's CPU time (all threads: the models' executors too,
  ``time.process_time``) over windows of at least :attr:`CostSettings.window_seconds`,
  divided by the call-seconds run in the window (the area under the live-calls curve,
  kept exactly from :meth:`CallCostMeter.call_started` / :meth:`CallCostMeter.call_ended`).
  The process's own idle cost (heartbeat, event loop, a window with no call) is measured
  too and subtracted first. The estimate is an EWMA over the windows that ran at least
  :attr:`CostSettings.min_call_seconds` of calls, once they ran
  :attr:`CostSettings.settle_call_seconds` in all. Time before the meter was made is never
  counted: make it once the engines and litellm are loaded (their one-time start-up, a
  few seconds of CPU, is no call's cost), as ``voxflow serve`` does.
* **before any measurement**, the prior :attr:`CostSettings.prior_call_cost` (the share
  of a core a WebRTC call was measured to cost: conservative, a simulated call costs half
  of it); :attr:`CallCost.source` says which.
* **event-loop lag**: :meth:`CallCostMeter.watch_loop` (a task its owner runs) sleeps
  :data:`LAG_PROBE_INTERVAL` again and again and records how late it wakes; every frame
  of every call is handled on that loop, so a late loop is late audio whatever the CPU
  figures say.

:meth:`CallCostMeter.cost` turns it into slots: ``floor(target_utilization * cores /
cost per call)``, at least 1. The
:class:`~voxflow_adapters.hosting.admission.AdmissionController` admits up to that many
(and at most ``max_calls``).
"""

from __future__ import annotations

import asyncio
import math
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["LAG_PROBE_INTERVAL", "CallCost", "CallCostMeter", "CostSettings",
           "available_cores"]

LAG_PROBE_INTERVAL = 0.1
"""Seconds between two event-loop lag probes of :meth:`CallCostMeter.watch_loop`."""


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity, else the machine's count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # (not Linux)
        return max(1, os.cpu_count() or 1)


class CostSettings(BaseModel):
    """How a call's cost is measured, and how many calls it allows."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    target_utilization: float = Field(
        0.7, gt=0, le=1, description="share of the cores the calls may use together: "
        "the rest absorbs bursts (every caller's turn ending at once), so answers stay fast",
    )
    prior_call_cost: float = Field(
        0.28, gt=0, le=64, description="share of a core one call is taken to cost before "
        "any was measured (a WebRTC call measured 24-28 %)",
    )
    window_seconds: float = Field(
        2.0, gt=0, le=3600, description="CPU time is measured over windows at least this long",
    )
    min_call_seconds: float = Field(
        1.0, gt=0, le=86_400, description="a window counts for the cost per call once it "
        "ran this many call-seconds",
    )
    settle_call_seconds: float = Field(
        20.0, ge=0, le=86_400, description="call-seconds measured before the measured cost "
        "replaces the prior (a call's first seconds, its greeting and first turn, are not "
        "the rest of it)",
    )
    smoothing: float = Field(
        0.3, gt=0, le=1, description="weight of the newest window in the cost's EWMA",
    )
    lag_window_seconds: float = Field(
        5.0, gt=0, le=3600, description="event-loop lag is judged over this many seconds",
    )


@dataclass(frozen=True, slots=True)
class CallCost:
    """What a call costs here, and the calls that allows.

    Attributes:
        per_call: share of a core one call costs (0.13: 13 % of a core).
        source: ``"measured"`` (from this process's calls) or ``"prior"`` (none measured
            yet: :attr:`CostSettings.prior_call_cost`).
        idle: share of a core the process spends with no call.
        cores: the cores it may run on.
        slots: calls the cores hold at the target utilisation (at least 1).
        windows: windows the measured cost is taken over (even while ``source`` is still
            ``"prior"``: fewer than ``settle_call_seconds`` measured).
        loop_lag_ms: how late the event loop woke (the 90th percentile of the probes of
            the last :attr:`CostSettings.lag_window_seconds`; None: no probe yet).
    """

    per_call: float
    source: Literal["measured", "prior"]
    idle: float
    cores: int
    slots: int
    windows: int
    loop_lag_ms: float | None


class CallCostMeter:
    """Measures this process's CPU per call and its event-loop lag (thread-safe).

    Args:
        settings: the windows, the prior and the target utilisation.
        cores: the cores the calls may use (default :func:`available_cores`).
        cpu_time: the process's CPU seconds so far (default ``time.process_time``).
        clock: monotonic seconds (default ``time.monotonic``).
    """

    def __init__(self, settings: CostSettings | None = None, *, cores: int | None = None,
                 cpu_time: Callable[[], float] = time.process_time,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if settings is not None and not isinstance(settings, CostSettings):
            raise TypeError(f"settings must be CostSettings, got {type(settings).__name__}")
        if cores is not None and (isinstance(cores, bool) or not isinstance(cores, int)
                                  or cores < 1):
            raise ValueError(f"cores must be an int of at least 1, got {cores!r}")
        self.settings = settings if settings is not None else CostSettings()
        self.cores = cores if cores is not None else available_cores()
        self._cpu_time = cpu_time
        self._clock = clock
        self._lock = threading.Lock()
        self._live = 0
        now = clock()
        self._window_start = now
        self._window_cpu = cpu_time()
        self._call_seconds = 0.0  # in the current window, up to _marked
        self._marked = now
        self._per_call: float | None = None
        self._idle: float = 0.0
        self._idle_measured = False
        self._windows = 0
        self._measured_call_seconds = 0.0
        self._lags: deque[tuple[float, float]] = deque(maxlen=1000)

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
        owner runs it as a task, on the loop the calls run on)."""
        if not 0 < interval < float("inf"):
            raise ValueError("interval must be a positive, finite number of seconds")
        loop = asyncio.get_running_loop()
        while True:
            asked = loop.time()
            await asyncio.sleep(interval)
            self.record_loop_lag(max(0.0, loop.time() - asked - interval))

    # -- the estimate -----------------------------------------------------------------

    def cost(self) -> CallCost:
        """The cost per call now, and the slots it allows (closes a window when one is
        due)."""
        s = self.settings
        with self._lock:
            self._advance()
            now = self._clock()
            if now - self._window_start >= s.window_seconds:
                self._close_window(now)
            settled = (self._per_call is not None
                       and self._measured_call_seconds >= s.settle_call_seconds)
            per_call = self._per_call if settled and self._per_call is not None else (
                s.prior_call_cost)
            source: Literal["measured", "prior"] = "measured" if settled else "prior"
            lag = self._lag_p90(now)
            windows, idle = self._windows, self._idle
        budget = s.target_utilization * self.cores
        slots = max(1, math.floor(budget / per_call + 1e-9))
        return CallCost(per_call=per_call, source=source, idle=idle, cores=self.cores,
                        slots=slots, windows=windows,
                        loop_lag_ms=None if lag is None else lag * 1000.0)

    # -- internals (under the lock) ---------------------------------------------------

    def _advance(self) -> None:
        now = self._clock()
        self._call_seconds += self._live * max(0.0, now - self._marked)
        self._marked = now

    def _close_window(self, now: float) -> None:
        s = self.settings
        seconds = now - self._window_start
        cpu = self._cpu_time()
        used = max(0.0, cpu - self._window_cpu)
        call_seconds = self._call_seconds
        self._window_start, self._window_cpu, self._call_seconds = now, cpu, 0.0
        if call_seconds <= 0.0:  # no call at all: the process's own idle cost
            rate = used / seconds
            self._idle = rate if not self._idle_measured else (
                s.smoothing * rate + (1 - s.smoothing) * self._idle)
            self._idle_measured = True
            return
        if call_seconds < s.min_call_seconds:
            return  # too little of a call to say what one costs
        sample = max(0.0, used - self._idle * seconds) / call_seconds
        self._per_call = sample if self._per_call is None else (
            s.smoothing * sample + (1 - s.smoothing) * self._per_call)
        self._windows += 1
        self._measured_call_seconds += call_seconds

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
