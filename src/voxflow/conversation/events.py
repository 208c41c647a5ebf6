"""Conversation events: emitted on the flow's event bus for every turn.

Unlike per-method events, these are never suppressed by ``suppress_flow_events``. Like
every flow event they carry the flow name and ``flow_id`` (the session id), never a copy
of the state, so emitting one costs the same on turn 1 and turn 1,000. When a turn is
streamed (``stream_turn``), each becomes a ``StreamFrame`` on the ``conversation``
channel.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Literal

from pydantic import ConfigDict, Field

from voxflow.flow.events import FlowEvent

if TYPE_CHECKING:
    from voxflow.llm import LLMEvent

__all__ = [
    "ConversationEventBase",
    "ConversationMessageAdded",
    "ConversationRouteSelected",
    "ConversationTurnCompleted",
    "ConversationTurnFailed",
    "ConversationTurnStarted",
    "LLMFrame",
    "SessionTracesFinalized",
]


@dataclasses.dataclass(frozen=True, slots=True)
class LLMFrame:
    """An LLM (or tool) event of a streamed turn, as its ``llm`` (``tool``) frame's
    :attr:`~voxflow.flow.StreamFrame.event`: the event, and the flow method whose call
    it is (None outside a method)."""

    event: LLMEvent
    method: str | None


class ConversationEventBase(FlowEvent):
    """Base of the conversation events (subscribe to it to get all of them)."""

    model_config = ConfigDict(defer_build=True)  # built on first use: a lighter import


class ConversationTurnStarted(ConversationEventBase):
    """``handle_turn`` accepted a user message and is about to run the graph."""

    kind: Literal["conversation_turn_started"] = "conversation_turn_started"
    turn_index: int = Field(description="1-based turn number within this Flow instance")


class ConversationMessageAdded(ConversationEventBase):
    """A message was appended to the canonical history."""

    kind: Literal["conversation_message_added"] = "conversation_message_added"
    role: str
    content: Any = None
    message_index: int = Field(description="position of the message in state.messages")
    name: str | None = None


class ConversationRouteSelected(ConversationEventBase):
    """``route_conversation`` chose the route of this turn."""

    kind: Literal["conversation_route_selected"] = "conversation_route_selected"
    route: str
    previous_intent: str | None = None
    message_index: int = Field(description="index of the user message being routed")
    source: Literal["route_turn", "intent", "answer_from_history", "default"] = Field(
        description="which precedence rule chose the route"
    )


class ConversationTurnCompleted(ConversationEventBase):
    """The turn's graph finished; ``reply`` is the assistant text recorded, if any."""

    kind: Literal["conversation_turn_completed"] = "conversation_turn_completed"
    turn_index: int
    route: str | None = None
    reply: str | None = None


class ConversationTurnFailed(ConversationEventBase):
    """The turn raised; the exception propagates to the caller."""

    kind: Literal["conversation_turn_failed"] = "conversation_turn_failed"
    turn_index: int
    error_type: str
    error: str


class SessionTracesFinalized(ConversationEventBase):
    """``finalize_session_traces()`` closed the session's trace batch."""

    kind: Literal["session_traces_finalized"] = "session_traces_finalized"
    turns: int = Field(description="turns recorded in the batch")
