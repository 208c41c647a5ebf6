"""CallCostMeter: CPU per call learned from the process's CPU time, and the loop's lag."""

from __future__ import annotations

import asyncio
from math import floor

import pytest
from pydantic import ValidationError
from voxflow_adapters.hosting.admission import AdmissionController, AdmissionSettings
from voxflow_adapters.hosting.call_cost import (
    CallCost,
    CallCostMeter,
    CostSettings,
    available_cores,
)
from voxflow_adapters.hosting.errors import CapacityExceededError


class Machine:
    """A clock and the process's CPU seconds, moved by the test."""

    def __init__(self, *, measured: bool = False) -> None:
        self.now = 0.0
        self.cpu = 0.0
        self.all_cpu = 0.0
        self.measured = measured  # whether the machine's CPU time can be read

    def clock(self) -> float:
        return self.now

    def cpu_time(self) -> float:
        return self.cpu

    def machine_time(self) -> float | None:
        return self.all_cpu if self.measured else None

    def run(self, seconds: float, *, cpu_rate: float, others: float = 0.0) -> None:
        """``seconds`` pass while the process uses ``cpu_rate`` cores, other processes
        ``others``."""
        self.now += seconds
        self.cpu += seconds * cpu_rate
        self.all_cpu += seconds * (cpu_rate + others)


def meter_on(machine: Machine, cores: int = 2, **settings: float) -> CallCostMeter:
    return CallCostMeter(CostSettings(**settings), cores=cores, cpu_time=machine.cpu_time,
                         machine_time=machine.machine_time, clock=machine.clock)


def test_before_any_call_is_measured_the_prior_sets_the_slots() -> None:
    machine = Machine()
    cost = meter_on(machine, prior_call_cost=0.28).cost()
    assert (cost.source, cost.per_call, cost.slots, cost.windows) == ("prior", 0.28, 5, 0)
    assert cost.loop_lag_ms is None


def test_the_cost_per_call_is_the_cpu_over_the_call_seconds_less_the_idle_cost() -> None:
    machine = Machine()
    meter = meter_on(machine, window_seconds=2.0, smoothing=1.0)
    machine.run(2.0, cpu_rate=0.02)  # no call: the process's own 2 % of a core
    assert meter.cost().idle == pytest.approx(0.02)
    for _ in range(4):
        meter.call_started()
    machine.run(2.0, cpu_rate=0.02 + 4 * 0.13)  # four calls of 13 % each
    cost = meter.cost()
    assert cost.source == "measured" and cost.per_call == pytest.approx(0.13)
    assert cost.slots == 10  # floor(0.7 * 2 / 0.13)
    assert cost.windows == 1


def test_calls_that_start_and_end_within_a_window_count_for_the_time_they_ran() -> None:
    machine = Machine()
    meter = meter_on(machine, window_seconds=4.0, smoothing=1.0)
    meter.call_started()
    machine.run(1.0, cpu_rate=0.2)
    meter.call_started()
    machine.run(2.0, cpu_rate=0.4)
    meter.call_ended()
    machine.run(1.0, cpu_rate=0.25)  # 6 call-seconds for 1.25 s of CPU
    assert meter.cost().per_call == pytest.approx(1.25 / 6)


def test_cpu_spent_before_the_meter_was_made_is_no_calls_cost() -> None:
    machine = Machine()
    machine.run(5.0, cpu_rate=0.92)  # loading the models and litellm: 4.6 s of CPU
    meter = meter_on(machine, window_seconds=2.0, smoothing=1.0)
    meter.call_started()
    machine.run(2.0, cpu_rate=0.1)
    assert meter.cost().per_call == pytest.approx(0.1)


def test_cpu_spent_before_a_restart_is_not_the_processs_idle_cost() -> None:
    machine = Machine()
    meter = meter_on(machine, window_seconds=2.0, smoothing=1.0)
    machine.run(4.9, cpu_rate=0.7)  # litellm's import after the meter was made
    meter.restart()
    machine.run(2.0, cpu_rate=0.0)  # no call, nothing running
    assert meter.cost().idle == 0.0
    meter.call_started()
    machine.run(2.0, cpu_rate=0.14)
    assert meter.cost().per_call == pytest.approx(0.14)  # not 0.14 less a 0.7 "idle"


