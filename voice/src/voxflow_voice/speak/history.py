"""History = heard: after an interruption, the conversation keeps what the user heard.

The LLM's next context must match the user's experience. When a reply is cut, the
assistant message of that turn is replaced by the words actually played (see
:mod:`voxflow_voice.speak.heard`), marked interrupted, with the heard duration and the full
generated text kept in its metadata.
"""

from __future__ import annotations

from typing import Any

from voxflow.conversation import ConversationMessage
from voxflow.ids import DeliveryId, TurnId
from voxflow.replies.announced import INTERRUPTED_MARK

from .heard import HeardReply

__all__ = ["INTERRUPTED_MARK", "record_heard"]



def record_heard(state: Any, turn_id: TurnId, delivery_id: DeliveryId, heard: HeardReply) -> None:
    """Cut the assistant message of ``turn_id`` to what was heard (or add one).

    The message to cut is the last assistant message after the turn's user message; if
    the flow recorded none (generation was cancelled first), one is appended. Runs under
    the session's state lock.
    """
    messages: list[ConversationMessage] = state.messages
    content = f"{heard.text} {INTERRUPTED_MARK}".strip()
    metadata: dict[str, Any] = {
        "interrupted": True,
        "heard_seconds": round(heard.heard_seconds, 3),
        "generated_text": heard.full_text,
        "turn_id": turn_id,
        "delivery_id": delivery_id,
    }
    index = _assistant_message_of_turn(messages)
    if index is None:
        messages.append(
            ConversationMessage(role="assistant", content=content, metadata=metadata)
        )
        return
    target = messages[index]
    if isinstance(target.content, str) and target.content:
        metadata["generated_text"] = target.content
    fields = target.model_dump()
    fields.update(content=content, metadata={**target.metadata, **metadata})
    messages[index] = ConversationMessage(**fields)  # messages are frozen: replace, validated


def _assistant_message_of_turn(messages: list[ConversationMessage]) -> int | None:
    for index in range(len(messages) - 1, -1, -1):
        role = messages[index].role
        if role == "user":
            return None
        if role == "assistant":
            return index
    return None
