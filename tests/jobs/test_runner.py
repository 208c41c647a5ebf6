"""JobRunner + JobWorkFlow: admission, blocking round-trips, failures, closing, restore."""

from __future__ import annotations

import asyncio
import threading
from typing import Any, ClassVar

import pytest
from pydantic import Field

from voxflow.conversation import ConversationState
from voxflow.errors import JobUpdateRejectedError, ResourceClosedError
from voxflow.flow import start
from voxflow.ids import TurnId
from voxflow.jobs import (
    JobRecord,
    JobRunner,
    JobState,
    JobWorkFlow,
    JobWorkState,
    Publisher,
    add_job,
)


class ReportJob(JobRecord):
    output_fields: ClassVar[frozenset[str]] = frozenset({"notes"})
    question: str
    notes: list[str] = Field(default_factory=list)
    stage: str | None = "collect"


class WorkChatState(ConversationState, JobState[ReportJob]):
    pass


class ReportWork(JobWorkFlow[JobWorkState[ReportJob]]):
    @start()
    def collect(self) -> None:
        self.check_open()
        self.publish_update("started")
        self.publish_update("stage_completed", stage="collect", outputs={"notes": ["Example fact"]})
        self.publish_update("completed")


class BrokenWork(JobWorkFlow[JobWorkState[ReportJob]]):
    @start()
    def collect(self) -> None:
        self.publish_update("started")
        raise ConnectionError("provider said: secret-token-123")


class LazyWork(JobWorkFlow[JobWorkState[ReportJob]]):
    @start()
    def collect(self) -> None:
        self.publish_update("started")


class SloppyWork(JobWorkFlow[JobWorkState[ReportJob]]):
    """Claims completion before committing its stage: the parent rejects it."""

    seen: ClassVar[list[str]] = []

    @start()
    def collect(self) -> None:
        self.publish_update("started")
        try:
            self.publish_update("completed")
        except JobUpdateRejectedError as exc:
            self.seen.append(str(exc))
            raise


class GatedWork(JobWorkFlow[JobWorkState[ReportJob]]):
    """Publishes ``started``, then waits for the test before the next stage."""

    gate: ClassVar[threading.Event]
    outcome: ClassVar[list[str]]

    @start()
    def collect(self) -> None:
        self.publish_update("started")
        self.gate.wait(timeout=30)
        try:
            self.check_open()
            self.publish_update("stage_completed", stage="collect", outputs={"notes": ["x"]})
        except (ResourceClosedError, JobUpdateRejectedError) as exc:
            self.outcome.append(type(exc).__name__)
            raise
        self.outcome.append("published")


def work_factory(cls: type[JobWorkFlow[Any]]) -> Any:
    def make_work(job: ReportJob, inputs: dict[str, Any], publish: Publisher) -> JobWorkFlow[Any]:
        return cls(
            state=JobWorkState[ReportJob](job=job), publish=publish, suppress_flow_events=True
        )

    return make_work


async def wait_for_status(changes: asyncio.Queue[dict[str, Any]], *statuses: str) -> dict[str, Any]:
    while True:
        snapshot = await changes.get()
        if snapshot["jobs"][0]["status"] in statuses:
            return snapshot


async def test_the_spec_example_runs_a_job_to_completion() -> None:
    state = WorkChatState()
    changes: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    runner = JobRunner(state, work_factory(ReportWork), on_update=changes.put)
    try:
        async with runner.state_lock:
            job = ReportJob(session_id=state.id, question="Example report")
            assert add_job(state, job)
            runner.submit(job, {})
        snapshot = await wait_for_status(changes, "completed", "failed")
    finally:
        await runner.aclose()
    assert snapshot["session_id"] == state.id
    assert snapshot["jobs"][0]["status"] == "completed"
    assert snapshot["jobs"][0]["notes"] == ["Example fact"]
    assert state.jobs[job.job_id].notes == ["Example fact"]
    assert state.jobs[job.job_id].last_update_seq == 3
    assert snapshot["seq"] == state.job_sequence == 4  # add + three updates


