"""Conversational flows: state, configuration, routing and the turn APIs.

The state models live in :mod:`voxflow.conversation.state`; they are re-exported here
and from :mod:`voxflow`.
"""

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
