"""add_job and commit_job_update: every accept/reject rule of the job lifecycle."""

from __future__ import annotations

import logging
from typing import Any, ClassVar

import pytest
from pydantic import Field

from voxflow.conversation import ConversationState
from voxflow.ids import JobId, SessionId
from voxflow.jobs import JobRecord, JobState, JobUpdate, add_job, commit_job_update


class ReportJob(JobRecord):
    output_fields: ClassVar[frozenset[str]] = frozenset({"notes", "summary", "status"})
    question: str = "q"
    notes: list[str] = Field(default_factory=list)
    summary: str | None = None
    stage: str | None = "collect"


class WorkState(ConversationState, JobState[ReportJob]):
    pass


@pytest.fixture
def state() -> WorkState:
    return WorkState()


@pytest.fixture
def job(state: WorkState) -> ReportJob:
    record = ReportJob(session_id=state.id)
    assert add_job(state, record)
    return record


def update(job: ReportJob, seq: int, kind: Any, **fields: Any) -> JobUpdate:
    return JobUpdate(
        session_id=job.session_id,
        job_id=job.job_id,
        revision=job.revision,
        attempt=job.attempt,
        seq=seq,
        kind=kind,
        **fields,
    )


def test_add_job_registers_the_record_and_bumps_the_sequence(state: WorkState) -> None:
    record = ReportJob(session_id=state.id)
    assert add_job(state, record)
    assert state.jobs[record.job_id] is record
    assert state.job_sequence == 1


def test_add_job_rejects_foreign_duplicate_and_non_queued(state: WorkState) -> None:
    foreign = ReportJob(session_id=SessionId("other"))
    assert not add_job(state, foreign)
    record = ReportJob(session_id=state.id)
    assert add_job(state, record)
    assert not add_job(state, ReportJob(session_id=state.id, job_id=record.job_id))
    assert not add_job(state, ReportJob(session_id=state.id, status="running"))
    assert state.job_sequence == 1
    assert list(state.jobs) == [record.job_id]


def test_add_job_rejects_a_record_that_does_not_round_trip(state: WorkState) -> None:
    record = ReportJob(session_id=state.id)
    record.notes = [object()]  # type: ignore[list-item]  # not JSON; assignment is unchecked
    assert not add_job(state, record)
    assert state.jobs == {}


def test_add_job_validates_its_arguments(state: WorkState) -> None:
    with pytest.raises(TypeError, match="job must be a JobRecord"):
        add_job(state, {"job_id": "x"})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="state must be a JobState"):
        add_job(ConversationState(), ReportJob(session_id=state.id))  # type: ignore[arg-type]


def test_a_full_lifecycle_commits_outputs_in_place(state: WorkState, job: ReportJob) -> None:
    assert commit_job_update(state, update(job, 1, "started"))
    assert job.status == "running"
    assert commit_job_update(
        state, update(job, 2, "stage_completed", stage="collect", outputs={"notes": ["fact"]})
    )
    assert job.notes == ["fact"] and job.committed_stages == ["collect"]
    assert commit_job_update(state, update(job, 3, "stage_started", stage="write"))
    assert job.stage == "write"
    assert commit_job_update(
        state, update(job, 5, "stage_completed", stage="write", outputs={"summary": "done"})
    )
    assert commit_job_update(state, update(job, 6, "completed"))
    assert job.status == "completed"
    assert job.committed_stages == ["collect", "write"]
    assert job.last_update_seq == 6
    assert state.job_sequence == 1 + 5
    assert state.jobs[job.job_id] is job


def test_unknown_foreign_and_mismatched_versions_are_rejected(
    state: WorkState, job: ReportJob
) -> None:
    unknown = update(job, 1, "started").model_copy(update={"job_id": JobId("nope")})
    assert not commit_job_update(state, unknown)
    foreign = update(job, 1, "started").model_copy(update={"session_id": SessionId("x")})
    assert not commit_job_update(state, foreign)
    for revision, attempt in ((2, 1), (1, 2)):
        stale = JobUpdate(
            session_id=job.session_id,
            job_id=job.job_id,
            revision=revision,
            attempt=attempt,
            seq=1,
            kind="started",
        )
        assert not commit_job_update(state, stale)
    assert job.status == "queued" and job.last_update_seq == 0
    assert state.job_sequence == 1


