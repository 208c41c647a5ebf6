"""Job records, job state and the two rules that change them: ``add_job`` and
``commit_job_update``.

A job is background work that outlives the conversational turn that started it. Its
record lives in the conversation state (``JobState.jobs``), so routers and replies can
read it, and it changes only through :func:`commit_job_update`, which checks identity,
ordering and the lifecycle before it touches anything::

    queued ──started──▶ running ──stage_started / stage_completed…──▶ completed
       └───────────────────┴──────────────failed──────────────────────▶ failed

Neither function locks: the caller serialises them (``JobRunner.state_lock``). Both
return ``False`` on rejection and log the reason at DEBUG on ``voxflow.jobs``; rejection
never changes the state.
"""

from __future__ import annotations

import logging
import uuid
from datetime import UTC, datetime
from typing import Any, ClassVar, Generic, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    StrictInt,
    ValidationError,
    field_validator,
)

from voxflow.conversation._record_marks import RecordDict, as_record_dict
from voxflow.ids import JobId, SessionId, TurnId, new_session_id

__all__ = [
    "JobRecord",
    "JobState",
    "JobStatus",
    "JobUpdate",
    "JobUpdateKind",
    "add_job",
    "begin_attempt",
    "commit_job_update",
    "job_copy",
    "utc_now",
]

logger = logging.getLogger("voxflow.jobs")

JobStatus = Literal["queued", "running", "completed", "failed"]
"""Lifecycle of a job: queued → running → completed | failed."""

JobUpdateKind = Literal["started", "stage_started", "stage_completed", "completed", "failed"]
"""What a worker reports; see :func:`commit_job_update` for the transitions."""

TERMINAL_JOB_STATUSES: frozenset[str] = frozenset({"completed", "failed"})


def utc_now() -> str:
    """The wall-clock time as ISO-8601 UTC, for record timestamps (never for durations)."""
    return datetime.now(UTC).isoformat()


def _new_job_id() -> JobId:
    return JobId(str(uuid.uuid4()))


class JobRecord(BaseModel):
    """One background job: identity, origin, lifecycle and (in subclasses) its outputs.

    Subclass it for domain inputs and outputs and name the fields workers may write in
    ``output_fields``; base fields can never be written by an update, whatever
    ``output_fields`` says.

    Example:
        >>> class ReportJob(JobRecord):
        ...     output_fields: ClassVar[frozenset[str]] = frozenset({"notes"})
        ...     question: str
        ...     notes: list[str] = Field(default_factory=list)
    """

    model_config = ConfigDict(extra="forbid", defer_build=True)

    output_fields: ClassVar[frozenset[str]] = frozenset()
    """Fields a ``stage_completed`` update may write (base fields are always excluded)."""

    job_id: JobId = Field(default_factory=_new_job_id, description="the job identity (uuid4)")
    session_id: SessionId = Field(description="the conversation that owns the job")
    origin_turn_id: TurnId | None = Field(None, description="the turn that asked for it")
    kind: str = Field("job", description="an application label for the kind of work")
    revision: StrictInt = Field(1, ge=1, description="the version of the request")
    attempt: StrictInt = Field(1, ge=1, description="the execution attempt of that version")
    status: JobStatus = "queued"
    stage: str | None = Field(None, description="the current stage name")
    committed_stages: list[str] = Field(default_factory=list)
    last_update_seq: int = Field(0, ge=0, description="seq of the last accepted update")
    error: str | None = None
    created_at: str = Field(default_factory=utc_now, description="ISO-8601 UTC")
    updated_at: str = Field(default_factory=utc_now, description="ISO-8601 UTC")

    @classmethod
    def writable_fields(cls) -> frozenset[str]:
        """``output_fields`` minus every base-class field: what updates may write."""
        return frozenset(cls.output_fields) - frozenset(JobRecord.model_fields)


JobT = TypeVar("JobT", bound=JobRecord)


