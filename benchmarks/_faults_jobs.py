"""``faults.py``'s job outage (``--only jobs``, no call): a job worker on a PostgreSQL of
the script's own, the server stopped while the job runs and started again later.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _faults_common import OwnPostgres, own_postgres
from _figures import figure

__all__ = ["JobOutage", "job_outage", "job_outages"]


_JOB_KIND = "faults.finishes_when_told"
_job_started = asyncio.Event()
_job_finish = asyncio.Event()


@dataclass
class JobOutage:
    """A job through a database outage (see the module)."""

    status: str = "-"  # the job's settled status, as its session sees it
    attempt: int = 0  # the attempt that settled it (1: never run again)
    announcement: str = ""
    stored_after_s: float | None = None  # the server back → the result in the inbox
    worker_alive: bool = False  # the worker still running after the outage
    next_job: str = "-"  # a job queued after the outage: its settled status
    restarts: int = 0  # the worker stopped and was started again (0: it rode it out)


_declared: list[Any] = []  # the job function (the registry holds it weakly)


def _declare_job() -> None:
    from voxflow.jobs import JobContext, background_job

    if _declared:
        return

    @background_job(kind=_JOB_KIND)
    async def finishes_when_told(job: JobContext, wait: bool = True) -> str:
        if wait:
            _job_started.set()
            await _job_finish.wait()
        return "Your table for two is booked."

    _declared.append(finishes_when_told)


async def job_outage(pg: OwnPostgres, outage: float, patience: float | None = None
                     ) -> JobOutage:
    """The job through an ``outage`` (s); with ``patience``, the worker's report patience
    (shorter than the outage: the attempt's report gives up and the job runs again;
    should the worker stop, it is started again at once, as a supervisor would, and
    counted in ``restarts``)."""
    from voxflow.errors import PersistenceUnavailableError
    from voxflow.jobs import BackgroundJob, PostgresJobQueue, add_job, apply_inbox
    from voxflow.wiring import AssistantState

    _declare_job()
    _job_started.clear()
    _job_finish.clear()
    result = JobOutage()
    queue = PostgresJobQueue(pg.url)
    await queue.migrate()

    async def settled(state: AssistantState, job: BackgroundJob, seconds: float) -> str:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            with contextlib.suppress(Exception):  # (nothing acknowledges: all its rows)
                apply_inbox(state, await queue.inbox.pending(state.id))
                if state.jobs[job.job_id].status in ("completed", "failed"):
                    return state.jobs[job.job_id].status
            await asyncio.sleep(0.1)
        return state.jobs[job.job_id].status

    state = AssistantState()
    job = BackgroundJob(session_id=state.id, kind=_JOB_KIND)
    add_job(state, job)
    await queue.enqueue_async(job)
    options: dict[str, Any] = {} if patience is None else {"report_patience": patience}

    async def supervised() -> None:
        while True:
            try:
                await queue.run_worker(heartbeat=1.0, stalled_after=10.0, **options)
            except PersistenceUnavailableError:
                if patience is None:
                    raise
                result.restarts += 1
                await asyncio.sleep(1.0)

    run = asyncio.create_task(supervised())
    try:
        started = asyncio.ensure_future(_job_started.wait())
        await asyncio.wait([started, run], timeout=60, return_when=asyncio.FIRST_COMPLETED)
        if run.done():
            run.result()  # (the worker's own failure, raised)
        if not started.done():
            started.cancel()
            raise TimeoutError("the job did not start within 60 s")
        await asyncio.to_thread(pg.stop)
        _job_finish.set()  # the job returns while the database is away
        await asyncio.sleep(outage)
        await asyncio.to_thread(pg.start)
        back = time.monotonic()
        result.status = await settled(state, job, 120)
        if result.status == "completed":
            result.stored_after_s = time.monotonic() - back
        result.announcement = state.jobs[job.job_id].announcement
        result.attempt = state.jobs[job.job_id].attempt
        result.worker_alive = not run.done()
        after = BackgroundJob(session_id=state.id, kind=_JOB_KIND, inputs={"wait": False})
        add_job(state, after)
        await queue.enqueue_async(after)
        result.next_job = await settled(state, after, 30)
    finally:
        run.cancel()
        with contextlib.suppress(BaseException):
            await run
        queue.close()
        await queue.inbox.close()
    return result


async def job_outages(runs: int, outage: float, bin_dir: Path,
                      patience: float | None = None) -> None:
    """A job through a database outage of ``outage`` s, ``runs`` times (``patience``:
    the worker's report patience, default its own)."""
    results: list[JobOutage] = []
    for run in range(1, runs + 1):
        with own_postgres(bin_dir) as pg:
            r = await job_outage(pg, outage, patience)
        results.append(r)
        took = "-" if r.stored_after_s is None else f"{r.stored_after_s:.1f} s"
        print(f"  run {run} job outage {outage:g} s"
              + ("" if patience is None else f", report patience {patience:g} s")
              + f": the job settled {r.status} "
              f"({r.announcement!r}) as attempt {r.attempt}, its result stored {took} "
              f"after the server was back; worker restarts {r.restarts}; "
              f"worker {'running' if r.worker_alive else 'STOPPED'}, a job queued after: "
              f"{r.next_job}", flush=True)
    lost = sum(r.status != "completed" for r in results)
    stored = [r.stored_after_s for r in results if r.stored_after_s is not None]
    print(f"  job outage {outage:g} s: results lost {lost} of {len(results)}; stored "
          + (f"{statistics.median(stored):.1f} s (median)" if stored else "never")
          + f" after the server was back; run again {sum(r.attempt > 1 for r in results)}; "
          f"worker running after it "
          f"{sum(r.worker_alive for r in results)}/{len(results)}; the next job completed "
          f"{sum(r.next_job == 'completed' for r in results)}/{len(results)}", flush=True)
    name = f"job outage {outage:g} s" + ("" if patience is None
                                          else f", report patience {patience:g} s")
    figure(f"{name}: results lost", lost, "jobs", target="0")
    if stored:
        figure(f"{name}: result stored after the server was back",
               round(statistics.median(stored), 1), "s")
