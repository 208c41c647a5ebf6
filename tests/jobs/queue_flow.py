"""The flow and job functions the job-queue tests run in job-worker subprocesses
(``voxflow jobs worker tests/jobs/queue_flow.py:Travel``)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from voxflow import Flow, listen
from voxflow.conversation import RouterContext
from voxflow.jobs import JobContext, background_job
from voxflow.wiring import AssistantState


@background_job(kind="queue_tests.check_flight")
async def check_flight(job: JobContext, flight: str, seconds: float = 0.2,
                       marker: str | None = None) -> str:
    """Sleeps ``seconds``; touches ``marker``-<attempt> when it starts (a test waits for
    it before killing the worker)."""
    if marker is not None:
        await asyncio.to_thread(Path(f"{marker}-{job.job.attempt}").write_text,
                                str(os.getpid()))
    await job.sleep(seconds)
    return f"Flight {flight} is on time (attempt {job.job.attempt})."


class Travel(Flow[AssistantState]):
    conversational = True

    def route_turn(self, context: RouterContext) -> str | None:
        return "flight" if "flight" in (self.state.current_user_message or "") else None

    @listen("flight")
    def handle_flight(self) -> str:
        check_flight.start(self, flight="BA 117", seconds=0.5)
        return "I'm checking your flight."


@background_job(kind="queue_tests.with_progress")
async def with_progress(job: JobContext) -> str:
    """Reports progress once, then its result."""
    assert await job.progress("Still looking, one moment.")
    return "Found it."


@background_job(kind="queue_tests.until_stopped")
async def until_stopped(job: JobContext, marker: str) -> str:
    """Runs until its worker stops (touches ``marker``-<attempt> when it starts)."""
    await asyncio.to_thread(Path(f"{marker}-{job.job.attempt}").write_text, str(os.getpid()))
    while not job.stop_requested:
        await job.sleep(0.05)
    return "Stopped as asked."


class AsyncTravel(Flow[AssistantState]):
    """Travel with an async flight handler: it runs on the session's event loop."""

    conversational = True

    def route_turn(self, context: RouterContext) -> str | None:
        return "flight" if "flight" in (self.state.current_user_message or "") else None

    @listen("flight")
    async def handle_flight(self) -> str:
        check_flight.start(self, flight="BA 117", seconds=0.5)
        return "I'm checking your flight."


@background_job(kind="queue_tests.returns")
async def returns(job: JobContext, text: str, repeat: int = 1, nul_at: int | None = None
                  ) -> str:
    """Returns ``text`` ``repeat`` times, with a NUL inserted at ``nul_at``: a result of
    any content or size (inputs holding a NUL are refused when the job starts)."""
    text = text * repeat
    return text if nul_at is None else text[:nul_at] + "\x00" + text[nul_at:]


@background_job(kind="queue_tests.progress_says")
async def progress_says(job: JobContext, text: str, nul_at: int | None = None) -> str:
    """Reports ``text`` (a NUL inserted at ``nul_at``) as progress; its result says
    whether that was refused, and why."""
    if nul_at is not None:
        text = text[:nul_at] + "\x00" + text[nul_at:]
    try:
        await job.progress(text)
    except ValueError as exc:  # (UnstorableTextError is one)
        return f"refused: {exc}"
    return "said"
