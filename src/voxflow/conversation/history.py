"""The history API of a conversational Flow: appending messages and agent results.

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

from voxflow.conversation.events import ConversationMessageAdded
from voxflow.conversation.helpers import (
    append_message,
    get_conversation_messages,
    get_state_field,
    set_state_field,
    validate_user_message,
)
from voxflow.conversation.routing import aclassify_intent, classify_intent
from voxflow.conversation.state import ConversationEvent, ConversationMessage
from voxflow.llm import BaseLLM

if TYPE_CHECKING:
    from voxflow.conversation.config import ConversationConfig
    from voxflow.flow.events import FlowEventBus

__all__ = ["ConversationHistory", "result_text"]


def result_text(result: Any) -> str | None:
    """The text of a handler or agent result: a string, or a string ``.raw``."""
    if isinstance(result, str):
        return result
    raw = getattr(result, "raw", None)
    return raw if isinstance(raw, str) else None


class ConversationHistory:
    """Mixin of :class:`voxflow.Flow`: history and agent-result helpers."""

    _turn_assistant_appended: bool = False
    _turn_reply: str | None = None
    _turn_agent_results: tuple[int, ...] = ()

    if TYPE_CHECKING:
        _frame_sink: Any

        @property
        def state(self) -> Any: ...
        @property
        def event_bus(self) -> FlowEventBus: ...
        @event_bus.setter
        def event_bus(self, bus: FlowEventBus) -> None: ...
        def _event_fields(self) -> dict[str, Any]: ...
        def emit_frame(
            self, channel: str, type: str, data: Mapping[str, Any] | None = None
        ) -> None: ...
        @classmethod
        def _conversation_config(cls) -> ConversationConfig: ...

    def _emit_conversation(self, event_type: type[BaseModel], **fields: Any) -> None:
        """Emit a conversation event on the bus and, when streaming, as a frame.

        Nothing is built when nobody listens, so an idle bus costs nothing per turn.
        """
        bus = self.event_bus
        if not bus.active and self._frame_sink is None:
            return
        event = event_type(**self._event_fields(), **fields)
        if bus.active:
            bus.emit(event)
        if self._frame_sink is not None:
            data = {k: getattr(event, k) for k in type(event).model_fields if k != "kind"}
            self.emit_frame("conversation", str(getattr(event, "kind", "")), data)

    def append_message(self, role: str, content: Any, **extra: Any) -> Any:
        """Append a message (role user/assistant/system/tool) to ``state.messages``.

        Lower level than :meth:`append_assistant_message`; ``extra`` are message fields
        (``name``, ``tool_call_id``, ``tool_calls``, ``files``, ``metadata``).

        Raises:
            ValueError: unknown role.
        """
        message = append_message(self, role, content, **extra)
        if role == "assistant":
            self._turn_assistant_appended = True
            text = content if isinstance(content, str) else None
            self._turn_reply = text
        messages = get_state_field(self, "messages", None)
        index = len(messages) - 1 if isinstance(messages, list) else 0
        self._emit_conversation(
            ConversationMessageAdded,
            role=role,
            content=content,
            message_index=index,
            name=extra.get("name"),
        )
        return message

    def append_assistant_message(self, content: Any, **extra: Any) -> Any:
        """Append a user-visible assistant reply; the next turn's ``converse`` sees it.

        A handler that calls it is not given a second copy from its return value.
        """
        if content is not None and not isinstance(content, str | list):
            raise TypeError("content must be a string, a list of content parts or None")
        return self.append_message("assistant", content, **extra)

    def append_agent_result(
        self,
        agent_name: str,
        result: Any,
        visibility: Literal["private", "public"] = "private",
    ) -> ConversationEvent:
        """Record an agent's result in ``state.events`` and ``state.agent_threads``.

        Public results (``visibility="public"``, or the agent listed in
        ``ConversationConfig.visible_agent_outputs``) are also appended as an assistant
        message. Either way the result object is never promoted a second time from the
        handler's return value.

        Raises:
            ValueError: empty ``agent_name`` or an unknown ``visibility``.
        """
        if not isinstance(agent_name, str) or not agent_name.strip():
            raise ValueError("agent_name must be a non-empty string")
        if visibility not in ("private", "public"):
            raise ValueError("visibility must be 'private' or 'public'")
        text = result_text(result)
        if text is None:
            text = result.model_dump_json() if isinstance(result, BaseModel) else str(result)
        public = visibility == "public" or self._conversation_config().agent_is_visible(agent_name)
        event = ConversationEvent(
            type="agent_result",
            payload={"content": text},
            agent_name=agent_name,
            visibility="public" if public else "private",
        )
        events = get_state_field(self, "events", None)
        if events is None:
            set_state_field(self, "events", [event])
        else:
            events.append(event)
        threads = get_state_field(self, "agent_threads", None)
        message = ConversationMessage(role="assistant", content=text, name=agent_name)
        if threads is None:
            set_state_field(self, "agent_threads", {agent_name: [message]})
        else:
            threads.setdefault(agent_name, []).append(message)
        self._turn_agent_results = (*self._turn_agent_results, id(result))
        if public:
            self.append_assistant_message(text, name=agent_name)
        return event

    @property
    def conversation_messages(self) -> list[dict[str, Any]]:
        """The canonical history as chat dicts, ready for an LLM (a new list)."""
        return get_conversation_messages(self)

    def receive_user_message(
        self,
        text: str,
        *,
        outcomes: Sequence[str] | None = None,
        llm: BaseLLM | str | Mapping[str, Any] | None = None,
    ) -> str | None:
        """Append a user message and set ``current``/``last_user_message``.

        With ``outcomes`` the text is classified (``llm`` required) and ``last_intent``
        set; returns that intent, else None. ``handle_turn`` does this for you.
        """
        validate_user_message(text, "text")
        if outcomes is not None and llm is None:
            raise ValueError("llm is required with outcomes")
        self._record_user_message(text)
        if outcomes is None:
            return None
        assert llm is not None
        intent = classify_intent(text, outcomes, llm=llm)
        set_state_field(self, "last_intent", intent)
        return intent

    def _record_user_message(self, text: str, files: Sequence[Any] = ()) -> None:
        if files:
            self.append_message("user", text, files=list(files))
        else:
            self.append_message("user", text)
        state = self.state
        if isinstance(state, dict):
            state["current_user_message"] = text
            state["last_user_message"] = text
            return
        fields = type(state).model_fields
        if "current_user_message" in fields:
            state.current_user_message = text
        if "last_user_message" in fields:
            state.last_user_message = text

    def classify_intent(
        self,
        text: str,
        outcomes: Sequence[str],
        *,
        llm: BaseLLM | str | Mapping[str, Any],
        context: str | None = None,
    ) -> str:
        """Map ``text`` to one of ``outcomes`` with ``llm`` (unmatched: the first outcome)."""
        return classify_intent(text, outcomes, llm=llm, context=context)

    async def aclassify_intent(
        self,
        text: str,
        outcomes: Sequence[str],
        *,
        llm: BaseLLM | str | Mapping[str, Any],
        context: str | None = None,
    ) -> str:
        """Async :meth:`classify_intent`."""
        return await aclassify_intent(text, outcomes, llm=llm, context=context)
