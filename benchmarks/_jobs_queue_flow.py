"""The job function ``benchmarks/jobs_queue.py`` runs in its job-worker processes."""

from __future__ import annotations

import asyncio
from pathlib import Path

from voxflow import Flow, listen
from voxflow.conversation import RouterContext
from voxflow.jobs import JobContext, background_job
from voxflow.wiring import AssistantState


@background_job(kind="bench.recoverable")
async def recoverable(job: JobContext, marker: str, first_attempt_seconds: float) -> str:
    """Touches ``marker``-<attempt> when it starts; the first attempt then runs long (it
    is killed meanwhile), a later one ends at once."""
    await asyncio.to_thread(Path(f"{marker}-{job.job.attempt}").touch)
    if job.job.attempt == 1:
        await job.sleep(first_attempt_seconds)
    return f"Done on attempt {job.job.attempt}."


class Bench(Flow[AssistantState]):
    conversational = True

    def route_turn(self, context: RouterContext) -> str | None:
        return None

    @listen("never")
    def handle_never(self) -> str:
        return ""


@background_job(kind="bench.instant")
async def instant(job: JobContext) -> str:
    """Returns at once: what is measured is the queue's and the inbox's round trip."""
    return "Done."