async def test_watch_loop_begins_a_fresh_cpu_window() -> None:
    machine = Machine()
    meter = meter_on(machine, window_seconds=2.0, smoothing=1.0)
    machine.run(4.9, cpu_rate=0.7)  # start-up work before the owner starts the watch
    probe = asyncio.get_running_loop().create_task(meter.watch_loop(interval=60.0))
    await asyncio.sleep(0)  # the watch starts
    probe.cancel()
    with pytest.raises(asyncio.CancelledError):
        await probe
    machine.run(2.0, cpu_rate=0.01)
    assert meter.cost().idle == pytest.approx(0.01)


def test_the_estimate_follows_the_recent_windows_smoothly() -> None:
    machine = Machine()
    meter = meter_on(machine, window_seconds=1.0, smoothing=0.5, min_call_seconds=1.0)
    meter.call_started()
    machine.run(1.0, cpu_rate=0.2)
    assert meter.cost().per_call == pytest.approx(0.24)  # halfway from the 28 % prior
    machine.run(1.0, cpu_rate=0.4)  # the calls got dearer (a longer reply, a busier flow)
    assert meter.cost().per_call == pytest.approx(0.32)
    machine.run(0.5, cpu_rate=5.0)  # half a window: not closed, not counted yet
    assert meter.cost().per_call == pytest.approx(0.32)


def test_a_window_with_too_little_of_a_call_says_nothing_of_its_cost() -> None:
    machine = Machine()
    meter = meter_on(machine, window_seconds=1.0, min_call_seconds=1.0)
    machine.run(0.9, cpu_rate=0.0)
    meter.call_started()
    machine.run(0.2, cpu_rate=1.0)  # 0.2 call-seconds, a burst of start-up work
    cost = meter.cost()
    assert (cost.source, cost.windows) == ("prior", 0)


def test_by_default_the_estimate_leaves_the_prior_over_many_windows() -> None:
    """The EWMA (``recent``) leaves the prior over ~40 s, and a fresh process's slots
    follow it, with the horizon as without one: the prior is no peak (the horizon's peak
    is of the measured windows alone)."""
    for horizon in (180.0, 0.0):
        machine = Machine()
        meter = meter_on(machine, horizon_seconds=horizon)  # 2 s windows, a tenth of each
        meter.call_started()
        seen = []
        for _ in range(20):  # 40 s of a call that costs 13 %
            machine.run(2.0, cpu_rate=0.13)
            seen.append(meter.cost())
        assert (seen[0].source, seen[0].recent) == ("measured", pytest.approx(0.265))
        assert [round(c.recent, 3) for c in seen[::5]] == [0.265, 0.21, 0.177, 0.158]
        assert [c.slots for c in seen[::5]] == [5, 6, 7, 8]
        assert seen[-1].recent == pytest.approx(0.13 + 0.15 * 0.9**20)
        assert seen[-1].per_call == pytest.approx(seen[-1].recent)


def test_an_unmeasured_prior_is_no_peak_for_a_scaled_out_worker() -> None:
    """A new worker whose engines were not warmed up starts at UNMEASURED_CALL_COST
    (28 %); its calls cost 13 %: its slots rise with its measurements (not held at the
    prior's 5 for the horizon), and a lull after a busy minute still keeps the busy
    minute's slots."""
    machine = Machine()
    meter = meter_on(machine)  # no prior, no rates: 0.28
    for _ in range(4):
        meter.call_started()
    seen = []
    for _ in range(30):  # a minute of 4 calls at 13 % each
        machine.run(2.0, cpu_rate=4 * 0.13)
        seen.append(meter.cost())
    assert (seen[0].source, seen[0].prior, seen[0].slots) == ("measured", 0.28, 5)
    assert seen[-1].slots == floor(0.7 * 2 / seen[-1].recent) == 10
    assert seen[-1].per_call == pytest.approx(seen[-1].recent)
    for _ in range(30):  # then a minute on hold at 5 % each
        machine.run(2.0, cpu_rate=4 * 0.05)
        seen.append(meter.cost())
    assert seen[-1].recent < 0.1 and seen[-1].slots == 10
    assert seen[-1].per_call == pytest.approx(0.13, abs=0.005)  # the busy minute's


