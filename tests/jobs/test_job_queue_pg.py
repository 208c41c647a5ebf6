"""Background jobs on the PostgreSQL job queue (Procrastinate), run by job-worker
subprocesses (``voxflow jobs worker``), their updates read from the session's durable
inbox and announced once. Real PostgreSQL (a fresh schema per test); skipped with the
reason where none answers."""

from __future__ import annotations

import asyncio
import functools
import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import PG_URL
from tests.jobs.queue_kit import (
    FLOW,
    KIND,
    STALLED_AFTER,
    all_rows,
    owner_state,
    start_call_worker,
    start_job_worker,
    stop,
    wait_for,
    wait_for_marker,
    wait_for_update,
    write_completed_run,
)
from voxflow.cli import main as cli_main
from voxflow.errors import JobPayloadError, PersistenceUnavailableError
from voxflow.jobs import (
    BackgroundJob,
    InboxReader,
    JobUpdate,
    PostgresJobQueue,
    QueuedJob,
    add_job,
    apply_inbox,
)
from voxflow.jobs.inbox import _entry
from voxflow.jobs.queue import TASK_NAME
from voxflow.wiring import AssistantState, AssistantWiring

pytestmark = pytest.mark.unit


async def test_a_job_started_in_a_call_runs_in_a_job_worker_process_and_is_announced_once(
    schema: str, queue: PostgresJobQueue
) -> None:
    from voxflow.loader import load_flow_class

    Travel = load_flow_class(FLOW)
    worker = start_job_worker(schema)
    try:
        flow = Travel()
        async with AssistantWiring(flow, job_queue=queue) as wiring:
            reply = await wiring.text_turn("is my flight on time?")
            assert reply == "I'm checking your flight."
            (job,) = flow.state.jobs.values()
            assert job.status == "queued"  # queued, not run in this process
            assert wiring.jobs is not None and wiring.jobs._workers == {}
            assert await wiring.wait_for_jobs(60), "the job worker never finished the job"
            said = await wiring.announce_ready()
            assert said == ["Flight BA 117 is on time (attempt 1)."]
            assert await wiring.announce_ready() == []  # once
            # the inbox rows read again (a second reader, a restart) change nothing
            rows = await all_rows(queue.inbox, flow.state.id)
            assert [r.update.kind for r in rows] == [
                "started", "stage_started", "stage_completed", "completed"]
            assert await queue.inbox.pending(flow.state.id) == []  # acknowledged
            before = flow.state.job_sequence
            async with wiring.state_lock:
                assert apply_inbox(flow.state, rows) == [False] * 4
            assert flow.state.job_sequence == before
            assert await wiring.announce_ready() == []
    finally:
        code, err = stop(worker)
    assert code == 0, err


async def test_a_queued_job_survives_the_death_of_the_call_worker_that_started_it(
    schema: str, queue: PostgresJobQueue
) -> None:
    from voxflow import persist
    from voxflow.flow.postgres import PostgresFlowPersistence
    from voxflow.loader import load_flow_class

    call_worker = start_call_worker(schema)
    try:
        assert call_worker.stdout is not None
        line = await asyncio.wait_for(asyncio.to_thread(call_worker.stdout.readline), 120)
        session_id = line.decode().strip()
        assert session_id, call_worker.stderr.read().decode() if call_worker.stderr else ""
    finally:
        call_worker.send_signal(signal.SIGKILL)
        call_worker.wait(10)
    worker = start_job_worker(schema)  # only now: the job ran nowhere before the death
    store = PostgresFlowPersistence(PG_URL, schema=schema)
    try:
        saved = persist(store)(type("SavedTravel", (load_flow_class(FLOW),), {}))
        flow = saved()
        assert await flow.aload_session(session_id)
        (job,) = flow.state.jobs.values()
        assert job.status == "queued"
        save = functools.partial(flow.asave_state, "handle_turn")
        async with AssistantWiring(flow, job_queue=queue, save_jobs=save) as call:
            assert call.replies is not None  # (the dead worker's floor: taken over)
            assert await call.wait_for_jobs(60), "the job worker never finished the job"
            assert await call.announce_ready() == ["Flight BA 117 is on time (attempt 1)."]
            assert await call.announce_ready() == []
            async with call.state_lock:
                await save()
        # the session as stored: the job completed, its announcement heard once
        again = saved()
        assert await again.aload_session(session_id)
        assert again.state.jobs[job.job_id].status == "completed"
        heard = [m for m in again.state.messages if m.metadata.get("announcement")]
        assert [m.content for m in heard] == ["Flight BA 117 is on time (attempt 1)."]
        assert await queue.inbox.pending(session_id) == []
    finally:
        code, err = stop(worker)
        store.close()
    assert code == 0, err


