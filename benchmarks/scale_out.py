"""Scale out (issue 17): every figure of a deployment of many workers on PostgreSQL, in one run.

Run (real time: under the benchmark lock, and note the load averages it prints):
``flock /tmp/voxflow-bench.lock uv run python benchmarks/scale_out.py [--cap 32]
[--turns 2] [--target-ms 1000] [--offers 10] [--failover-runs 3] [--job-runs 3]
[--heartbeat 2] [--stalled-after 10] [--save-turns 200] [--save-runs 3]
[--skip capacity,dispatch,failover,jobs,saves]``; ``--quick`` makes every section as
small as it goes (a smoke run: ``--cap 2 --turns 1 --offers 2 --failover-runs 1
--job-runs 1 --heartbeat 0.5 --stalled-after 2.5 --save-turns 20 --save-runs 1``, where
those options are not given).

One section each, each with the machine's load average at its start and its end:

* **calls per worker** (``capacity.run_calls``): N concurrent scripted calls on one
  process's shared models, set up as a ``voxflow serve --worker`` is (the models
  first come, first served, ``VoiceSettings()``), searched upward, N = 1, 2, 4, 6, 8,
  12, 16, 24, 32, ... (``--cap`` the last), until a row misses the target: voice-to-voice
  p95 <= ``--target-ms`` with every question committed, none lost, no stale sample.
  Between the last N that met it and the first that missed, N is then bisected, so the
  **knee** printed is the largest N within the target (below the first N that misses),
  or "at least the cap". Once with the real models (Whisper, Piper) and once with instant
  STT/TTS (a fixed transcript; every segment of the reply synthesized once, then
  replayed): what the pipeline around the models holds. The callers are simulated (no
  WebRTC transport: ``webrtc_load.py`` measures its cost). **RSS per extra call**: each
  upward row's peak growth over the row below, per added call (the first row's growth
  includes the models' first use; the bisected rows, below an earlier peak, have none),
  the median of the rows after the first.
* **dispatch** (this file's own): ``POST /offer`` → data channel open, through a front
  door and a call worker on PostgreSQL (``FrontDoor``/``CallWorker``, in this process)
  vs straight to a ``WebRtcServer``, medians over ``--offers`` sequential offers of a
  real aiortc caller (each hung up before the next).
* **failover** (``_failover.py``, as ``failover.py`` uses it): the deployed shape, a front
  door and two call workers (``voxflow serve --front-door`` / ``--worker``, processes)
  on PostgreSQL (every table in a fresh schema, dropped after), an aiortc caller
  dialing the front door; the worker holding the call is killed (-9) mid-reply. Kill →
  the resumed call's first reply audio, split into detection, reconnect (of it the lease
  wait and the state load), hello, and the resumed call's next commit → its first reply
  audio; the caller's own question and its end of turn are left out (printed apart).
* **job recovery** (``jobs_queue.one_run``): a job worker (``voxflow jobs worker``)
  killed (-9) mid-job → the job running again as its next attempt on a standby job
  worker → finished, with ``--heartbeat`` / ``--stalled-after`` (the CLI's defaults).
* **save latency** (``persistence.run_backend``): p50/p99 of one persisted turn's save,
  fenced as a call's saves are (``store.fenced(lease)``), SQLite vs PostgreSQL.

PostgreSQL: ``VOXFLOW_BENCH_DATABASE_URL`` (default
``postgresql://postgres@127.0.0.1:5432/test``); its sections are skipped with the reason
when none answers. Nothing is asserted: the machine is shared (see the load averages).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from _figures import figure
from persistence import PG_URL, fresh_schema, postgres_unreachable

TOKEN = "scale-out-bench-token"
SECTIONS = ("capacity", "dispatch", "failover", "jobs", "saves")
LADDER = (1, 2, 4, 6, 8, 12, 16, 24, 32, 48, 64)
"""The upward search's N (those below ``--cap``, then the cap)."""
QUICK = {"cap": 2, "turns": 1, "offers": 2, "failover_runs": 1, "job_runs": 1,
         "heartbeat": 0.5, "stalled_after": 2.5, "save_turns": 20, "save_runs": 1}


def _load() -> float:
    return os.getloadavg()[0]


@contextlib.contextmanager
def section(title: str) -> Iterator[None]:
    """Print ``title`` with the load average, and the load average again at the end."""
    began = time.monotonic()
    print(f"\n== {title} (load average {_load():.1f} at the start)", flush=True)
    try:
        yield
    finally:
        print(f"  (load average {_load():.1f} at the end; {time.monotonic() - began:.0f} s)",
              flush=True)


# -- calls per worker ---------------------------------------------------------------------


async def _instant_engines(engines: Any) -> Any:
    """The same VAD, an STT that answers at once, every segment of the reply synthesized
    once now (then replayed at once)."""
    from _capacity_calls import REPLY
    from voxflow_voice.engines import VoiceEngines
    from voxflow_voice.speak.segmenter import TextSegmenter
    from webrtc_load import WARM_UP, _CachedTts, _InstantStt

    instant = VoiceEngines(stt=_InstantStt(), tts=_CachedTts(engines.tts),
                           make_vad=engines.make_vad)
    segmenter = TextSegmenter()
    for segment in [*segmenter.push(REPLY), *segmenter.flush()]:
        async for _ in instant.tts.stream(segment.text, delivery_id=WARM_UP, segment_id=1):
            pass
    return instant