def _busy_then_quiet(horizon: float | None, quiet_seconds: float) -> tuple[
        CallCostMeter, Machine, list[CallCost]]:
    """Six calls costing 20 % each for 60 s (the EWMA at the prior, 20 %: 7 slots on 2
    cores), then the same six live calls at 10 % each (silent: on hold, reading) for
    ``quiet_seconds``; the meter's cost after each quiet window (``horizon``: the
    setting's, None for the default, 180 s)."""
    machine = Machine()
    meter = (meter_on(machine, prior_call_cost=0.2) if horizon is None else
             meter_on(machine, prior_call_cost=0.2, horizon_seconds=horizon))
    for _ in range(6):
        meter.call_started()
    for _ in range(30):
        machine.run(2.0, cpu_rate=6 * 0.2)
        meter.tick()  # (the watch closes each window when due)
    assert (meter.cost().per_call, meter.cost().slots) == (pytest.approx(0.2), 7)
    quiet = []
    for _ in range(round(quiet_seconds / 2.0)):
        machine.run(2.0, cpu_rate=6 * 0.1)
        quiet.append(meter.cost())
    return meter, machine, quiet


def test_a_lull_of_the_admitted_calls_lowers_the_recent_cost_not_the_slots() -> None:
    """Calls held silent cost less per call-second, and their EWMA falls to half in the
    lull; taken as the cost of a call, it would admit twice the calls, that do not fit
    once the silent ones talk again. The slots hold the busy stretch's cost until the
    lull has lasted the horizon."""
    _, _, quiet = _busy_then_quiet(None, 180.0)  # as long as the horizon
    assert max(c.slots for c in quiet) == 7  # floor(0.7 x 2 / 0.2)
    assert quiet[-1].recent == pytest.approx(0.1 + 0.1 * 0.9**90)  # the EWMA fell
    assert quiet[-1].slots < floor(0.7 * 2 / quiet[-1].recent) == 13
    assert all(c.per_call == pytest.approx(0.2) for c in quiet)
    assert quiet[-1].source == "measured"


def test_a_load_that_stays_cheaper_raises_the_slots_once_the_horizon_passed() -> None:
    """No ratchet: past the horizon the slots follow the EWMA, 180 s late, window by
    window (the peak ages out), up to what the cheaper calls allow."""
    meter, _, quiet = _busy_then_quiet(None, 400.0)
    within, after = quiet[:90], quiet[90:]  # the last busy window 180 s before
    assert max(c.slots for c in within) == 7
    # from then on, about the EWMA as it was a horizon before (the peak's EWMA is of the
    # 30 busy windows, not of the prior before them: within 1 %)
    assert [c.per_call for c in after[:5]] == pytest.approx(
        [0.1 + 0.1 * 0.9**n for n in range(1, 6)], rel=0.01)
    assert [c.slots for c in after[::10]] == sorted(c.slots for c in after[::10])
    assert quiet[-1].slots == 13 == floor(0.7 * 2 / (0.1 + 0.1 * 0.9**110))
    assert meter.cost().per_call == pytest.approx(0.1, abs=1e-5)


