"""Every code example of ``spec/conversational-flows.txt`` (part 2: jobs, turns, replies).

Changed only in import names: ``crewai.flow`` -> ``voxflow``,
``crewai.experimental.flow_jobs`` -> ``voxflow.jobs``, ``flow_turns`` -> ``voxflow.turns``,
``flow_replies`` -> ``voxflow.replies`` (see the README's renames table). The reply-queue
example is a fragment: the names it leaves to the application (``MyJob``, ``flow``,
``jobs``, ``cancelled_job_ids``, ``send_public_event``) are defined around it.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, ClassVar

import pytest

pytestmark = pytest.mark.unit


# ---------------------------------------------------------------- jobs spanning turns


def test_jobs_spanning_conversational_turns() -> None:
    # --- the spec's example (imports renamed) ---
    import asyncio
    from typing import ClassVar  # noqa: F401 (shadowed by the module's import)

    from pydantic import Field

    from voxflow import ConversationState, start
    from voxflow.jobs import (
        JobRecord,
        JobRunner,
        JobState,
        JobWorkFlow,
        JobWorkState,
        add_job,
    )

    class ReportJob(JobRecord):
        output_fields: ClassVar[frozenset[str]] = frozenset({"notes"})
        question: str
        notes: list[str] = Field(default_factory=list)
        stage: str = "collect"

    class WorkChatState(ConversationState, JobState[ReportJob]):
        pass

    class ReportWork(JobWorkFlow[JobWorkState[ReportJob]]):
        @start()
        def collect(self):  # type: ignore[no-untyped-def]
            self.check_open()
            self.publish_update("started")
            self.publish_update(
                "stage_completed",
                stage="collect",
                outputs={"notes": ["Example fact"]},
            )
            self.publish_update("completed")

    async def run_job():  # type: ignore[no-untyped-def]
        state = WorkChatState()
        changes = asyncio.Queue()  # type: ignore[var-annotated]

        def make_work(job, inputs, publish):  # type: ignore[no-untyped-def]
            return ReportWork(
                initial_state=JobWorkState[ReportJob](job=job),
                publish=publish,
                suppress_flow_events=True,
            )

        runner = JobRunner(state, make_work, on_update=changes.put)
        try:
            async with runner.state_lock:
                job = ReportJob(session_id=state.id, question="Example report")
                if not add_job(state, job):
                    raise RuntimeError("Job registration rejected")
                runner.submit(job, {})
            while True:
                snapshot = await changes.get()
                if snapshot["jobs"][0]["status"] in {"completed", "failed"}:
                    return snapshot
        finally:
            await runner.aclose()

    # Run in a script: asyncio.run(run_job())
    snapshot = asyncio.run(run_job())
    # --- what the spec says it does ---
    json.dumps(snapshot)  # JSON-compatible
    assert set(snapshot) >= {"session_id", "seq", "jobs"}
    (job,) = snapshot["jobs"]
    assert job["status"] == "completed"
    assert job["notes"] == ["Example fact"]  # the typed output, committed by the parent
    assert job["committed_stages"] == ["collect"]
    assert job["question"] == "Example report"
    assert job["session_id"] == snapshot["session_id"]
    assert job["error"] is None


# ---------------------------------------------------------------- turn and reply identities


def test_turn_and_public_reply_identities(capsys: pytest.CaptureFixture[str]) -> None:
    # --- the spec's example (imports renamed) ---
    from voxflow import Flow, listen
    from voxflow.turns import TurnRunner, TurnState

    class Chat(Flow[TurnState]):
        conversational = True

        def route_turn(self, context):  # type: ignore[no-untyped-def]
            return "acknowledge"

        @listen("acknowledge")
        def handle_acknowledge(self):  # type: ignore[no-untyped-def]
            return "Request received."

    flow = Chat(suppress_flow_events=True)
    runner = TurnRunner(flow)
    events = runner.stream_turn("Hello", turn_id="turn-1", kind="acknowledgment")
    try:
        for event in events:
            if runner.accept_event(event):
                print(event.model_dump_json())
    finally:
        events.close()

    snapshot = runner.snapshot()
    reply = snapshot["replies"][0]
    interrupted = runner.interrupt(
        session_id=reply["session_id"],
        turn_id=reply["turn_id"],
        input_revision=reply["input_revision"],
        delivery_id=reply["delivery_id"],
    )
    # --- what the spec says it does ---
    printed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    # a hardcoded reply: exactly started, route_selected, text, completed
    assert [e["type"] for e in printed] == ["started", "route_selected", "text", "completed"]
    assert [e["seq"] for e in printed] == [1, 2, 3, 4]
    assert {(e["turn_id"], e["kind"], e["input_revision"]) for e in printed} == {
        ("turn-1", "acknowledgment", 1)
    }
    assert len({e["delivery_id"] for e in printed}) == 1  # the sole reply identity
    assert printed[1]["route"] == "acknowledge"
    assert (printed[2]["segment_id"], printed[2]["text"]) == (1, "Request received.")
    assert reply["text"] == "Request received."
    assert reply["status"] == "completed"
    assert snapshot["turns"][0]["turn_id"] == "turn-1"
    # interrupting a completed reply: True, the text and status stay, the fence is set
    assert interrupted is True
    after = runner.snapshot()["replies"][0]
    assert (after["status"], after["interrupted"], after["text"]) == (
        "completed",
        True,
        "Request received.",
    )
    # the history the Flow owns
    assert [(m.role, m.content) for m in flow.state.messages] == [
        ("user", "Hello"),
        ("assistant", "Request received."),
    ]


# ---------------------------------------------------------------- queued background replies


class _Harness:
    """What the reply-queue fragment leaves to the application."""

    def __init__(self) -> None:
        self.sent: list[Any] = []
        self.cancelled_job_ids: set[str] = set()


async def test_queued_background_replies() -> None:
    from voxflow import Flow, listen, start
    from voxflow.jobs import JobRecord, JobRunner, JobWorkFlow, JobWorkState, add_job

    class MyJob(JobRecord):
        output_fields: ClassVar[frozenset[str]] = frozenset({"answer"})
        stage: str = "research"
        answer: str = ""

    # --- the spec's example (imports renamed) ---
    from voxflow.jobs import JobState
    from voxflow.replies import (
        ClientActivity,
        CoveredUpdate,
        ReplyQueue,
        ReplyQueueState,
    )
    from voxflow.turns import TurnRunner

    class WorkChatState(ReplyQueueState, JobState[MyJob]):
        pass

    # --- the application around the fragment ---
    class Chat(Flow[WorkChatState]):
        conversational = True

        def route_turn(self, context: Any) -> str:
            return "research"

        @listen("research")
        def handle_research(self) -> str:
            return "I'll look into it."

    class Research(JobWorkFlow[JobWorkState[MyJob]]):
        @start()
        def research(self) -> None:
            self.publish_update("started")
            self.publish_update(
                "stage_completed", stage="research", outputs={"answer": "Tea ships Monday."}
            )
            self.publish_update("completed")

    app = _Harness()
    cancelled_job_ids = app.cancelled_job_ids
    flow = Chat(suppress_flow_events=True)
    wake = asyncio.Event()

    async def send_public_event(event: Any) -> None:
        app.sent.append(event)

    # --- the spec's fragment (verbatim) ---
    # Your conversational Flow uses WorkChatState; jobs is its JobRunner.
    turns = TurnRunner(flow)
    replies = ReplyQueue(turns, is_relevant=lambda job: job.job_id not in cancelled_job_ids)

    async def on_job_snapshot(snapshot):  # type: ignore[no-untyped-def]
        async with jobs.state_lock:
            for job in flow.state.jobs.values():
                if job.status == "completed":
                    replies.enqueue(job)
        # Publish snapshots and wake your application-owned delivery task.
        wake.set()

    async def try_delivery():  # type: ignore[no-untyped-def]
        async with jobs.state_lock:
            delivery = replies.claim()
            if delivery is None:
                return
            events = replies.prepare(
                delivery.delivery_id,
                lambda current_jobs: "\n\n".join(job.answer for job in current_jobs),
            )
        for event in events:
            async with jobs.state_lock:
                if not replies.accepts_output(delivery.delivery_id):
                    replies.settle(delivery.delivery_id, "skipped")
                    return
                if turns.accept_event(event):
                    await send_public_event(event)
        # Generation has completed. The speaking floor is still leased.
        # Validate whole-message adapter feedback before calling:
        # replies.settle(delivery.delivery_id, "completed")

    # --- driving it ---
    def make_work(job: MyJob, inputs: Any, publish: Any) -> Research:
        return Research(
            initial_state=JobWorkState[MyJob](job=job), publish=publish, suppress_flow_events=True
        )

    jobs = JobRunner(flow.state, make_work, on_update=on_job_snapshot)
    try:
        async with jobs.state_lock:  # a foreground turn holds the lock throughout
            foreground = [e async for e in turns.astream_turn("Research tea", turn_id="t1")]
            assert [e.type for e in foreground][-1] == "completed"
            job = MyJob(session_id=flow.state.id, origin_turn_id="t1")
            assert add_job(flow.state, job)
            jobs.submit(job, {})
        while flow.state.jobs[job.job_id].status != "completed":
            await asyncio.wait_for(wake.wait(), 30)
            wake.clear()
        # the user is speaking: nothing may be claimed
        assert replies.observe_client(
            ClientActivity(
                session_id=flow.state.id, seq=1, recording=True, playback=False, muted=False
            )
        )
        await try_delivery()
        assert app.sent == []
        assert replies.observe_client(
            ClientActivity(
                session_id=flow.state.id, seq=2, recording=False, playback=False, muted=False
            )
        )
        await try_delivery()
        # --- what the spec says it does ---
        assert [e.type for e in app.sent] == ["started", "text", "completed"]
        assert app.sent[1].text == "Tea ships Monday."
        assert {e.kind for e in app.sent} == {"progress"}
        assert {e.turn_id for e in app.sent} == {"t1"}  # attributed to the originating turn
        assert {e.job_id for e in app.sent} == {job.job_id}
        (delivery,) = replies.snapshot()["deliveries"]
        assert delivery["status"] == "scheduled"  # the floor is still leased
        assert replies.settle(delivery["delivery_id"], "completed") is True
        assert replies.settle(delivery["delivery_id"], "completed") is False  # once
        # a covered version is never announced again
        assert replies.enqueue(flow.state.jobs[job.job_id]) is None
        coverage = CoveredUpdate.from_job(flow.state.jobs[job.job_id])
        assert coverage.job_id == job.job_id
        # the history was not touched by the announcement
        assert [m.content for m in flow.state.messages] == ["Research tea", "I'll look into it."]
    finally:
        jobs.request_close()
        await jobs.aclose()
        replies.close()