async def test_a_job_worker_killed_mid_job_is_rerun_as_the_next_attempt_and_finishes(
    schema: str, queue: PostgresJobQueue, tmp_path: Path
) -> None:
    marker = str(tmp_path / "started")
    state, job = owner_state(flight="LH 400", seconds=2.0, marker=marker)
    queue_id = await queue.enqueue_async(job)
    first = start_job_worker(schema)
    second: subprocess.Popen[bytes] | None = None
    try:
        await wait_for_marker(marker, 1, 60, "attempt 1 to start")
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        second = start_job_worker(schema)
        await wait_for_marker(marker, 2, 60, "attempt 2 to start on the other worker")

        # the dead attempt's late update is refused by the queue's fence ...
        late = JobUpdate(session_id=state.id, job_id=job.job_id, revision=1, attempt=1,
                         seq=3, kind="stage_completed", stage="run",
                         outputs={"announcement": "a dead worker's result"})
        assert await queue.inbox.write(late, queue_job=(queue_id, 1)) is False

        await wait_for_update(queue.inbox, state.id, "completed", 60, "attempt 2 to complete")
    finally:
        if second is not None:
            code, err = stop(second)
            assert code == 0, err
        stop(first)
    rows = await all_rows(queue.inbox, state.id)
    assert {r.attempt for r in rows} == {1, 2}
    assert all(r.update is not None for r in rows)
    assert [r.update.kind for r in rows if r.attempt == 1] == ["started", "stage_started"]
    applied = apply_inbox(state, rows)
    assert all(applied)
    final = state.jobs[job.job_id]
    assert (final.status, final.attempt) == ("completed", 2)
    assert final.announcement == "Flight LH 400 is on time (attempt 2)."
    # ... and, should the dead attempt's rows be read again, by commit_job_update
    dead = [r for r in rows if r.attempt == 1]
    assert apply_inbox(state, dead) == [False, False]
    forged = _entry((10**9, state.id, job.job_id, 1, 1, 3,
                     {"type": "update", "update": late.model_dump(mode="json")}))
    assert apply_inbox(state, [forged]) == [False]
    assert state.jobs[job.job_id].announcement == "Flight LH 400 is on time (attempt 2)."


async def test_a_paused_job_worker_resumed_after_its_job_moved_on_lands_nothing(
    schema: str, queue: PostgresJobQueue, tmp_path: Path
) -> None:
    """A SIGSTOPped ("zombie") job worker: its job re-runs elsewhere as attempt 2; woken
    while attempt 2 runs, its attempt-1 result is refused by the inbox, and the queue
    job is not finished by it (Procrastinate's finish_job alone would end attempt 2 and
    bump the attempt counter, fencing the live attempt out: the job was lost)."""
    marker = str(tmp_path / "started")
    seconds = STALLED_AFTER + 2.0  # attempt 1 is stopped longer than that: it goes on
    state, job = owner_state(flight="SK 5", seconds=seconds, marker=marker)
    await queue.enqueue_async(job)
    zombie = start_job_worker(schema)
    other: subprocess.Popen[bytes] | None = None
    try:
        await wait_for_marker(marker, 1, 60, "attempt 1 to start")
        zombie.send_signal(signal.SIGSTOP)
        stopped = time.monotonic()
        other = start_job_worker(schema)
        await wait_for_marker(marker, 2, 90, "attempt 2 to start on the other worker")
        await asyncio.sleep(max(0.0, seconds - (time.monotonic() - stopped)))
        zombie.send_signal(signal.SIGCONT)  # attempt 2 still runs

        await wait_for_update(queue.inbox, state.id, "completed", 90,
                              "attempt 2 to complete on the other worker")
        await asyncio.sleep(1.0)
    finally:
        zombie.send_signal(signal.SIGCONT)
        _, err = stop(zombie)
        if other is not None:
            stop(other)
    # woken, it cancels its run of attempt 1 (its poll finds the queue runs attempt 2),
    # or the run, ended meanwhile, finds its report refused: either way nothing lands
    assert ("attempt 1 was re-queued meanwhile" in err
            or "attempt 1 was queued again by another worker's sweep" in err), err
    assert "attempt 1 not finished: the queue runs a later attempt" in err, err
    rows = await all_rows(queue.inbox, state.id)
    assert [(r.attempt, r.update.kind) for r in rows if r.update is not None] == [
        (1, "started"), (1, "stage_started"), (2, "started"), (2, "stage_started"),
        (2, "stage_completed"), (2, "completed")]
    assert all(apply_inbox(state, rows))
    assert state.jobs[job.job_id].announcement == "Flight SK 5 is on time (attempt 2)."


async def test_a_long_job_on_a_live_worker_is_never_rerun(
    schema: str, queue: PostgresJobQueue, tmp_path: Path
) -> None:
    marker = str(tmp_path / "started")
    state, job = owner_state(flight="AF 12", seconds=2.5 * STALLED_AFTER, marker=marker)
    await queue.enqueue_async(job)
    workers = [start_job_worker(schema), start_job_worker(schema)]  # one could steal it
    try:
        await wait_for_update(queue.inbox, state.id, "completed", 90, "the long job to complete")
    finally:
        for w in workers:
            code, err = stop(w)
            assert code == 0, err
    rows = await all_rows(queue.inbox, state.id)
    assert {r.attempt for r in rows} == {1}
    assert not await asyncio.to_thread(os.path.exists, f"{marker}-2")
    assert all(apply_inbox(state, rows))
    assert state.jobs[job.job_id].status == "completed"