def test_an_idle_process_forgets_the_peak_after_the_horizon_as_a_restart_keeps_it() -> None:
    """With no call the windows measure the process's idle cost as before and none
    feeds the peak, which ages out: past the horizon the slots are the EWMA's, as they
    were. A restart (the watch beginning a window) forgets the window's part so far,
    not the closed windows' figures."""
    meter, machine, quiet = _busy_then_quiet(180.0, 60.0)  # busy to 60 s, quiet to 120
    assert quiet[-1].slots == 7 and quiet[-1].recent < 0.15
    machine.run(1.0, cpu_rate=6 * 0.5)  # half a window of start-up work, then a restart
    meter.restart()
    assert (meter.cost().per_call, meter.cost().slots) == (pytest.approx(0.2), 7)
    for _ in range(6):
        meter.call_ended()
    for _ in range(59):  # to 239 s without a call
        machine.run(2.0, cpu_rate=0.01)
    cost = meter.cost()
    assert cost.idle == pytest.approx(0.01) and cost.recent == quiet[-1].recent
    assert cost.per_call == pytest.approx(0.2) and cost.slots == 7  # the busy stretch's
    for _ in range(31):  # to 301 s: the last call's window (120 s) is past the horizon
        machine.run(2.0, cpu_rate=0.01)
    cost = meter.cost()
    assert cost.per_call == cost.recent == quiet[-1].recent  # the EWMA, as before
    assert cost.slots == floor(0.7 * 2 / cost.recent)


def test_without_a_horizon_the_slots_follow_the_ewma_into_the_lull() -> None:
    """``horizon_seconds=0``: the EWMA alone, as before the horizon (what the lull test
    above fails on)."""
    _, _, quiet = _busy_then_quiet(0.0, 60.0)
    assert quiet[-1].per_call == quiet[-1].recent == pytest.approx(0.1 + 0.1 * 0.9**30)
    assert quiet[-1].slots == 13


def test_other_processes_cpu_is_not_the_calls_to_use() -> None:
    machine = Machine(measured=True)
    meter = meter_on(machine, window_seconds=2.0, smoothing=1.0)
    meter.call_started()
    machine.run(2.0, cpu_rate=0.1, others=1.0)  # a test suite takes one core of two
    cost = meter.cost()
    assert cost.others == pytest.approx(1.0)
    assert cost.slots == 7  # floor(0.7 * (2 - 1) / 0.1)


def test_other_processes_starting_work_counts_at_once_and_ending_it_slowly() -> None:
    machine = Machine(measured=True)
    meter = meter_on(machine, window_seconds=1.0, smoothing=0.1)
    machine.run(1.0, cpu_rate=0.0, others=0.2)
    assert meter.cost().others == pytest.approx(0.2)  # the first window as it is
    machine.run(1.0, cpu_rate=0.0, others=1.4)  # a test suite starts
    assert meter.cost().others == pytest.approx(0.8)  # half of the rise at once
    machine.run(1.0, cpu_rate=0.0, others=0.0)  # and stops
    assert meter.cost().others == pytest.approx(0.72)  # a tenth of the fall


def test_a_starved_window_only_raises_the_cost() -> None:
    machine = Machine(measured=True)
    meter = meter_on(machine, window_seconds=2.0, smoothing=0.5)
    for _ in range(8):
        meter.call_started()
    machine.run(2.0, cpu_rate=0.4, others=1.6)  # no idle CPU: 5 % a call is what it got
    assert meter.cost().per_call == pytest.approx(0.28)  # not lowered
    machine.run(2.0, cpu_rate=8 * 0.2, others=0.0)  # idle CPU again: 20 % a call
    assert meter.cost().recent == pytest.approx(0.24)


def test_slots_are_at_least_one_however_dear_a_call() -> None:
    machine = Machine()
    meter = meter_on(machine, cores=1, window_seconds=1.0, smoothing=1.0)
    meter.call_started()
    machine.run(1.0, cpu_rate=3.0)  # one call takes three cores' worth (threads)
    assert (meter.cost().per_call, meter.cost().slots) == (pytest.approx(3.0), 1)


def test_loop_lag_is_the_90th_percentile_of_the_recent_probes() -> None:
    machine = Machine()
    meter = meter_on(machine, lag_window_seconds=5.0)
    for lag in [0.001] * 9 + [0.5]:  # one late wake among ten: the p90 is the late one
        meter.record_loop_lag(lag)
    assert meter.cost().loop_lag_ms == pytest.approx(500.0)
    for _ in range(10):
        meter.record_loop_lag(0.002)
    assert meter.cost().loop_lag_ms == pytest.approx(2.0)
    machine.run(6.0, cpu_rate=0.0)  # all aged out
    assert meter.cost().loop_lag_ms is None


