"""Conversation state: the canonical chat history a conversational Flow keeps.

``ConversationState`` is the state model of a conversational ``Flow``; subclass it to add
domain fields (``TurnState`` in :mod:`voxflow.turns` does). It is deliberately a plain,
mutable pydantic model with no validators that walk the history, so appending one message
or event is O(1) and a turn's cost does not grow with the length of the conversation.

``ChatState`` and ``ConversationalInputs`` are the legacy, lower-level shapes kept for
custom orchestration (see ``voxflow.conversation.helpers``).
"""

from __future__ import annotations

from typing import Any, Literal, TypedDict

from pydantic import BaseModel, ConfigDict, Field

from voxflow.files import FileRef, file_parts
from voxflow.ids import SessionId, new_session_id

__all__ = [
    "ChatState",
    "ConversationEvent",
    "ConversationMessage",
    "ConversationState",
    "ConversationalInputs",
    "MessageRole",
    "Visibility",
]

MessageRole = Literal["user", "assistant", "system", "tool"]
"""Who wrote a message, in the OpenAI/litellm chat vocabulary."""

Visibility = Literal["private", "public"]
"""Whether an agent result is scratch work (private) or part of the visible chat (public)."""


class ConversationMessage(BaseModel):
    """One message of the canonical history, in the shape chat-completion APIs expect.

    Messages are frozen: history is append-only, so an LLM call, a persisted snapshot and
    a stream frame can all share one message object without copying it.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    role: MessageRole = Field(description="user, assistant, system or tool")
    content: str | list[dict[str, Any]] | None = Field(
        default=None, description="text, a list of content parts (multimodal), or None"
    )
    name: str | None = Field(default=None, description="optional author name (e.g. a tool)")
    tool_call_id: str | None = Field(
        default=None, description="for role='tool': the call this message answers"
    )
    tool_calls: list[dict[str, Any]] | None = Field(
        default=None, description="for role='assistant': tool calls the model requested"
    )
    files: list[FileRef | str] | None = Field(
        default=None,
        description="files attached to this message: FileRef records of input_files "
        "(stored by reference), or paths/URLs",
    )
    metadata: dict[str, Any] = Field(
        default_factory=dict,
        description="application data; never sent to the LLM",
    )

    def to_llm(self) -> dict[str, Any]:
        """This message as a litellm/OpenAI chat message dict (no metadata, no Nones)."""
        out: dict[str, Any] = {"role": self.role, "content": self.content}
        refs = [f for f in self.files or () if isinstance(f, FileRef)]
        if refs:  # input files: litellm multimodal content parts
            parts: list[dict[str, Any]] = (
                [{"type": "text", "text": self.content}]
                if isinstance(self.content, str) and self.content
                else list(self.content or [])
            )
            for ref in refs:
                parts.extend(file_parts(ref))
            out["content"] = parts
        if self.name is not None:
            out["name"] = self.name
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        if self.tool_calls is not None:
            out["tool_calls"] = self.tool_calls
        return out

    @property
    def text(self) -> str:
        """The message's text: ``content`` if a string, else its text parts joined."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        parts = [p.get("text", "") for p in self.content if p.get("type", "text") == "text"]
        return "".join(str(p) for p in parts)


class ConversationEvent(BaseModel):
    """A structured fact recorded during the conversation (e.g. an agent's result).

    Events are the audit trail next to the history: private agent work lands here and in
    ``ConversationState.agent_threads`` without polluting ``messages``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    type: str = Field(description="what happened, e.g. 'agent_result'")
    payload: dict[str, Any] = Field(default_factory=dict, description="JSON-compatible data")
    agent_name: str | None = Field(default=None, description="the agent it concerns, if any")
    visibility: Visibility = Field(
        default="private", description="public events were also added to the visible history"
    )


class ConversationState(BaseModel):
    """State of a conversational Flow: one session's history, routing and lifecycle.

    ``id`` is the session id: ``handle_turn(..., session_id=...)`` stamps it, and
    ``@persist`` stores snapshots under it, so a fresh Flow with the same id continues
    the conversation.
    """

    model_config = ConfigDict(defer_build=True)

    id: SessionId = Field(default_factory=new_session_id, description="the session id (uuid4)")
    messages: list[ConversationMessage] = Field(
        default_factory=list, description="canonical history, oldest first"
    )
    current_user_message: str | None = Field(
        default=None, description="the user line of the turn being handled"
    )
    last_user_message: str | None = Field(
        default=None, description="the most recent user line (kept after the turn)"
    )
    last_intent: str | None = Field(
        default=None,
        description="the route chosen for the last turn; router context, never a fallback",
    )
    ended: bool = Field(default=False, description="true once the conversation ended")
    events: list[ConversationEvent] = Field(
        default_factory=list, description="structured audit trail (agent results, ...)"
    )
    agent_threads: dict[str, list[ConversationMessage]] = Field(
        default_factory=dict, description="private per-agent message threads, by agent name"
    )
    session_ready: bool = Field(
        default=False, description="one-time bootstrap flag, set by conversation_start()"
    )


class ChatState(BaseModel):
    """Legacy lower-level chat state: history as plain ``{role, content}`` dicts.

    Kept for custom orchestration with ``voxflow.conversation`` helpers; new code uses
    ``ConversationState``.
    """

    model_config = ConfigDict(extra="allow", defer_build=True)

    id: SessionId = Field(default_factory=new_session_id, description="the session id (uuid4)")
    messages: list[dict[str, Any]] = Field(
        default_factory=list, description="LLM history as {role, content} dicts"
    )
    last_user_message: str | None = Field(default=None, description="latest user line")
    last_intent: str | None = Field(default=None, description="route after classification")
    session_ready: bool = Field(default=False, description="one-time bootstrap flag")


class ConversationalInputs(TypedDict, total=False):
    """Conventional ``kickoff(inputs={...})`` keys of a conversational run."""

    id: str
    user_message: str
    last_intent: str | None