def test_stale_and_duplicate_seq_are_rejected_gaps_allowed(
    state: WorkState, job: ReportJob
) -> None:
    assert commit_job_update(state, update(job, 4, "started"))
    assert not commit_job_update(state, update(job, 4, "failed"))
    assert not commit_job_update(state, update(job, 2, "failed"))
    assert job.status == "running"
    assert commit_job_update(state, update(job, 9, "failed", error="boom"))
    assert job.status == "failed" and job.error == "boom"


def test_nothing_is_accepted_after_a_terminal_status(state: WorkState, job: ReportJob) -> None:
    assert commit_job_update(state, update(job, 1, "failed"))
    assert job.error == "Job failed."
    before = job.model_dump()
    for kind in ("started", "stage_started", "stage_completed", "completed", "failed"):
        assert not commit_job_update(state, update(job, 10, kind, stage="collect"))
    assert job.model_dump() == before


def test_outputs_only_on_stage_completed(state: WorkState, job: ReportJob) -> None:
    assert not commit_job_update(state, update(job, 1, "started", outputs={"notes": ["x"]}))
    assert commit_job_update(state, update(job, 2, "started"))
    assert not commit_job_update(state, update(job, 3, "completed", outputs={"summary": "x"}))
    assert not commit_job_update(
        state, update(job, 4, "stage_started", stage="b", outputs={"notes": []})
    )
    assert job.notes == [] and job.summary is None


def test_output_keys_are_limited_to_declared_non_base_fields(
    state: WorkState, job: ReportJob
) -> None:
    assert commit_job_update(state, update(job, 1, "started"))
    # "status" is in ReportJob.output_fields but is a base field: never writable.
    for outputs in ({"status": "completed"}, {"question": "changed"}, {"nope": 1}):
        assert not commit_job_update(
            state, update(job, 2, "stage_completed", stage="collect", outputs=outputs)
        )
    assert job.status == "running" and job.question == "q"
    assert job.committed_stages == []


def test_an_invalid_candidate_leaves_the_record_untouched(state: WorkState, job: ReportJob) -> None:
    assert commit_job_update(state, update(job, 1, "started"))
    bad = update(job, 2, "stage_completed", stage="collect", outputs={"notes": "not a list"})
    assert not commit_job_update(state, bad)
    assert job.notes == [] and job.committed_stages == [] and job.last_update_seq == 1


def test_stage_rules(state: WorkState, job: ReportJob) -> None:
    # Not running yet: stage updates and completion are rejected.
    assert not commit_job_update(state, update(job, 1, "stage_started", stage="b"))
    assert not commit_job_update(state, update(job, 1, "completed"))
    assert commit_job_update(state, update(job, 1, "started"))
    assert not commit_job_update(state, update(job, 2, "started"))  # only from queued
    # The default stage "collect" is current and uncommitted.
    assert not commit_job_update(state, update(job, 2, "stage_started", stage="b"))
    assert not commit_job_update(state, update(job, 2, "completed"))
    assert not commit_job_update(state, update(job, 2, "stage_completed", stage="other"))
    assert not commit_job_update(state, update(job, 2, "stage_completed"))
    assert commit_job_update(state, update(job, 2, "stage_completed", stage="collect"))
    assert not commit_job_update(state, update(job, 3, "stage_completed", stage="collect"))
    assert not commit_job_update(state, update(job, 3, "stage_started", stage="collect"))
    assert not commit_job_update(state, update(job, 3, "stage_started"))
    assert commit_job_update(state, update(job, 3, "stage_started", stage="b"))
    assert not commit_job_update(state, update(job, 4, "completed"))
    assert job.status == "running" and job.stage == "b"