async def test_watch_loop_records_how_late_a_blocked_loop_wakes() -> None:
    meter = CallCostMeter(CostSettings(lag_window_seconds=60.0))
    loop = asyncio.get_running_loop()
    probe = loop.create_task(meter.watch_loop(interval=0.05))
    await asyncio.sleep(0.06)
    blocked_until = loop.time() + 0.3
    while loop.time() < blocked_until:  # blocking work on the loop, as a sync call would
        pass
    await asyncio.sleep(0.01)  # the late probe wakes first
    probe.cancel()
    with pytest.raises(asyncio.CancelledError):
        await probe
    lag = meter.cost().loop_lag_ms  # (fewer than ten probes: their p90 is the latest)
    assert lag is not None and lag >= 250.0


def test_admission_refuses_past_the_measured_slots_with_the_cost_in_the_reason() -> None:
    machine = Machine()
    meter = meter_on(machine, cores=2, window_seconds=2.0, smoothing=1.0)
    admission = AdmissionController(AdmissionSettings(), clock=machine.clock, meter=meter)
    assert admission.load().max_calls is None and admission.load().slots == 5  # the prior
    calls = [admission.admit(f"call-{i}") for i in range(2)]
    machine.run(2.0, cpu_rate=2 * 0.35)  # each call costs 35 % of a core here
    load = admission.load()
    assert (load.slots, load.headroom, load.cost_source) == (4, 2, "measured")
    assert load.call_cost == pytest.approx(0.35)
    calls += [admission.admit("call-2"), admission.admit("call-3")]
    with pytest.raises(CapacityExceededError) as info:
        admission.admit("call-4")
    reason = str(info.value)
    assert "4 calls" in reason and "costs 35% of a core here (measured" in reason
    assert "70% of its 2 cores hold 4" in reason
    assert (info.value.active_calls, info.value.max_calls) == (4, 4)
    calls[0].release()
    calls[0].release()  # (once)
    assert admission.load().headroom == 1


def test_admission_refuses_a_call_while_the_admitted_ones_sit_silent() -> None:
    """Seven calls at 20 % fill 70 % of 2 cores; silent for a minute they cost 10 %, and
    the eighth is still refused, the reason saying the cost is the busy stretch's."""
    machine = Machine()
    meter = meter_on(machine, cores=2, prior_call_cost=0.2)
    admission = AdmissionController(AdmissionSettings(), clock=machine.clock, meter=meter)
    calls = [admission.admit(f"call-{i}") for i in range(7)]
    for _ in range(30):
        machine.run(2.0, cpu_rate=7 * 0.2)
        meter.tick()  # (the watch closes each window when due)
    for _ in range(30):  # a minute on hold
        machine.run(2.0, cpu_rate=7 * 0.1)
        meter.tick()
    with pytest.raises(CapacityExceededError) as info:
        admission.admit("call-7")
    assert ("costs 20% of a core here (measured over its recent calls; its highest over "
            "the last 3 min, 10% now), and 70% of its 2 cores hold 7") in str(info.value)
    load = admission.load()
    assert (load.slots, load.headroom, load.call_cost) == (7, 0, pytest.approx(0.2))
    assert load.recent_call_cost == pytest.approx(0.1 + 0.1 * 0.9**30)
    calls[0].release()


