"""Admission by measured headroom: refuse the call that would slow every call down.

A process holds so many calls before answers slow down (``benchmarks/capacity.py``
measures it: the p95 voice to voice of all calls stays under a target up to some N,
then every caller waits). Past it, one more call makes all the others worse. An
:class:`AdmissionController` refuses that call instead, with a typed
:class:`~.errors.CapacityExceededError` (``voxflow serve`` answers 503 with its
message; a scaled-out front door hands the call to a worker with headroom):

* **the measured slots**: as many calls as the cores (less what other processes use)
  hold at a target utilisation, at the CPU a call was measured to cost on this machine
  (:class:`~voxflow_adapters.hosting.call_cost.CallCostMeter`: the process's CPU time per
  call of its recent calls, the highest it was over the last few minutes, so calls
  sitting silent for a while do not make room for more than fit once they talk again;
  until one was measured, the cost derived from the models' real-time factors the
  engines' warm-up measured on this machine), and never more than ``max_calls``
  (``VOXFLOW_MAX_CALLS``: an upper bound, none by default);
* **the event loop**: every call's audio is handled on one loop; while it carries calls
  and wakes later than ``max_loop_lag_ms`` (its recent 90th percentile), a new call
  would only make every call later;
* **the ramp**: at least ``ramp_seconds`` between two admissions. Calls admitted
  together ask their first questions together, and callers on the same rhythm keep
  asking together: each turn's urgent work (Whisper, the first clause's synthesis)
  then queues behind the others' (``benchmarks/capacity.py --offered``);
* **the measurement**: the recent voice-to-voice p95 of this process's turns
  (:meth:`AdmissionController.record`, fed with every ``TurnMetrics``) over
  ``p95_target_ms`` (``VOXFLOW_P95_TARGET_MS``): the machine is slower than the cap
  assumed (shared, throttled), so no call is added until answers are fast again.

:meth:`AdmissionController.load` reports it all as a :class:`Load` (active calls, the
cap, the headroom left, the measured p95, the model scheduler's utilisation and urgent
queue wait): what ``GET /load`` of ``voxflow serve`` returns, and what a call worker reports
with its heartbeat (a front door counts the headroom of the workers, and the one with the
most takes the call).

A call that would go over is refused before it starts: an admitted call is never made
late by one admitted after it.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator
from voxflow_voice.engines.rates import ModelRates
from voxflow_voice.scheduler import ModelScheduler

from .call_cost import CallCost, CallCostMeter, CostSettings
from .dispatch_tables import UNCAPPED_SLOTS
from .errors import CapacityExceededError

__all__ = ["UNBOUNDED_CALLS", "UTILIZATION_WINDOW", "Admission", "AdmissionController",
           "AdmissionSettings", "Load"]

UNBOUNDED_CALLS = UNCAPPED_SLOTS
"""The upper bound of a process given no ``max_calls``: its measured slots decide (the
slots a call worker registers, which its measured headroom then narrows)."""

UTILIZATION_WINDOW = 10.0
"""Seconds :attr:`Load.utilization` is measured over (at least, when the load is looked
at less often)."""
_SAMPLE_EVERY = 0.5  # seconds between two kept samples of the scheduler's busy time


class AdmissionSettings(BaseModel):
    """When a process takes one more call."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    max_calls: int | None = Field(
        None, ge=1, le=UNBOUNDED_CALLS, description="concurrent calls at most, whatever the "
        "measured cost allows (None: as many as it allows)",
    )
    cost: CostSettings = Field(
        default_factory=CostSettings, description="how a call's cost is measured and how "
        "many calls the cores hold",
    )
    max_loop_lag_ms: float = Field(
        200.0, gt=0, le=60_000, description="refuse calls while the event loop wakes later "
        "than this (ms, the 90th percentile of its recent probes)",
    )
    p95_target_ms: float = Field(
        1000.0, gt=0, le=60_000, description="refuse calls while the recent p95 voice to "
        "voice is above this",
    )
    window_turns: int = Field(
        40, ge=1, le=10_000, description="recent turns the p95 is taken over"
    )
    window_seconds: float = Field(
        60.0, gt=0, le=86_400, description="turns older than this are forgotten"
    )
    min_turns: int = Field(
        10, ge=1, le=10_000, description="turns needed before the p95 counts (at most "
        "window_turns)",
    )
    ramp_seconds: float = Field(
        0.0, ge=0, le=3600, description="at least this long between two admissions (0: "
        "none), so calls arriving together do not all speak together",
    )

    @model_validator(mode="after")
    def _check(self) -> AdmissionSettings:
        if self.min_turns > self.window_turns:  # the p95 would never count
            raise ValueError(f"min_turns ({self.min_turns}) must be at most window_turns "
                             f"({self.window_turns}): the window never holds more turns")
        return self


