"""The lock model end to end: the spec's ``try_delivery`` pattern with a real conversational
Flow, TurnRunner, JobRunner (a worker Flow in a thread) and ReplyQueue, all serialised by
``JobRunner.state_lock``.

Rules shown here (see ``voxflow.jobs.runner`` and ``voxflow.replies.queue``):

1. A foreground turn holds ``state_lock`` for its whole iteration; jobs it starts are
   registered, associated and submitted inside it.
2. ``on_update`` takes ``state_lock`` to enqueue completed jobs (the runner calls it with
   the lock released), then wakes the delivery task.
3. ``try_delivery`` claims and prepares under the lock, then re-checks
   ``accepts_output`` and ``accept_event`` under the lock before *each* handoff, and
   awaits the transport with the lock released.
4. ``settle(..., "completed")`` only after the client reported the whole message played.
"""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

import pytest

from voxflow import Flow
from voxflow.flow import listen, start
from voxflow.ids import DeliveryId
from voxflow.jobs import (
    JobRecord,
    JobRunner,
    JobState,
    JobWorkFlow,
    JobWorkState,
    Publisher,
    add_job,
)
from voxflow.replies import ClientActivity, ReplyQueue, ReplyQueueState
from voxflow.turns import ReplyEvent, TurnRunner

pytestmark = pytest.mark.unit


class ReportJob(JobRecord):
    output_fields: ClassVar[frozenset[str]] = frozenset({"answer"})
    question: str
    answer: str = ""
    stage: str | None = "research"


class WorkChatState(ReplyQueueState, JobState[ReportJob]):
    pass


class ReportWork(JobWorkFlow[JobWorkState[ReportJob]]):
    @start()
    def research(self) -> None:
        self.check_open()
        self.publish_update("started")
        answer = f"The report on {self.state.job.question} is ready."
        self.publish_update("stage_completed", stage="research", outputs={"answer": answer})
        self.publish_update("completed")


class Chat(Flow[WorkChatState]):
    conversational = True

    def route_turn(self, context: Any) -> str:
        return "research"

    @listen("research")
    def handle_research(self) -> str:
        return "I'll look into it and tell you when it's ready."


class App:
    """What an application owns: the transport, the delivery task, the client."""

    def __init__(self) -> None:
        self.flow = Chat(suppress_flow_events=True)
        self.turns = TurnRunner(self.flow)
        self.replies = ReplyQueue(self.turns)
        self.wake = asyncio.Event()
        self.sent: list[ReplyEvent] = []
        self.client_seq = 0
        self.jobs = JobRunner(self.flow.state, self.make_work, on_update=self.on_job_snapshot)

    @staticmethod
    def make_work(job: ReportJob, inputs: dict[str, Any], publish: Publisher) -> ReportWork:
        return ReportWork(
            state=JobWorkState[ReportJob](job=job), publish=publish, suppress_flow_events=True
        )

    async def on_job_snapshot(self, snapshot: dict[str, Any]) -> None:
        async with self.jobs.state_lock:
            for job in self.flow.state.jobs.values():
                if job.status == "completed":
                    self.replies.enqueue(job)
        self.wake.set()

    async def send_public_event(self, event: ReplyEvent) -> None:
        await asyncio.sleep(0)  # the transport write
        self.sent.append(event)

    async def foreground_turn(self, message: str) -> list[ReplyEvent]:
        handed: list[ReplyEvent] = []
        async with self.jobs.state_lock:  # rule 1: the whole iteration
            self.replies.set_foreground(True)
            try:
                async for event in self.turns.astream_turn(message):
                    if event.type == "started":
                        job = ReportJob(
                            session_id=self.flow.state.id,
                            origin_turn_id=event.turn_id,
                            question=message,
                        )
                        assert add_job(self.flow.state, job)
                        assert self.turns.associate_job(job)
                        self.jobs.submit(job, {})
                    if self.turns.accept_event(event):
                        handed.append(event)
            finally:
                self.replies.set_foreground(False)
        return handed

    async def try_delivery(self, build_text: Any) -> DeliveryId | None:
        async with self.jobs.state_lock:
            delivery = self.replies.claim()
            if delivery is None:
                return None
            events = self.replies.prepare(delivery.delivery_id, build_text)
        for event in events:
            async with self.jobs.state_lock:
                if not self.replies.accepts_output(delivery.delivery_id):
                    self.replies.settle(delivery.delivery_id, "skipped")
                    return delivery.delivery_id
                if not self.turns.accept_event(event):
                    continue
            await self.send_public_event(event)
            await self.on_sent(event)
        return delivery.delivery_id

    async def on_sent(self, event: ReplyEvent) -> None:
        """Hook for the client simulation."""

    def observe(self, **kw: Any) -> bool:
        self.client_seq += 1
        fields = {"recording": False, "playback": False, "muted": False, **kw}
        return self.replies.observe_client(
            ClientActivity(session_id=self.flow.state.id, seq=self.client_seq, **fields)
        )