def test_a_reconnection_taking_its_own_calls_place_is_one_call_to_the_meter() -> None:
    """The same page reconnecting (``admit(replacing=)``): while its old connection
    ends, the two are one caller to the meter (the CPU a call costs is not spread over
    two), whichever of them ends first."""
    machine = Machine()
    meter = meter_on(machine, cores=2, window_seconds=2.0, smoothing=1.0)
    admission = AdmissionController(AdmissionSettings(), clock=machine.clock, meter=meter)
    old = admission.admit("a")
    machine.run(1.0, cpu_rate=0.3)
    new = admission.admit("b", replacing="a")  # the page reconnects
    machine.run(1.0, cpu_rate=0.3)  # the old connection still ending
    assert admission.load().call_cost == pytest.approx(0.3)  # 0.6 CPU s over 2 call-s
    old.release()
    machine.run(2.0, cpu_rate=0.3)
    assert admission.load().call_cost == pytest.approx(0.3)
    # a reconnection that did not start (released first): its old connection goes on
    again = admission.admit("c", replacing="b")
    again.release()
    machine.run(2.0, cpu_rate=0.3)
    load = admission.load()
    assert load.call_cost == pytest.approx(0.3) and load.active_calls == 1
    assert meter.cost().idle == pytest.approx(0.0)  # (b's CPU, not the process's own)
    new.release()
    machine.run(2.0, cpu_rate=0.01)  # no call: the process's own cost
    assert meter.cost().idle == pytest.approx(0.01)
    assert admission.load().call_cost == pytest.approx(0.3)


def test_max_calls_bounds_the_measured_slots() -> None:
    machine = Machine()
    meter = meter_on(machine, cores=8, window_seconds=1.0, smoothing=1.0)
    admission = AdmissionController(AdmissionSettings(max_calls=3), clock=machine.clock,
                                    meter=meter)
    assert admission.ceiling == 3
    slots = [admission.admit(f"c{i}") for i in range(3)]
    machine.run(1.0, cpu_rate=0.3)  # 10 % a call: 56 slots measured, 3 allowed
    with pytest.raises(CapacityExceededError, match=r"limit 3"):
        admission.admit("c3")
    assert admission.load().slots == 3 and len(slots) == 3
    assert AdmissionController(AdmissionSettings(), meter=meter).ceiling == 10_000


def test_a_late_event_loop_refuses_new_calls_with_the_lag() -> None:
    machine = Machine()
    meter = meter_on(machine)
    admission = AdmissionController(AdmissionSettings(max_loop_lag_ms=200.0),
                                    clock=machine.clock, meter=meter)
    for _ in range(10):
        meter.record_loop_lag(0.35)
    first = admission.admit("a")  # an idle loop's lateness hurts no call (start-up work)
    for _ in range(10):
        meter.record_loop_lag(0.35)
    with pytest.raises(CapacityExceededError, match=r"event loop runs 350 ms late \(limit "
                       r"200 ms\)"):
        admission.admit("b")
    machine.run(6.0, cpu_rate=0.0)
    assert admission.load().accepting and admission.load().active_calls == 1
    first.release()


def test_bad_settings_and_arguments_are_refused() -> None:
    with pytest.raises(ValidationError):
        CostSettings(target_utilization=0)
    with pytest.raises(ValidationError):
        CostSettings(prior_call_cost=float("nan"))
    for bad in (-1.0, 3601.0, float("inf"), float("nan"), "a while"):
        with pytest.raises(ValidationError, match="horizon_seconds"):
            CostSettings(horizon_seconds=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="cores"):
        CallCostMeter(cores=0)
    with pytest.raises(TypeError, match="CostSettings"):
        CallCostMeter(object())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="CallCostMeter"):
        AdmissionController(meter=object())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="seconds"):
        CallCostMeter().record_loop_lag(-1.0)
    assert available_cores() >= 1


def test_the_horizons_peaks_stay_bounded_when_nobody_asks_the_cost() -> None:
    """A meter whose windows the watch closes (tick) and whose cost nobody reads keeps at
    most one peak per window of the horizon, however long a falling cost runs."""
    machine = Machine()
    meter = meter_on(machine, window_seconds=1.0, horizon_seconds=10.0, smoothing=0.5)
    meter.call_started()
    for n in range(300):  # each window's call cheaper than the last: no peak replaces one
        machine.run(1.0, cpu_rate=0.2 * 0.99**n)
        meter.tick()
    assert len(meter._peaks) <= 11
    assert meter.cost().per_call == pytest.approx(max(v for _, v in meter._peaks))
    # a window as short as the settings allow: the cap is no larger than a deque holds
    tiny = CallCostMeter(CostSettings(window_seconds=1e-300), cores=2)
    assert tiny.cost().slots >= 1
