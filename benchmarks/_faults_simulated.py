"""``faults.py --transport simulated``: the database faults of ``--only pg`` on a call
through the simulated transport (``run_call``: the real models, the example assistant,
the simulated caller, real time) instead of WebRTC: 10 resets of every connection in a
row (each as a question begins and again 0.8 s later, while it is answered and saved),
and PostgreSQL stopped as a question begins and started again ``downtime`` s later.
Its saves are deferred as a hosted call's (``hosting.deferred_saves.saves_deferred``).
:func:`simulated_call` is the call every family's simulated variant runs (the LLM
provider's, the disk's and the clock's: ``_faults_llm.py``, ``_faults_disk_clock.py``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import statistics
from collections.abc import Awaitable, Callable, Collection
from pathlib import Path
from typing import Any

from _faults_common import (
    QUESTION,
    CallResult,
    OwnPostgres,
    median_of,
    own_postgres,
    print_call,
    stored_completed,
)
from _figures import figure

__all__ = ["simulated_call", "simulated_faults"]

_GAP = 6.0  # s between two questions (an answer takes about 2)


class _HeldBack(logging.Handler):
    """The outages the call's deferred saves report ("held back 5.8 s")."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.seconds: list[float] = []

    def emit(self, record: logging.LogRecord) -> None:
        found = re.search(r"held back ([0-9.]+) s", record.getMessage())
        if found:
            self.seconds.append(float(found.group(1)))


async def simulated_call(engines: Any, flow: Any, store: Any, asked: int,
                         at_question: Callable[[int], Awaitable[None] | None],
                         faulted: Collection[int], *, gap: float = _GAP,
                         settings: Any = None) -> tuple[CallResult, list[int]]:
    """A call through ``run_call`` (real time) of ``flow``, its sessions in ``store``:
    ``asked`` questions ``gap`` s apart, ``at_question(n)`` called as question ``n`` (from
    1) begins (what it returns is awaited alongside: the fault's own course); the
    questions in ``faulted`` are "during" the fault. What it came to, and the question
    each finished reply answered."""
    from voxflow_adapters.testkit.scenario import run_call
    from voxflow_adapters.testkit.script import CallScript

    from voxflow.clock import MonotonicClock

    started = 0
    first_audio: list[tuple[int, float]] = []  # (question, ms)
    replies: list[int] = []  # the question each finished reply answered
    courses: list[asyncio.Task[None]] = []

    def on_event(event: Any) -> None:
        nonlocal started
        if event.kind == "speech_started":
            started += 1
            course = at_question(started)
            if course is not None:
                courses.append(asyncio.ensure_future(course))
        elif event.kind == "reply_finished":
            replies.append(started)
        elif event.kind == "turn_metrics" and event.first_audio is not None:
            first_audio.append((started, (event.first_audio - event.speech_end) * 1000))

    script = CallScript()
    for n in range(asked):
        script = script.user_says(0.5 + n * gap, QUESTION)
    script = script.until(0.5 + asked * gap)
    held = _HeldBack()
    said = logging.getLogger("voxflow_adapters.hosting.deferred_saves")
    level = said.level
    said.setLevel(logging.WARNING)  # (faults.py quiets everything below ERROR)
    said.addHandler(held)
    try:
        await run_call(flow, script, engines, on_event=on_event, clock=MonotonicClock(),
                       settings=settings)
        async with asyncio.timeout(60):
            await asyncio.gather(*courses)
    finally:
        said.removeHandler(held)
        said.setLevel(level)
    stored = await asyncio.to_thread(stored_completed, store, str(flow.state.id))
    return CallResult(
        asked=asked, heard=len(replies), stored=stored,
        answers_after=asked in replies, held_back=sum(held.seconds),
        before_ms=[ms for n, ms in first_audio if n not in faulted],
        during_ms=[ms for n, ms in first_audio if n in faulted]), replies


async def _pg_call(engines: Any, pg: OwnPostgres, fault: str, downtime: float = 5.0
                   ) -> CallResult:
    """One call of ``fault`` (``resets``: 10 questions each with two resets, between two
    clean ones; ``restart``: a question while PostgreSQL is down, then one after it is
    back)."""
    from voxflow.examples.assistant import assistant_class
    from voxflow.flow.postgres import PostgresFlowPersistence

    # a clean question first and last; "before" below: the first audio of those two
    faulted = range(2, 12) if fault == "resets" else range(2, 3)

    async def resets() -> None:
        await asyncio.to_thread(pg.reset)
        await asyncio.sleep(0.8)
        await asyncio.to_thread(pg.reset)

    async def restart() -> None:
        await asyncio.to_thread(pg.stop)
        await asyncio.sleep(downtime)
        await asyncio.to_thread(pg.start)

    def at_question(n: int) -> Awaitable[None] | None:
        if n not in faulted:
            return None
        return resets() if fault == "resets" else restart()

    store = PostgresFlowPersistence(pg.url, connect_timeout=2)
    try:
        flow = assistant_class(None)(persistence=store)
        result, _ = await simulated_call(engines, flow, store, max(faulted) + 1,
                                         at_question, faulted)
        return result
    finally:
        store.close()


async def simulated_faults(engines: Any, runs: int, downtime: float, bin_dir: Path) -> None:
    """The resets and the restart on the simulated transport, ``runs`` times, and the
    worst turns lost."""
    table: dict[str, list[CallResult]] = {"resets": [], "restart": []}
    for run in range(1, runs + 1):
        print(f"run {run} (simulated transport):", flush=True)
        with own_postgres(bin_dir) as pg:
            for fault in table:
                r = await _pg_call(engines, pg, fault, downtime)
                table[fault].append(r)
                print_call(fault, r, " (simulated; 'before': the clean questions)"
                           if fault == "resets" else f" (simulated; down {downtime:g} s)")
    print(f"\nsimulated transport, {runs} run(s), load average {os.getloadavg()[0]:.1f}:")
    for fault, label in (("resets", "10 connection resets in a row"),
                         ("restart", f"PostgreSQL restart, {downtime:g} s down")):
        rs = table[fault]
        lost = max(r.lost for r in rs)
        print(f"  {label:<33} turns lost {lost} (worst run); answers after "
              f"{sum(r.answers_after for r in rs)}/{len(rs)}; state held back "
              f"{statistics.median(r.held_back for r in rs):.1f} s; first audio "
              f"{median_of(r.during_ms for r in rs)} ms during the fault "
              f"({median_of(r.before_ms for r in rs)} outside it)")
        figure(f"turns lost: {label}, simulated transport", lost, "turns", target="0")
