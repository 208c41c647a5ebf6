"""Records of the reply queue: deliveries, the speaking floor, coverage, client activity.

A *delivery* is one background announcement waiting for (or holding) the speaking
floor; its ``delivery_id`` becomes the identity of the public reply that speaks it. A
*coverage* (:class:`CoveredUpdate`) names one accepted version of one job, so the same
result is never announced twice and a newer version is never mistaken for an old one.
:class:`DeliveryIndex` is derived from the records (pending FIFO, coverage → delivery), so
``claim``/``enqueue``/``mark_covered`` cost the same on the thousandth delivery as on the
first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    field_validator,
)

from voxflow.conversation._record_marks import RecordDict, as_record_dict
from voxflow.ids import DeliveryId, JobId, SessionId, TurnId, new_delivery_id
from voxflow.jobs.records import JobRecord, utc_now
from voxflow.turns.records import TurnState

__all__ = [
    "MAX_CLIENT_SEQ",
    "MAX_CLIENT_SEQ_STEP",
    "ClientActivity",
    "CoveredUpdate",
    "DeliveryFloor",
    "DeliveryIndex",
    "DeliveryRecord",
    "DeliveryStatus",
    "ReplyQueueState",
    "ReplyQueueStatistics",
    "SettleStatus",
]

DeliveryStatus = Literal["pending", "scheduled", "completed", "interrupted", "skipped", "failed"]
"""pending → scheduled → completed | interrupted | skipped | failed."""

SettleStatus = Literal["completed", "interrupted", "skipped", "failed"]
"""The terminal statuses ``ReplyQueue.settle`` accepts."""


class CoveredUpdate(BaseModel):
    """One accepted version of one job: (job_id, revision, attempt, seq)."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    job_id: JobId
    revision: StrictInt = Field(ge=1)
    attempt: StrictInt = Field(ge=1)
    seq: StrictInt = Field(ge=0, description="the job's last_update_seq for this version")

    @classmethod
    def from_job(cls, job: JobRecord) -> CoveredUpdate:
        """The coverage of ``job``'s current accepted version."""
        if not isinstance(job, JobRecord):
            raise TypeError(f"job must be a JobRecord, got {type(job).__name__}")
        return cls(
            job_id=job.job_id, revision=job.revision, attempt=job.attempt, seq=job.last_update_seq
        )


class DeliveryRecord(BaseModel):
    """One queued announcement and its scheduling lifecycle."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    session_id: SessionId
    delivery_id: DeliveryId = Field(
        default_factory=new_delivery_id, description="also the identity of its ReplyRecord"
    )
    turn_id: TurnId = Field(description="the turn that started the announced work")
    input_revision: StrictInt = Field(1, ge=1, description="copied from the origin turn")
    covered_updates: list[CoveredUpdate] = Field(default_factory=list)
    status: DeliveryStatus = "pending"
    reason: str = ""
    created_at: str = Field(default_factory=utc_now, description="ISO-8601 UTC")
    updated_at: str = Field(default_factory=utc_now, description="ISO-8601 UTC")
    scheduled_at: str | None = None
    settled_at: str | None = None


class DeliveryFloor(BaseModel):
    """Who may speak: observations, never media handles.

    ``foreground`` is server-owned (``set_foreground``); ``recording``, ``playback`` and
    ``muted`` come from the client (``observe_client``); ``active_delivery_id`` is the
    one scheduled delivery that holds the floor.
    """

    model_config = ConfigDict(extra="forbid", defer_build=True)

    foreground: bool = False
    recording: bool = False
    playback: bool = False
    muted: bool = False
    closed: bool = False
    client_seq: int = Field(0, ge=0, description="the last accepted client observation")
    playback_delivery_id: DeliveryId | None = Field(
        None, description="what the client is playing; None for local cached audio"
    )
    active_delivery_id: DeliveryId | None = None

    @property
    def held(self) -> bool:
        """Whether a scheduled delivery holds the floor (``active_delivery_id`` names it).

        Callers ask this rather than compare the id to None: the floor's state is a
        question with a name, and the id is only read where a delivery is known to hold it.
        """
        return self.active_delivery_id is not None

    def busy_reason(self, *, check_playback: bool = True) -> str | None:
        """Why the floor cannot be given to an announcement now, or None."""
        if self.closed:
            return "floor closed"
        if self.foreground:
            return "foreground turn"
        if self.recording:
            return "user recording"
        if check_playback and self.playback:
            return "playback"
        if self.muted:
            return "client muted"
        return None


MAX_CLIENT_SEQ = 2**53 - 1
"""The largest ``ClientActivity.seq`` (the largest integer a JSON client counts exactly)."""

MAX_CLIENT_SEQ_STEP = 1024
"""How far one observation's ``seq`` may jump past the last accepted one.

