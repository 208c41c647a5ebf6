"""``faults.py``'s ICE faults (``--only ice``, and the silent one of ``--only pg``): a call
whose server's STUN server is silent, refusing or late (``_stun_faults.py``).
"""

from __future__ import annotations

import os
import statistics
import tempfile
from pathlib import Path
from typing import Any

from _faults_common import Caller, CallResult, OwnPostgres, finish, print_call, serving
from _figures import figure

__all__ = ["ice_fault", "ice_faults", "silent_ice"]


async def ice_fault(engines: Any, store: Any, fault: str = "silent"
                    ) -> tuple[CallResult, float]:
    """The call through a STUN server that is ``silent``, ``refusing`` or ``slow``
    (``_stun_faults.py``), and the offer's answer time without it."""
    from _stun_faults import stun_server
    from voxflow_adapters.webrtc import IceServer

    result = CallResult()
    async with serving(engines, store) as (server, _):
        plain = Caller(engines, f"http://127.0.0.1:{server.port}", server.token)
        baseline = await plain.connect()
        await plain.hang_up()
    async with stun_server(fault) as (port, _slow):
        stun = (IceServer(urls=(f"stun:127.0.0.1:{port}",)),)
        async with serving(engines, store, ice_servers=stun) as (server, calls):
            caller = Caller(engines, f"http://127.0.0.1:{server.port}", server.token)
            result.offer_s = await caller.connect()
            for _ in range(3):
                caller.ask()
                if (ms := await caller.answered()) is not None:
                    result.during_ms.append(ms)
            return await finish(result, caller, server, store, calls[0]), baseline


async def silent_ice(engines: Any, pg: OwnPostgres) -> tuple[CallResult, float]:
    """The call through a silent STUN server, its sessions in PostgreSQL."""
    from voxflow.flow.postgres import PostgresFlowPersistence

    store = PostgresFlowPersistence(pg.url)
    try:
        return await ice_fault(engines, store, "silent")
    finally:
        store.close()


async def ice_faults(engines: Any, runs: int) -> None:
    """A call through each failing STUN server (SQLite: the fault is the STUN server's),
    ``runs`` times, and the medians."""
    from voxflow.flow.persistence import SQLiteFlowPersistence

    results: dict[str, list[tuple[CallResult, float]]] = {f: [] for f in
                                                          ("silent", "refusing", "slow")}
    for run in range(1, runs + 1):
        print(f"run {run} (ICE servers):", flush=True)
        for fault, rs in results.items():
            with tempfile.TemporaryDirectory(prefix="voxflow-faults-") as tmp:
                store = SQLiteFlowPersistence(Path(tmp) / "calls.db")
                try:
                    r, base = await ice_fault(engines, store, fault)
                finally:
                    store.close()
            rs.append((r, base))
            print_call(f"{fault} STUN", r, f"; offer answered in {r.offer_s:.2f} s "
                       f"({base:.2f} s without the STUN server)")
    print(f"\nmedians of {runs} run(s), load average {os.getloadavg()[0]:.1f}:")
    for fault, rs in results.items():
        lost = max(r.lost for r, _ in rs)
        offer = statistics.median(r.offer_s for r, _ in rs)
        base = statistics.median(b for _, b in rs)
        ended = [r.ended for r, _ in rs if r.ended]
        print(f"  a {fault} STUN server: turns lost {lost} (worst run); answers after "
              f"{sum(r.answers_after for r, _ in rs)}/{len(rs)}; calls ended "
              f"{len(ended)}; the offer answered in {offer:.2f} s ({base:.2f} s without "
              "it; the gathering waits 2 s)")
        figure(f"{fault} STUN server: offer answered", round(offer, 2), "s")
        figure(f"turns lost: a {fault} STUN server", lost, "turns", target="0")
