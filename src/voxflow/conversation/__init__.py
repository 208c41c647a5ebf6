"""Conversational flows: state, configuration, routing, the turn APIs and tracing.

A ``Flow`` becomes conversational with ``conversational = True`` or
``@ConversationConfig(...)``; then ``handle_turn``/``ahandle_turn``,
``stream_turn``/``astream_turn`` and ``chat`` run one user message at a time through the
built-in graph, held by every Flow as ``flow.conversation`` (see
:mod:`voxflow.conversation.part` and :mod:`voxflow.conversation.graph`). The module
helpers below work on any state shape, for custom orchestration and tests. Declarative
flows are built with ``Flow.from_declaration`` (:mod:`voxflow.conversation.declaration`).
"""

from voxflow.conversation.config import ConversationalConfig as ConversationalConfig
from voxflow.conversation.config import ConversationConfig as ConversationConfig
from voxflow.conversation.config import RouterConfig as RouterConfig
from voxflow.conversation.events import ConversationEventBase as ConversationEventBase
from voxflow.conversation.events import ConversationMessageAdded as ConversationMessageAdded
from voxflow.conversation.events import ConversationRouteSelected as ConversationRouteSelected
from voxflow.conversation.events import ConversationTurnCompleted as ConversationTurnCompleted
from voxflow.conversation.events import ConversationTurnFailed as ConversationTurnFailed
from voxflow.conversation.events import ConversationTurnStarted as ConversationTurnStarted
from voxflow.conversation.events import SessionTracesFinalized as SessionTracesFinalized
from voxflow.conversation.graph import END_REPLY as END_REPLY
from voxflow.conversation.graph import NO_LLM_REPLY as NO_LLM_REPLY
from voxflow.conversation.graph import RouterContext as RouterContext
from voxflow.conversation.helpers import append_message as append_message
from voxflow.conversation.helpers import get_conversation_messages as get_conversation_messages
from voxflow.conversation.helpers import get_conversational_config as get_conversational_config
from voxflow.conversation.helpers import input_history_to_messages as input_history_to_messages
from voxflow.conversation.helpers import normalize_kickoff_inputs as normalize_kickoff_inputs
from voxflow.conversation.helpers import (
    prepare_conversational_turn as prepare_conversational_turn,
)
from voxflow.conversation.helpers import receive_user_message as receive_user_message
from voxflow.conversation.helpers import set_state_field as set_state_field
from voxflow.conversation.persistence import (
    SQLiteConversationPersistence as SQLiteConversationPersistence,
)
from voxflow.conversation.routing import BUILTIN_ROUTE_DESCRIPTIONS as BUILTIN_ROUTE_DESCRIPTIONS
from voxflow.conversation.routing import RouteCatalog as RouteCatalog
from voxflow.conversation.routing import aclassify_intent as aclassify_intent
from voxflow.conversation.routing import classify_intent as classify_intent
from voxflow.conversation.state import ChatState as ChatState
from voxflow.conversation.state import ConversationalInputs as ConversationalInputs
from voxflow.conversation.state import ConversationEvent as ConversationEvent
from voxflow.conversation.state import ConversationMessage as ConversationMessage
from voxflow.conversation.state import ConversationState as ConversationState
from voxflow.conversation.tracing import InMemoryTraceRecorder as InMemoryTraceRecorder
from voxflow.conversation.tracing import JsonlTraceExporter as JsonlTraceExporter
from voxflow.conversation.tracing import TraceBatch as TraceBatch
from voxflow.conversation.tracing import TraceExporter as TraceExporter
from voxflow.conversation.tracing import add_trace_exporter as add_trace_exporter
from voxflow.conversation.tracing import remove_trace_exporter as remove_trace_exporter

__all__ = [
    "BUILTIN_ROUTE_DESCRIPTIONS",
    "END_REPLY",
    "NO_LLM_REPLY",
    "ChatState",
    "ConversationConfig",
    "ConversationEvent",
    "ConversationEventBase",
    "ConversationMessage",
    "ConversationMessageAdded",
    "ConversationRouteSelected",
    "ConversationState",
    "ConversationTurnCompleted",
    "ConversationTurnFailed",
    "ConversationTurnStarted",
    "ConversationalConfig",
    "ConversationalInputs",
    "InMemoryTraceRecorder",
    "JsonlTraceExporter",
    "RouteCatalog",
    "RouterConfig",
    "RouterContext",
    "SQLiteConversationPersistence",
    "SessionTracesFinalized",
    "TraceBatch",
    "TraceExporter",
    "aclassify_intent",
    "add_trace_exporter",
    "append_message",
    "classify_intent",
    "get_conversation_messages",
    "get_conversational_config",
    "input_history_to_messages",
    "normalize_kickoff_inputs",
    "prepare_conversational_turn",
    "receive_user_message",
    "remove_trace_exporter",
    "set_state_field",
]