async def test_a_worker_exception_fails_the_job_with_the_formatted_error() -> None:
    state = WorkChatState()
    changes: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    events: list[dict[str, Any]] = []
    runner = JobRunner(
        state,
        work_factory(BrokenWork),
        on_update=changes.put,
        on_worker_event=events.append,
        format_error=lambda exc: f"{type(exc).__name__} (details redacted)",
    )
    async with runner:
        job = ReportJob(session_id=state.id, question="q")
        assert add_job(state, job)
        runner.submit(job)
        await wait_for_status(changes, "failed")
    assert state.jobs[job.job_id].error == "ConnectionError (details redacted)"
    assert [e["type"] for e in events] == ["worker_started", "worker_settled"]
    assert events[-1]["error"] == "ConnectionError (details redacted)"


async def test_a_rejected_update_stops_the_worker_and_fails_the_job() -> None:
    state = WorkChatState()
    changes: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    SloppyWork.seen = []
    async with JobRunner(state, work_factory(SloppyWork), on_update=changes.put) as runner:
        job = ReportJob(session_id=state.id, question="q")
        assert add_job(state, job)
        runner.submit(job)
        await wait_for_status(changes, "failed")
    assert SloppyWork.seen == ["Job session closed or update rejected."]
    assert state.jobs[job.job_id].error == "Job session closed or update rejected."
    assert state.jobs[job.job_id].committed_stages == []


async def test_a_worker_that_returns_early_fails_the_job() -> None:
    state = WorkChatState()
    changes: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    async with JobRunner(state, work_factory(LazyWork), on_update=changes.put) as runner:
        job = ReportJob(session_id=state.id, question="q")
        assert add_job(state, job)
        runner.submit(job)
        await wait_for_status(changes, "failed")
    assert state.jobs[job.job_id].error == "Worker finished without completing the job."


@pytest.mark.parametrize("problem", ["raises", "wrong identity", "streaming", "not a flow"])
async def test_a_bad_make_work_fails_the_job(problem: str) -> None:
    state = WorkChatState()
    changes: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    def make_work(job: ReportJob, inputs: dict[str, Any], publish: Publisher) -> Any:
        if problem == "raises":
            raise KeyError("missing input")
        if problem == "not a flow":
            return object()
        if problem == "wrong identity":
            job = job.model_copy(update={"attempt": 2})
        work = ReportWork(state=JobWorkState[ReportJob](job=job), publish=publish)
        work.stream = problem == "streaming"
        return work

    async with JobRunner(state, make_work, on_update=changes.put) as runner:
        job = ReportJob(session_id=state.id, question="q")
        assert add_job(state, job)
        runner.submit(job)
        await wait_for_status(changes, "failed")
    assert state.jobs[job.job_id].status == "failed"
    assert state.jobs[job.job_id].error


async def test_admission_rules() -> None:
    state = WorkChatState()
    changes: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    GatedWork.gate = threading.Event()
    GatedWork.outcome = []
    built: list[str] = []

    def make_work(job: ReportJob, inputs: dict[str, Any], publish: Publisher) -> Any:
        built.append(job.job_id)
        return GatedWork(state=JobWorkState[ReportJob](job=job), publish=publish)

    runner = JobRunner(state, make_work, on_update=changes.put)
    try:
        unregistered = ReportJob(session_id=state.id, question="q")
        runner.submit(unregistered)
        job = ReportJob(session_id=state.id, question="q")
        assert add_job(state, job)
        runner.submit(job.model_copy(update={"attempt": 2}))  # another attempt
        runner.submit(job)
        runner.submit(job)  # a duplicate while queued/running
        await wait_for_status(changes, "running")
        runner.submit(job)  # no longer queued
        GatedWork.gate.set()
        while state.jobs[job.job_id].committed_stages != ["collect"]:
            await changes.get()
    finally:
        GatedWork.gate.set()
        await runner.aclose()
    assert built == [job.job_id]  # admitted exactly once
    closed_job = ReportJob(session_id=state.id, question="late")
    assert add_job(state, closed_job)
    runner.submit(closed_job)
    await asyncio.sleep(0)
    assert state.jobs[closed_job.job_id].status == "queued"
    with pytest.raises(TypeError, match="job must be a JobRecord"):
        runner.submit({"job_id": "x"})  # type: ignore[arg-type]


