"""Dicts of records (turns, replies, deliveries, jobs) are stored one row per key.

On SQLite and PostgreSQL (``make_store``), read back through a second backend or a
connection of its own (``tests.stores``); real TurnRunner turns; a real subprocess for
the crash in the middle of a save. Every
round trip compares what ``load_state`` returns with ``state.model_dump(mode="json")``
taken right after the save, so "exactly the saved state" includes each dict's order.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import pickle
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, ClassVar

import pytest
from pydantic import BaseModel, ConfigDict, Field

from tests.stores import PlainStore, reopen, rows, statements, where
from voxflow import Flow, SQLiteFlowPersistence, persist
from voxflow.conversation._record_marks import HOT_RECORDS, RecordDict
from voxflow.conversation.persistence import SavedLists, prepare_state_save
from voxflow.errors import PersistenceConflictError
from voxflow.flow._row_store import RowStore
from voxflow.flow.persistence import RECORDS_KEY, RecordChanges, StateChanges
from voxflow.ids import SessionId
from voxflow.jobs import JobRecord, JobState, JobUpdate, add_job, commit_job_update
from voxflow.replies import ReplyQueue, ReplyQueueState
from voxflow.testing import Acknowledger
from voxflow.turns import TurnLedger, TurnRunner, TurnState

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]

MANY = 24  # more turns than the records compared field by field on every save (8)


Chat = Acknowledger  # every turn: "Request received."


def persisted(backend: RowStore) -> Flow[TurnState]:
    @persist(backend)
    class Saved(Chat):
        pass

    return Saved(suppress_flow_events=True)


async def turns(runner: TurnRunner, count: int, prefix: str = "m") -> None:
    for i in range(count):
        async for event in runner.astream_turn(f"{prefix}{i}"):
            runner.accept_event(event)


def save_now(flow: Flow[TurnState], backend: RowStore) -> dict[str, Any]:
    """Save through the runtime's hook (as ``@persist`` does); return the expected dump."""
    flow.conversation.prepare_state_save(backend, "check")()
    return flow.state.model_dump(mode="json")


def assert_round_trip(flow: Flow[TurnState], backend: RowStore) -> None:
    expected = save_now(flow, backend)
    reader = reopen(backend)  # a second connection: what is stored
    try:
        stored = reader.load_state(flow.state.id)
    finally:
        reader.close()
    assert stored == expected
    assert stored is not None
    for field in ("turns", "replies"):
        assert list(stored[field]) == list(expected[field])  # dict order kept


def record_writes(seen: list[str]) -> int:
    return sum(1 for s in seen if s.startswith(("INSERT INTO state_records", "DELETE FROM state")))


# -- the backend ----------------------------------------------------------------------


def test_changes_upsert_delete_and_keep_each_dict_in_order(make_store: Any) -> None:
    backend = make_store("r")
    state = {"id": "s", "turns": {"a": {"n": 1}, "b": {"n": 2}, "c": {"n": 3}}, "x": 0}
    v1 = backend.save_full_state("s", "m", state)
    [(snapshot,)] = rows(backend, "SELECT state_json FROM flow_states")
    assert '"n"' not in snapshot and RECORDS_KEY in snapshot  # records are rows, not JSON
    change = RecordChanges(
        upserts=[("b", {"n": 20}), ("d", {"n": 4})], deletes=["a"], base_count=3, count=3
    )
    v2 = backend.save_state_changes(
        "s", "m", StateChanges({"id": "s", "x": 1}, records={"turns": change}, base_version=v1)
    )
    assert v2 == v1 + 1
    stored = backend.load_state("s")
    assert stored == {"id": "s", "x": 1, "turns": {"b": {"n": 20}, "c": {"n": 3}, "d": {"n": 4}}}
    assert list(stored["turns"]) == ["b", "c", "d"]
    readd = RecordChanges(upserts=[("a", {"n": 5})], deletes=["c"], base_count=3, count=3)
    assert backend.save_state_changes(
        "s", "m", StateChanges({"id": "s"}, records={"turns": readd}, base_version=v2)
    )
    assert list(backend.load_state("s")["turns"]) == ["b", "d", "a"]  # type: ignore[index]
    # A stale base (another writer saved since) is a typed conflict and writes nothing.
    before = backend.load_state("s")
    stale = RecordChanges(upserts=[("z", {})], base_count=3, count=4)
    with pytest.raises(PersistenceConflictError) as refused:
        backend.save_state_changes(
            "s", "m", StateChanges({"id": "s"}, records={"turns": stale}, base_version=v1)
        )
    assert (refused.value.session_id, refused.value.expected, refused.value.stored) == ("s", 1, 3)
    wrong_count = RecordChanges(upserts=[("z", {})], base_count=2, count=3)
    assert (
        backend.save_state_changes(
            "s", "m", StateChanges({"id": "s"}, records={"turns": wrong_count})
        )
        is None
    )
    assert backend.load_state("s") == before
    assert [v for v, _, _ in backend.history("s")] == [1, 2, 3]


