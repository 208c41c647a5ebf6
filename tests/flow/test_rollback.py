"""RollbackPoint: a discarded (speculative) turn leaves no trace, live or persisted."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from pathlib import Path
from typing import Any

import pytest

from voxflow import ConversationConfig, Flow, SQLiteFlowPersistence, listen, persist, start
from voxflow.flow import RollbackPoint
from voxflow.jobs import JobUpdate, add_job, commit_job_update
from voxflow.jobs.results import BackgroundJob
from voxflow.replies import ReplyQueue
from voxflow.testing import Acknowledger
from voxflow.turns import TurnRunner, TurnState
from voxflow.wiring import AssistantState

pytestmark = pytest.mark.unit


class Chat(Acknowledger):
    reply = "ok"


def persisted_chat(backend: SQLiteFlowPersistence) -> type[Flow[TurnState]]:
    class SavedChat(Chat):
        pass

    return persist(backend)(SavedChat)


async def turn(runner: TurnRunner, text: str) -> list[str]:
    return [e.type async for e in runner.astream_turn(text)]


async def test_a_discarded_turn_leaves_no_trace_in_memory_or_storage(tmp_path: Path) -> None:
    backend = SQLiteFlowPersistence(tmp_path / "flows.db")
    runner = TurnRunner(persisted_chat(backend)())
    await turn(runner, "one")
    state = runner.flow.state
    call = str(state.id)
    before = state.model_dump()
    stored_before = backend.load_state(call)
    assert stored_before is not None and len(stored_before["messages"]) == 2

    point = RollbackPoint.take(runner.flow)
    assert "completed" in await turn(runner, "two, spoken too early")
    assert len(state.messages) == 4 and len(state.turns) == 2
    stored = backend.load_state(call)
    assert stored is not None and len(stored["messages"]) == 4  # the turn was saved

    await point.restore()
    assert runner.flow.state is state  # the same object, put back as it was
    assert state.model_dump() == before
    stored_after = backend.load_state(call)
    assert stored_after is not None
    assert stored_after["messages"] == stored_before["messages"]
    assert set(stored_after["turns"]) == set(before["turns"])

    # and the conversation goes on from there, saved incrementally again
    await turn(runner, "two")
    assert [m.content for m in state.messages] == ["one", "ok", "two", "ok"]
    stored_next = backend.load_state(call)
    assert stored_next is not None
    assert [m["content"] for m in stored_next["messages"]] == ["one", "ok", "two", "ok"]


async def test_frozen_history_items_are_shared_and_mutable_records_copied() -> None:
    runner = TurnRunner(Chat())
    await turn(runner, "hello")
    state = runner.flow.state
    first_message = state.messages[0]
    [record] = state.turns.values()
    point = RollbackPoint.take(runner.flow)
    record.status = "interrupted"  # an in-place change after the point...
    await point.restore()
    assert state.messages[0] is first_message  # frozen: shared, never copied
    [restored] = state.turns.values()
    assert restored.status == "completed"  # ...is undone


async def test_dict_states_roll_back_in_place() -> None:
    class Counter(Flow[dict[str, Any]]):
        @start()
        def bump(self) -> int:
            self.state["n"] = self.state.get("n", 0) + 1
            self.state.setdefault("log", []).append(self.state["n"])
            return int(self.state["n"])

    flow = Counter()
    await flow.kickoff_async()
    state = flow.state
    point = RollbackPoint.take(flow)
    await flow.kickoff_async()
    assert state["log"] == [1, 2]
    await point.restore()
    assert flow.state is state and state["n"] == 1 and state["log"] == [1]


async def test_a_point_restores_once_and_checks_its_input() -> None:
    flow = Chat()
    point = RollbackPoint.take(flow)
    await point.restore()
    assert point.used
    with pytest.raises(RuntimeError, match="restores once"):
        await point.restore()
    with pytest.raises(TypeError, match="flow must be a Flow"):
        RollbackPoint.take(object())  # type: ignore[arg-type]


class SlowSaves(SQLiteFlowPersistence):
    """SQLite whose saves wait for ``release`` once ``armed``: a turn's save in flight."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.armed = False
        self.saving = threading.Event()
        self.release = threading.Event()
        self.landed = threading.Event()  # the held save was written

    def _hold(self) -> bool:
        if not self.armed:
            return False
        self.armed = False
        self.saving.set()
        self.release.wait(10)
        return True

    def save_state_changes(self, *args: Any, **kwargs: Any) -> Any:
        held = self._hold()
        try:
            return super().save_state_changes(*args, **kwargs)
        finally:
            if held:
                self.landed.set()

    def save_full_state(self, *args: Any, **kwargs: Any) -> Any:
        held = self._hold()
        try:
            return super().save_full_state(*args, **kwargs)
        finally:
            if held:
                self.landed.set()