async def gated_job_running() -> tuple[
    WorkChatState, asyncio.Queue[dict[str, Any]], JobRunner, ReportJob
]:
    """A runner whose one job is running, held at ``GatedWork.gate``: the state, the
    updates it published, the runner and the job."""
    state = WorkChatState()
    changes: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    GatedWork.gate = threading.Event()
    GatedWork.outcome = []
    runner = JobRunner(state, work_factory(GatedWork), on_update=changes.put)
    job = ReportJob(session_id=state.id, question="q")
    assert add_job(state, job)
    runner.submit(job)
    await wait_for_status(changes, "running")
    return state, changes, runner, job


async def test_updates_wait_for_the_state_lock_and_close_releases_publishers() -> None:
    state, _changes, runner, job = await gated_job_running()
    async with runner.state_lock:  # a foreground turn holds the state
        GatedWork.gate.set()  # the worker now publishes and blocks on the lock
        # The worker thread publishes; poll until its update reached the processor.
        while not runner.waiting_updates:  # noqa: ASYNC110
            await asyncio.sleep(0.001)
        assert state.jobs[job.job_id].committed_stages == []  # not committed under us
        runner.request_close()  # session teardown: publishers are released with False
    await runner.aclose()
    assert GatedWork.outcome == ["JobUpdateRejectedError"]
    assert state.jobs[job.job_id].committed_stages == []
    assert state.jobs[job.job_id].status == "running"  # no update lands after close


async def test_check_open_stops_at_the_next_stage_boundary() -> None:
    _state, _changes, runner, _job = await gated_job_running()
    runner.request_close()
    GatedWork.gate.set()
    await runner.aclose()
    assert GatedWork.outcome == ["ResourceClosedError"]


async def test_publishing_from_the_runner_loop_is_refused() -> None:
    state = WorkChatState()
    captured: list[Publisher] = []

    def make_work(job: ReportJob, inputs: dict[str, Any], publish: Publisher) -> Any:
        captured.append(publish)
        return ReportWork(state=JobWorkState[ReportJob](job=job), publish=publish)

    changes: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    async with JobRunner(state, make_work, on_update=changes.put) as runner:
        job = ReportJob(session_id=state.id, question="q")
        assert add_job(state, job)
        runner.submit(job)
        await wait_for_status(changes, "completed")
        work = ReportWork(state=JobWorkState[ReportJob](job=job), publish=captured[0])
        with pytest.raises(RuntimeError, match="never from the JobRunner's own event loop"):
            work.publish_update("failed")


async def test_a_failing_subscriber_closes_the_runner() -> None:
    state = WorkChatState()
    seen: list[str] = []

    async def on_update(snapshot: dict[str, Any]) -> None:
        seen.append(snapshot["jobs"][0]["status"])
        if snapshot["jobs"][0]["status"] == "running":
            raise RuntimeError("subscriber broke")

    runner = JobRunner(state, work_factory(ReportWork), on_update=on_update)
    job = ReportJob(session_id=state.id, question="q")
    assert add_job(state, job)
    runner.submit(job)
    while not runner.closed:  # noqa: ASYNC110  # closed by the processor task on failure
        await asyncio.sleep(0.001)
    await runner.aclose()  # the worker was released, not stranded
    assert seen[:2] == ["queued", "running"]
    assert state.jobs[job.job_id].status == "running"


async def test_restoring_a_snapshot_never_restarts_work() -> None:
    state, changes, runner, job = await gated_job_running()
    saved = state.model_dump_json()
    runner.request_close()
    GatedWork.gate.set()
    await runner.aclose()

    restored = WorkChatState.model_validate_json(saved)
    built: list[str] = []

    def make_work(job: ReportJob, inputs: dict[str, Any], publish: Publisher) -> Any:
        built.append(job.job_id)
        return ReportWork(state=JobWorkState[ReportJob](job=job), publish=publish)

    async with JobRunner(restored, make_work, on_update=changes.put) as again:
        again.submit(restored.jobs[job.job_id])
        await asyncio.sleep(0)
        await asyncio.sleep(0)
    assert built == []
    assert restored.jobs[job.job_id].status == "running"