def test_changes_are_validated(make_store: Any) -> None:
    backend = make_store("v")
    with pytest.raises(TypeError, match="StateChanges"):
        backend.save_state_changes("s", "m", {"id": "s"})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="counts"):
        backend.save_state_changes(
            "s", "m", StateChanges({}, records={"turns": RecordChanges(base_count=-1)})
        )
    with pytest.raises(TypeError, match="keys"):
        bad = RecordChanges(upserts=[(1, {})])  # type: ignore[list-item]
        backend.save_state_changes("s", "m", StateChanges({}, records={"turns": bad}))
    with pytest.raises(ValueError, match="base_version"):
        backend.save_state_changes("s", "m", StateChanges({}, base_version=-2))
    with pytest.raises(ValueError, match="flow_uuid"):
        backend.save_state_changes("", "m", StateChanges({}))
    if isinstance(backend, SQLiteFlowPersistence):
        assert not backend.path.exists()  # nothing was written: not even the file
    assert backend.load_state("s") is None and backend.revision("s") == 0


def test_a_database_from_before_record_rows_opens_and_migrates(tmp_path: Path) -> None:
    # SQLite only: databases from before record rows exist only as SQLite files (the
    # PostgreSQL backend has stored records as rows from its first version).
    path = tmp_path / "old.db"
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.executescript(
            """
            CREATE TABLE flow_states (flow_uuid TEXT PRIMARY KEY, method_name TEXT NOT NULL,
                saved_at TEXT NOT NULL, version INTEGER NOT NULL, state_json TEXT NOT NULL);
            INSERT INTO flow_states VALUES ('s', 'm', 'then', 4,
                '{"id": "s", "turns": {"t1": {"n": 1}}, "replies": {}}');
            """
        )
        conn.commit()
    backend = SQLiteFlowPersistence(path)
    old = {"id": "s", "turns": {"t1": {"n": 1}}, "replies": {}}
    assert backend.load_state("s") == old  # inline dicts still load
    tables = {r[0] for r in backend._conn.execute("SELECT name FROM sqlite_master")}  # type: ignore[union-attr]
    assert {"state_records", "conversation_items", "flow_state_history"} <= tables
    # A delta that assumes record rows is refused: the inline dicts are not rows yet.
    change = RecordChanges(upserts=[("t2", {"n": 2})], base_count=1, count=2)
    assert (
        backend.save_state_changes(
            "s", "m", StateChanges({"id": "s"}, records={"turns": change}, base_version=4)
        )
        is None
    )
    new = {"id": "s", "turns": {"t1": {"n": 1}, "t2": {"n": 2}}, "replies": {}}
    assert backend.save_full_state("s", "m", new) == 5
    assert backend.load_state("s") == new
    assert backend.history("s")[0] == (4, "m", old)


# -- tracked turns, saved incrementally -------------------------------------------------


