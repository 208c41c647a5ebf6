"""Faults a call survives: resets of the database connections, a restarted PostgreSQL, an
ICE server that never answers, is down or answers late; offers made during a reset; and
a job worker through a database outage.

Run: ``flock /tmp/voxflow-bench.lock uv run python benchmarks/faults.py [--runs 3]
[--only pg llm disk clock jobs ice commit] [--transport webrtc simulated]``
(real time: it starts a PostgreSQL of its own, never touching the shared one).
This script runs them and reports; each family of faults is a sibling module:
``_faults_pg.py`` (the database's: ``pg``, ``commit``), ``_faults_ice.py``,
``_faults_jobs.py``, ``_faults_llm.py``, ``_faults_disk_clock.py``, on the call harness
of ``_faults_common.py``.

Everything runs in this process on the real models: ``WebRtcServer`` (the example
assistant, its sessions in a PostgreSQL this script starts in a temporary directory with
the machine's ``initdb``/``pg_ctl``) and an aiortc caller (``LoopbackCaller``) that asks
"Hello there!" (answered in two seconds) and waits for each answer. Scenarios:

* **both transports** (``--transport``): the resets and the restart, the LLM provider's
  hang, reset and garbage, the full disk and the clock jump also run on a call through
  the simulated transport (``run_call``, ``_faults_simulated.py``: the real models,
  real time, questions at fixed times, each fault begun as its question begins), whose
  saves are deferred as the hosted call's; their figures are named "simulated";
* **resets**: 10 times in a row, every connection to the database is reset
  (``pg_terminate_backend``, the server up) right before a question and again 0.8 s
  after it, while the answer is being saved and played;
* **restart**: PostgreSQL is stopped (``pg_ctl stop -m fast``), a question is asked
  while it is down, and it is started again ``--downtime`` (5) s after it stopped;
* **silent ICE**: the server's ``--ice-server`` is a STUN server that takes every packet
  and never answers; three questions;
* **offers**: a front door and a call worker (in this process, on the same database);
  every connection is reset and three offers are made at once, ``--offer-rounds`` times;
* **LLM hang / reset / garbage**: a chat flow whose LLM is an OpenAI-compatible server
  on loopback (``_llm_faults.py``, reached by litellm through an endpoint the code names;
  2 s timeout, 1 retry) that answers, then hangs (or resets the connection, or answers
  events that are not JSON) for one question, then answers again; the caller's wait for
  the faulted question to settle and what it heard meanwhile;
* **disk full**: the SQLite session store on a small tmpfs (``mount -t tmpfs``, root
  only; said and skipped otherwise), filled to the last byte before a question and
  freed 3 s later; on PostgreSQL, a server of the script's own whose data directory is
  on a 64 MB tmpfs, filled the same way (what the server logged is printed);
* **clock jump**: the store's lease clock jumps an hour forward before a question, then
  two hours back before the next;
* the LLM, disk and clock faults run twice (``--stores``): the sessions on SQLite,
  then on a PostgreSQL of the script's own (its lease clock: the server's, moved by the
  jump);
* **ICE servers** (``--only ice``, sessions on SQLite): the server's ``--ice-server``
  is a STUN server that is silent, down (its port refusing: ICMP port unreachable) or
  late (it answers 4 s after each request, past the 2 s the gathering waits); three
  questions each, the offer's answer time against a call without it;
* **COMMIT cut** (``--only commit``, sessions on a PostgreSQL of the script's own): a
  proxy on loopback (``_pg_cut.py``) cuts the store's next COMMIT before each of six
  questions, in turn after the server made it (its answer dropped) and before it reached
  the server; turns lost, and user messages stored twice;
* **job outage** (``--only jobs``, no call): a job worker (``run_worker``, in this
  process) runs a job on a PostgreSQL of the script's own; the server is stopped while
  the job runs, the job returns, and the server is started again ``--job-outage`` (40) s
  later: past the ~30 s a job's report used to be tried for. The job's settled status,
  how long after the server came back its result was stored, and whether the worker
  still runs a job queued afterwards. With ``--report-patience`` shorter than the outage
  the attempt's report gives up and the job runs again as its next attempt once the
  server is back; the worker itself rides the outage out (**worker restarts**: how often
  a supervisor loop here had to start it again; 0 since it no longer stops).

For each call: **turns lost** (questions asked less the answers both heard by the caller
and stored completed; must be 0), **answers after** (a question after the fault is
answered), and how long it was **degraded**: for the store faults, the time its state was
held back unsaved (``Call.deferred.outages``) and the answer time (``first_audio_ms``, the
server's end of speech → first reply audio) during the fault against before it; for
the silent ICE server, the offer's answer time against a call without it. For the
offers, how many were refused. Medians over ``--runs``; nothing is asserted (the machine
is shared: note the load average it prints).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import statistics
from pathlib import Path
from typing import Any

from _faults_common import PG_BIN, CallResult, median_of, own_postgres, print_call
from _faults_disk_clock import clock_jump, disk_full, simulated_clock_jump, simulated_disk_full
from _faults_ice import ice_faults
from _faults_jobs import job_outages
from _faults_llm import LlmFault, llm_fault, simulated_llm_fault
from _faults_pg import commit_faults, pg_faults
from _faults_simulated import simulated_faults
from _figures import figure


async def main(runs: int, downtime: float, offer_rounds: int, bin_dir: Path,
               only: list[str], job_outage_s: float,
               report_patience: float | None = None,
               stores: tuple[str, ...] = ("sqlite", "postgres"),
               transports: tuple[str, ...] = ("webrtc", "simulated")) -> None:
    from voxflow_adapters.webrtc.server import ignore_closed_transport_errors
    from voxflow_voice.engines import VoiceEngines

    ignore_closed_transport_errors(asyncio.get_running_loop())
    # what the faults make voxflow and psycopg log (warnings, by design) is not the report
    for name in ("", "psycopg"):
        logging.getLogger(name).setLevel(logging.ERROR)
    if "jobs" in only:
        print(f"faults: a job worker through a PostgreSQL outage; load average "
              f"{os.getloadavg()[0]:.1f} at the start", flush=True)
        await job_outages(runs, job_outage_s, bin_dir, report_patience)
    if not set(only) - {"jobs"}:
        return
    engines = await asyncio.to_thread(VoiceEngines.load, deterministic=True)
    print(f"faults: a call on the real models, its sessions in a PostgreSQL of its own; "
          f"load average {os.getloadavg()[0]:.1f} at the start", flush=True)
    if "ice" in only:
        await ice_faults(engines, runs)
    if set(only) & {"llm", "disk", "clock"}:
        await other_faults(engines, runs, only, bin_dir, stores, transports)
    if "commit" in only:
        await commit_faults(engines, runs, bin_dir)
    if "pg" in only and "webrtc" in transports:
        await pg_faults(engines, runs, downtime, offer_rounds, bin_dir)
    if "pg" in only and "simulated" in transports:
        await simulated_faults(engines, runs, downtime, bin_dir)


_CALLS = {  # each transport's call through an LLM provider fault, a full disk, a clock jump
    "webrtc": (llm_fault, disk_full, clock_jump),
    "simulated": (simulated_llm_fault, simulated_disk_full, simulated_clock_jump),
}


async def other_faults(engines: Any, runs: int, only: list[str], bin_dir: Path,
                       kinds: tuple[str, ...] = ("sqlite", "postgres"),
                       transports: tuple[str, ...] = ("webrtc", "simulated")) -> None:
    """The LLM provider, disk and clock faults, ``runs`` times each, and their medians,
    with the sessions on SQLite and on a PostgreSQL of the script's own (``kinds``;
    PostgreSQL when ``bin_dir`` has ``initdb``), on each of ``transports``."""
    stores = tuple(name for kind, name in (("sqlite", "SQLite"), ("postgres", "PostgreSQL"))
                   if kind in kinds)
    if "PostgreSQL" in stores and not (bin_dir / "initdb").exists():
        print(f"  (no initdb in {bin_dir}: LLM, disk and clock faults on SQLite only)")
        stores = tuple(name for name in stores if name != "PostgreSQL")
    # (a WebRTC call's figures keep their names; a simulated one's say so)
    wheres = tuple(f"{where}{' simulated' if transport == 'simulated' else ''}"
                   for transport in transports for where in stores)
    llm: dict[str, list[LlmFault]] = {f"{fault} {where}": [] for where in wheres
                                      for fault in ("hang", "reset", "garbage")}
    disks: dict[str, list[CallResult]] = {where: [] for where in wheres}
    clocks: dict[str, list[CallResult]] = {where: [] for where in wheres}

    def calls(where: str) -> tuple[Any, Any, Any]:
        return _CALLS["simulated" if where.endswith(" simulated") else "webrtc"]

    for run in range(1, runs + 1):
        print(f"run {run} (LLM provider, disk, clock):", flush=True)
        with contextlib.ExitStack() as stack:
            pg = stack.enter_context(own_postgres(bin_dir)) if "PostgreSQL" in stores and set(
                only) & {"llm", "clock"} else None
            if "llm" in only:
                for key in llm:
                    fault, where = key.split(maxsplit=1)
                    f = await calls(where)[0](engines, fault, pg if where.startswith(
                        "PostgreSQL") else None)
                    llm[key].append(f)
                    took = "never" if f.settled_s is None else f"{f.settled_s:.1f} s"
                    print(f"  LLM {key:<29} answers lost {f.lost} of 2; the faulted "
                          f"question settled {f.turn_status} after {took}, the caller heard "
                          f"{f.heard_during} repl(ies) for it (cause: {f.cause}); answers "
                          f"after: {'yes' if f.answers_after else 'NO'}"
                          + (f"; ENDED: {f.ended}" if f.ended else ""), flush=True)
            if "disk" in only:
                for where in wheres:
                    d = await calls(where)[1](engines, pg_bin=bin_dir if where.startswith(
                        "PostgreSQL") else None)
                    if isinstance(d, str):
                        print(f"  disk full   {d} ({where})", flush=True)
                    else:
                        disks[where].append(d)
                        print_call("disk full", d, f" (full 3 s; {where}"
                                   + (f"; {d.server_log})" if d.server_log else ")"))
            if "clock" in only:
                for where in wheres:
                    c = await calls(where)[2](engines, pg if where.startswith("PostgreSQL")
                                              else None)
                    clocks[where].append(c)
                    print_call("clock jump", c, f" (+1 h, then -2 h; {where})")
    print(f"\nmedians of {runs} run(s), load average {os.getloadavg()[0]:.1f}:")
    for fault, results in llm.items():
        if not results:
            continue
        settled = [f.settled_s for f in results if f.settled_s is not None]
        lost = max(f.lost for f in results)
        median = statistics.median(settled) if settled else float("nan")
        statuses = ", ".join(sorted({f.turn_status for f in results}))
        print(f"  LLM provider {fault:<29}: answers lost {lost} (worst run); the faulted "
              f"question settled in {median:.1f} s ({statuses}), replies heard "
              f"for it {max(f.heard_during for f in results)}; answers after "
              f"{sum(f.answers_after for f in results)}/{len(results)}")
        figure(f"LLM provider {fault}: answers lost", lost, "answers", target="0")
        if settled:
            figure(f"LLM provider {fault}: question settled", round(statistics.median(
                settled), 1), "s")
    for label, rs in (*((f"disk full 3 s {where}", rs) for where, rs in disks.items()),
                      *((f"clock jump +1 h / -2 h {where}", rs)
                        for where, rs in clocks.items())):
        if rs:
            lost = max(r.lost for r in rs)
            print(f"  {label:<43}: turns lost {lost} (worst run); answers after "
                  f"{sum(r.answers_after for r in rs)}/{len(rs)}; state held back "
                  f"{statistics.median(r.held_back for r in rs):.1f} s; first audio "
                  f"{median_of(r.during_ms for r in rs)} ms during the fault "
                  f"({median_of(r.before_ms for r in rs)} before)")
            figure(f"turns lost: {label}", lost, "turns", target="0")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="rounds of every fault (3)")
    parser.add_argument("--downtime", type=float, default=5.0,
                        help="seconds PostgreSQL is down in the restart (5)")
    parser.add_argument("--offer-rounds", type=int, default=5,
                        help="resets with three offers right after each (5)")
    parser.add_argument("--pg-bin", type=Path, default=PG_BIN,
                        help=f"the directory of initdb and pg_ctl ({PG_BIN})")
    parser.add_argument("--job-outage", type=float, default=40.0,
                        help="seconds the job outage's PostgreSQL is down (40)")
    parser.add_argument("--report-patience", type=float, default=None,
                        help="the job worker's report patience in the job outage (its "
                        "default, 900 s); shorter than the outage, the job's attempt "
                        "gives up and runs again once the server is back")
    parser.add_argument("--only", nargs="+",
                        choices=("pg", "llm", "disk", "clock", "jobs", "ice", "commit"),
                        default=["pg", "llm", "disk", "clock", "jobs", "ice", "commit"],
                        help="the faults to run (all): pg is the database's (resets, "
                        "restart, silent ICE, offers)")
    parser.add_argument("--stores", nargs="+", choices=("sqlite", "postgres"),
                        default=["sqlite", "postgres"],
                        help="where the LLM, disk and clock faults' sessions are (both; "
                        "postgres: a server of the script's own, needs initdb)")
    parser.add_argument("--transport", nargs="+", choices=("webrtc", "simulated"),
                        default=["webrtc", "simulated"],
                        help="the transports the database (pg), LLM provider, disk and "
                        "clock faults run on (both): simulated is run_call's, with the same "
                        "deferred saves")
    args = parser.parse_args()
    if args.runs < 1 or not 0 < args.downtime <= 60 or args.offer_rounds < 1:
        parser.error("--runs and --offer-rounds must be >= 1, --downtime in (0, 60]")
    if set(args.only) & {"pg", "jobs", "commit"} and not (args.pg_bin / "initdb").exists():
        parser.exit(0, f"faults skipped: no initdb in {args.pg_bin} (give --pg-bin)\n")
    asyncio.run(main(args.runs, args.downtime, args.offer_rounds, args.pg_bin, args.only,
                     args.job_outage, args.report_patience, tuple(args.stores),
                     tuple(args.transport)))
