"""Turn and reply records, the public reply events, and the state that holds them.

Identity is the backbone (see ARCHITECTURE.md): ``session_id`` → ``turn_id`` (one
committed input, single use) → ``input_revision`` (≥ 1) → ``delivery_id`` (one public
reply, the only reply id) → ``seq`` (event order within a delivery) → ``segment_id``
(text deltas, from 1). Records are plain mutable pydantic models kept in
:class:`TurnState`, so they persist and round-trip through JSON with the rest of the
conversation; events are frozen.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, field_validator

from voxflow.conversation._record_marks import RecordDict, as_record_dict
from voxflow.conversation.state import ConversationState
from voxflow.ids import DeliveryId, JobId, SessionId, TurnId, new_delivery_id

__all__ = [
    "ReplyEvent",
    "ReplyEventType",
    "ReplyKind",
    "ReplyRecord",
    "ReplyStatus",
    "TurnRecord",
    "TurnState",
    "TurnStatus",
]

TurnStatus = Literal["running", "completed", "interrupted", "failed"]
"""Lifecycle of a committed input: running → completed | interrupted | failed."""

ReplyStatus = Literal["generating", "completed", "interrupted", "failed"]
"""Lifecycle of a reply's text generation (not of its audio)."""

ReplyKind = Literal["acknowledgment", "answer", "progress"]
"""What a reply is for; background announcements are ``progress``."""

ReplyEventType = Literal[
    "started",
    "route_selected",
    "generation_started",
    "first_model_text",
    "text",
    "completed",
    "interrupted",
    "failed",
]
"""Public reply event types; ``completed``, ``interrupted`` and ``failed`` are terminal."""


class TurnRecord(BaseModel):
    """One committed user input and what became of it."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    session_id: SessionId
    turn_id: TurnId = Field(description="single use within the session")
    input_revision: StrictInt = Field(1, ge=1, description="version of the input (≥ 1)")
    status: TurnStatus = "running"
    route: str | None = Field(None, description="the route the flow selected")
    job_ids: list[JobId] = Field(default_factory=list, description="jobs this turn started")


class ReplyRecord(BaseModel):
    """One public reply (a delivery): its identity, text and transport fence."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    session_id: SessionId
    turn_id: TurnId
    input_revision: StrictInt = Field(1, ge=1)
    delivery_id: DeliveryId = Field(
        default_factory=new_delivery_id, description="the canonical reply identity (uuid4)"
    )
    kind: ReplyKind = "answer"
    status: ReplyStatus = "generating"
    interrupted: bool = Field(
        False, description="delivery fence, separate from status: set once, never cleared"
    )
    segments: list[str] = Field(default_factory=list, description="text deltas, in order")
    text: str = Field("", description="the full text once generation finished")
    last_event_seq: int = Field(0, ge=0, description="the last seq issued")
    last_accepted_seq: int = Field(0, ge=0, description="the last seq accepted at transport")
    heard_text: str | None = Field(
        None, description="the words the user heard of it so far, saved while it plays (a "
        "voice call's resumable session); None: not tracked",
    )
    heard_seconds: float = Field(0.0, ge=0, description="seconds of it played (heard_text)")
    job_id: JobId | None = None
    job_revision: int | None = None
    job_attempt: int | None = None


class ReplyEvent(BaseModel):
    """One public event of one reply, in ``seq`` order.

    Timings describe what the server observed (``clock="server_monotonic"``), not model
    TTFT and not audio: ``elapsed_ms`` counts from the start of the tracked turn (or of
    ``ReplyQueue.prepare``); ``model_first_text_ms`` from the provider request start to
    the first public text chunk, and includes SDK and network time.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    type: ReplyEventType
    session_id: SessionId
    turn_id: TurnId
    input_revision: StrictInt = Field(ge=1)
    delivery_id: DeliveryId
    kind: ReplyKind
    seq: StrictInt = Field(ge=1, description="per delivery, 1-based, increasing")
    elapsed_ms: float = Field(ge=0, description="server monotonic ms since the turn began")
    clock: Literal["server_monotonic"] = "server_monotonic"
    segment_id: int | None = Field(None, ge=1, description="1-based text segment index")
    text: str | None = None
    route: str | None = None
    call_id: str | None = Field(None, description="the LLM call that produced the text")
    model_first_text_ms: float | None = None
    job_id: JobId | None = None
    job_revision: int | None = None
    job_attempt: int | None = None


class TurnState(ConversationState):
    """Conversation state with serialisable turn and reply records.

    Combine with job and reply-queue state by inheritance, e.g.
    ``class WorkChatState(ReplyQueueState, JobState[MyJob])``.
    """

    turns: dict[str, TurnRecord] = Field(
        default_factory=RecordDict, description="turn_id → record"
    )
    replies: dict[str, ReplyRecord] = Field(
        default_factory=RecordDict, description="delivery_id → record"
    )

    # A RecordDict logs its changes: a save finds them without scanning every record.
    _track_records = field_validator("turns", "replies", mode="after")(as_record_dict)