class JobState(BaseModel, Generic[JobT]):
    """State that holds jobs; combine it with a conversation state.

    Example:
        >>> class WorkChatState(ConversationState, JobState[ReportJob]):
        ...     pass
    """

    model_config = ConfigDict(defer_build=True)

    id: SessionId = Field(default_factory=new_session_id, description="the session identity")
    jobs: dict[str, JobT] = Field(default_factory=RecordDict, description="job_id → record")
    job_sequence: int = Field(0, ge=0, description="bumped on every accepted change")

    # A RecordDict logs its changes: a save finds them without scanning every record.
    _track_records = field_validator("jobs", mode="after")(as_record_dict)

    @staticmethod
    def __rollback_keep__(restored: Any, live: dict[str, Any]) -> None:
        """What a rollback (:class:`~voxflow.flow.RollbackPoint`) keeps of the live jobs:
        each job's updates committed since the point (same revision and attempt, a
        newer ``last_update_seq``), and each job that started since (not ``queued``:
        its work left the undone turn). A job the undone work registered and that never
        started is dropped with it; ``job_sequence`` never goes back."""
        jobs = restored.jobs
        for job_id, job in live.get("jobs", {}).items():
            before = jobs.get(job_id)
            if before is None:
                if job.status != "queued":
                    jobs[job_id] = job
            elif ((job.revision, job.attempt) == (before.revision, before.attempt)
                    and job.last_update_seq > before.last_update_seq):
                jobs[job_id] = job
        restored.job_sequence = max(restored.job_sequence, live.get("job_sequence", 0))


class JobUpdate(BaseModel):
    """One report from a worker about one job version.

    ``seq`` increases per job; an update is accepted only when it is newer than the
    last accepted one (gaps are allowed).
    """

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    session_id: SessionId
    job_id: JobId
    revision: StrictInt = Field(ge=1)
    attempt: StrictInt = Field(ge=1)
    seq: StrictInt = Field(gt=0)
    kind: JobUpdateKind
    stage: str | None = None
    outputs: dict[str, JsonValue] = Field(default_factory=dict)
    error: str | None = None


def _reject(action: str, reason: str, **fields: object) -> bool:
    if logger.isEnabledFor(logging.DEBUG):
        logger.debug("%s rejected: %s", action, reason, extra={"voxflow": fields})
    return False


def _json_round_trips(job: JobRecord) -> bool:
    try:
        type(job).model_validate_json(job.model_dump_json())
    except (ValidationError, ValueError, TypeError):
        return False
    return True


def add_job(state: JobState[JobT], job: JobT) -> bool:
    """Register a queued job in ``state`` (the record itself, not a copy).

    Args:
        state: the conversation state holding jobs.
        job: a ``queued`` record of this session with a fresh ``job_id``.

    Returns:
        True when registered (``job_sequence`` is bumped); False when the session is
        foreign, the id is taken, the status is not ``queued`` or the record does not
        round-trip through validation and JSON.

    Raises:
        TypeError: ``state`` is not a JobState or ``job`` not a JobRecord.
    """
    if not isinstance(state, JobState):
        raise TypeError(f"state must be a JobState, got {type(state).__name__}")
    if not isinstance(job, JobRecord):
        raise TypeError(f"job must be a JobRecord, got {type(job).__name__}")
    ids = {"job_id": job.job_id, "session_id": job.session_id}
    if job.session_id != state.id:
        return _reject("add_job", "foreign session", **ids)
    if job.job_id in state.jobs:
        return _reject("add_job", "duplicate job_id", **ids)
    if job.status != "queued":
        return _reject("add_job", f"status is {job.status!r}, not 'queued'", **ids)
    if not _json_round_trips(job):
        return _reject("add_job", "record does not round-trip through JSON", **ids)
    state.jobs[job.job_id] = job
    state.job_sequence += 1
    return True


def _transition(job: JobRecord, update: JobUpdate) -> dict[str, Any] | str:
    """The field changes ``update`` makes to ``job``, or the reason it is rejected."""
    if update.outputs and update.kind != "stage_completed":
        return f"outputs on a {update.kind!r} update"
    if update.kind == "started":
        if job.status != "queued":
            return f"started while {job.status}"
        return {"status": "running"}
    if update.kind == "failed":
        return {"status": "failed", "error": update.error or "Job failed."}
    if job.status != "running":
        return f"{update.kind} while {job.status}"
    if update.kind == "stage_started":
        if not update.stage:
            return "stage_started without a stage name"
        if update.stage in job.committed_stages:
            return "stage already committed"
        if job.stage is not None and job.stage not in job.committed_stages:
            return "previous stage not committed"
        return {"stage": update.stage}
    if update.kind == "stage_completed":
        if job.stage is None or update.stage != job.stage:
            return "stage_completed for a stage that is not the current one"
        if job.stage in job.committed_stages:
            return "stage already committed"
        unknown = set(update.outputs) - type(job).writable_fields()
        if unknown:
            return f"output keys not in output_fields: {sorted(unknown)}"
        return {**update.outputs, "committed_stages": [*job.committed_stages, job.stage]}
    # completed
    if job.stage is None or job.stage not in job.committed_stages:
        return "completed before the current stage was committed"
    return {"status": "completed"}