async def test_sigterm_tells_a_running_job_to_stop_and_the_worker_exits(
    schema: str, queue: PostgresJobQueue, tmp_path: Path
) -> None:
    """``JobContext.stop_requested`` turns True when the job worker is asked to stop, so
    a job that waits for it lets SIGTERM end the worker (it was set only after every
    running job had finished: such a job, and its worker, never ended)."""
    marker = str(tmp_path / "started")
    state = AssistantState()
    job = BackgroundJob(session_id=state.id, kind="queue_tests.until_stopped",
                        inputs={"marker": marker})
    assert add_job(state, job)
    await queue.enqueue_async(job)
    worker = start_job_worker(schema)
    try:
        async def started() -> bool:
            return await asyncio.to_thread(os.path.exists, f"{marker}-1")

        await wait_for(started, 60, "the job to start")
    finally:
        code, err = await asyncio.to_thread(stop, worker)
    assert code == 0, err
    rows = await all_rows(queue.inbox, state.id)
    assert [r.update.kind for r in rows if r.update is not None][-1] == "completed"


async def test_a_job_a_stopping_worker_finishes_is_not_rerun_elsewhere(
    schema: str, queue: PostgresJobQueue, tmp_path: Path
) -> None:
    """SIGTERM lets the running job finish; while it does, the stopping worker's
    heartbeat goes on (Procrastinate stops it at once), so no sweep takes the job for
    stalled and runs it again on another worker."""
    marker = str(tmp_path / "started")
    state, job = owner_state(flight="IB 4", seconds=2.5 * STALLED_AFTER, marker=marker)
    await queue.enqueue_async(job)
    first = start_job_worker(schema)
    other: subprocess.Popen[bytes] | None = None
    try:
        async def started() -> bool:
            return await asyncio.to_thread(os.path.exists, f"{marker}-1")

        await wait_for(started, 60, "the job to start")
        other = start_job_worker(schema)  # would run a re-queued attempt
        first.send_signal(signal.SIGTERM)
        first.send_signal(signal.SIGTERM)  # a second one changes nothing
        code, err = await asyncio.to_thread(stop, first)  # waits for the job (30 s)
        assert code == 0, err
        assert other.poll() is None
    finally:
        stop(first)
        if other is not None:
            stop(other)
    rows = await all_rows(queue.inbox, state.id)
    assert {r.attempt for r in rows} == {1}
    assert [r.update.kind for r in rows if r.update is not None][-1] == "completed"
    assert not await asyncio.to_thread(os.path.exists, f"{marker}-2")


async def test_progress_from_a_job_worker_is_registered_once_and_announceable(
    schema: str, queue: PostgresJobQueue
) -> None:
    state = AssistantState()
    job = BackgroundJob(session_id=state.id, kind="queue_tests.with_progress")
    assert add_job(state, job)
    await queue.enqueue_async(job)
    worker = start_job_worker(schema)
    try:
        await wait_for_update(queue.inbox, state.id, "completed", 60, "the job to complete")
    finally:
        code, err = stop(worker)
    assert code == 0, err
    rows = await all_rows(queue.inbox, state.id)
    assert [r.progress for r in rows if r.update is None] == ["Still looking, one moment."]
    assert all(apply_inbox(state, rows))
    progress = [j for j in state.jobs.values() if j.kind.endswith(".progress")]
    assert len(progress) == 1 and progress[0].status == "completed"
    assert progress[0].announcement == "Still looking, one moment."
    assert progress[0].inputs == {"progress_of": job.job_id}
    assert apply_inbox(state, rows) == [False] * len(rows)  # read twice: registered once
    assert len(state.jobs) == 2


async def test_listen_notify_wakes_the_owner_long_before_its_poll(
    schema: str, queue: PostgresJobQueue
) -> None:
    state, job = owner_state(flight="KL 1")
    other, _ = owner_state(flight="KL 2")
    woke: dict[str, asyncio.Event] = {state.id: asyncio.Event(), other.id: asyncio.Event()}

    def told(session_id: str) -> Any:
        async def on_update() -> None:
            woke[session_id].set()
        return on_update

    # poll=3600: only a notification can wake a reader within the test
    readers = [InboxReader(queue.inbox, s, lock=asyncio.Lock(), on_update=told(s.id),
                           poll=3600) for s in (state, other)]
    for reader in readers:
        reader.start()
    try:
        async def offered() -> bool:  # their first reads found nothing: the offer at start
            return all(event.is_set() for event in woke.values())

        async def listening() -> bool:
            rows = await queue.inbox._execute(
                "SELECT count(*) FROM pg_stat_activity WHERE query = %s",
                (f'LISTEN "{queue.inbox.channel}"',))
            return bool(rows[0][0] >= 1)

        await wait_for(offered, 30, "the readers' first reads")
        await wait_for(listening, 30, "the LISTEN")
        await asyncio.sleep(0.5)
        assert await listening()
        rows = await queue.inbox._execute(
            "SELECT count(*) FROM pg_stat_activity WHERE query = %s",
            (f'LISTEN "{queue.inbox.channel}"',))
        assert rows[0][0] == 1  # one connection listens for every session
        for event in woke.values():
            event.clear()
        assert state.jobs[job.job_id].status == "queued"
        update = JobUpdate(session_id=state.id, job_id=job.job_id, revision=1, attempt=1,
                           seq=1, kind="started")
        assert await queue.inbox.write(update) is True
        assert await queue.inbox.write(update) is True  # written twice: one row
        await asyncio.wait_for(woke[state.id].wait(), 30)
    finally:
        for reader in readers:
            await reader.aclose()
    assert state.jobs[job.job_id].status == "running"
    assert readers[0].applied == 1 and readers[1].applied == 0
    assert not woke[other.id].is_set()
    assert len(await all_rows(queue.inbox, state.id)) == 1
    assert await queue.inbox.pending(state.id) == []


