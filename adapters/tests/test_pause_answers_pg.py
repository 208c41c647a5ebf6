"""Answers prepared in the user's pause, with background jobs on the PostgreSQL job queue.

A call worker with ``VOXFLOW_DATABASE_URL`` hands its jobs to job-worker processes (the
queue) and reads their results from the session's durable inbox. A job asked for by an
answer prepared in the pause must not reach the queue before that answer's verdict: if
the user speaks on, the answer is undone, and a queued job would run for a turn that
never was. Real PostgreSQL (a fresh schema per test; skipped with the reason where none
answers), real Whisper and Piper, the call on a virtual clock.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import uuid
from collections.abc import AsyncIterator

import pytest
from voxflow_adapters.testkit.scenario import run_call
from voxflow_adapters.testkit.script import CallScript
from voxflow_adapters.testkit.timeline import call_timeline
from voxflow_voice.engines import VoiceEngines
from voxflow_voice.listen.turn_detector import TurnDetection
from voxflow_voice.session import VoiceSettings

from voxflow import Flow, listen
from voxflow.clock import VirtualClock
from voxflow.conversation import RouterContext
from voxflow.jobs import JobContext, PostgresJobQueue, background_job
from voxflow.jobs.queue import TASK_NAME
from voxflow.wiring import AssistantState, AssistantWiring

from .conftest import PG_URL, skip_without_postgres

pytestmark = pytest.mark.models


@background_job(kind="pause_answers_pg.look_up_order")
async def look_up_order(job: JobContext) -> str:
    """Never run here: a job worker would (these tests have none)."""
    return "Order twelve has shipped."


class Orders(Flow[AssistantState]):
    conversational = True

    def route_turn(self, context: RouterContext) -> str | None:
        return "order" if "order" in (self.state.current_user_message or "").lower() else "chat"

    @listen("order")
    def handle_order(self) -> str:
        look_up_order.start(self)
        return "I'm checking your order."

    @listen("chat")
    def handle_chat(self) -> str:
        return "Sure."


@pytest.fixture
async def queue() -> AsyncIterator[PostgresJobQueue]:
    """A migrated job queue in a fresh schema, dropped after the test."""
    skip_without_postgres()
    import psycopg

    schema = f"vxp_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    q = PostgresJobQueue(PG_URL, schema=schema)
    await q.migrate()
    try:
        yield q
    finally:
        q.close()
        await q.inbox.close()
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute("SET lock_timeout = '60s'")
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


async def queued_job_ids(queue: PostgresJobQueue) -> list[str]:
    """The voxflow job ids of every job in the queue (waiting, running or run)."""
    rows = await queue.inbox._execute(
        "SELECT args->>'job_id' FROM procrastinate_jobs WHERE task_name = %s ORDER BY id",
        (TASK_NAME,))
    return [r[0] for r in rows]


async def test_a_job_asked_for_in_a_discarded_pause_answer_never_reaches_the_queue(
    engines: VoiceEngines, queue: PostgresJobQueue,
) -> None:
    # (issue 30) "Check my order" [pause] "number twelve, please.": the answer prepared
    # in the pause asked for a lookup; the user spoke on, so it was undone. In-process,
    # its job was held until the verdict and never started; on the job queue it was
    # queued at once, and a job worker ran it for a turn that never was.
    first = "Check my order"
    seconds = sum(s.samples.size for s in engines.tts.synthesize(first)) / engines.tts.sample_rate
    script = (CallScript().user_says(0.3, first)
              .user_says(0.3 + seconds + 0.35, "number twelve, please.").until(12.0))
    patient = VoiceSettings(turn_detection=TurnDetection(end_of_turn_silence=1.2))
    timer = dataclasses.replace(engines, end_of_turn=None)  # the pause is not a turn's end
    flow = Orders()
    async with asyncio.timeout(120):  # wall clock: only a hang reaches it
        async with AssistantWiring(flow, clock=VirtualClock(autojump=True),
                                   job_queue=queue) as wiring:
            call = await run_call(wiring, script, timer, settings=patient)
    discarded = {d.turn_id for d in call.of_kind("speculative_reply_discarded")}
    [committed] = call.of_kind("turn_committed")
    assert discarded and "number" in committed.text.lower(), call_timeline(call)
    [job] = flow.state.jobs.values()  # the committed turn's lookup
    assert job.origin_turn_id == committed.turn_id
    assert await queued_job_ids(queue) == [job.job_id]  # the undone turn's never queued