def commit_job_update(state: JobState[JobT], update: JobUpdate) -> bool:
    """Apply one worker update to its job, atomically, if every rule allows it.

    Rejected (False, nothing changed): an unknown job, a foreign session, another
    (revision, attempt), ``seq <= last_update_seq``, a terminal job, outputs on any kind
    but ``stage_completed``, or a transition the lifecycle forbids (see the module
    docstring). The whole candidate record is validated and JSON-checked before the
    record is mutated in place; then ``last_update_seq``, ``updated_at`` and
    ``state.job_sequence`` advance.

    Not locked: hold ``JobRunner.state_lock`` (or otherwise serialise) around it.

    Raises:
        TypeError: ``update`` is not a JobUpdate or ``state`` not a JobState.
    """
    if not isinstance(state, JobState):
        raise TypeError(f"state must be a JobState, got {type(state).__name__}")
    if not isinstance(update, JobUpdate):
        raise TypeError(f"update must be a JobUpdate, got {type(update).__name__}")
    ids = {"job_id": update.job_id, "seq": update.seq, "kind": update.kind}
    job = state.jobs.get(update.job_id)
    if job is None:
        return _reject("job update", "unknown job", **ids)
    if update.session_id != state.id or job.session_id != state.id:
        return _reject("job update", "foreign session", **ids)
    if (update.revision, update.attempt) != (job.revision, job.attempt):
        return _reject("job update", "revision/attempt mismatch", **ids)
    if update.seq <= job.last_update_seq:
        return _reject("job update", "stale or duplicate seq", **ids)
    if job.status in TERMINAL_JOB_STATUSES:
        return _reject("job update", f"job already {job.status}", **ids)
    changes = _transition(job, update)
    if isinstance(changes, str):
        return _reject("job update", changes, **ids)
    changes["last_update_seq"] = update.seq
    changes["updated_at"] = utc_now()
    candidate_data = job.model_dump()
    candidate_data.update(changes)
    try:
        candidate = type(job).model_validate(candidate_data)
        candidate.model_dump_json()
    except (ValidationError, ValueError, TypeError) as exc:
        return _reject("job update", f"candidate record invalid ({type(exc).__name__})", **ids)
    for name in changes:
        setattr(job, name, getattr(candidate, name))
    state.job_sequence += 1
    return True


def begin_attempt(state: JobState[JobT], job_id: str, *, revision: int, attempt: int) -> bool:
    """Move an unfinished job to a later execution ``attempt`` of the same ``revision``.

    A job queue re-runs a job whose worker died (its heartbeats stopped) as the next
    attempt; its first update names that attempt. The record goes back to ``queued``
    with no stage and ``last_update_seq`` 0, so the new attempt's updates (seq from 1)
    are accepted by :func:`commit_job_update`, and every update of an earlier attempt
    (a late or duplicate one from the dead worker) is refused by it from now on.

    Rejected (False, nothing changed): an unknown job, another revision, an attempt that
    is not later than the record's, or a job already completed or failed.

    Not locked: serialise it like :func:`commit_job_update`.
    """
    if not isinstance(state, JobState):
        raise TypeError(f"state must be a JobState, got {type(state).__name__}")
    ids = {"job_id": job_id, "revision": revision, "attempt": attempt}
    job = state.jobs.get(job_id)
    if job is None:
        return _reject("begin_attempt", "unknown job", **ids)
    if revision != job.revision:
        return _reject("begin_attempt", "another revision", **ids)
    if isinstance(attempt, bool) or not isinstance(attempt, int) or attempt <= job.attempt:
        return _reject("begin_attempt", "not a later attempt", **ids)
    if job.status in TERMINAL_JOB_STATUSES:
        return _reject("begin_attempt", f"job already {job.status}", **ids)
    changes: dict[str, Any] = {"attempt": attempt, "status": "queued", "stage": None,
                               "committed_stages": [], "last_update_seq": 0, "error": None,
                               "updated_at": utc_now()}
    for name, value in changes.items():
        setattr(job, name, value)
    state.job_sequence += 1
    return True


def job_copy(job: JobT) -> JobT:
    """A deep copy of ``job``, for callbacks that must not touch the live record.

    Registered records round-trip through JSON (``add_job`` checks it), so a dump and
    re-validation copies every value, about twice as fast as ``copy.deepcopy``.
    """
    return type(job).model_validate(job.model_dump())
