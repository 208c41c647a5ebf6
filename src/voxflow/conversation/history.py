"""The history of a conversation: appending messages and agent results.

:class:`History` belongs to the conversation part (:mod:`voxflow.conversation.part`);
:class:`voxflow.Flow`'s history methods (``append_message``, ``append_assistant_message``,
``append_agent_result``, ``conversation_messages``, ``receive_user_message``,
``classify_intent``) delegate to it.

Every append is O(1) and emits ``conversation_message_added`` (on the event bus, and as a
``conversation`` frame when the turn is streamed). ``append_agent_result`` keeps private
agent work out of the canonical history: it lands in ``state.events`` and
``state.agent_threads[agent]``, and becomes a visible assistant message only when public
(explicitly, or through ``ConversationConfig.visible_agent_outputs``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel

from voxflow.conversation.config import class_config
from voxflow.conversation.events import ConversationMessageAdded
from voxflow.conversation.helpers import (
    TurnFacts,
    append_message,
    get_state_field,
    set_state_field,
    validate_user_message,
)
from voxflow.conversation.routing import classify_intent
from voxflow.conversation.state import ConversationEvent, ConversationMessage
from voxflow.llm import BaseLLM

if TYPE_CHECKING:
    from voxflow.flow.host import FlowHost

__all__ = ["History", "result_text"]


def result_text(result: Any) -> str | None:
    """The text of a handler or agent result: a string, or a string ``.raw``."""
    if isinstance(result, str):
        return result
    raw = getattr(result, "raw", None)
    return raw if isinstance(raw, str) else None


class History:
    """The history API of one Flow's conversation (see the module docs).

    Every append is O(1) and emits ``conversation_message_added`` (on the event bus,
    and as a ``conversation`` frame when the turn is streamed).

    Args:
        host: the Flow, as its parts see it.
        turn: what the current turn has done (appends note the reply here).

    Attributes:
        reply_identity: ``turn_id`` and ``delivery_id`` of the tracked reply in flight
            (set by ``TurnRunner`` for its turn), put in the metadata of every assistant
            message appended meanwhile: what cuts the reply later finds its message by
            identity, not by comparing texts.
    """

    __slots__ = ("_host", "_turn", "reply_identity")

    def __init__(self, host: FlowHost, turn: TurnFacts) -> None:
        self._host = host
        self._turn = turn
        self.reply_identity: dict[str, str] | None = None

    def emit(self, event_type: type[BaseModel], **fields: Any) -> None:
        """Emit a conversation event on the bus and, when streaming, as a
        ``conversation`` frame; nothing is built when nobody listens."""
        self._host.emit(event_type, channel="conversation", **fields)

    def append_message(self, role: str, content: Any, **extra: Any) -> Any:
        """:meth:`voxflow.Flow.append_message`."""
        flow = self._host.flow
        if role == "assistant" and self.reply_identity is not None:
            extra["metadata"] = {**self.reply_identity, **(extra.get("metadata") or {})}
        message = append_message(flow, role, content, **extra)
        if role == "assistant":
            self._turn.assistant_appended = True
            self._turn.reply = content if isinstance(content, str) else None
        messages = get_state_field(flow, "messages", None)
        index = len(messages) - 1 if isinstance(messages, list) else 0
        self.emit(
            ConversationMessageAdded,
            role=role,
            content=content,
            message_index=index,
            name=extra.get("name"),
        )
        return message

    def append_assistant_message(self, content: Any, **extra: Any) -> Any:
        """:meth:`voxflow.Flow.append_assistant_message`."""
        if content is not None and not isinstance(content, str | list):
            raise TypeError("content must be a string, a list of content parts or None")
        return self._host.flow.append_message("assistant", content, **extra)

    def append_agent_result(
        self, agent_name: str, result: Any, visibility: Literal["private", "public"]
    ) -> ConversationEvent:
        """:meth:`voxflow.Flow.append_agent_result`."""
        if not isinstance(agent_name, str) or not agent_name.strip():
            raise ValueError("agent_name must be a non-empty string")
        if visibility not in ("private", "public"):
            raise ValueError("visibility must be 'private' or 'public'")
        flow = self._host.flow
        text = result_text(result)
        if text is None:
            text = result.model_dump_json() if isinstance(result, BaseModel) else str(result)
        public = visibility == "public" or class_config(type(flow)).agent_is_visible(agent_name)
        event = ConversationEvent(
            type="agent_result",
            payload={"content": text},
            agent_name=agent_name,
            visibility="public" if public else "private",
        )
        events = get_state_field(flow, "events", None)
        if events is None:
            set_state_field(flow, "events", [event])
        else:
            events.append(event)
        threads = get_state_field(flow, "agent_threads", None)
        message = ConversationMessage(role="assistant", content=text, name=agent_name)
        if threads is None:
            set_state_field(flow, "agent_threads", {agent_name: [message]})
        else:
            threads.setdefault(agent_name, []).append(message)
        self._turn.agent_results = (*self._turn.agent_results, id(result))
        if public:
            flow.append_assistant_message(text, name=agent_name)
        return event

    def receive_user_message(
        self,
        text: str,
        outcomes: Sequence[str] | None,
        llm: BaseLLM | str | Mapping[str, Any] | None,
    ) -> str | None:
        """:meth:`voxflow.Flow.receive_user_message`."""
        validate_user_message(text, "text")
        if outcomes is not None and llm is None:
            raise ValueError("llm is required with outcomes")
        self.record_user_message(text)
        if outcomes is None:
            return None
        assert llm is not None
        intent = classify_intent(text, outcomes, llm=llm)
        set_state_field(self._host.flow, "last_intent", intent)
        return intent

    def record_user_message(self, text: str, files: Sequence[Any] = ()) -> None:
        """Append the user's message and set ``current``/``last_user_message``."""
        flow = self._host.flow
        if files:
            flow.append_message("user", text, files=list(files))
        else:
            flow.append_message("user", text)
        state = flow.state
        if isinstance(state, dict):
            state["current_user_message"] = text
            state["last_user_message"] = text
            return
        fields = type(state).model_fields
        if "current_user_message" in fields:
            state.current_user_message = text
        if "last_user_message" in fields:
            state.last_user_message = text
