"""``faults.py``'s database faults (``--only pg`` and ``--only commit``): resets of every
connection, a restarted PostgreSQL, a silent ICE server with the sessions in PostgreSQL,
offers made right after a reset, and COMMITs cut by a proxy (``_pg_cut.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _faults_common import (
    CallResult,
    OwnPostgres,
    asked_before,
    finish,
    median_of,
    own_postgres,
    print_call,
    serving,
)
from _faults_ice import silent_ice
from _figures import figure

__all__ = ["CommitCuts", "commit_cuts", "commit_faults", "offers_during_resets", "pg_faults",
           "resets", "restart"]


async def resets(engines: Any, pg: OwnPostgres, count: int = 10) -> CallResult:
    from voxflow.flow.postgres import PostgresFlowPersistence

    store = PostgresFlowPersistence(pg.url)
    result = CallResult()
    try:
        async with serving(engines, store) as (server, calls):
            caller = await asked_before(engines, server, result)
            for _ in range(count):
                pg.reset()  # before the question: the turn's saves meet dead connections
                caller.ask()
                await asyncio.sleep(0.8)
                pg.reset()  # while it is answered, saved and played
                if (ms := await caller.answered()) is not None:
                    result.during_ms.append(ms)
            return await finish(result, caller, server, store, calls[0])
    finally:
        store.close()


async def restart(engines: Any, pg: OwnPostgres, downtime: float) -> CallResult:
    from voxflow.flow.postgres import PostgresFlowPersistence

    store = PostgresFlowPersistence(pg.url)
    result = CallResult()
    try:
        async with serving(engines, store) as (server, calls):
            caller = await asked_before(engines, server, result)
            stopped = time.monotonic()
            await asyncio.to_thread(pg.stop)
            caller.ask()  # answered while the database is down
            if (ms := await caller.answered()) is not None:
                result.during_ms.append(ms)
            await asyncio.sleep(max(0.0, downtime - (time.monotonic() - stopped)))
            await asyncio.to_thread(pg.start)
            caller.ask()  # right after it is back
            if (ms := await caller.answered()) is not None:
                result.during_ms.append(ms)
            return await finish(result, caller, server, store, calls[0])
    finally:
        store.close()


@dataclass
class CommitCuts:
    """A call whose store writes had their COMMIT cut (see the module)."""

    call: CallResult
    cuts: int = 0  # COMMITs cut
    doubled: int = 0  # user messages stored more than once


async def commit_cuts(engines: Any, pg: OwnPostgres, count: int = 6) -> CommitCuts:
    """The call through ``count`` questions, the next COMMIT of the store cut before each:
    after the server made it (its answer dropped) and before it reached the server, in
    turn (``_pg_cut.py``)."""
    from _pg_cut import CommitCut

    from voxflow.flow.postgres import PostgresFlowPersistence

    result = CallResult()
    with CommitCut(pg.url) as cut:
        store = PostgresFlowPersistence(cut.url)
        try:
            async with serving(engines, store) as (server, calls):
                caller = await asked_before(engines, server, result, 1)
                for n in range(count):
                    cut.arm("after" if n % 2 == 0 else "before")
                    caller.ask()
                    if (ms := await caller.answered()) is not None:
                        result.during_ms.append(ms)
                    await asyncio.to_thread(cut.wait_cut, 20.0)  # (its save may come later)
                session_id = str(caller.caller.session_id)
                result = await finish(result, caller, server, store, calls[0])
            state = await asyncio.to_thread(store.load_state, session_id) or {}
            said = [m["content"] for m in state.get("messages", []) if m["role"] == "user"]
            return CommitCuts(result, cut.cuts, max(0, len(said) - result.asked))
        finally:
            store.close()


async def offers_during_resets(engines: Any, pg: OwnPostgres, rounds: int
                               ) -> tuple[int, int]:
    """``(refused, offered)`` over ``rounds`` resets, three offers right after each."""
    from voxflow_adapters.hosting.dispatch import DispatchStore
    from voxflow_adapters.hosting.worker import CallWorker
    from voxflow_adapters.webrtc import (
        PeerSettings,
        ServerSettings,
        WebRtcServer,
        assistant_call_factory,
    )
    from voxflow_adapters.webrtc.client import LoopbackCaller, OfferRejected
    from voxflow_adapters.webrtc.front_door import FrontDoor

    host = WebRtcServer(assistant_call_factory(), engines, settings=ServerSettings(
        max_calls=3, peer=PeerSettings(ice_host_addresses=("127.0.0.1",))))
    worker = CallWorker(host, DispatchStore(pg.url))
    await worker.start()
    door = FrontDoor(DispatchStore(pg.url), settings=ServerSettings(port=0))
    refused = offered = 0
    try:
        async with door:
            for _ in range(rounds):
                pg.reset()
                callers = [LoopbackCaller(f"http://127.0.0.1:{door.port}", door.token)
                           for _ in range(3)]
                outcomes = await asyncio.gather(*(c.connect() for c in callers),
                                                return_exceptions=True)
                offered += len(callers)
                refused += sum(isinstance(o, OfferRejected) for o in outcomes)
                for caller, outcome in zip(callers, outcomes, strict=True):
                    if outcome is None:
                        with contextlib.suppress(Exception):
                            caller.send({"v": 1, "type": "hangup"})
                            await caller.wait_message("bye", within=10)
                    await caller.aclose()
                async with asyncio.timeout(30):
                    await host.wait_idle()
                await asyncio.sleep(0.5)  # the slots given back
    finally:
        await worker.aclose()
    return refused, offered


# -- the reports -------------------------------------------------------------------------


async def pg_faults(engines: Any, runs: int, downtime: float, offer_rounds: int,
                    bin_dir: Path) -> None:
    """Connection resets, a restart ``downtime`` s long, a silent ICE server and offers
    during ``offer_rounds`` resets, ``runs`` times on a PostgreSQL of the script's own, and
    the medians."""
    table: dict[str, list[Any]] = {"resets": [], "restart": [], "ice": [], "ice_base": [],
                                   "offers": []}
    for run in range(1, runs + 1):
        print(f"run {run}:", flush=True)
        with own_postgres(bin_dir) as pg:
            r = await resets(engines, pg)
            table["resets"].append(r)
            print_call("resets", r, " (20 resets: 10 before a question, 10 during it)")
            r = await restart(engines, pg, downtime)
            table["restart"].append(r)
            print_call("restart", r, f" (down {downtime:g} s)")
            r, base = await silent_ice(engines, pg)
            table["ice"].append(r)
            table["ice_base"].append(base)
            print_call("silent ICE", r, f"; offer answered in {r.offer_s:.2f} s "
                       f"({base:.2f} s without the STUN server)")
            refused, offered = await offers_during_resets(engines, pg, offer_rounds)
            table["offers"].append((refused, offered))
            print(f"  offers      refused {refused} of {offered} made right after a "
                  "reset of every connection", flush=True)
    print(f"\nmedians of {runs} run(s), load average {os.getloadavg()[0]:.1f} at the end:")
    for key, label in (("resets", "10 connection resets in a row"),
                       ("restart", f"PostgreSQL restart, {downtime:g} s down"),
                       ("ice", "an ICE server that never answers")):
        rs: list[CallResult] = table[key]
        lost = max(r.lost for r in rs)
        before = median_of(r.before_ms for r in rs)
        during = median_of(r.during_ms for r in rs)
        print(f"  {label:<33} turns lost {lost} (worst run); answers after "
              f"{sum(r.answers_after for r in rs)}/{len(rs)}; state held back "
              f"{statistics.median(r.held_back for r in rs):.1f} s; first audio {during} ms "
              f"during the fault ({before} before)")
        figure(f"turns lost: {label}", lost, "turns", target="0")
    ice = statistics.median(r.offer_s for r in table["ice"])
    base = statistics.median(table["ice_base"])
    print(f"  an ICE server that never answers: the offer answered in {ice:.2f} s "
          f"({base:.2f} s without it)")
    refused = sum(r for r, _ in table["offers"])
    offered = sum(o for _, o in table["offers"])
    print(f"  offers refused right after a reset: {refused} of {offered}")
    figure("restart: state held back", round(statistics.median(
        r.held_back for r in table["restart"]), 1), "s")
    figure("silent ICE server: offer answered", round(ice, 2), "s")
    figure("offers refused during a reset", refused, "offers", target="0")


async def commit_faults(engines: Any, runs: int, bin_dir: Path) -> None:
    """A call whose store's COMMITs are cut, ``runs`` times, and the medians."""
    results: list[CommitCuts] = []
    for run in range(1, runs + 1):
        with own_postgres(bin_dir) as pg:
            r = await commit_cuts(engines, pg)
        results.append(r)
        print_call(f"run {run} commit cuts", r.call,
                   f" ({r.cuts} COMMITs cut; user messages doubled {r.doubled})")
    lost = max(r.call.lost for r in results)
    doubled = max(r.doubled for r in results)
    print(f"  COMMIT cut (made and unanswered, or never made), each question: turns lost "
          f"{lost}, doubled {doubled} (worst run); answers after "
          f"{sum(r.call.answers_after for r in results)}/{len(results)}; state held back "
          f"{statistics.median(r.call.held_back for r in results):.1f} s; first audio "
          f"{median_of(r.call.during_ms for r in results)} ms during "
          f"({median_of(r.call.before_ms for r in results)} before)", flush=True)
    figure("turns lost: COMMITs cut", lost, "turns", target="0")
    figure("turns doubled: COMMITs cut", doubled, "turns", target="0")