async def test_a_watch_first_fires_only_once_the_inbox_listens(
    queue: PostgresJobQueue,
) -> None:
    """The listener's first wake-up (rows may have come before it listened) must come
    after its LISTEN: a reader woken by it reads, and a row written right after that read
    is then notified, not left for the next poll."""
    state, job = owner_state(flight="SK 5")
    await queue.inbox.open()
    event = queue.inbox.watch(state.id)
    try:
        await asyncio.wait_for(event.wait(), 30)  # the first wake-up: read now
        rows = await queue.inbox._execute(
            "SELECT count(*) FROM pg_stat_activity WHERE query = %s",
            (f'LISTEN "{queue.inbox.channel}"',))
        assert rows[0][0] == 1  # already listening when it woke the reader
        event.clear()
        assert await queue.inbox.write(JobUpdate(
            session_id=state.id, job_id=job.job_id, revision=1, attempt=1, seq=1,
            kind="started")) is True
        # only the notification sets it again (a missed one would wait forever)
        await asyncio.wait_for(event.wait(), 30)
    finally:
        queue.inbox.unwatch(state.id, event)


async def test_two_readers_of_one_inbox_apply_each_update_once(
    queue: PostgresJobQueue,
) -> None:
    state, job = owner_state(flight="BA 9")
    copy = AssistantState.model_validate(state.model_dump())  # a second worker's copy
    await write_completed_run(queue.inbox, job, "Done.")
    first = InboxReader(queue.inbox, state, lock=asyncio.Lock())
    rows = await queue.inbox.pending(state.id)
    assert await first.read_once() == 4
    assert await first.read_once() == 0  # acknowledged: nothing pending
    # a second reader that had read the same rows before the acknowledgement
    async with asyncio.Lock():
        assert apply_inbox(copy, rows) == [True] * 4
        assert apply_inbox(copy, rows) == [False] * 4
    assert state.jobs[job.job_id].status == copy.jobs[job.job_id].status == "completed"


async def test_a_reader_whose_save_is_fenced_acknowledges_nothing(
    queue: PostgresJobQueue,
) -> None:
    from voxflow.errors import FencedWriteError

    state, job = owner_state(flight="AZ 7")
    await queue.inbox.write(JobUpdate(session_id=state.id, job_id=job.job_id, revision=1,
                                      attempt=1, seq=1, kind="started"))
    told: list[str] = []

    async def fenced_save() -> None:
        raise FencedWriteError(state.id, epoch=1, current=2)

    async def on_update() -> None:
        told.append("announce")

    reader = InboxReader(queue.inbox, state, lock=asyncio.Lock(), save=fenced_save,
                         on_update=on_update)
    with pytest.raises(FencedWriteError):
        await reader.read_once()
    assert told == []  # a worker that lost the session announces nothing
    assert len(await queue.inbox.pending(state.id)) == 1  # left to the session's owner


async def test_a_reader_whose_save_failed_saves_and_announces_on_its_next_read(
    queue: PostgresJobQueue,
) -> None:
    """A save that fails (the database away for a moment) leaves the rows applied in
    memory but unsaved and unacknowledged: the next read finds them already applied
    (refused as duplicates), and must still save the state before acknowledging them and
    tell the session, or the completed job is acknowledged unsaved and never announced."""
    from voxflow.errors import PersistenceUnavailableError

    state, job = owner_state(flight="LH 3")
    await write_completed_run(queue.inbox, job, "Done.")
    saved: list[str] = []
    told: list[str] = []

    async def save() -> None:
        if not saved:
            saved.append("failed")
            raise PersistenceUnavailableError("the database went away", path="test",
                                              fix="none")
        saved.append(state.jobs[job.job_id].status)

    async def on_update() -> None:
        told.append(state.jobs[job.job_id].status)

    reader = InboxReader(queue.inbox, state, lock=asyncio.Lock(), save=save,
                         on_update=on_update)
    with pytest.raises(PersistenceUnavailableError):
        await reader.read_once()
    assert len(await queue.inbox.pending(state.id)) == 4  # nothing acknowledged unsaved
    await reader.read_once()
    assert saved == ["failed", "completed"]  # saved before the acknowledgement
    assert told == ["completed"]  # and the session told once
    assert await queue.inbox.pending(state.id) == []


async def test_a_started_reader_tells_the_session_once_even_with_nothing_to_read(
    queue: PostgresJobQueue,
) -> None:
    """A restored session may hold a completed job whose rows its dead owner applied and
    acknowledged but never announced: the new owner's reader offers it once at start."""
    state, _ = owner_state(flight="OS 1")
    told: list[int] = []

    async def on_update() -> None:
        told.append(len(told))

    reader = InboxReader(queue.inbox, state, lock=asyncio.Lock(), on_update=on_update,
                         poll=0.2)
    reader.start()
    try:
        await wait_for(lambda: asyncio.sleep(0, bool(told)), 30, "the offer at start")
        await asyncio.sleep(2.0)  # ~10 more polls, each finding nothing
    finally:
        await reader.aclose()
    assert told == [0]