def answers(jobs: list[ReportJob]) -> str:
    return "\n\n".join(job.answer for job in jobs)


async def wait_for_pending(app: App) -> None:
    while not app.replies.statistics().pending:
        app.wake.clear()
        await app.wake.wait()


async def test_try_delivery_end_to_end() -> None:
    app = App()
    try:
        foreground = await app.foreground_turn("solar panels")
        assert [e.type for e in foreground] == ["started", "route_selected", "text", "completed"]
        assert foreground[-1].job_id is not None  # later events name the job it started
        await wait_for_pending(app)
        delivery_id = await app.try_delivery(answers)
        assert delivery_id is not None
        # Generation finished, the floor is still leased until the client reports playback.
        assert app.replies.statistics().active_delivery_id == delivery_id
        assert app.observe(playback=True, delivery_id=delivery_id)
        assert app.observe(playback=False, delivery_id=delivery_id)
        async with app.jobs.state_lock:
            assert app.replies.settle(delivery_id, "completed")
    finally:
        await app.jobs.aclose()
    announced = [e for e in app.sent if e.delivery_id == delivery_id]
    assert [e.type for e in announced] == ["started", "text", "completed"]
    assert announced[1].text == "The report on solar panels is ready."
    assert all(e.kind == "progress" and e.turn_id == foreground[0].turn_id for e in announced)
    job = next(iter(app.flow.state.jobs.values()))
    assert app.flow.state.deliveries[delivery_id].status == "completed"
    assert app.flow.state.covered_updates[job.job_id].seq == job.last_update_seq
    async with app.jobs.state_lock:
        assert app.replies.enqueue(job) is None  # announced once
        assert app.replies.claim() is None


async def test_a_barge_in_during_the_announcement_stops_it() -> None:
    app = App()

    async def user_starts_talking(event: ReplyEvent) -> None:
        if event.type == "started":
            assert app.observe(recording=True)

    app.on_sent = user_starts_talking  # type: ignore[method-assign]
    try:
        await app.foreground_turn("wind farms")
        await wait_for_pending(app)
        delivery_id = await app.try_delivery(answers)
    finally:
        await app.jobs.aclose()
    assert delivery_id is not None
    assert [e.type for e in app.sent] == ["started"]  # nothing after the barge-in
    assert app.flow.state.deliveries[delivery_id].status == "skipped"
    assert app.flow.state.replies[delivery_id].interrupted
    assert app.replies.statistics().active_delivery_id is None
    job = next(iter(app.flow.state.jobs.values()))
    assert job.answer == "The report on wind farms is ready."  # the result is kept


async def test_a_foreground_turn_holds_the_floor_and_the_lock() -> None:
    app = App()
    try:
        await app.foreground_turn("tides")
        await wait_for_pending(app)
        async with app.jobs.state_lock:
            app.replies.set_foreground(True)
            assert app.replies.claim() is None
            app.replies.set_foreground(False)
        order: list[str] = []

        async def foreground() -> list[ReplyEvent]:
            handed = await app.foreground_turn("more")
            order.append("foreground turn done")
            return handed

        async def announce(event: ReplyEvent) -> None:
            order.append(f"announced {event.type}")

        app.on_sent = announce  # type: ignore[method-assign]
        second = asyncio.create_task(foreground())
        await asyncio.sleep(0)  # the turn takes the state lock first
        blocked = asyncio.create_task(app.try_delivery(answers))
        handed = await second
        delivered = await blocked
    finally:
        await app.jobs.aclose()
    assert handed[-1].type == "completed"
    assert delivered is not None
    # The delivery waited for the lock: nothing was announced during the foreground turn.
    assert order[0] == "foreground turn done"
    assert order[1:] == ["announced started", "announced text", "announced completed"]