def test_the_runner_needs_a_running_loop() -> None:
    with pytest.raises(RuntimeError, match="running event loop"):
        JobRunner(WorkChatState(), work_factory(ReportWork), on_update=print)  # type: ignore[arg-type]


async def test_constructor_validation() -> None:
    with pytest.raises(TypeError, match="state must be a JobState"):
        JobRunner(ConversationState(), work_factory(ReportWork), on_update=print)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="make_work"):
        JobRunner(WorkChatState(), None, on_update=print)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="publish"):
        ReportWork(
            state=JobWorkState[ReportJob](job=ReportJob(session_id="s", question="q")), publish=None
        )  # type: ignore[arg-type]


async def test_fail_job_settles_a_job_once_and_leaves_a_settled_one() -> None:
    """``fail_job``: the public way a layer above (a job queue that refused a job) settles
    one; a second call, or a call for a completed or unknown job, changes nothing."""
    state = WorkChatState()
    changes: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    async with JobRunner(state, work_factory(ReportWork), on_update=changes.put) as runner:
        queued = ReportJob(session_id=state.id, question="never ran")
        assert add_job(state, queued)
        await runner.fail_job(queued.job_id, "not queued: the queue is full")
        snapshot = await changes.get()
        assert snapshot["jobs"][0]["status"] == "failed"
        assert state.jobs[queued.job_id].error == "not queued: the queue is full"
        assert state.jobs[queued.job_id].last_update_seq == 1
        await runner.fail_job(queued.job_id, "again")
        await runner.fail_job("no-such-job", "nothing")
        assert state.jobs[queued.job_id].error == "not queued: the queue is full"
        assert state.jobs[queued.job_id].last_update_seq == 1
        assert changes.empty()


async def test_a_cancelled_close_still_stops_the_processor_and_the_workers() -> None:
    """A close cancelled while it waits for a running job (a second cancel at shutdown)
    cancels the job's task with it and stops the update processor: nothing of the
    runner is left running behind the cancellation."""
    _state, _changes, runner, _job = await gated_job_running()
    processor = runner._processor
    assert processor is not None and not processor.done()
    workers = [task for _, task in runner._workers.values()]
    closing = asyncio.create_task(runner.aclose())
    await asyncio.sleep(0.05)  # waiting for the gated job
    closing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await closing
    assert processor.done() and runner._processor is None
    assert all(task.cancelling() or task.done() for task in workers)
    GatedWork.gate.set()  # (the worker thread ends; its publish is refused)
    await asyncio.wait(workers, timeout=10)


async def test_held_admissions_wait_for_their_turn_and_hold_nothing_else() -> None:
    # (issue 30, item 2) A speculative turn's jobs wait for its verdict; the jobs of
    # other turns start, and their results are committed, meanwhile.
    state = WorkChatState()
    changes: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    runner = JobRunner(state, work_factory(ReportWork), on_update=changes.put)
    speculative, earlier = TurnId("t-speculative"), TurnId("t-earlier")
    try:
        runner.hold_admissions(speculative)
        mine = ReportJob(session_id=state.id, question="mine", origin_turn_id=speculative)
        undone = ReportJob(session_id=state.id, question="undone", origin_turn_id=speculative)
        other = ReportJob(session_id=state.id, question="other", origin_turn_id=earlier)
        for job in (mine, undone, other):
            assert add_job(state, job)
            runner.submit(job)
        while state.jobs[other.job_id].status != "completed":
            await changes.get()  # the other turn's job ran to its result
        assert state.jobs[mine.job_id].status == state.jobs[undone.job_id].status == "queued"
        del state.jobs[undone.job_id]  # (as a rollback of its turn drops it)
        runner.release_admissions(speculative)
        runner.release_admissions(speculative)  # idempotent
        while state.jobs[mine.job_id].status != "completed":
            await changes.get()
    finally:
        await runner.aclose()
    assert undone.job_id not in state.jobs