async def test_tracked_turns_write_only_their_records_and_round_trip(make_store: Any) -> None:
    backend = make_store("t")
    flow = persisted(backend)
    runner = TurnRunner(flow)
    writes: dict[int, int] = {}
    for count in (5, 30):
        await turns(runner, count - len(flow.state.turns), prefix=f"r{count}-")
        save_now(flow, backend)
        with statements(backend) as seen:
            await turns(runner, 1, prefix=f"probe{count}-")
        writes[count] = record_writes(seen)
        assert_round_trip(flow, backend)
    # The same few rows per turn at turn 6 and turn 31: the new turn and reply, and the
    # records the turn changed after a save; never the older ones.
    assert writes[5] == writes[30]
    assert 2 <= writes[30] <= 12
    [(size,)] = rows(backend, "SELECT length(state_json) FROM flow_states")
    assert size < 1500  # the snapshot row holds no records


async def test_older_records_changed_in_place_are_saved(make_store: Any) -> None:
    backend = make_store("old")
    flow = persisted(backend)
    runner = TurnRunner(flow)
    await turns(runner, MANY)
    save_now(flow, backend)
    first = next(iter(flow.state.replies.values()))
    # What the ledger does to an old reply: the fence, a late accept; and a route fix.
    assert runner.interrupt(
        session_id=first.session_id,
        turn_id=first.turn_id,
        input_revision=first.input_revision,
        delivery_id=first.delivery_id,
    )
    flow.state.turns[first.turn_id].route = "rerouted"
    flow.state.turns[first.turn_id].job_ids = ["job-1"]  # a container, assigned
    assert_round_trip(flow, backend)
    stored = backend.load_state(flow.state.id)
    assert stored is not None and stored["replies"][first.delivery_id]["interrupted"] is True
    # In place inside a container of one of the newest records: compared field by field.
    latest = list(flow.state.replies.values())[-1]
    latest.segments.append(" (heard)")
    assert_round_trip(flow, backend)
    # Nothing changed: a save writes no record row.
    with statements(backend) as seen:
        save_now(flow, backend)
    assert record_writes(seen) == 0


async def test_deletions_pruning_and_reordering_are_saved(make_store: Any) -> None:
    backend = make_store("del")
    flow = persisted(backend)
    runner = TurnRunner(flow)
    await turns(runner, MANY)
    save_now(flow, backend)
    state = flow.state
    for key in list(state.turns)[:5]:  # prune the oldest turns
        del state.turns[key]
    del state.replies[list(state.replies)[10]]  # and one reply in the middle
    assert_round_trip(flow, backend)
    await turns(runner, 3, prefix="after-")  # new keys go after the survivors
    assert_round_trip(flow, backend)
    state.turns = dict(reversed(state.turns.items()))  # reordered: the field is rewritten
    assert_round_trip(flow, backend)
    state.replies.clear()
    assert_round_trip(flow, backend)
    assert rows(backend, "SELECT COUNT(*) FROM state_records WHERE field = 'replies'") == [(0,)]


async def test_restoring_an_older_snapshot_is_saved_exactly(
    tmp_path: Path, make_store: Any
) -> None:
    backend = make_store("spec")
    flow = persisted(backend)
    runner = TurnRunner(flow)
    await turns(runner, MANY)
    save_now(flow, backend)
    snapshot = runner.snapshot()
    state = flow.state
    older = {k: r.model_copy(deep=True) for k, r in state.replies.items()}
    await turns(runner, 4, prefix="speculative-")
    # The ledger's restore: the dicts shrink back to the snapshot (new dict objects).
    runner.restore(snapshot)
    assert len(state.turns) == MANY
    assert_round_trip(flow, backend)
    # Older record objects put back into the same dict (a speculative reply undone)…
    for key in list(state.replies)[:3]:
        state.replies[key] = older[key]
        older[key].text = "what was said before"  # …then changed in place, while old
    assert_round_trip(flow, backend)
    older[next(iter(state.replies))].status = "failed"  # the put-back object is watched now
    assert_round_trip(flow, backend)