async def test_purge_deletes_only_acknowledged_rows_past_their_age(
    queue: PostgresJobQueue,
) -> None:
    state, job = owner_state(flight="EI 2")
    for seq, kind in ((1, "started"), (2, "failed")):
        await queue.inbox.write(JobUpdate(session_id=state.id, job_id=job.job_id, revision=1,
                                          attempt=1, seq=seq, kind=kind))  # type: ignore[arg-type]
    (first, _) = await queue.inbox.pending(state.id)
    assert await queue.inbox.ack(state.id, [first.id]) == 1
    assert await queue.inbox.purge(3600) == 0  # acknowledged, but not an hour ago
    assert await queue.inbox.purge(0) == 1  # the unacknowledged row stays
    assert [e.seq for e in await all_rows(queue.inbox, state.id)] == [2]


async def test_a_reader_closes_when_a_wake_up_and_its_close_come_together(
    queue: PostgresJobQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A notification that lands in the same loop step as the call's close (a job worker
    reporting while the call hangs up): the reader stops there and reads nothing more.
    On Python 3.11 ``asyncio.wait_for`` returns a wait that finished beside the
    cancellation and drops the cancellation: the reader read on, and when its next
    wait was not cut short either, the call's close (``AssistantWiring.aclose``) never
    returned (a CI run stalled there for 90 minutes)."""
    state, _ = owner_state(flight="OS 2")
    reads: list[str] = []
    parked = asyncio.Event()
    pending = queue.inbox.pending

    async def counted(session_id: str, **kwargs: Any) -> Any:
        reads.append(session_id)
        entries = await pending(session_id, **kwargs)
        if len(reads) >= 2:
            parked.set()
        return entries

    monkeypatch.setattr(queue.inbox, "pending", counted)
    reader = InboxReader(queue.inbox, state, lock=asyncio.Lock(), poll=60.0)
    reader.start()
    # it reads at its start and once the inbox listens (rows may have come before); then
    # it waits for a notification (its poll is a minute away)
    await asyncio.wait_for(parked.wait(), 30)
    await asyncio.sleep(0.5)
    wake = reader._wake  # the event a notification for this session sets
    assert wake is not None
    read_before = len(reads)
    closing = asyncio.create_task(reader.aclose())  # runs first in the next step
    wake.set()  # the wake-up, in the same step
    done, _ = await asyncio.wait({closing}, timeout=30)
    assert done, "the reader went on after its close"
    assert len(reads) == read_before, "the reader read again after its close"


# -- hostile inputs --------------------------------------------------------------------


def test_a_bad_database_url_is_a_typed_error_that_never_echoes_the_password() -> None:
    for url in ("mysql://u:hunter2@h/db", "postgresql://u:hunter2@", "", "postgresql://"):
        with pytest.raises(ValueError) as err:
            PostgresJobQueue(url)
        assert "hunter2" not in str(err.value)
    with pytest.raises(ValueError, match="schema"):
        PostgresJobQueue(PG_URL, schema="Robert'); DROP TABLE x;--")


async def test_an_unreachable_database_is_a_typed_error_naming_the_fix() -> None:
    from voxflow.errors import PersistenceUnavailableError

    queue = PostgresJobQueue("postgresql://u:hunter2@127.0.0.1:1/db", connect_timeout=2)
    with pytest.raises(PersistenceUnavailableError) as err:
        await queue.migrate()
    assert "hunter2" not in str(err.value) and "VOXFLOW_DATABASE_URL" in str(err.value)


@pytest.mark.parametrize(("option", "value"), [
    ("stalled_after", float("inf")), ("stalled_after", float("nan")), ("heartbeat", 0.0),
    ("heartbeat", float("inf")),
])
async def test_run_worker_refuses_seconds_that_are_not_finite_before_connecting(
    option: str, value: float
) -> None:
    # (make_interval(secs => inf) in the stalled-job check: a stalled job never re-run)
    queue = PostgresJobQueue("postgresql://u:hunter2@127.0.0.1:1/db", connect_timeout=1)
    seconds = {"heartbeat": 0.5, "stalled_after": 5.0, option: value}
    with pytest.raises(ValueError, match=f"{option} must be a positive, finite number"):
        await queue.run_worker(**seconds)


def test_the_job_worker_command_says_the_fix_for_bad_options(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("VOXFLOW_DATABASE_URL", raising=False)
    assert cli_main(["jobs", "worker", FLOW]) == 2
    assert "export VOXFLOW_DATABASE_URL=" in capsys.readouterr().err
    monkeypatch.setenv("VOXFLOW_DATABASE_URL", "postgresql://u:hunter2@127.0.0.1:1/db")
    assert cli_main(["jobs", "worker", FLOW, "--heartbeat", "2", "--stalled-after", "1"]) == 2
    err = capsys.readouterr().err
    assert "--stalled-after 1 must be longer than --heartbeat 2" in err and "hunter2" not in err
    # PostgreSQL reserves pg_*: named as the URL's fault, not the database's
    monkeypatch.setenv("VOXFLOW_DATABASE_URL", "postgresql://u:hunter2@127.0.0.1:1/db"
                       "?options=-csearch_path%3Dpg_catalog")
    assert cli_main(["jobs", "worker", FLOW]) == 2
    err = capsys.readouterr().err
    assert "VOXFLOW_DATABASE_URL" in err and "'pg_catalog'" in err and "reserved" in err
    assert "hunter2" not in err
    assert cli_main(["jobs", "worker", "nowhere.py:Nothing"]) == 2
    assert "Traceback" not in capsys.readouterr().err


def test_a_bad_job_payload_is_a_typed_error_naming_the_field() -> None:
    good = {"session_id": "s", "job_id": "j", "kind": KIND, "revision": 1, "inputs": {}}
    assert QueuedJob.parse(good).kind == KIND
    for bad, field in (({**good, "revision": "1"}, "revision"), ({**good, "evil": 1}, "evil"),
                       ({k: v for k, v in good.items() if k != "job_id"}, "job_id"),
                       ({**good, "inputs": {"x": float("nan")}}, "inputs")):
        with pytest.raises(JobPayloadError, match=field):
            QueuedJob.parse(bad)


async def test_a_bad_payload_in_the_queue_fails_that_job_and_the_worker_goes_on(
    schema: str, queue: PostgresJobQueue
) -> None:
    app = queue._open_sync()
    await asyncio.to_thread(app.configure_task(TASK_NAME, queue=queue.queue).defer,
                            session_id=["not", "a", "string"], evil=True)
    state, job = owner_state(flight="IB 3", seconds=0.1)
    unknown = BackgroundJob(session_id=state.id, kind="no.such.kind")
    assert add_job(state, unknown)
    await queue.enqueue_async(job)
    await queue.enqueue_async(unknown)
    worker = start_job_worker(schema)
    try:
        async def both_ended() -> bool:
            rows = await all_rows(queue.inbox, state.id)
            return sum(r.update is not None and r.update.kind in ("completed", "failed")
                       for r in rows) == 2

        await wait_for(both_ended, 60, "both good-shaped jobs to end")
    finally:
        code, err = stop(worker)
    assert code == 0, err
    assert "bad queued job payload: session_id" in err
    assert all(apply_inbox(state, await all_rows(queue.inbox, state.id)))
    assert state.jobs[job.job_id].status == "completed"
    failed = state.jobs[unknown.job_id]
    assert failed.status == "failed" and "no background job function of kind" in (
        failed.error or "")
    rows = await queue.inbox._execute(
        "SELECT status, count(*) FROM procrastinate_jobs GROUP BY status ORDER BY status")
    assert dict(rows) == {"failed": 1, "succeeded": 2}


async def test_malformed_inbox_rows_are_refused_not_raised(queue: PostgresJobQueue) -> None:
    state, job = owner_state(flight="X")
    for body in ('{"type": "update", "update": {"kind": "completed"}}', '"text"',
                 '{"type": "progress", "text": ""}', '{"type": "shell", "cmd": "rm"}'):
        await queue.inbox._execute(
            "INSERT INTO voxflow_job_inbox (session_id, job_id, revision, attempt, seq, body) "
            "VALUES (%s, %s, 1, 1, %s, %s::jsonb)",
            (state.id, job.job_id, len(body), body))
    entries = await queue.inbox.pending(state.id)
    assert len(entries) == 4 and all(e.problem for e in entries)
    assert apply_inbox(state, entries) == [False] * 4
    assert state.jobs[job.job_id].status == "queued"


@settings(max_examples=200, derandomize=True, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(["session_id", "job_id", "kind", "revision",
                                        "origin_turn_id", "inputs", "other"]),
                       st.recursive(st.none() | st.booleans() | st.integers() | st.floats()
                                    | st.text(max_size=20),
                                    lambda c: st.lists(c, max_size=3)
                                    | st.dictionaries(st.text(max_size=5), c, max_size=3),
                                    max_leaves=8)))
def test_fuzz_queued_job_payloads_parse_or_raise_job_payload_error(payload: dict[str, Any]
                                                                    ) -> None:
    try:
        parsed = QueuedJob.parse(payload)
    except JobPayloadError:
        return
    assert json.loads(parsed.model_dump_json())["kind"] == parsed.kind


@settings(max_examples=200, derandomize=True, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=20),
                    lambda c: st.lists(c, max_size=3)
                    | st.dictionaries(st.sampled_from(["type", "update", "text", "kind",
                                                       "seq", "x"]), c, max_size=4),
                    max_leaves=10))
def test_fuzz_inbox_bodies_become_entries_never_exceptions(body: Any) -> None:
    entry = _entry((1, "s", "j", 1, 1, 1, body))
    assert (entry.update is None) or entry.problem is None
    state, _ = owner_state()
    apply_inbox(state, [entry])  # never raises


def test_the_default_job_queue_follows_voxflow_database_url(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from voxflow.jobs import default_job_queue
    from voxflow.settings import SettingsError

    monkeypatch.delenv("VOXFLOW_DATABASE_URL", raising=False)
    assert default_job_queue() is None  # embedded: jobs in the call's process
    url = "postgresql://u:hunter2@db.example:5432/v"
    monkeypatch.setenv("VOXFLOW_DATABASE_URL", url)
    queue = default_job_queue()
    assert queue is not None and (queue.schema, queue.url) == ("public", url)
    assert "hunter2" not in repr(queue)
    monkeypatch.setenv("VOXFLOW_DATABASE_URL", f"{url}?options=-csearch_path%3Dcalls")
    queue = default_job_queue()  # the URL's schema: the sessions' and the dispatch's
    assert queue is not None and queue.schema == queue.inbox.schema == "calls"
    monkeypatch.setenv("VOXFLOW_DATABASE_URL", "mysql://u:hunter2@db/v")
    with pytest.raises(SettingsError) as err:
        default_job_queue()
    assert "hunter2" not in str(err.value)


def test_a_job_worker_finds_a_job_function_by_its_kind() -> None:
    from voxflow.jobs import JobContext, background_job
    from voxflow.jobs.background import job_function

    def declare() -> Any:
        @background_job(kind="queue_tests.twice")
        async def twice(job: JobContext) -> str:
            return "again"
        return twice

    first, second = declare(), declare()  # the same function declared again: the latest
    assert job_function("queue_tests.twice") is second and first is not second

    @background_job(kind="queue_tests.twice")
    async def other(job: JobContext) -> str:
        return "other"

    with pytest.raises(LookupError, match="two background job functions share the kind"):
        job_function("queue_tests.twice")
    with pytest.raises(LookupError, match="no background job function of kind"):
        job_function("queue_tests.nobody")


def test_a_flow_file_loaded_by_path_and_imported_by_name_declares_its_jobs_once(
    tmp_path: Path,
) -> None:
    # `voxflow jobs worker path/flow.py:Flow` loads the file under a name of its own; a
    # module that also imports it by its package name declares the same function again:
    # the same job, not "two functions share the kind" (every job failed that way)
    import importlib
    import sys as _sys

    from voxflow.jobs.background import job_function
    from voxflow.loader import load_flow_class

    package = tmp_path / "loaded_twice_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "flow.py").write_text(
        "from voxflow import Flow\n"
        "from voxflow.jobs import JobContext, background_job\n"
        "from voxflow.wiring import AssistantState\n"
        "@background_job(kind='queue_tests.loaded_twice')\n"
        "async def look(job: JobContext) -> str:\n"
        "    return 'seen'\n"
        "class Twice(Flow[AssistantState]):\n"
        "    pass\n")
    load_flow_class(f"{package / 'flow.py'}:Twice")
    _sys.path.insert(0, str(tmp_path))
    try:
        imported = importlib.import_module("loaded_twice_pkg.flow")
    finally:
        _sys.path.remove(str(tmp_path))
    assert job_function("queue_tests.loaded_twice") is imported.look


class _ThreadRecordingQueue(PostgresJobQueue):
    """The real queue, noting the thread each enqueue (a database round trip) ran on."""

    threads: list[int]

    def enqueue(self, job: BackgroundJob, inputs: Any = None) -> int:
        self.threads.append(threading.get_ident())
        return super().enqueue(job, inputs)


async def test_a_job_started_from_an_async_handler_is_queued_off_the_event_loop(
    schema: str,
) -> None:
    from voxflow.loader import load_flow_class

    queue = _ThreadRecordingQueue(PG_URL, schema=schema)
    queue.threads = []
    await queue.migrate()
    try:
        flow = load_flow_class(FLOW.replace(":Travel", ":AsyncTravel"))()
        async with AssistantWiring(flow, job_queue=queue) as wiring:
            assert await wiring.text_turn("is my flight on time?") == "I'm checking your flight."
            (job,) = flow.state.jobs.values()
            assert job.status == "queued"  # the turn returned its queued record
        # closing waited for the submission: the job is in the queue, queued elsewhere
        assert queue.threads and threading.get_ident() not in queue.threads
        rows = await queue.inbox._execute(
            "SELECT args->>'job_id' FROM procrastinate_jobs WHERE task_name = %s",
            (TASK_NAME,))
        assert [r[0] for r in rows] == [job.job_id]
    finally:
        queue.close()
        await queue.inbox.close()


async def test_a_job_an_async_handler_could_not_queue_is_recorded_failed(schema: str) -> None:
    from voxflow.loader import load_flow_class

    queue = PostgresJobQueue(PG_URL, schema=schema)
    await queue.migrate()
    try:
        flow = load_flow_class(FLOW.replace(":Travel", ":AsyncTravel"))()
        # the database goes away between the call's start and the handler's enqueue
        queue.url = "postgresql://nobody@127.0.0.1:1/test"
        async with AssistantWiring(flow, job_queue=queue) as wiring:
            assert await wiring.text_turn("is my flight on time?") == "I'm checking your flight."
            (job,) = flow.state.jobs.values()
            assert wiring._binding is not None
            await wiring._binding.drain()  # the submission's thread, then its failure
            assert job.status == "failed"
            assert job.error is not None and job.error.startswith("not queued:")
    finally:
        queue.close()
        await queue.inbox.close()


async def test_inbox_rows_are_saved_with_a_persisted_flow_before_they_are_acknowledged(
    queue: PostgresJobQueue, tmp_path: Path
) -> None:
    from voxflow import persist
    from voxflow.flow.persistence import SQLiteFlowPersistence
    from voxflow.loader import load_flow_class

    store = SQLiteFlowPersistence(tmp_path / "calls.db")
    saved = persist(store)(type("SavedTravel", (load_flow_class(FLOW),), {}))
    try:
        flow = saved()
        async with AssistantWiring(flow, job_queue=queue) as wiring:  # no save_jobs
            await wiring.text_turn("is my flight on time?")
            (job,) = flow.state.jobs.values()
            update = JobUpdate(session_id=flow.state.id, job_id=job.job_id, revision=1,
                               attempt=1, seq=1, kind="started")
            assert await queue.inbox.write(update) is True

            async def acknowledged() -> bool:
                return await queue.inbox.pending(flow.state.id) == []

            await wait_for(acknowledged, 30, "the inbox row's acknowledgement")
        # acknowledged only once saved: the stored session has the update
        again = saved()
        assert await again.aload_session(flow.state.id)
        assert again.state.jobs[job.job_id].status == "running"
    finally:
        store.close()


class _GatedQueue(PostgresJobQueue):
    """The real queue whose enqueue (in its thread) waits for ``gate``: the window in
    which a call worker killed -9 would leave its stored session behind."""

    entered: threading.Event
    gate: threading.Event

    def enqueue(self, job: BackgroundJob, inputs: Any = None) -> int:
        self.entered.set()
        self.gate.wait(60)
        return super().enqueue(job, inputs)


async def test_a_turn_never_stores_a_queued_job_before_it_is_in_the_queue(
    schema: str, tmp_path: Path
) -> None:
    """Issue 17, "nothing lost": a job started from an async handler is enqueued in a
    thread; the turn's save must not land before the enqueue (a kill -9 between the two
    would leave a stored ``queued`` job nothing ever runs). Checked at the moment of the
    window: whatever the store holds then, each ``queued`` job in it is in the queue."""
    from voxflow import persist
    from voxflow.flow.persistence import SQLiteFlowPersistence
    from voxflow.loader import load_flow_class

    queue = _GatedQueue(PG_URL, schema=schema)
    queue.entered, queue.gate = threading.Event(), threading.Event()
    await queue.migrate()
    store = SQLiteFlowPersistence(tmp_path / "calls.db")
    saved = persist(store)(type("SavedAsyncTravel",
                                (load_flow_class(FLOW.replace(":Travel", ":AsyncTravel")),), {}))

    async def in_queue() -> list[str]:
        rows = await queue.inbox._execute(
            "SELECT args->>'job_id' FROM procrastinate_jobs WHERE task_name = %s",
            (TASK_NAME,))
        return [r[0] for r in rows]

    async def stored_queued(session_id: str) -> list[str]:
        again = saved()
        if not await again.aload_session(session_id):
            return []
        return [j for j, rec in again.state.jobs.items() if rec.status == "queued"]

    try:
        flow = saved()
        async with AssistantWiring(flow, job_queue=queue) as wiring:
            turn = asyncio.ensure_future(wiring.text_turn("is my flight on time?"))
            try:
                assert await asyncio.to_thread(queue.entered.wait, 60)
                # the enqueue is blocked in its thread; the loop runs (this test runs on
                # it): let the turn go as far as it can, up to its return
                await asyncio.wait({turn}, timeout=3.0)
                # a process killed -9 now leaves this store and this queue behind
                stranded = set(await stored_queued(flow.state.id)) - set(await in_queue())
                assert stranded == set(), "a stored queued job is not in the queue"
                assert not turn.done()  # its save waits for the enqueue
            finally:
                queue.gate.set()
            assert await turn == "I'm checking your flight."
            (job,) = flow.state.jobs.values()
            assert await stored_queued(flow.state.id) == [job.job_id]
            assert await in_queue() == [job.job_id]  # queued once
    finally:
        queue.gate.set()
        queue.close()
        await queue.inbox.close()
        store.close()


async def test_a_job_that_could_not_be_queued_is_never_stored_queued(
    schema: str, tmp_path: Path
) -> None:
    """The enqueue fails (the database went away): the turn's save refuses the state
    naming a queued job that is not in the queue; the job's failure is stored next."""
    from voxflow import persist
    from voxflow.flow.persistence import SQLiteFlowPersistence
    from voxflow.loader import load_flow_class

    queue = PostgresJobQueue(PG_URL, schema=schema)
    await queue.migrate()
    store = SQLiteFlowPersistence(tmp_path / "calls.db")
    saved = persist(store)(type("SavedAsyncTravel",
                                (load_flow_class(FLOW.replace(":Travel", ":AsyncTravel")),), {}))
    try:
        flow = saved()
        queue.url = "postgresql://nobody@127.0.0.1:1/test"
        async with AssistantWiring(flow, job_queue=queue) as wiring:
            with pytest.raises(PersistenceUnavailableError):
                await wiring.text_turn("is my flight on time?")
            (job,) = flow.state.jobs.values()
            assert wiring._binding is not None
            await wiring._binding.drain()
            assert job.status == "failed"
            again = saved()
            if await again.aload_session(flow.state.id):
                assert again.state.jobs.get(job.job_id) is None
            await flow.asave_state("job_update")
        again = saved()
        assert await again.aload_session(flow.state.id)
        assert again.state.jobs[job.job_id].status == "failed"
    finally:
        queue.close()
        await queue.inbox.close()
        store.close()
