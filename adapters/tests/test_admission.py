"""AdmissionController: calls past the cap, or while answers are slow, are refused typed."""

from __future__ import annotations

import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError
from voxflow_adapters.hosting.admission import AdmissionController, AdmissionSettings, Load
from voxflow_adapters.hosting.errors import CapacityExceededError
from voxflow_voice.scheduler import ModelScheduler

from voxflow.errors import VoxflowError


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_calls_past_the_cap_are_refused_until_one_is_released() -> None:
    admission = AdmissionController(AdmissionSettings(max_calls=2), clock=FakeClock())
    first, second = admission.admit("a"), admission.admit("b")
    with pytest.raises(CapacityExceededError, match=r"limit 2") as info:
        admission.admit("c")
    assert isinstance(info.value, VoxflowError)
    assert (info.value.active_calls, info.value.max_calls) == (2, 2)
    load = admission.load()
    assert (load.active_calls, load.headroom, load.accepting) == (2, 0, False)
    assert load.reason is not None and "full" in load.reason
    first.release()
    first.release()  # idempotent: b keeps its slot
    assert admission.load().headroom == 1
    with admission.admit("c"):
        assert admission.load().active_calls == 2
    second.release()
    assert admission.load() == Load(
        active_calls=0, max_calls=2, slots=2, headroom=2, accepting=True, reason=None,
        p95_ms=None, p95_target_ms=1000.0, turns=0, utilization=None,
        urgent_wait_p95_ms=None, call_cost=0.28, cost_source="prior", loop_lag_ms=None,
        prior_call_cost=0.28, model_rtf={}, recent_call_cost=0.28)
    assert admission.refused == 1


def test_a_call_taking_the_place_of_one_of_its_own_is_admitted_on_a_full_server() -> None:
    """The same page reconnecting: the new call replaces an admitted one, whose slot is
    given back when it ends; a call naming one not admitted here is judged as any."""
    admission = AdmissionController(AdmissionSettings(max_calls=1), clock=FakeClock())
    old = admission.admit("a")
    with pytest.raises(CapacityExceededError):
        admission.admit("b", replacing="not-here")
    new = admission.admit("b", replacing="a")
    assert admission.load().active_calls == 2 and admission.refused == 1
    assert admission.active_calls == 2  # (the public read capacity.py's trace uses)
    with pytest.raises(CapacityExceededError):  # a call is replaced once, not per offer
        admission.admit("b2", replacing="a")
    old.release()
    assert (admission.load().active_calls, admission.load().headroom) == (1, 0)
    assert admission.active_calls == 1
    assert admission.refused == 2
    with pytest.raises(CapacityExceededError):
        admission.admit("c", replacing="a")  # (a has ended: c is one call more)
    new.release()
    assert admission.load().headroom == 1


def test_a_slow_recent_p95_refuses_calls_until_the_slow_turns_age_out() -> None:
    clock = FakeClock()
    admission = AdmissionController(
        AdmissionSettings(max_calls=50, p95_target_ms=1000.0, min_turns=10,
                          window_seconds=60.0), clock=clock)
    for _ in range(9):
        admission.record(3000.0)
    assert admission.load().accepting  # 9 turns: too few to judge
    admission.record(3000.0)
    with pytest.raises(CapacityExceededError, match=r"3,000 ms .* 1,000 ms target"):
        admission.admit("a")
    assert admission.load().p95_ms == 3000.0
    clock.now = 30.0
    for _ in range(20):
        admission.record(700.0)
    assert not admission.load().accepting  # 10 of 30 recent turns still slow: p95 3 s
    clock.now = 61.0  # the slow turns are older than the window
    load = admission.load()
    assert (load.accepting, load.p95_ms, load.turns) == (True, 700.0, 20)
    admission.admit("a").release()


def test_the_ramp_spaces_admissions_so_calls_arriving_together_do_not_all_start() -> None:
    clock = FakeClock()
    admission = AdmissionController(AdmissionSettings(max_calls=8, ramp_seconds=1.5),
                                     clock=clock)
    admission.admit("a")
    clock.now = 1.0
    with pytest.raises(CapacityExceededError, match=r"one per 1.5 s and took one 1.0 s ago"):
        admission.admit("b")
    load = admission.load()
    assert (load.active_calls, load.headroom, load.accepting) == (1, 0, False)
    clock.now = 1.5
    admission.admit("b")  # the ramp runs from the last admission, not the last refusal
    clock.now = 2.9
    with pytest.raises(CapacityExceededError):
        admission.admit("c")
    assert admission.refused == 2
    clock.now = 3.0
    load = admission.load()  # (the slots: the prior cost's, at most 8)
    assert load.headroom == load.slots - 2
    admission.admit("c")