async def test_a_rollback_point_restores_the_stored_state_too(
    tmp_path: Path, make_store: Any
) -> None:
    from voxflow.flow.rollback import RollbackPoint

    backend = make_store("rollback")
    flow = persisted(backend)
    runner = TurnRunner(flow)
    await turns(runner, MANY)
    expected = save_now(flow, backend)
    point = RollbackPoint.take(flow)  # deep copies: the copies are not watched
    await turns(runner, 2, prefix="discarded-")
    next(iter(flow.state.replies.values())).text = "changed by the discarded turn"
    await point.restore()  # saves at once
    assert backend.load_state(flow.state.id) == expected
    await turns(runner, 2, prefix="kept-")
    old = next(iter(flow.state.replies.values()))  # a restored copy, old and cold
    old.text = "changed after the rollback"
    assert_round_trip(flow, backend)


async def test_another_writers_save_makes_the_next_save_a_conflict(
    tmp_path: Path, make_store: Any
) -> None:
    backend = make_store("two")
    other = make_store("two")  # e.g. another process on the same database
    flow = persisted(backend)
    runner = TurnRunner(flow)
    await turns(runner, 6)
    expected = save_now(flow, backend)
    # The other writer stores the same counts with other content: only the version
    # tells the two apart.
    forged = copy.deepcopy(expected)
    first = next(iter(forged["replies"]))
    forged["replies"][first]["text"] = "forged"
    other.save_state(flow.state.id, "other", forged)
    # The flow is behind now: its next save is refused, and the other writer's state stays.
    with pytest.raises(PersistenceConflictError, match="revision"):
        await turns(runner, 1, prefix="next-")
    stored = other.load_state(flow.state.id)
    assert stored is not None and stored["replies"][first]["text"] == "forged"
    other.close()


@pytest.mark.parametrize("point", ["INSERT INTO state_records", "INSERT INTO flow_states "],
                         ids=["before-its-records", "after-its-rows"])