@dataclass(frozen=True, slots=True)
class Load:
    """How loaded a process is, and how many more calls it takes.

    Attributes:
        active_calls: calls admitted and not yet released.
        max_calls: the upper bound (None: none).
        slots: calls it holds: the measured slots, at most ``max_calls``.
        headroom: calls it would admit now (0 while refusing).
        accepting: whether the next call is admitted.
        reason: why not, when it is not.
        p95_ms: recent voice-to-voice p95 (None until ``min_turns`` turns were seen).
        p95_target_ms: the target the p95 is held to.
        turns: turns the p95 is taken over.
        utilization: share of the model workers' time spent running model work over
            about the last :data:`UTILIZATION_WINDOW` seconds: since the newest look at
            the load at least that old, else the oldest look since (whoever looked: a
            heartbeat, a claim, ``GET /load``); None without a scheduler, or before two
            looks half a second apart.
        urgent_wait_p95_ms: how long urgent model work waited for a worker (recent p95;
            None without a scheduler or before any).
        call_cost: share of a core one call costs here, as the slots take it: the
            highest the measured cost was over the last ``CostSettings.horizon_seconds``
            (calls held silent for a while lower ``recent_call_cost``, not this).
        cost_source: ``"measured"`` (this process's recent calls), ``"models"`` (none
            measured yet: derived from the models' real-time factors) or ``"prior"``
            (none measured yet: the configured prior, or engines never warmed up).
        prior_call_cost: the cost of a call before one was measured (see
            ``cost_source``).
        recent_call_cost: the cost per call now (the EWMA of the recent windows; the
            prior until one), below ``call_cost`` after a lull.
        model_rtf: each model's recent real-time factor (``stt``, ``tts``, ``vad``: wall
            seconds per second of audio over its last jobs; rises when jobs wait for a
            core); empty without the engines' rates or before any job.
        loop_lag_ms: how late the event loop wakes (recent 90th percentile; None until
            probed).
    """

    active_calls: int
    max_calls: int | None
    slots: int
    headroom: int
    accepting: bool
    reason: str | None
    p95_ms: float | None
    p95_target_ms: float
    turns: int
    utilization: float | None
    urgent_wait_p95_ms: float | None
    call_cost: float
    cost_source: str
    loop_lag_ms: float | None
    prior_call_cost: float
    model_rtf: dict[str, float]
    recent_call_cost: float

    def as_dict(self) -> dict[str, Any]:
        """The fields as a JSON-ready dict (``GET /load``)."""
        return asdict(self)

    def capacity(self) -> str:
        """How many calls the process takes, as its start-up line says it."""
        bound = "" if self.max_calls is None else f", at most {self.max_calls}"
        source = {"models": "from the models' real-time factors here, until a call is "
                            "measured"}.get(self.cost_source, self.cost_source)
        return (f"calls admitted by their measured cost: {self.slots} slot(s) now at "
                f"{self.call_cost:.0%} of a core per call ({source}){bound}")