def test_without_a_ramp_calls_are_admitted_back_to_back() -> None:
    admission = AdmissionController(AdmissionSettings(max_calls=3), clock=FakeClock())
    for call in "abc":
        admission.admit(call)
    assert admission.load().active_calls == 3


def test_load_reports_the_scheduler_figures() -> None:
    clock = FakeClock()
    scheduler = ModelScheduler(2)
    admission = AdmissionController(scheduler=scheduler, clock=clock)
    first = admission.load()
    clock.now = 10.0
    second = admission.load()
    assert first.utilization is None  # no earlier mark to measure from
    assert second.utilization == 0.0  # idle workers
    assert second.urgent_wait_p95_ms is None  # no urgent job yet
    scheduler.close()


async def test_the_utilization_is_measured_over_a_window_whoever_looked_last() -> None:
    """A heartbeat (and the claim loop) look at the load every second or so; a GET /load
    right after one must not divide the busy time of a job that ended since by a few
    milliseconds (it reported 20 times the workers' capacity)."""
    import time

    clock = FakeClock()
    scheduler = ModelScheduler(1)
    admission = AdmissionController(scheduler=scheduler, clock=clock)
    try:
        admission.load()                       # t = 0
        clock.now = 1.25
        assert admission.load().utilization == 0.0  # the heartbeat's look: idle so far
        await scheduler.run(time.sleep, 0.2)  # 0.2 s of model work
        busy = scheduler.statistics().busy_seconds
        clock.now = 1.26
        shown = admission.load().utilization    # GET /load, 10 ms after the heartbeat
        assert shown == pytest.approx(busy / 1.26)  # over the window, not the 10 ms
        assert 0.0 < shown < 1.0
        clock.now = 30.0  # looks far apart: from the newest look at least 10 s old
        assert admission.load().utilization == pytest.approx(busy / 28.75)
        clock.now = 45.0  # (the look at 30 s is that one now, and nothing ran since)
        assert admission.load().utilization == 0.0
    finally:
        scheduler.close()


def test_admission_refuses_bad_input() -> None:
    admission = AdmissionController()
    admission.admit("a")
    with pytest.raises(ValueError, match="already admitted"):
        admission.admit("a")
    with pytest.raises(ValueError, match="non-empty"):
        admission.admit("")
    with pytest.raises(ValueError, match="finite"):
        admission.record(float("nan"))
    with pytest.raises(ValueError, match="finite"):
        admission.record(-1.0)
    with pytest.raises(TypeError, match="AdmissionSettings"):
        AdmissionController({"max_calls": 3})  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        AdmissionSettings(max_calls=0)
    for ramp in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ValidationError):
            AdmissionSettings(ramp_seconds=ramp)


@given(st.lists(st.one_of(st.floats(allow_nan=True, allow_infinity=True),
                          st.integers(-10, 10**6), st.integers(10**308, 10**400)),
                max_size=40))
def test_any_recorded_values_keep_load_consistent(values: list[float]) -> None:
    admission = AdmissionController(AdmissionSettings(min_turns=1, max_calls=3))
    kept: list[float] = []
    for value in values:
        valid = 0 <= value <= sys.float_info.max  # False for NaN
        if valid:
            admission.record(value)
            kept.append(float(value))
        else:
            with pytest.raises(ValueError, match="finite"):
                admission.record(value)
    load = admission.load()
    expected = sorted(kept)[min(len(kept) - 1, int(0.95 * len(kept)))] if kept else None
    assert (load.p95_ms, load.turns) == (expected, len(kept))
    slow = expected is not None and expected > 1000.0
    assert load.accepting == (not slow) == (load.reason is None)
    assert load.headroom == (0 if slow else 3)


def test_a_meter_and_rates_other_than_its_own_are_refused() -> None:
    """The prior comes from the meter's rates, Load.model_rtf from the controller's: two
    ModelRates would report two machines."""
    from voxflow_adapters.hosting.call_cost import CallCostMeter
    from voxflow_voice.engines.rates import ModelRates

    rates = ModelRates()
    meter = CallCostMeter(rates=rates)
    with pytest.raises(ValueError, match=r"meter\.rates"):
        AdmissionController(meter=meter, rates=ModelRates())
    with pytest.raises(ValueError, match=r"meter\.rates"):
        AdmissionController(meter=CallCostMeter(), rates=rates)
    assert AdmissionController(meter=meter, rates=rates).rates is rates
    assert AdmissionController(meter=meter).rates is rates