async def test_a_save_still_running_for_the_undone_turn_cannot_overwrite_the_rollback(
    tmp_path: Path,
) -> None:
    # The call's first turn is the speculative one, so its save is a full one (a delta
    # would be refused by the store's version check once the rollback saved first).
    backend = SlowSaves(tmp_path / "flows.db")
    runner = TurnRunner(persisted_chat(backend)())
    state = runner.flow.state
    call = str(state.id)
    point = RollbackPoint.take(runner.flow)
    backend.armed = True  # the next save (the speculative turn's) hangs in its thread

    async def speculative() -> None:
        async for _ in runner.astream_turn("two, spoken too early"):
            pass

    task = asyncio.create_task(speculative())
    await asyncio.to_thread(backend.saving.wait, 10)
    task.cancel()  # the turn is discarded while its save is still being written
    with contextlib.suppress(asyncio.CancelledError):
        await task
    restore = asyncio.create_task(point.restore())
    await asyncio.sleep(0.05)
    backend.release.set()  # the stale save lands now...
    await restore  # ...and the rollback's own save after it
    await asyncio.to_thread(backend.landed.wait, 10)
    stored = backend.load_state(call)
    assert stored is not None
    assert stored["messages"] == [] and stored["turns"] == {}
    assert state.messages == [] and state.turns == {}


async def test_a_rollback_keeps_the_work_of_others(tmp_path: Path) -> None:
    # (issue 30, item 2) A speculative turn waits for its verdict without the state
    # lock, so a job's result can be committed and queued for announcement meanwhile.
    # Undoing the turn must not undo that: the job's updates, its queued announcement
    # and the floor stay as they are live, in memory and in storage; a job the undone
    # turn itself registered (never started) goes with it.
    backend = SQLiteFlowPersistence(tmp_path / "flows.db")

    @persist(backend)
    @ConversationConfig(system_prompt="")
    class Shop(Flow[AssistantState]):
        @listen("converse")
        def answer(self) -> str:
            return "ok"

    runner = TurnRunner(Shop())
    replies = ReplyQueue(runner)
    await turn(runner, "check my order")
    state = runner.flow.state
    [asked] = state.turns
    lookup = BackgroundJob(session_id=state.id, origin_turn_id=asked, kind="lookup")
    assert add_job(state, lookup)

    def update(seq: int, kind: str, **fields: Any) -> JobUpdate:
        return JobUpdate(session_id=state.id, job_id=lookup.job_id, revision=1, attempt=1,
                         seq=seq, kind=kind, **fields)

    assert commit_job_update(state, update(1, "started"))
    point = RollbackPoint.take(runner.flow)
    await turn(runner, "and the weather, spoken too early")  # the work to undo
    own = BackgroundJob(session_id=state.id, origin_turn_id=asked, kind="weather")
    assert add_job(state, own)
    # meanwhile, the lookup returns: its result is committed and queued
    assert commit_job_update(state, update(2, "stage_started", stage="run"))
    assert commit_job_update(state, update(3, "stage_completed", stage="run",
                                           outputs={"announcement": "It ships today."}))
    assert commit_job_update(state, update(4, "completed"))
    delivery = replies.enqueue(state.jobs[lookup.job_id])
    assert delivery is not None
    sequence = state.job_sequence

    await point.restore()
    assert runner.flow.state is state and len(state.turns) == 1  # the turn is undone
    assert set(state.jobs) == {lookup.job_id}  # its own job with it
    kept = state.jobs[lookup.job_id]
    assert (kept.status, kept.announcement, kept.last_update_seq) == (
        "completed", "It ships today.", 4)
    assert state.job_sequence == sequence  # never back
    assert list(state.deliveries) == [delivery]
    assert replies.claim() is not None  # the queue still knows it
    stored = backend.load_state(str(state.id))
    assert stored is not None and len(stored["turns"]) == 1
    assert set(stored["jobs"]) == {lookup.job_id}
    assert stored["jobs"][lookup.job_id]["status"] == "completed"
    assert list(stored["deliveries"]) == [delivery]