def test_a_job_without_a_stage_cannot_complete_without_one(state: WorkState) -> None:
    plain = JobRecord(session_id=state.id)
    generic_state = JobState[JobRecord](id=state.id)
    assert add_job(generic_state, plain)
    base = {"session_id": state.id, "job_id": plain.job_id, "revision": 1, "attempt": 1}
    assert commit_job_update(generic_state, JobUpdate(**base, seq=1, kind="started"))
    assert not commit_job_update(generic_state, JobUpdate(**base, seq=2, kind="completed"))
    assert commit_job_update(
        generic_state, JobUpdate(**base, seq=2, kind="stage_started", stage="only")
    )
    assert commit_job_update(
        generic_state, JobUpdate(**base, seq=3, kind="stage_completed", stage="only")
    )
    assert commit_job_update(generic_state, JobUpdate(**base, seq=4, kind="completed"))


def test_failure_keeps_earlier_outputs(state: WorkState, job: ReportJob) -> None:
    assert commit_job_update(state, update(job, 1, "started"))
    assert commit_job_update(
        state, update(job, 2, "stage_completed", stage="collect", outputs={"notes": ["a"]})
    )
    assert commit_job_update(state, update(job, 3, "failed", error="provider down"))
    assert job.notes == ["a"] and job.status == "failed"


def test_job_update_validates_strictly() -> None:
    base = {"session_id": "s", "job_id": "j", "kind": "started"}
    with pytest.raises(ValueError, match="seq"):
        JobUpdate(**base, revision=1, attempt=1, seq=0)
    with pytest.raises(ValueError, match="revision"):
        JobUpdate(**base, revision=True, attempt=1, seq=1)
    with pytest.raises(ValueError, match="kind"):
        JobUpdate(**{**base, "kind": "paused"}, revision=1, attempt=1, seq=1)
    with pytest.raises(ValueError, match="extra"):
        JobUpdate(**base, revision=1, attempt=1, seq=1, surprise=1)


def test_rejections_are_logged_with_the_reason(
    state: WorkState, job: ReportJob, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG, logger="voxflow.jobs"):
        assert not commit_job_update(state, update(job, 1, "completed"))
    assert "job update rejected: completed while queued" in caplog.text


def test_state_round_trips_through_json(state: WorkState, job: ReportJob) -> None:
    assert commit_job_update(state, update(job, 1, "started"))
    restored = WorkState.model_validate_json(state.model_dump_json())
    assert restored.jobs[job.job_id] == job
    assert isinstance(restored.jobs[job.job_id], ReportJob)


def test_begin_attempt_moves_an_unfinished_job_on_and_refuses_the_dead_attempt(
    state: WorkState, job: ReportJob
) -> None:
    from voxflow.jobs import begin_attempt

    assert commit_job_update(state, update(job, 1, "started"))
    dead = update(job, 2, "stage_completed", stage="collect", outputs={"notes": ["late"]})
    before = state.job_sequence
    assert begin_attempt(state, job.job_id, revision=1, attempt=2)
    assert (job.attempt, job.status, job.stage, job.last_update_seq) == (2, "queued", None, 0)
    assert state.job_sequence == before + 1
    assert not commit_job_update(state, dead)  # the dead attempt's late update
    assert job.notes == []
    again = JobUpdate(session_id=state.id, job_id=job.job_id, revision=1, attempt=2, seq=1,
                      kind="started")
    assert commit_job_update(state, again)
    # not a later attempt, another revision, an unknown job: refused, nothing changed
    for kwargs in ({"revision": 1, "attempt": 2}, {"revision": 1, "attempt": 1},
                   {"revision": 2, "attempt": 3}):
        assert not begin_attempt(state, job.job_id, **kwargs)
    assert not begin_attempt(state, "no-such-job", revision=1, attempt=5)
    assert job.status == "running" and job.attempt == 2
    assert commit_job_update(state, JobUpdate(session_id=state.id, job_id=job.job_id,
                                              revision=1, attempt=2, seq=2, kind="failed"))
    assert not begin_attempt(state, job.job_id, revision=1, attempt=3)  # terminal