class Admission:
    """One admitted call's slot: :meth:`release` it when the call ends (idempotent)."""

    __slots__ = ("_controller", "_released", "call_id")

    def __init__(self, controller: AdmissionController, call_id: str) -> None:
        self.call_id = call_id
        self._controller = controller
        self._released = False

    def release(self) -> None:
        """Free the slot (a second call does nothing)."""
        if not self._released:
            self._released = True
            self._controller._release(self.call_id)

    def __enter__(self) -> Admission:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"Admission({self.call_id!r}, released={self._released})"


class AdmissionController:
    """Admits calls while the process has headroom (thread-safe).

    The meter counts CPU time from when its :meth:`CallCostMeter.watch_loop` starts (its
    owner starts it once the engines and litellm are loaded).

    Args:
        settings: the upper bound, the cost measurement and the latency targets.
        scheduler: the engines' model scheduler, for the utilisation in :class:`Load`.
        clock: seconds (``time.monotonic``), for the window of recent turns.
        meter: measures what a call costs (default: a
            :class:`~voxflow_adapters.hosting.call_cost.CallCostMeter` of
            ``settings.cost`` on ``clock`` and ``rates``); its
            :meth:`CallCostMeter.watch_loop` is run by the controller's owner.
        rates: the engines' real-time factors (``VoiceEngines.rates``): the prior cost
            of a call is derived from their warm-up's, and :class:`Load` shows the
            recent ones (default: ``meter.rates``; with a meter, its own or none).

    Raises:
        ValueError: ``meter`` and ``rates`` are both given, and ``rates`` is not
            ``meter.rates``.
    """

    def __init__(
        self, settings: AdmissionSettings | None = None, *,
        scheduler: ModelScheduler | None = None, clock: Callable[[], float] = time.monotonic,
        meter: CallCostMeter | None = None, rates: ModelRates | None = None,
    ) -> None:
        if settings is not None and not isinstance(settings, AdmissionSettings):
            raise TypeError(f"settings must be AdmissionSettings, got {type(settings).__name__}")
        if meter is not None and not isinstance(meter, CallCostMeter):
            raise TypeError(f"meter must be a CallCostMeter, got {type(meter).__name__}")
        if rates is not None and not isinstance(rates, ModelRates):
            raise TypeError(f"rates must be ModelRates, got {type(rates).__name__}")
        if meter is not None and rates is not None and meter.rates is not rates:
            raise ValueError("rates must be the meter's own (meter.rates): the prior would "
                             "come from one ModelRates, Load.model_rtf from another")
        self.settings = settings if settings is not None else AdmissionSettings()
        self.rates = rates if rates is not None else meter.rates if meter is not None else None
        self.meter = meter if meter is not None else CallCostMeter(self.settings.cost,
                                                                   clock=clock, rates=rates)
        self._scheduler = scheduler
        self._clock = clock
        self._lock = threading.Lock()
        self._active: set[str] = set()
        # admitted calls another already took the place of -> that call
        self._replaced: dict[str, str] = {}
        self._turns: deque[tuple[float, float]] = deque(maxlen=self.settings.window_turns)
        # (clock, the scheduler's busy seconds) samples of the last UTILIZATION_WINDOW
        self._busy_marks: deque[tuple[float, float]] = deque(
            maxlen=int(UTILIZATION_WINDOW / _SAMPLE_EVERY) + 2)
        self._refused = 0
        self._admitted_at: float | None = None  # clock of the last admission

    def admit(self, call_id: str, *, replacing: str | None = None) -> Admission:
        """A slot for ``call_id``, or a refusal.

        ``replacing``: an admitted call of this process that ``call_id`` takes the place
        of (the same page reconnecting while its old connection still looks alive): the
        old call ends as the new one starts, so no call is added and none is refused; the
        old call's slot is given back when it ends (the meter counts the two as one call
        meanwhile: their CPU is one caller's). A call is replaced once: another offer
        naming it, or an id not admitted here, is judged as any new call.

        Raises:
            CapacityExceededError: the cap is reached, or recent answers are slower than
                the target (the message says which, with the figures).
            ValueError: ``call_id`` is empty or already admitted.
        """
        if not isinstance(call_id, str) or not call_id:
            raise ValueError(f"call_id must be a non-empty str, got {call_id!r}")
        with self._lock:
            if call_id in self._active:
                raise ValueError(f"call {call_id!r} is already admitted")
            callers = self._callers()
            if (replacing is None or replacing not in self._active
                    or replacing in self._replaced):
                slots, cost = self._slots()
                reason = self._refusal(slots, cost)
                if reason is not None:
                    self._refused += 1
                    raise CapacityExceededError(reason, active_calls=len(self._active),
                                                max_calls=slots)
                self._admitted_at = self._clock()
            else:
                self._replaced[replacing] = call_id  # (once: a second offer is one more)
            self._active.add(call_id)
            if self._callers() > callers:
                self.meter.call_started()
        return Admission(self, call_id)

    def record(self, voice_to_voice_ms: float) -> None:
        """One answered turn's voice-to-voice latency (from ``TurnMetrics``)."""
        try:
            value = float(voice_to_voice_ms)
        except OverflowError:  # an int past any float
            value = float("inf")
        if not value >= 0.0 or value == float("inf"):
            raise ValueError(f"voice_to_voice_ms must be a finite number >= 0, got {value!r}")
        with self._lock:
            self._turns.append((self._clock(), value))

    def load(self) -> Load:
        """The load now (see :class:`Load`)."""
        with self._lock:
            slots, cost = self._slots()
            reason = self._refusal(slots, cost)
            p95, turns = self._p95()
            active = len(self._active)
        utilization, urgent_wait = self._scheduler_figures()
        headroom = 0 if reason is not None else slots - active
        return Load(
            active_calls=active, max_calls=self.settings.max_calls, slots=slots,
            headroom=headroom, accepting=reason is None, reason=reason, p95_ms=p95,
            p95_target_ms=self.settings.p95_target_ms, turns=turns,
            utilization=utilization, urgent_wait_p95_ms=urgent_wait,
            call_cost=cost.per_call, cost_source=cost.source, loop_lag_ms=cost.loop_lag_ms,
            prior_call_cost=cost.prior,
            model_rtf=self.rates.recent() if self.rates is not None else {},
            recent_call_cost=cost.recent,
        )

    @property
    def ceiling(self) -> int:
        """The most calls it could ever hold: ``max_calls``, else :data:`UNBOUNDED_CALLS`
        (the slots a call worker registers; its measured headroom narrows them)."""
        bound = self.settings.max_calls
        return bound if bound is not None else UNBOUNDED_CALLS

    @property
    def refused(self) -> int:
        """Calls refused so far."""
        return self._refused

    @property
    def active_calls(self) -> int:
        """Calls admitted and not yet released (a call and the one that took its place
        both counted, as :attr:`Load.active_calls`); a read that moves nothing (no
        window of the meter or the scheduler is sampled, as :meth:`load` does)."""
        with self._lock:
            return len(self._active)

    # -- internals ------------------------------------------------------------------

    def _release(self, call_id: str) -> None:
        with self._lock:
            if call_id in self._active:
                callers = self._callers()
                self._active.discard(call_id)
                self._replaced.pop(call_id, None)
                if self._callers() < callers:
                    self.meter.call_ended()

    def _callers(self) -> int:
        """Admitted calls, a call and the live one that took its place counted once (the
        same page: the meter's calls, whose CPU it divides; under the lock)."""
        return len(self._active) - sum(
            1 for new in self._replaced.values() if new in self._active)

    def _slots(self) -> tuple[int, CallCost]:
        cost = self.meter.cost()
        bound = self.settings.max_calls
        return (cost.slots if bound is None else min(bound, cost.slots)), cost

    def _p95(self) -> tuple[float | None, int]:
        horizon = self._clock() - self.settings.window_seconds
        while self._turns and self._turns[0][0] < horizon:
            self._turns.popleft()
        values = sorted(ms for _, ms in self._turns)
        if len(values) < self.settings.min_turns:
            return None, len(values)
        return values[min(len(values) - 1, int(0.95 * len(values)))], len(values)

    def _refusal(self, slots: int, cost: CallCost) -> str | None:
        s = self.settings
        active = len(self._active)
        if active >= slots:
            if s.max_calls is not None and slots == s.max_calls:
                return (f"this server is full: {active} calls (limit {s.max_calls}), "
                        "more would slow every call down; try again in a moment")
            how = {"measured": "measured over its recent calls",
                   "models": "from its models' real-time factors, until a call is measured",
                   }.get(cost.source, "until one is measured")
            if cost.per_call > cost.recent + 0.005:  # a lull: the horizon's peak holds
                how += (f"; its highest over the last "
                        f"{s.cost.horizon_seconds / 60:g} min, {cost.recent:.0%} now")
            others = (f" less the {cost.others:.1f} other processes keep busy"
                      if cost.others >= 0.05 else "")
            return (f"this server is full: {active} call{'s' if active != 1 else ''}, as "
                    "many as it holds: a call "
                    f"costs {cost.per_call:.0%} of a core here ({how}), and "
                    f"{s.cost.target_utilization:.0%} of its {cost.cores} "
                    f"core{'s' if cost.cores != 1 else ''}{others} hold "
                    f"{cost.slots}; more would slow every call down; try again in a moment")
        # An idle loop's lateness hurts no call (start-up work: models warming, a
        # listener binding), and a server that refused its first call on it would
        # never measure one: the loop is judged while it carries calls.
        if (active and cost.loop_lag_ms is not None
                and cost.loop_lag_ms > s.max_loop_lag_ms):
            return (f"this server is too busy: its event loop runs {cost.loop_lag_ms:,.0f} ms "
                    f"late (limit {s.max_loop_lag_ms:,.0f} ms); try again in a moment")
        if self._admitted_at is not None and s.ramp_seconds > 0:
            since = self._clock() - self._admitted_at
            if since < s.ramp_seconds:
                return (f"this server takes on calls one per {s.ramp_seconds:g} s and took "
                        f"one {since:.1f} s ago; try again in a moment")
        p95, turns = self._p95()
        if p95 is not None and p95 > s.p95_target_ms:
            return (f"this server is too busy: answers take {p95:,.0f} ms (p95 of the last "
                    f"{turns} turns), above its {s.p95_target_ms:,.0f} ms target; try again "
                    "in a moment")
        return None

    def _scheduler_figures(self) -> tuple[float | None, float | None]:
        if self._scheduler is None:
            return None, None
        stats = self._scheduler.statistics()
        now = self._clock()
        with self._lock:
            # Measured from a sample about a window old, never from the previous look:
            # the heartbeat and the claim loop look every second or so, and a GET /load
            # right after one would divide a job's busy time by a few milliseconds.
            marks = self._busy_marks
            while len(marks) >= 2 and marks[1][0] <= now - UTILIZATION_WINDOW:
                marks.popleft()
            base = marks[0] if marks else None
            if not marks or now - marks[-1][0] >= _SAMPLE_EVERY:
                marks.append((now, stats.busy_seconds))
        utilization = None
        if base is not None and now - base[0] >= _SAMPLE_EVERY:
            utilization = (stats.busy_seconds - base[1]) / ((now - base[0]) * stats.workers)
        return utilization, stats.waited_p95_ms.get("urgent")

    def __repr__(self) -> str:
        load = self.load()
        return (f"AdmissionController(active={load.active_calls}/{load.slots}, "
                f"accepting={load.accepting})")
