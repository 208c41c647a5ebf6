"""AnnouncementDelivery reports each queued announcement once, through the call's emit,
when it first sees it pending: a real TurnRunner, JobRunner (worker flows in a thread) and
ReplyQueue, no models."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, ClassVar

import pytest
from voxflow_voice.call import CallContext
from voxflow_voice.events import AnnouncementQueued, SessionEvent
from voxflow_voice.session.delivery import AnnouncementDelivery
from voxflow_voice.session.floor import FloorReporter
from voxflow_voice.session.voice_settings import DEFAULT_VOICE_SETTINGS

from voxflow import Flow
from voxflow.clock import MonotonicClock
from voxflow.flow import listen, start
from voxflow.ids import DeliveryId, TurnId
from voxflow.jobs import (
    JobRecord,
    JobRunner,
    JobState,
    JobWorkFlow,
    JobWorkState,
    Publisher,
    add_job,
)
from voxflow.replies import ReplyQueue, ReplyQueueState
from voxflow.turns import ReplyEvent, TurnRunner

pytestmark = pytest.mark.unit


class Report(JobRecord):
    output_fields: ClassVar[frozenset[str]] = frozenset({"answer"})
    answer: str = ""
    stage: str | None = "research"


class ChatState(ReplyQueueState, JobState[Report]):
    pass


class ReportWork(JobWorkFlow[JobWorkState[Report]]):
    @start()
    def research(self) -> None:
        self.publish_update("started")
        self.publish_update("stage_completed", stage="research", outputs={"answer": "Done."})
        self.publish_update("completed")


class Chat(Flow[ChatState]):
    conversational = True

    def route_turn(self, context: Any) -> str:
        return "research"

    @listen("research")
    def handle_research(self) -> str:
        return "I'll look into it."


def make_work(job: Report, inputs: dict[str, Any], publish: Publisher) -> ReportWork:
    return ReportWork(state=JobWorkState[Report](job=job), publish=publish,
                      suppress_flow_events=True)


class Speaker:
    """The answering path's announce, recording what it was asked to speak."""

    def __init__(self) -> None:
        self.spoken: list[DeliveryId] = []

    async def announce(
        self, turn_id: TurnId, delivery_id: DeliveryId, events: Sequence[ReplyEvent]
    ) -> None:
        self.spoken.append(delivery_id)


async def test_each_queued_announcement_is_reported_once() -> None:
    flow = Chat(suppress_flow_events=True)
    turns = TurnRunner(flow)
    replies = ReplyQueue(turns)
    completed = asyncio.Event()
    delivery: AnnouncementDelivery | None = None

    async def on_update(snapshot: dict[str, Any]) -> None:
        # Other code enqueues (not offer_completed), then wakes the delivery task.
        async with jobs.state_lock:
            for job in flow.state.jobs.values():
                if job.status == "completed":
                    replies.enqueue(job)
        completed.set()
        assert delivery is not None
        delivery.wake()

    jobs = JobRunner(flow.state, make_work, on_update=on_update)
    emitted: list[SessionEvent] = []
    call = CallContext(turns, MonotonicClock(), emit=emitted.append,
                       settings=DEFAULT_VOICE_SETTINGS, lock=jobs.state_lock, replies=replies,
                       jobs=jobs)
    floor = FloorReporter(call)
    floor.muted_changed(True)  # the floor is held: nothing is claimed or spoken
    speaker = Speaker()
    delivery = AnnouncementDelivery(call, floor, speaker)

    async def turn(message: str) -> None:
        async with jobs.state_lock:
            async for event in turns.astream_turn(message):
                if event.type == "started":
                    job = Report(session_id=flow.state.id, origin_turn_id=event.turn_id)
                    assert add_job(flow.state, job) and turns.associate_job(job)
                    jobs.submit(job, {})
                turns.accept_event(event)

    task = asyncio.create_task(delivery.run())
    try:
        for count, message in enumerate(("solar panels", "wind farms"), 1):
            await turn(message)
            while len(flow.state.deliveries) < count:  # its result was enqueued
                completed.clear()
                await asyncio.wait_for(completed.wait(), 10)  # a thread: a few ms
            for _ in range(50):  # the woken task looks at the queue
                await asyncio.sleep(0)
        woken = [e.delivery_id for e in emitted]  # reported by the woken task
        await delivery.offer_completed()  # offered again: coalesced, not reported again
        await delivery.offer_completed()
        for _ in range(50):
            await asyncio.sleep(0)
    finally:
        task.cancel()
        await jobs.aclose()
    pending = [d for d in flow.state.deliveries.values() if d.status == "pending"]
    assert len(pending) == 2 and not speaker.spoken
    queued = [e for e in emitted if isinstance(e, AnnouncementQueued)]
    assert len(queued) == len(emitted)  # nothing else was reported
    assert woken == [e.delivery_id for e in queued] == [d.delivery_id for d in pending]
    by_job = {j.job_id: j.origin_turn_id for j in flow.state.jobs.values()}
    for event, record in zip(queued, pending, strict=True):
        [cov] = record.covered_updates
        assert event.job_ids == (cov.job_id,) and event.turn_id == by_job[cov.job_id]
        assert event.session_id == flow.state.id
        assert event.ready_at is None  # enqueued by other code: never seen by jobs_updated