Clients number observations 1, 2, 3...; a gap means observations were lost or merged,
which is legitimate, but only up to this step: a larger jump is refused
(:class:`~voxflow.errors.ClientActivityError`), so one message can never push the floor's
``client_seq`` out of reach of the client's next real observation.
"""


class ClientActivity(BaseModel):
    """One client observation (strictly typed): what the user's side is doing now.

    ``seq`` must increase per client, from 1 to :data:`MAX_CLIENT_SEQ`, by at most
    :data:`MAX_CLIENT_SEQ_STEP` at a time; ``delivery_id`` names the reply being played,
    or is None for locally cached audio (e.g. a canned acknowledgment). Booleans are not
    integers here, nor integers booleans: a wrong type is a ``ValidationError``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    session_id: StrictStr = Field(min_length=1, max_length=256)
    seq: StrictInt = Field(gt=0, le=MAX_CLIENT_SEQ)
    recording: StrictBool
    playback: StrictBool
    muted: StrictBool
    delivery_id: StrictStr | None = Field(None, min_length=1, max_length=256)


class ReplyQueueState(TurnState):
    """Turn state plus the reply queue; combine with ``JobState[MyJob]``.

    Example:
        >>> class WorkChatState(ReplyQueueState, JobState[ReportJob]):
        ...     pass
    """

    deliveries: dict[str, DeliveryRecord] = Field(
        default_factory=RecordDict, description="delivery_id → record, FIFO"
    )
    covered_updates: dict[str, CoveredUpdate] = Field(
        default_factory=RecordDict, description="job_id → the newest delivered version"
    )
    _track_queue_records = field_validator("deliveries", "covered_updates", mode="after")(
        as_record_dict
    )
    delivery_floor: DeliveryFloor = Field(default_factory=DeliveryFloor)
    delivery_sequence: int = Field(0, ge=0, description="bumped on every change")

    @staticmethod
    def __rollback_keep__(restored: Any, live: dict[str, Any]) -> None:
        """What a rollback (:class:`~voxflow.flow.RollbackPoint`) keeps: the whole reply
        queue as it is live. A flow's turn never changes it; the queue's own operations
        do (a job's result queued for announcement, the client's floor reported), and
        undoing a turn must not undo them."""
        for name in ("deliveries", "covered_updates", "delivery_floor", "delivery_sequence"):
            if name in live:
                setattr(restored, name, live[name])


@dataclass(slots=True, eq=False)
class DeliveryIndex:
    """Pending deliveries (FIFO) and coverage → delivery, so per-call work stays flat.

    Derived from ``state.deliveries``; rebuilt (once) when that dict is replaced or
    grows behind the queue's back.
    """

    deliveries: dict[str, DeliveryRecord]
    count: int
    pending: dict[str, None]
    coverage: dict[CoveredUpdate, DeliveryId]

    @classmethod
    def build(cls, deliveries: dict[str, DeliveryRecord]) -> DeliveryIndex:
        coverage: dict[CoveredUpdate, DeliveryId] = {}
        for rec in deliveries.values():
            for cov in rec.covered_updates:
                coverage.setdefault(cov, rec.delivery_id)
        return cls(
            deliveries=deliveries,
            count=len(deliveries),
            pending={d.delivery_id: None for d in deliveries.values() if d.status == "pending"},
            coverage=coverage,
        )


@dataclass(frozen=True, slots=True)
class ReplyQueueStatistics:
    """A read-only view of the queue for logs and tests."""

    pending: int
    active_delivery_id: DeliveryId | None
    busy_reason: str | None
    delivery_sequence: int
    closed: bool
