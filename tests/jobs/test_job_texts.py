"""A job's texts settle the job the same way wherever it runs (issue 29, item 4): on the
PostgreSQL job queue a result holding a NUL failed the inbox write (``\\u0000 cannot be
converted to text``): the queue row ``failed``, the session's job ``running`` forever,
nothing said; in-process the same job completed. Now both refuse the text before any
write and the job settles ``failed`` naming it, and a report the inbox will not take
settles the job failed with the reason. Real PostgreSQL job workers (subprocesses) and
the in-process runner; the PostgreSQL tests skip with the reason without a server."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

from tests.jobs.queue_flow import progress_says, returns
from tests.jobs.queue_kit import all_rows, start_job_worker, stop, wait_for_update
from voxflow import Flow, listen
from voxflow.conversation import RouterContext
from voxflow.jobs import BackgroundJob, PostgresJobQueue, add_job, apply_inbox
from voxflow.wiring import AssistantState, AssistantWiring

pytestmark = pytest.mark.unit

NUL_REASON = ("the result of background job queue_tests.returns contains a NUL character "
              "(U+0000) at index 8")


class Runs(Flow[AssistantState]):
    conversational = True
    job: ClassVar[Any] = returns
    inputs: ClassVar[dict[str, Any]] = {}

    def route_turn(self, context: RouterContext) -> str | None:
        return "go"

    @listen("go")
    def handle(self) -> str:
        type(self).job.start(self, **type(self).inputs)
        return "On it."


async def run_in_process(job: Any, **inputs: Any) -> BackgroundJob:
    """The job run by the call's own runner (no database: the embedded shape)."""
    flow_class = type("OneJob", (Runs,), {"job": job, "inputs": inputs})
    flow = flow_class()
    async with AssistantWiring(flow) as wiring:
        await wiring.text_turn("go")
        await wiring.wait_for_jobs(10.0)
    [record] = [j for j in flow.state.jobs.values() if j.kind == job.kind]
    return record


async def run_on_queue(queue: PostgresJobQueue, schema: str, kind: str, **inputs: Any
                       ) -> tuple[AssistantState, BackgroundJob]:
    """The job run by a ``voxflow jobs worker`` process; its inbox applied to a state."""
    state = AssistantState()
    job = BackgroundJob(session_id=state.id, kind=kind, inputs=inputs)
    assert add_job(state, job)
    await queue.enqueue_async(job)
    worker = start_job_worker(schema)
    try:
        await wait_for_update(queue.inbox, state.id, "failed|completed", 30,
                              f"job {kind} to settle")
    finally:
        code, err = stop(worker)
    assert code == 0, err
    apply_inbox(state, await all_rows(queue.inbox, state.id))
    return state, state.jobs[job.job_id]


async def test_a_result_with_a_nul_fails_the_job_naming_it_in_process() -> None:
    job = await run_in_process(returns, text="Gate 12B", nul_at=8)
    assert (job.status, job.error) == ("failed", NUL_REASON)
    assert job.announcement == ""


async def test_a_result_with_a_nul_fails_the_job_naming_it_on_the_postgres_queue(
        schema: str, queue: PostgresJobQueue) -> None:
    _, job = await run_on_queue(queue, schema, returns.kind, text="Gate 12B", nul_at=8)
    assert (job.status, job.error) == ("failed", NUL_REASON)
    assert job.announcement == ""


async def test_progress_with_a_nul_is_refused_to_the_job_alike_wherever_it_runs(
        schema: str, queue: PostgresJobQueue) -> None:
    said = "refused: the progress of background job queue_tests.progress_says contains a "\
           "NUL character (U+0000) at index 3"
    job = await run_in_process(progress_says, text="onemoment", nul_at=3)
    assert (job.status, job.announcement) == ("completed", said)
    _, job = await run_on_queue(queue, schema, progress_says.kind, text="onemoment", nul_at=3)
    assert (job.status, job.announcement) == ("completed", said)


