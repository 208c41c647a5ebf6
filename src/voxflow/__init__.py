"""voxflow."""

from voxflow.conversation.state import ChatState as ChatState
from voxflow.conversation.state import ConversationalInputs as ConversationalInputs
from voxflow.conversation.state import ConversationEvent as ConversationEvent
from voxflow.conversation.state import ConversationMessage as ConversationMessage
from voxflow.conversation.state import ConversationState as ConversationState

__all__ = [
    "ChatState",
    "ConversationEvent",
    "ConversationMessage",
    "ConversationState",
    "ConversationalInputs",
]
