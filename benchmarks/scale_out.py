"""Scale out: what one call worker holds, what dispatch and failover cost, what a save
costs on PostgreSQL vs SQLite.

Run (real time: under the benchmark lock, and note the load average it prints):
``flock /tmp/voxflow-bench.lock uv run python benchmarks/scale_out.py [--calls 1,2,4]
[--turns 2] [--failover-runs 1] [--offers 10] [--skip capacity,failover,...]``

It reuses the other benchmarks rather than repeating them, and prints one section each:

* **calls per worker** (``capacity.run_calls``): N concurrent scripted calls on one
  process's shared models, the voice-to-voice p95 per N, and the largest N within
  p95 <= 1 s (every question committed, none lost), with the real models (Whisper,
  Piper) and with instant STT/TTS (a fixed transcript, the reply audio cached): what a
  ``voxflow serve --worker`` process holds on this machine's cores; and the RSS per
  extra call (peak growth over the row below, per added call).
* **dispatch** (``scale_out``'s own): ``POST /offer`` → answer, through a front door
  and a call worker on PostgreSQL (``FrontDoor``/``CallWorker``, in this process) vs
  straight to a ``WebRtcServer``, medians over ``--offers`` sequential offers of a real
  aiortc caller (each hung up before the next).
* **failover** (``failover.measure_failover``): kill -9 of a serve process mid-reply →
  the call resumed on another on the same PostgreSQL, split into detection / reconnect
  (of it the lease wait) / state load, and the next answer's first audio.
* **save latency** (``persistence.run_backend``): p50/p99 of an incremental save, SQLite
  vs PostgreSQL.

Nothing is asserted: the machine is shared (see the load average).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from _figures import figure

PG_URL = os.environ.get("VOXFLOW_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")
TOKEN = "scale-out-bench-token"
SECTIONS = ("capacity", "dispatch", "failover", "saves")


def _load() -> float:
    return os.getloadavg()[0]


# -- calls per worker ---------------------------------------------------------------------


def _instant_engines(engines: Any) -> Any:
    """The same VAD, an STT that answers at once, the reply audio synthesized once."""
    from voxflow_voice.engines import VoiceEngines
    from webrtc_load import _CachedTts, _InstantStt

    return VoiceEngines(stt=_InstantStt(), tts=_CachedTts(engines.tts),
                        make_vad=engines.make_vad)


async def capacity_section(calls: list[int], turns: int) -> None:
    import capacity

    engines, idle = await capacity.load_engines()
    instant = _instant_engines(engines)
    async for _ in instant.tts.stream(capacity.REPLY):  # cached: every reply is instant
        pass
    print(f"\n== calls per worker (one process, shared models, {turns} questions per call; "
          f"idle RSS {idle:.0f} MB; load {_load():.1f})")
    for name, which in (("real models", engines), ("instant STT/TTS", instant)):
        rows = []
        baseline = (0, capacity._rss_mb())
        for n in calls:
            row, _ = await capacity.run_calls(which, n, turns, baseline=baseline)
            baseline = (n, row.rss_peak_mb)
            rows.append(row)
            print(f"  {name:<16} {n:>3} calls: v2v p50 {capacity._ms(row.v2v_p50_ms):>9}, "
                  f"p95 {capacity._ms(row.v2v_p95_ms):>9}, committed "
                  f"{row.committed}/{row.asked}, lost {row.turns_lost}, CPU/call "
                  f"{row.cpu_per_call_pct:.1f} %, RSS peak {row.rss_peak_mb:.0f} MB, "
                  f"RSS per extra call {row.rss_per_extra_call_mb:.1f} MB", flush=True)
        best = capacity._within_target(rows)
        print(f"  {name}: calls per worker at p95 <= 1 s (of those measured): {best}")
        figure(f"calls per worker at p95 <= 1 s ({name})", best, "calls")
        extra = [r.rss_per_extra_call_mb for r in rows[1:]]
        if extra:
            figure(f"RSS per extra call ({name})", round(statistics.median(extra), 1), "MB")


# -- dispatch -----------------------------------------------------------------------------


async def _offer_times(base_url: str, offers: int) -> list[float]:
    from voxflow_adapters.webrtc.client import LoopbackCaller

    times = []
    for _ in range(offers):
        caller = LoopbackCaller(base_url, TOKEN)
        began = time.monotonic()
        await caller.connect()  # offer posted → answer applied → data channel open
        times.append((time.monotonic() - began) * 1000.0)
        await caller.aclose()
        await asyncio.sleep(0.3)
    return times


async def dispatch_section(offers: int) -> None:
    import psycopg
    from voxflow_adapters.webrtc import PeerSettings, ServerSettings, WebRtcServer
    from voxflow_adapters.webrtc.calls import assistant_call_factory
    from voxflow_adapters.webrtc.dispatch import DispatchStore
    from voxflow_adapters.webrtc.front_door import FrontDoor
    from voxflow_adapters.webrtc.worker import CallWorker
    from voxflow_voice.engines import VoiceEngines

    engines = await asyncio.to_thread(VoiceEngines.load)
    loopback = PeerSettings(ice_host_addresses=("127.0.0.1",))
    schema = f"vx_scale_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    url = f"{PG_URL}?options=-csearch_path%3D{schema}"
    try:
        direct = WebRtcServer(assistant_call_factory(), engines,
                              settings=ServerSettings(port=0, token=TOKEN, peer=loopback))
        async with direct:
            straight = await _offer_times(f"http://127.0.0.1:{direct.port}", offers)
        host = WebRtcServer(assistant_call_factory(), engines,
                            settings=ServerSettings(peer=loopback))
        worker = CallWorker(host, DispatchStore(url))
        await worker.start()
        try:
            async with FrontDoor(DispatchStore(url),
                                 settings=ServerSettings(port=0, token=TOKEN)) as door:
                dispatched = await _offer_times(f"http://127.0.0.1:{door.port}", offers)
        finally:
            await worker.aclose()
    finally:
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
    a, b = statistics.median(straight), statistics.median(dispatched)
    print(f"\n== dispatch (offer → data channel open, median of {offers}; load {_load():.1f})")
    print(f"  straight to a serve process:        {a:7.0f} ms")
    print(f"  front door → call worker (PostgreSQL): {b:7.0f} ms  (+{b - a:.0f} ms)")
    figure("call setup through a front door", round(b), "ms")
    figure("call setup, dispatch overhead", round(b - a), "ms")


# -- failover -----------------------------------------------------------------------------


async def failover_section(runs: int) -> None:
    import failover
    from voxflow_voice.engines import VoiceEngines

    engines = await asyncio.to_thread(VoiceEngines.load)
    timings = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as tmp:
            store, where = failover._store("postgres", Path(tmp))
            store.check_writable()
            try:
                timings.append(await failover.measure_failover(engines, store, where))
            finally:
                store.close()
                store.drop_schema()

    def med(name: str) -> float:
        return float(statistics.median(getattr(t, name) for t in timings))

    print(f"\n== failover on PostgreSQL (kill -9 mid-reply → resumed on another process; "
          f"median of {runs}; load {_load():.1f})")
    print(f"  detection {med('detection'):.2f} s, reconnect {med('reconnect'):.2f} s (lease "
          f"wait {med('lease_wait'):.2f} s), state load {med('state_load') * 1000:.0f} ms, "
          f"total (kill → resumed hello) {med('total'):.2f} s, then the next answer's "
          f"first audio {med('next_answer'):.2f} s later")
    figure("failover: kill → resumed hello (postgres)", round(med("total"), 2), "s")


# -- saves --------------------------------------------------------------------------------


def saves_section() -> None:
    import persistence

    args = argparse.Namespace(runs=3, turns=200)
    sqlite = persistence.run_backend(persistence.sqlite_store, args, False)
    postgres = persistence.run_backend(persistence.postgres_store, args, False)
    print(f"\n== save latency (200 turns, median of 3 runs; load {_load():.1f})")
    print(f"  SQLite      p50 {sqlite[0]:.2f} ms, p99 {sqlite[1]:.2f} ms")
    print(f"  PostgreSQL  p50 {postgres[0]:.2f} ms, p99 {postgres[1]:.2f} ms")
    figure("save p50 (postgres)", round(postgres[0], 2), "ms")
    figure("save p50 (sqlite)", round(sqlite[0], 2), "ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", default="1,2,4", help="concurrent calls per row")
    parser.add_argument("--turns", type=int, default=2, help="questions per call")
    parser.add_argument("--offers", type=int, default=10, help="offers timed per path")
    parser.add_argument("--failover-runs", type=int, default=1, help="kills timed")
    parser.add_argument("--skip", default="", help=f"sections to skip: {','.join(SECTIONS)}")
    args = parser.parse_args()
    skip = {s for s in args.skip.split(",") if s}
    if skip - set(SECTIONS):
        parser.error(f"--skip takes {', '.join(SECTIONS)}")
    calls = sorted({int(c) for c in args.calls.split(",") if c})
    print(f"scale out, {os.cpu_count()} CPUs, load average {_load():.1f} at the start")
    if "capacity" not in skip:
        asyncio.run(capacity_section(calls, args.turns))
    if "dispatch" not in skip:
        asyncio.run(dispatch_section(args.offers))
    if "failover" not in skip:
        asyncio.run(failover_section(args.failover_runs))
    if "saves" not in skip:
        saves_section()
    print(f"\nload average {_load():.1f} at the end")


if __name__ == "__main__":
    main()