async def test_a_held_turns_hand_offs_wait_for_its_verdict_from_any_thread() -> None:
    # (issue 30) A job queue's submission of a speculative turn's job (from a handler's
    # thread) is kept until the turn's verdict, as an admission is: made at the release
    # if the job is still registered, dropped if its turn was undone; a turn that is not
    # held is not kept (the caller submits at once).
    state = WorkChatState()
    runner = JobRunner(state, work_factory(ReportWork), on_update=asyncio.Queue().put)
    speculative = TurnId("t-speculative")
    handed: list[str] = []
    try:
        mine = ReportJob(session_id=state.id, question="mine", origin_turn_id=speculative)
        undone = ReportJob(session_id=state.id, question="undone", origin_turn_id=speculative)
        for job in (mine, undone):
            assert add_job(state, job)
        assert not runner.hand_off_when_final(mine, lambda: handed.append("early"))
        runner.hold_admissions(speculative)
        kept = await asyncio.gather(*(
            asyncio.to_thread(runner.hand_off_when_final, job,
                              lambda job=job: handed.append(job.question))
            for job in (mine, undone)))
        assert kept == [True, True] and handed == []
        del state.jobs[undone.job_id]  # (as a rollback of its turn drops it)
        runner.release_admissions(speculative)
        runner.release_admissions(speculative)  # idempotent
        assert handed == ["mine"]
        assert not runner.hand_off_when_final(mine, lambda: handed.append("late"))
    finally:
        await runner.aclose()


async def test_holding_admissions_refuses_an_asked_that_is_not_callable() -> None:
    # a non-callable ``asked`` was only logged when the turn asked for its first job,
    # long after the mistake, and the turn was never told
    state = WorkChatState()
    changes: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    runner = JobRunner(state, work_factory(ReportWork), on_update=changes.put)
    try:
        with pytest.raises(TypeError, match="asked must be callable or None, got str"):
            runner.hold_admissions(TurnId("t-held"), asked="make it final")  # type: ignore[arg-type]
        job = ReportJob(session_id=state.id, question="a", origin_turn_id=TurnId("t-held"))
        assert add_job(state, job)
        runner.submit(job)  # admitted at once: the refused hold held nothing
        while state.jobs[job.job_id].status != "completed":
            await changes.get()
    finally:
        await runner.aclose()


async def test_a_held_turn_is_told_of_its_first_job_on_the_loop() -> None:
    # (issue 32) A voice session makes a turn final once it asks for a job (it acted on
    # the world): the runner tells it once, on the loop, whether the job is admitted on
    # the loop or handed to a job queue from a handler's thread; never after the release.
    state = WorkChatState()
    runner = JobRunner(state, work_factory(ReportWork), on_update=asyncio.Queue().put)
    loop = asyncio.get_running_loop()
    told: list[tuple[str, bool]] = []
    admitted, handed = TurnId("t-admitted"), TurnId("t-handed")
    try:
        for turn in (admitted, handed):
            runner.hold_admissions(turn, asked=lambda turn=turn: told.append(
                (str(turn), asyncio.get_running_loop() is loop)))
        first = ReportJob(session_id=state.id, question="a", origin_turn_id=admitted)
        second = ReportJob(session_id=state.id, question="b", origin_turn_id=admitted)
        for job in (first, second):
            assert add_job(state, job)
            runner.submit(job)
        queued = ReportJob(session_id=state.id, question="c", origin_turn_id=handed)
        assert add_job(state, queued)
        assert await asyncio.to_thread(runner.hand_off_when_final, queued, lambda: None)
        for _ in range(50):  # (the runner's queue and the loop's callbacks)
            await asyncio.sleep(0)
        assert sorted(told) == [("t-admitted", True), ("t-handed", True)]  # once each
        runner.release_admissions(admitted)
        runner.hold_admissions(admitted)  # held again without a callback: none is told
        late = ReportJob(session_id=state.id, question="d", origin_turn_id=admitted)
        assert add_job(state, late)
        runner.submit(late)
        for _ in range(50):
            await asyncio.sleep(0)
        assert len(told) == 2
    finally:
        await runner.aclose()
