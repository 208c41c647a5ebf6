"""Job recovery time on the PostgreSQL job queue: kill -9 of a job worker mid-job → the
job running again, as its next attempt, on another job worker.

Each run: a fresh schema; job worker A (``voxflow jobs worker``, a subprocess) takes a
job whose first attempt runs long; once it started, a standby worker B is started and
registered, then A is SIGKILLed. Times, all on the database's clock (the kill instant is
read from it just before the signal; the rest from Procrastinate's ``procrastinate_events``
and the inbox rows):

* **detection**: kill → the job re-queued as its next attempt (A's heartbeat went stale
  for ``--stalled-after`` seconds and a worker's once-a-heartbeat check re-queued it);
* **pickup**: re-queued → attempt 2 started on B (a ``NOTIFY`` wakes B);
* **recovery**: kill → attempt 2 started (detection + pickup), the headline;
* **finished**: kill → attempt 2's ``completed`` row in the session's inbox.

Then ``--jobs`` jobs that return at once, one after the other, with one job worker
running: **enqueue** (the blocking insert a handler makes) and **round trip** (enqueue →
the job's ``completed`` applied to the session's state by an ``InboxReader`` woken by
``NOTIFY``; its poll is an hour, so only the notification can wake it), p50 and p90.

Prints the median (and min/max) of ``--runs`` runs and the load average. Expected:
detection between ``stalled_after - heartbeat`` and ``stalled_after + heartbeat`` (the
last heartbeat came up to one heartbeat before the kill; the check runs once a
heartbeat). PostgreSQL: ``VOXFLOW_BENCH_DATABASE_URL`` (default
``postgresql://postgres@127.0.0.1:5432/test``); skipped with its reason when none answers.
Run: ``uv run python benchmarks/jobs_queue.py [--runs 5] [--heartbeat 2]
[--stalled-after 10]`` (the CLI's defaults). ``scale_out.py`` prints the recovery too,
with these functions (:func:`recovery_runs`, :func:`print_recovery`).

Measured on the shared 2-core machine (5 runs, load average 10.7 at the start, under
``flock /tmp/voxflow-bench.lock``), defaults: recovery median 11.00 s (9.00 to 11.06),
detection 10.98 s, pickup 0.02 s, finished 11.08 s. Detection falls on the heartbeat
grid: 9 s or 11 s, as expected for stalled-after 10 s and a check every 2 s. With
``--heartbeat 0.5 --stalled-after 2.5`` (load 10.0): recovery 2.31 s (2.27 to 2.43),
detection 2.28 s, pickup 0.03 s, finished 2.52 s. Instant jobs (3 runs of 30, load 3.5
to 4.0): round trip p50 27.2 / 52.5 / 39.3 ms (p90 46.7 / 71.5 / 50.0), enqueue p50
4.7 / 6.7 / 4.9 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from _figures import figure
from persistence import PG_URL, postgres_unreachable, schema_url

from voxflow.jobs import BackgroundJob, PostgresJobQueue

HERE = Path(__file__).resolve().parent
FLOW = str(HERE / "_jobs_queue_flow.py") + ":Bench"


def job_worker(schema: str, heartbeat: float, stalled_after: float) -> subprocess.Popen[bytes]:
    # the queue's schema is the first of the URL's search_path
    env = {**os.environ, "VOXFLOW_DATABASE_URL": schema_url(schema)}
    return subprocess.Popen(
        [sys.executable, "-m", "voxflow.cli", "jobs", "worker", FLOW,
         "--heartbeat", str(heartbeat), "--stalled-after", str(stalled_after),
         "--log-level", "ERROR"], env=env, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL)


async def until(predicate: object, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not await predicate():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def one_run(heartbeat: float, stalled_after: float, folder: Path) -> dict[str, float]:
    schema = f"vx_bench_jobs_{uuid.uuid4().hex[:10]}"
    queue = PostgresJobQueue(PG_URL, schema=schema)
    sql = queue.inbox._execute
    marker = str(folder / schema)
    workers: list[subprocess.Popen[bytes]] = []
    try:
        await queue.migrate()
        job = BackgroundJob(session_id=f"bench-{schema}", kind="bench.recoverable",
                            inputs={"marker": marker, "first_attempt_seconds": 600.0})
        queue_id = await queue.enqueue_async(job)
        workers.append(job_worker(schema, heartbeat, stalled_after))

        async def started(attempt: int) -> bool:
            return await asyncio.to_thread(os.path.exists, f"{marker}-{attempt}")

        await until(lambda: started(1), 120, "attempt 1 to start")
        workers.append(job_worker(schema, heartbeat, stalled_after))

        async def two_workers() -> bool:
            rows = await sql("SELECT count(*) FROM procrastinate_workers")
            return bool(rows[0][0] >= 2)

        await until(two_workers, 120, "the standby worker to register")
        await asyncio.sleep(heartbeat * 1.5)  # kill at a random phase of A's heartbeat
        (killed_at,) = (await sql("SELECT extract(epoch FROM clock_timestamp())::float8"))[0]
        workers[0].send_signal(signal.SIGKILL)
        workers[0].wait(10)

        async def completed() -> bool:
            rows = await sql("SELECT 1 FROM voxflow_job_inbox WHERE job_id = %s AND attempt = 2 "
                             "AND body->'update'->>'kind' = 'completed'", (job.job_id,))
            return bool(rows)

        await until(completed, stalled_after * 6 + 60, "attempt 2 to complete")
        rows = await sql(
            "SELECT type::text, extract(epoch FROM at)::float8 FROM procrastinate_events "
            "WHERE job_id = %s ORDER BY at", (queue_id,))
        retried = next(at for kind, at in rows if kind == "deferred_for_retry")
        second = [at for kind, at in rows if kind == "started"][1]
        (done,) = (await sql(
            "SELECT extract(epoch FROM created_at)::float8 FROM voxflow_job_inbox WHERE "
            "job_id = %s AND attempt = 2 AND body->'update'->>'kind' = 'completed'",
            (job.job_id,)))[0]
        return {"detection": retried - killed_at, "pickup": second - retried,
                "recovery": second - killed_at, "finished": done - killed_at}
    finally:
        for w in workers:
            if w.poll() is None:
                w.send_signal(signal.SIGTERM)
                try:
                    w.wait(30)
                except subprocess.TimeoutExpired:
                    w.kill()
        await queue.inbox._execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        queue.close()
        await queue.inbox.close()


async def round_trips(jobs: int, heartbeat: float, stalled_after: float
                      ) -> tuple[list[float], list[float]]:
    """(enqueue ms, round trip ms) of ``jobs`` instant jobs, one at a time."""
    from voxflow.jobs import InboxReader, add_job
    from voxflow.wiring import AssistantState

    schema = f"vx_bench_jobs_{uuid.uuid4().hex[:10]}"
    queue = PostgresJobQueue(PG_URL, schema=schema)
    await queue.migrate()
    worker = job_worker(schema, heartbeat, stalled_after)
    state = AssistantState()
    done = asyncio.Event()

    async def on_update() -> None:
        done.set()

    reader = InboxReader(queue.inbox, state, lock=asyncio.Lock(), on_update=on_update,
                         poll=3600)
    enqueue_ms: list[float] = []
    trip_ms: list[float] = []
    try:
        reader.start()
        for n in range(jobs + 2):  # the first two warm the worker up, not counted
            job = BackgroundJob(session_id=state.id, kind="bench.instant")
            assert add_job(state, job)
            await asyncio.sleep(0.2)
            done.clear()
            start = time.perf_counter()
            await queue.enqueue_async(job)
            queued = time.perf_counter()
            while state.jobs[job.job_id].status != "completed":
                await asyncio.wait_for(done.wait(), 60)
                done.clear()
            if n >= 2:
                enqueue_ms.append((queued - start) * 1000)
                trip_ms.append((time.perf_counter() - start) * 1000)
    finally:
        await reader.aclose()
        worker.send_signal(signal.SIGTERM)
        worker.wait(30)
        await queue.inbox._execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        queue.close()
        await queue.inbox.close()
    return enqueue_ms, trip_ms


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def recovery_runs(runs: int, heartbeat: float, stalled_after: float) -> list[dict[str, float]]:
    """``runs`` job recoveries (:func:`one_run`), each printed as it ends."""
    results: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory() as folder:
        for run in range(runs):
            result = asyncio.run(one_run(heartbeat, stalled_after, Path(folder)))
            results.append(result)
            print(f"  run {run + 1}: " + ", ".join(f"{k} {v:.2f} s" for k, v in result.items()),
                  flush=True)
    return results


def print_recovery(results: list[dict[str, float]], heartbeat: float,
                   stalled_after: float) -> None:
    """The median, min and max of each mark, and the headline figure for ``voxflow bench``."""
    print(f"  {'':10s} {'median':>8} {'min':>8} {'max':>8}")
    for key in ("detection", "pickup", "recovery", "finished"):
        values = [r[key] for r in results]
        print(f"  {key:10s} {statistics.median(values):8.2f} {min(values):8.2f} "
              f"{max(values):8.2f}  s")
    figure("job recovery (kill -9 -> next attempt running)",
           round(statistics.median(r["recovery"] for r in results), 2), "s",
           target=f"<= {stalled_after + 2 * heartbeat:g}")
    figure("job recovery, finished (kill -9 -> next attempt completed)",
           round(statistics.median(r["finished"] for r in results), 2), "s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--heartbeat", type=float, default=2.0)
    parser.add_argument("--stalled-after", type=float, default=10.0)
    parser.add_argument("--jobs", type=int, default=30, help="instant jobs timed (0: none)")
    args = parser.parse_args()
    if args.runs < 1 or not 0 < args.heartbeat < args.stalled_after:
        parser.error("--runs >= 1 and 0 < --heartbeat < --stalled-after")
    reason = postgres_unreachable()
    if reason is not None:
        print(f"jobs_queue skipped: {reason}")
        return
    load = os.getloadavg()
    print(f"job recovery after kill -9 of its job worker (heartbeat {args.heartbeat:g} s, "
          f"stalled after {args.stalled_after:g} s), {args.runs} runs, load average "
          f"{load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")
    print_recovery(recovery_runs(args.runs, args.heartbeat, args.stalled_after),
                   args.heartbeat, args.stalled_after)
    if args.jobs > 0:
        enqueue, trips = asyncio.run(round_trips(args.jobs, args.heartbeat,
                                                 args.stalled_after))
        print(f"{args.jobs} instant jobs, one job worker:  p50 ms   p90 ms")
        print(f"  enqueue (handler's insert)   {pct(enqueue, 0.5):7.1f}  {pct(enqueue, 0.9):7.1f}")
        print(f"  enqueue -> result applied   {pct(trips, 0.5):7.1f}  {pct(trips, 0.9):7.1f}")
        figure("job round trip p50 (enqueue -> result in the session)",
               round(pct(trips, 0.5), 1), "ms")
    print(f"  load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
