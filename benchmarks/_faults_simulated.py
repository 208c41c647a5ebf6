"""``faults.py --transport simulated``: the database faults of ``--only pg`` on a call
through the simulated transport (``run_call``: the real models, the example assistant,
the simulated caller, real time) instead of WebRTC: 10 resets of every connection in a
row (each as a question begins and again 0.8 s later, while it is answered and saved),
and PostgreSQL stopped as a question begins and started again ``downtime`` s later.
Its saves are deferred as a hosted call's (``hosting.deferred_saves.saves_deferred``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import statistics
import threading
import time
from pathlib import Path
from typing import Any

from _faults_common import QUESTION, CallResult, OwnPostgres, median_of, own_postgres, print_call
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


async def simulated_call(engines: Any, pg: OwnPostgres, fault: str, downtime: float = 5.0
                         ) -> CallResult:
    """One call of ``fault`` (``resets``: 10 questions each with two resets, between two
    clean ones; ``restart``: a question while PostgreSQL is down, then one after it is
    back)."""
    from voxflow_adapters.testkit.scenario import run_call
    from voxflow_adapters.testkit.script import CallScript

    from voxflow.clock import MonotonicClock
    from voxflow.examples.assistant import assistant_class
    from voxflow.flow.postgres import PostgresFlowPersistence

    # a clean question first and last; "before" below: the first audio of those two
    faulted = range(2, 12) if fault == "resets" else range(2, 3)
    asked = max(faulted) + 1
    store = PostgresFlowPersistence(pg.url, connect_timeout=2)
    flow = assistant_class(None)(persistence=store)
    started = 0
    first_audio: list[tuple[int, float]] = []  # (question, ms)
    replies: list[int] = []  # the question each finished reply answered
    threads: list[threading.Thread] = []

    def in_thread(fn: Any, *args: Any) -> None:
        thread = threading.Thread(target=fn, args=args, daemon=True)
        thread.start()
        threads.append(thread)

    def restart() -> None:
        pg.stop()
        time.sleep(downtime)
        pg.start()

    def on_event(event: Any) -> None:
        nonlocal started
        if event.kind == "speech_started":
            started += 1
            if started in faulted and fault == "resets":
                in_thread(pg.reset)
                threading.Timer(0.8, pg.reset).start()
            elif started in faulted:
                in_thread(restart)
        elif event.kind == "reply_finished":
            replies.append(started)
        elif event.kind == "turn_metrics" and event.first_audio is not None:
            first_audio.append((started, (event.first_audio - event.speech_end) * 1000))

    script = CallScript()
    for n in range(asked):
        script = script.user_says(0.5 + n * _GAP, QUESTION)
    script = script.until(0.5 + asked * _GAP)
    held = _HeldBack()
    said = logging.getLogger("voxflow_adapters.hosting.deferred_saves")
    level = said.level
    said.setLevel(logging.WARNING)  # (faults.py quiets everything below ERROR)
    said.addHandler(held)
    try:
        await run_call(flow, script, engines, on_event=on_event, clock=MonotonicClock())
        for thread in threads:
            await asyncio.to_thread(thread.join, 60)
        await asyncio.sleep(1.0)  # (the resets' timers)
        again = assistant_class(None)(persistence=store)
        await again.aload_session(flow.state.id)
        stored = sum(m.role == "assistant" for m in again.state.messages)
    finally:
        said.removeHandler(held)
        said.setLevel(level)
        store.close()
    return CallResult(
        asked=asked, heard=len(replies), stored=stored,
        answers_after=asked in replies, held_back=sum(held.seconds),
        before_ms=[ms for n, ms in first_audio if n not in faulted],
        during_ms=[ms for n, ms in first_audio if n in faulted])


async def simulated_faults(engines: Any, runs: int, downtime: float, bin_dir: Path) -> None:
    """The resets and the restart on the simulated transport, ``runs`` times, and the
    worst turns lost."""
    table: dict[str, list[CallResult]] = {"resets": [], "restart": []}
    for run in range(1, runs + 1):
        print(f"run {run} (simulated transport):", flush=True)
        with own_postgres(bin_dir) as pg:
            for fault in table:
                r = await simulated_call(engines, pg, fault, downtime)
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