async def test_a_result_the_inbox_refuses_to_store_settles_the_job_failed_with_why(
        schema: str, queue: PostgresJobQueue) -> None:
    """The database itself refuses the result's row (a trigger here, a full disk or a
    constraint in life): the job was left ``running`` for good."""
    import psycopg

    from tests.conftest import PG_URL

    async with await psycopg.AsyncConnection.connect(PG_URL, autocommit=True) as conn:
        await conn.execute(f"""
            CREATE FUNCTION "{schema}".refuse() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
              IF NEW.body->'update'->>'kind' = 'stage_completed' THEN
                RAISE EXCEPTION 'could not extend file: No space left on device';
              END IF;
              RETURN NEW;
            END $$;
            CREATE TRIGGER refuse BEFORE INSERT ON "{schema}".voxflow_job_inbox
                FOR EACH ROW EXECUTE FUNCTION "{schema}".refuse();""")
    _, job = await run_on_queue(queue, schema, returns.kind, text="Gate 12B")
    assert job.status == "failed"
    assert job.error is not None
    assert job.error.startswith("background job queue_tests.returns's report could not be "
                                "stored: "), job.error
    assert "No space left on device" in job.error


async def test_inputs_with_a_nul_are_refused_when_the_job_starts_naming_the_input() -> None:
    """The queue's insert failed with 'unsupported Unicode escape sequence', reported as
    'cannot use the PostgreSQL job inbox' (the database unreachable, it said)."""
    from voxflow.errors import JobPayloadError, UnstorableTextError
    from voxflow.jobs import QueuedJob

    with pytest.raises(UnstorableTextError, match=r"inputs\.text contains a NUL character"):
        await run_in_process(returns, text="Gate\x0012")
    with pytest.raises(JobPayloadError, match=r"inputs: .*text contains a NUL character"):
        QueuedJob.parse({"session_id": "s", "job_id": "j", "kind": "k", "revision": 1,
                         "inputs": {"text": "Gate\x0012"}})


OVER_DEFAULT = ("the result of background job queue_tests.returns has 5,000,000 characters, "
                "over the limit of 4,000 (VOXFLOW_MAX_JOB_RESULT_CHARS)")


async def test_a_result_over_the_limit_fails_the_job_naming_the_limit_in_process() -> None:
    """(issue 29, item 6) 5,000,000 characters were stored and announced whole."""
    job = await run_in_process(returns, text="x", repeat=5_000_000)
    assert (job.status, job.error, job.announcement) == ("failed", OVER_DEFAULT, "")
    job = await run_in_process(returns, text="x", repeat=4_000)  # at the limit: said
    assert job.status == "completed" and len(job.announcement) == 4_000


async def test_a_result_over_the_limit_fails_the_job_naming_the_limit_on_the_queue(
        schema: str, queue: PostgresJobQueue, monkeypatch: pytest.MonkeyPatch) -> None:
    _, job = await run_on_queue(queue, schema, returns.kind, text="x", repeat=5_000_000)
    assert (job.status, job.error, job.announcement) == ("failed", OVER_DEFAULT, "")
    # the job worker's own setting (a process of its own: read from its environment)
    monkeypatch.setenv("VOXFLOW_MAX_JOB_RESULT_CHARS", "100")
    _, job = await run_on_queue(queue, schema, returns.kind, text="x", repeat=101)
    assert job.status == "failed"
    assert job.error is not None and job.error.endswith(
        "has 101 characters, over the limit of 100 (VOXFLOW_MAX_JOB_RESULT_CHARS)")


def test_the_limit_is_a_setting_with_bounds_and_the_cli_applies_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from voxflow.jobs import max_job_result_chars, set_max_job_result_chars
    from voxflow.settings import Settings, SettingsError

    assert Settings.from_env({}).max_job_result_chars == 4_000
    assert Settings.from_env({"VOXFLOW_MAX_JOB_RESULT_CHARS": "250"}).max_job_result_chars == 250
    for bad in ("0", "-1", "10000001", "many"):
        with pytest.raises(SettingsError, match="VOXFLOW_MAX_JOB_RESULT_CHARS"):
            Settings.from_env({"VOXFLOW_MAX_JOB_RESULT_CHARS": bad})
    previous = set_max_job_result_chars(250)
    try:
        assert max_job_result_chars() == 250
        with pytest.raises(ValueError, match="at least 1"):
            set_max_job_result_chars(0)
    finally:
        set_max_job_result_chars(previous)
