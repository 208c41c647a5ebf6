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
from typing import Any

import pytest
from voxflow_adapters.testkit.assertions import assert_announcement_waited, assert_floor_held
from voxflow_adapters.testkit.scenario import run_call
from voxflow_adapters.testkit.script import CallScript
from voxflow_adapters.testkit.timeline import call_timeline
from voxflow_voice.engines import VoiceEngines
from voxflow_voice.listen.turn_detector import TurnDetection
from voxflow_voice.session import VoiceSettings

from voxflow import Flow, listen
from voxflow.clock import VirtualClock
from voxflow.conversation import RouterContext
from voxflow.jobs import JobContext, JobUpdate, PostgresJobQueue, background_job
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


FLIGHT = "Flight BA 117 is on time."


@background_job(kind="pause_answers_pg.check_flight")
async def check_flight(job: JobContext) -> str:
    """Never run here: the test reports for it, as its job worker would."""
    return FLIGHT


class Travel(Flow[AssistantState]):
    conversational = True

    def route_turn(self, context: RouterContext) -> str | None:
        return "flight" if "flight" in (self.state.current_user_message or "").lower() else "chat"

    @listen("flight")
    def handle_flight(self) -> str:
        check_flight.start(self)
        return "I'm checking your flight."

    @listen("chat")
    def handle_chat(self) -> str:
        return "Sure, let me think about that."


async def report_at(clock: VirtualClock, queue: PostgresJobQueue, flow: Travel,
                    at: float) -> float:
    """Act as the flight check's job worker: at ``at`` on the call's clock, write its run
    (started, its stage, its announcement, completed) to the session's inbox, the clock
    held until the call worker's reader has applied it, acknowledged it (a round trip)
    and told the session, which queued its announcement; when that was (call time)."""
    while not flow.state.jobs:
        await clock.sleep(0.05)
    [job] = flow.state.jobs.values()
    await clock.sleep(at - clock.now())
    with clock.hold():  # (real I/O: the call's time stands still meanwhile)
        updates: list[tuple[Any, str | None, dict[str, Any]]] = [
            ("started", None, {}), ("stage_started", "run", {}),
            ("stage_completed", "run", {"announcement": FLIGHT}), ("completed", None, {})]
        for seq, (kind, stage, outputs) in enumerate(updates, 1):
            await queue.inbox.write(JobUpdate(
                session_id=job.session_id, job_id=job.job_id, revision=1, attempt=1,
                seq=seq, kind=kind, stage=stage, outputs=outputs))
        def queued() -> bool:
            return any(c.job_id == job.job_id for d in flow.state.deliveries.values()
                       for c in d.covered_updates)

        while not queued():  # noqa: ASYNC110
            await asyncio.sleep(0.01)  # the reader: woken by NOTIFY, on real time
        assert flow.state.jobs[job.job_id].status == "completed"
        return clock.now()


async def test_a_result_from_the_inbox_during_a_pause_answer_is_queued_at_once(
    engines: VoiceEngines, queue: PostgresJobQueue,
) -> None:
    # (issue 30) The flight check's result comes through the PostgreSQL inbox in the
    # end-of-turn silence of the user's next question, while the answer prepared in its
    # pause waits for the verdict: the reader applies it under the state lock, which that
    # answer does not hold across the verdict, so it is queued at once and announced
    # once, after the answer.
    script = (CallScript().user_says(0.5, "Is my flight on time?")
              .user_says(4.6, "What about the weather?"))
    timer = dataclasses.replace(engines, end_of_turn=None)  # (its 0.6 s pause)
    clock = VirtualClock(autojump=True)
    flow = Travel()
    async with asyncio.timeout(120):  # wall clock: only a deadlock reaches it
        async with AssistantWiring(flow, clock=clock, job_queue=queue) as wiring:
            reporting = asyncio.ensure_future(report_at(clock, queue, flow, at=5.9))
            try:
                call = await run_call(wiring, script, timer, settings=VoiceSettings())
            finally:
                if not reporting.done():
                    reporting.cancel()
            applied = await reporting
    second = call.of_kind("turn_committed")[1]
    paused = [e.end_at for e in call.of_kind("speech_ended")]
    assert paused[-1] < applied < second.at, call_timeline(call)  # in its pause
    assert [m.speculative for m in call.of_kind("turn_metrics")] == [True, True]
    [queued] = call.of_kind("announcement_queued")
    assert queued.at == applied, call_timeline(call)  # the moment it was read (and told)
    waited = assert_announcement_waited(call, text=FLIGHT)
    assert waited.started_at + call.tape.start > second.at  # after the answer
    assert_floor_held(call)
    assert await queued_job_ids(queue) == list(flow.state.jobs)  # queued once