def test_a_crash_inside_a_save_leaves_the_previous_state(make_store: Any, point: str) -> None:
    # Killed as the save starts on its records, or once its item and record rows are
    # written and only the snapshot row is left: nothing of that save may be loaded.
    store = make_store("crash")
    store.check_writable()  # PostgreSQL: creates the schema the subprocess writes to
    script = textwrap.dedent(
        f"""
        import json, sys
        from tests.stores import crash_at, open_store
        from voxflow import persist
        from voxflow.testing import Acknowledger
        from voxflow.turns import TurnRunner

        backend = open_store({where(store)!r})

        @persist(backend)
        class Chat(Acknowledger):
            pass

        flow = Chat(suppress_flow_events=True)
        runner = TurnRunner(flow)

        def turn(message):
            for event in runner.stream_turn(message):
                runner.accept_event(event)

        for i in range(20):
            turn(f"m{{i}}")
        flow.conversation.prepare_state_save(backend, "check")()
        print(json.dumps(flow.state.model_dump(mode="json")), flush=True)
        crash_at(backend, {point!r})  # the next save dies mid-way
        turn("lost")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True,
        timeout=120, check=False, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 17, done.stderr
    before = json.loads(done.stdout)
    stored = reopen(store).load_state(before["id"])
    assert stored == before
    assert len(stored["turns"]) == 20 and stored["messages"][-1]["content"] == "Request received."


def test_a_plain_backend_still_gets_full_turn_state_snapshots() -> None:
    memory = PlainStore()

    @persist(memory)
    class Saved(Chat):
        pass

    flow = Saved(suppress_flow_events=True)
    runner = TurnRunner(flow)
    for i in range(3):
        for event in runner.stream_turn(f"m{i}"):
            runner.accept_event(event)
    assert len(memory.saved[-1]["turns"]) == 3
    assert len(memory.saved[-1]["replies"]) == 3


# -- jobs and the reply queue -------------------------------------------------------------


class Job(JobRecord):
    output_fields: ClassVar[frozenset[str]] = frozenset({"answer"})
    answer: str = ""


class WorkState(ReplyQueueState, JobState[Job]):
    pass


def test_jobs_and_deliveries_changed_by_their_rules_round_trip(
    tmp_path: Path, make_store: Any
) -> None:
    backend = make_store("jobs")
    state = WorkState()
    ledger = TurnLedger(lambda: state)
    queue = ReplyQueue(ledger)
    active = ledger.begin()
    ledger.finish(active, text="ok")
    ledger.end(active)
    saved = SavedLists()

    def check() -> None:
        prepare_state_save(state, state.id, backend, "check", saved)()
        assert backend.load_state(state.id) == state.model_dump(mode="json")

    jobs = []
    for i in range(MANY):
        job = Job(session_id=state.id, origin_turn_id=active.turn.turn_id, kind=f"k{i}")
        assert add_job(state, job)
        jobs.append(job)
        check()

    def update(job: Job, seq: int, kind: str, **extra: Any) -> None:
        assert commit_job_update(
            state,
            JobUpdate(
                session_id=SessionId(state.id),
                job_id=job.job_id,
                revision=1,
                attempt=1,
                seq=seq,
                kind=kind,  # type: ignore[arg-type]
                **extra,
            ),
        )

    oldest = jobs[0]  # long-running: its updates arrive while newer jobs pile up
    update(oldest, 1, "started")
    update(oldest, 2, "stage_started", stage="work")
    check()
    update(oldest, 3, "stage_completed", stage="work", outputs={"answer": "done"})
    update(oldest, 4, "completed")
    check()
    assert queue.enqueue(oldest) is not None
    check()
    delivery = queue.claim()
    assert delivery is not None
    for event in queue.prepare(delivery.delivery_id, lambda found: found[0].answer):
        if queue.accepts_output(delivery.delivery_id):
            ledger.accept_event(event)
    check()
    assert queue.settle(delivery.delivery_id, "completed")
    check()
    stored = backend.load_state(state.id)
    assert stored is not None
    assert stored["jobs"][oldest.job_id]["answer"] == "done"
    assert stored["deliveries"][delivery.delivery_id]["status"] == "completed"
    assert list(stored["jobs"]) == [j.job_id for j in jobs]


class Loose(BaseModel):
    """A record type that cannot be watched (extra fields): compared in full each save."""

    model_config = ConfigDict(extra="allow")

    notes: list[str] = Field(default_factory=list)


class LooseState(TurnState):
    jobs: dict[str, Loose] = Field(default_factory=dict)


def test_records_that_cannot_be_watched_are_compared_in_full(
    tmp_path: Path, make_store: Any
) -> None:
    backend = make_store("loose")
    state = LooseState()
    saved = SavedLists()
    for i in range(MANY):
        state.jobs[f"j{i}"] = Loose(notes=[f"n{i}"])
    prepare_state_save(state, state.id, backend, "check", saved)()
    state.jobs["j0"].notes.append("in place, old record")  # no assignment at all
    state.jobs["j1"].extra_field = 1  # type: ignore[attr-defined]
    prepare_state_save(state, state.id, backend, "check", saved)()
    assert backend.load_state(state.id) == state.model_dump(mode="json")


async def test_saved_records_keep_their_pydantic_behaviour(tmp_path: Path, make_store: Any) -> None:
    backend = make_store("watch")
    flow = persisted(backend)
    runner = TurnRunner(flow)
    await turns(runner, 2)
    save_now(flow, backend)
    reply = next(iter(flow.state.replies.values()))
    fields = set(reply.model_fields_set)
    assert "status" in fields and reply.model_dump(exclude_unset=True)
    twin = reply.model_copy(update={"text": "copy"})
    assert type(twin.__pydantic_fields_set__) is set  # copies are not watched
    assert copy.deepcopy(reply) == reply
    assert pickle.loads(pickle.dumps(reply)) == reply
    assert type(pickle.loads(pickle.dumps(reply)).__pydantic_fields_set__) is set
    assert reply == type(reply).model_validate(reply.model_dump())
    reply.kind = "progress"
    assert reply.model_fields_set == fields | {"kind"}
    assert_round_trip(flow, backend)


def test_watching_is_scoped_to_the_saver(tmp_path: Path, make_store: Any) -> None:
    # Two backends saving the same state (e.g. a method-level @persist elsewhere): each
    # sees every change.
    first = make_store("a")
    second = make_store("b")
    state = TurnState()
    ledger = TurnLedger(lambda: state)
    saved = SavedLists()
    for _ in range(MANY):
        active = ledger.begin()
        ledger.finish(active, text="hi")
        ledger.end(active)
    for backend in (first, second):
        prepare_state_save(state, state.id, backend, "m", saved)()
    old = next(iter(state.replies.values()))
    old.text = "changed once"
    for backend in (first, second):
        prepare_state_save(state, state.id, backend, "m", saved)()
        assert backend.load_state(state.id) == state.model_dump(mode="json")


# -- RecordDict: changes found from the dict's own logs -------------------------------


async def test_a_save_finds_record_changes_without_scanning_old_records(
    make_store: Any,
) -> None:
    backend = make_store("tracked")
    flow = persisted(backend)
    runner = TurnRunner(flow)
    await turns(runner, 40)
    state = flow.state
    assert isinstance(state.turns, RecordDict) and isinstance(state.replies, RecordDict)
    [marks] = flow.conversation.saved_lists.values()
    for field in ("turns", "replies"):
        mark = marks.records[field]
        # The mark holds the hot records only, not one entry per record of the session.
        assert mark.tracked is getattr(state, field) and mark.size == 40
        assert len(mark.keys) == len(mark.values) == HOT_RECORDS
    with statements(backend) as sql:
        await turns(runner, 1, prefix="next-")
    upserts = [s for s in sql if "INTO state_records" in s]
    assert upserts and all("next-" not in s for s in upserts)  # rows, not the whole dict
    assert_round_trip(flow, backend)


async def test_record_dict_edits_of_every_kind_round_trip(tmp_path: Path, make_store: Any) -> None:
    backend = make_store("edits")
    flow = persisted(backend)
    runner = TurnRunner(flow)
    await turns(runner, 12)
    state = flow.state
    first, second, *_ = list(state.turns)
    edits = [
        lambda: state.turns.pop(first),  # a delete: the field is rewritten
        lambda: state.turns.__setitem__(second, state.turns[second].model_copy()),  # replaced
        lambda: setattr(state.turns[second], "route", "moved"),  # an assignment (old record)
        lambda: setattr(state.replies[next(iter(state.replies))], "text", "edited"),
        lambda: state.replies[next(reversed(state.replies))].segments.append("x"),  # hot
        lambda: state.turns.update({second: state.turns[second].model_copy(), **{}}),
        lambda: state.turns.setdefault(second, state.turns[second]),
        lambda: state.replies.clear(),
        lambda: setattr(state, "turns", dict(state.turns)),  # a plain dict assigned
    ]
    for edit in edits:
        edit()
        await turns(runner, 1, prefix=f"after-{len(state.turns)}-")
        assert_round_trip(flow, backend)


def test_record_dict_copies_are_fresh_and_plain_to_json() -> None:
    records = RecordDict(a=1)
    records["b"] = 2
    records["a"] = 3
    assert records.added == ["b"] and records.replaced == ["a"]
    for copied in (copy.copy(records), copy.deepcopy(records), pickle.loads(pickle.dumps(records))):
        assert type(copied) is RecordDict and copied == {"a": 3, "b": 2}
        assert copied.added == [] and copied.replaced == [] and copied.reshaped == 0
    del records["a"]
    records |= {"c": 4}
    assert records.reshaped == 1 and records.added == ["b", "c"]
    assert json.dumps(records) == '{"b": 2, "c": 4}'
