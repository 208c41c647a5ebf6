"""The admission's cost meter over a ``capacity.py --offered`` run: its trace every 5 s
(:func:`trace_meter`), why its cost per call differs from the row's
(:func:`print_cost_decomposition`) and the late turns of a ``--lull``
(:func:`print_lull`)."""

from __future__ import annotations

import asyncio
import time

from _capacity_calls import P95_TARGET_MS, TAIL, CapacityRow, second_wave
from voxflow_adapters.hosting.admission import AdmissionController

__all__ = ["TracePoint", "print_cost_decomposition", "print_lull", "trace_meter"]


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.0f} ms"


TracePoint = tuple[float, int, float, float, float | None, int]
"""(s, live calls, the meter's cost per call (the slots'), its EWMA now
(``CallCost.recent``), the process's CPU over the live call-seconds since the previous
point (None for the first, or with no call), slots)."""


async def trace_meter(admission: AdmissionController, trace: list[TracePoint],
                       every: float = 5.0) -> None:
    """The meter's cost per call and slots every ``every`` s, and beside it the raw
    figure of those ``every`` s (the process's CPU over the live call-seconds, the live
    calls taken as the mean of both ends; the idle cost not subtracted): how far one
    stretch's cost strays from the meter's. Read from the meter, not with
    ``admission.load()``, which also samples the scheduler's utilisation window (that of
    "whoever looked"): tracing would shift it. ``meter.cost()`` closes a CPU window that
    is due, which the meter's own loop-lag probe does within 0.1 s anyway."""
    start = time.perf_counter()
    last: tuple[float, float, int] | None = None  # (wall, CPU, live) of the previous point
    while True:
        live = admission.active_calls  # (the admitted calls; a read, nothing moves)
        now, cpu = time.perf_counter(), time.process_time()
        raw = None
        if last is not None and live + last[2] > 0:
            raw = (cpu - last[1]) / ((now - last[0]) * (live + last[2]) / 2)
        cost = admission.meter.cost()
        trace.append((now - start, live, cost.per_call, cost.recent, raw, cost.slots))
        last = (now, cpu, live)
        await asyncio.sleep(every)


def print_cost_decomposition(row: CapacityRow, meter_cost: float, idle: float,
                             trace: list[TracePoint]) -> None:
    """Why the meter's cost per call at the end differs from the row's CPU/call: the
    same CPU over another denominator (the calls' seconds *held*, admission to release,
    each call's TAIL s of silence after its last reply included, where the row counts
    each call to its last reply sample), the idle cost the meter subtracts, and its
    EWMA's weight on the last ~40 s, when the calls wind down."""
    if row.held_seconds <= 0:
        return
    held = 100.0 * row.cpu_seconds / row.held_seconds
    print(f"  cost per call: the row {row.cpu_per_call_pct:.1f} % (CPU {row.cpu_seconds:.1f} s "
          f"/ {row.heard_seconds:.0f} call-s to each last reply sample); over the call-s "
          f"held, admission to release ({row.held_seconds:.0f} s, each call's {TAIL:g} s "
          f"tail included) {held:.1f} %; the meter's EWMA at the end {100 * meter_cost:.1f} % "
          f"(idle {100 * idle:.1f} % of a core subtracted per window)")
    print("  the meter over the run (s: live calls, cost per call (its EWMA now where "
          "lower), slots [the 5 s's raw CPU / call-s]): " + ", ".join(
              f"{at:.0f}: {live}, {100 * cost:.1f} %"
              + (f" ({100 * recent:.1f})" if recent < cost - 5e-4 else "") + f", {slots}"
              + ("" if raw is None else f" [{100 * raw:.1f}]")
              for at, live, cost, recent, raw, slots in trace))


def print_lull(row: CapacityRow, arrivals: float, turns: int, lull: float) -> None:
    """The turns answered late (voice to voice over the target), all and after the lull."""
    at, over = second_wave(arrivals, turns, lull)
    print(f"  lull {lull:g} s: second wave offered from {at:.0f} to {at + over:.0f} s; late "
          f"turns (v2v > {P95_TARGET_MS:.0f} ms): {row.late_turns} of "
          f"{row.committed} committed; after the lull "
          f"{row.resumed_late} of {row.resumed_turns}, p95 {_ms(row.resumed_p95_ms)}")