def ladder(cap: int) -> list[int]:
    """The N searched upward: :data:`LADDER` below ``cap``, then ``cap``."""
    return [n for n in LADDER if n < cap] + [cap]


async def search_calls(engines: Any, name: str, turns: int, target_ms: float,
                       cap: int) -> tuple[list[Any], list[Any]]:
    """Rows of N concurrent calls, N upward until one misses ``target_ms``, then bisected
    between the last N that met it and that one (see the module); each row printed.
    Returns (every row, the upward rows)."""
    import capacity
    from _capacity_calls import _rss_mb

    rows: list[Any] = []
    upward_rows: list[Any] = []
    baseline = (0, _rss_mb())

    async def row(n: int, upward: bool) -> bool:
        nonlocal baseline
        began = time.monotonic()
        r, _ = await asyncio.wait_for(capacity.run_calls(engines, n, turns, baseline=baseline),
                                      timeout=capacity.CALL_LIMIT + 60.0)
        rows.append(r)
        if upward:
            baseline = (n, r.rss_peak_mb)
            upward_rows.append(r)
        rss = f"{r.rss_per_extra_call_mb:.1f} MB" if upward else "n/a (bisected)"
        print(f"  {name:<16} {n:>3} calls: v2v p50 {capacity._ms(r.v2v_p50_ms):>9}, "
              f"p95 {capacity._ms(r.v2v_p95_ms):>9}, committed {r.committed}/{r.asked}, "
              f"lost {r.turns_lost}, stale {r.stale_samples}, CPU/call "
              f"{r.cpu_per_call_pct:.1f} %, RSS peak {r.rss_peak_mb:.0f} MB, RSS per extra "
              f"call {rss} ({'met' if r.meets(target_ms) else 'MISSED'}; "
              f"{time.monotonic() - began:.0f} s, load {_load():.1f})", flush=True)
        return bool(r.meets(target_ms))

    met, missed = 0, None
    for n in ladder(cap):
        if not await row(n, upward=True):
            missed = n
            break
        met = n
    while missed is not None and missed - met > 1:
        mid = (met + missed) // 2
        if await row(mid, upward=False):
            met = mid
        else:
            missed = mid
    return rows, upward_rows


async def capacity_section(turns: int, target_ms: float, cap: int) -> None:
    import capacity

    engines, idle = await capacity.load_engines(scheduling=False)
    instant = await _instant_engines(engines)
    print(f"  one process, shared models, first come first served, {turns} question(s) per "
          f"call, target v2v p95 <= {target_ms:g} ms, cap {cap}; idle RSS {idle:.0f} MB",
          flush=True)
    for name, which in (("real models", engines), ("instant STT/TTS", instant)):
        rows, upward = await search_calls(which, name, turns, target_ms, cap)
        knee = capacity.calls_within_target(rows, target_ms)
        shown = f"at least {knee} (the cap: raise --cap)" if knee == cap else str(knee)
        print(f"  {name}: calls per worker at p95 <= {target_ms:g} ms: {shown}", flush=True)
        figure(f"calls per worker at p95 <= {target_ms:g} ms ({name})", knee, "calls")
        extra = [r.rss_per_extra_call_mb for r in upward[1:]]
        if extra:
            rss = round(statistics.median(extra), 1)
            print(f"  {name}: RSS per extra call {rss} MB (median of {len(extra)} row(s); "
                  f"the first call {upward[0].rss_per_extra_call_mb:.0f} MB)", flush=True)
            figure(f"RSS per extra call ({name})", rss, "MB")


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
    from voxflow_adapters.hosting.calls import assistant_call_factory
    from voxflow_adapters.hosting.dispatch import DispatchStore
    from voxflow_adapters.hosting.worker import CallWorker
    from voxflow_adapters.webrtc import PeerSettings, ServerSettings, WebRtcServer
    from voxflow_adapters.webrtc.front_door import FrontDoor
    from voxflow_voice.engines import VoiceEngines

    engines = await asyncio.to_thread(VoiceEngines.load)
    loopback = PeerSettings(ice_host_addresses=("127.0.0.1",))
    with fresh_schema("vx_scale_") as url:
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
    a, b = statistics.median(straight), statistics.median(dispatched)
    print(f"  offer → data channel open, median of {offers}:")
    print(f"  straight to a serve process:           {a:7.0f} ms")
    print(f"  front door → call worker (PostgreSQL): {b:7.0f} ms  (+{b - a:.0f} ms)")
    figure("call setup through a front door", round(b), "ms")
    figure("call setup, dispatch overhead", round(b - a), "ms")


# -- failover -----------------------------------------------------------------------------


async def failover_section(runs: int) -> None:
    import _failover
    from voxflow_voice.engines import VoiceEngines

    engines = await asyncio.to_thread(VoiceEngines.load)  # the caller's questions
    print(f"  front door + 2 call workers on PostgreSQL, caller peer_timeout "
          f"{_failover.PEER_TIMEOUT:g} s, lease 6 s, worker stale after 5 s", flush=True)
    timings = []
    for run in range(1, runs + 1):
        with tempfile.TemporaryDirectory() as tmp, \
                _failover.front_door_shape(PG_URL, Path(tmp)) as (shape, sessions):
            timings.append(await _failover.measure_failover(engines, shape, sessions))
        _failover.print_run(run, timings[-1])
    print(f"  medians of {runs} run(s):")
    _failover.print_failover(timings, "front door, postgres")


# -- job recovery -------------------------------------------------------------------------


def jobs_section(runs: int, heartbeat: float, stalled_after: float) -> None:
    import jobs_queue

    print(f"  job worker killed -9 mid-job, a standby job worker; heartbeat {heartbeat:g} s, "
          f"stalled after {stalled_after:g} s; {runs} run(s)", flush=True)
    results = jobs_queue.recovery_runs(runs, heartbeat, stalled_after)
    jobs_queue.print_recovery(results, heartbeat, stalled_after)


# -- saves --------------------------------------------------------------------------------


def saves_section(turns: int, runs: int, postgres: bool) -> None:
    import persistence

    args = argparse.Namespace(runs=runs, turns=turns)
    print(f"  one save after each of {turns} tracked turns, fenced; median of {runs} run(s)")
    backends = [("SQLite", "sqlite", persistence.sqlite_store)]
    if postgres:
        backends.append(("PostgreSQL", "postgres", persistence.postgres_store))
    for label, key, make in backends:
        p50, p99 = persistence.run_backend(make, args, True)
        print(f"  {label:<11} p50 {p50:.2f} ms, p99 {p99:.2f} ms", flush=True)
        figure(f"fenced save p50 ({key})", round(p50, 2), "ms")
        figure(f"fenced save p99 ({key})", round(p99, 2), "ms")


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cap", type=int, default=32,
                        help="the largest N of concurrent calls tried (default: %(default)s)")
    parser.add_argument("--turns", type=int, default=2, help="questions per call")
    parser.add_argument("--target-ms", type=float, default=1000.0,
                        help="the voice-to-voice p95 target (default: %(default)s)")
    parser.add_argument("--offers", type=int, default=10, help="offers timed per path")
    parser.add_argument("--failover-runs", type=int, default=3, help="call workers killed")
    parser.add_argument("--job-runs", type=int, default=3, help="job workers killed")
    parser.add_argument("--heartbeat", type=float, default=2.0, help="job workers' (s)")
    parser.add_argument("--stalled-after", type=float, default=10.0, help="job workers' (s)")
    parser.add_argument("--save-turns", type=int, default=200, help="saves timed per run")
    parser.add_argument("--save-runs", type=int, default=3, help="runs per backend")
    parser.add_argument("--skip", default="", help=f"sections to skip: {','.join(SECTIONS)}")
    parser.add_argument("--quick", action="store_true",
                        help="every section as small as it goes (a smoke run)")
    args = parser.parse_args()
    if args.quick:
        for name, value in QUICK.items():
            if getattr(args, name) == parser.get_default(name):
                setattr(args, name, value)
    args.skip = {s for s in args.skip.split(",") if s}
    if args.skip - set(SECTIONS):
        parser.error(f"--skip takes {', '.join(SECTIONS)}")
    if not 1 <= args.cap <= LADDER[-1] or args.turns < 1 or args.target_ms <= 0:
        parser.error(f"--cap in 1..{LADDER[-1]}, --turns >= 1, --target-ms > 0")
    if min(args.offers, args.failover_runs, args.job_runs, args.save_runs) < 1:
        parser.error("--offers, --failover-runs, --job-runs and --save-runs must be >= 1")
    if not 0 < args.heartbeat < args.stalled_after or args.save_turns < 20:
        parser.error("0 < --heartbeat < --stalled-after, and --save-turns >= 20")
    return args


def main() -> None:
    args = _arguments()
    reason = postgres_unreachable()
    print(f"scale out, {os.cpu_count()} CPUs, load average {_load():.1f} at the start")
    if reason is not None:
        print(f"(PostgreSQL: {reason}; its sections are skipped)")
    if "capacity" not in args.skip:
        with section("calls per worker"):
            asyncio.run(capacity_section(args.turns, args.target_ms, args.cap))
    for name, title, run in (
        ("dispatch", "dispatch: POST /offer through a front door",
         lambda: asyncio.run(dispatch_section(args.offers))),
        ("failover", "failover: kill -9 of a call worker mid-reply → first reply audio",
         lambda: asyncio.run(failover_section(args.failover_runs))),
        ("jobs", "job recovery: kill -9 of a job worker mid-job",
         lambda: jobs_section(args.job_runs, args.heartbeat, args.stalled_after)),
    ):
        if name not in args.skip and reason is None:
            with section(title):
                run()
    if "saves" not in args.skip:
        with section("save latency, fenced"):
            saves_section(args.save_turns, args.save_runs, reason is None)
    print(f"\nload average {_load():.1f} at the end")


if __name__ == "__main__":
    main()
