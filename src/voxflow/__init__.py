"""voxflow."""

from voxflow.agent import Agent as Agent
from voxflow.agent import AgentResult as AgentResult
from voxflow.conversation.config import ConversationalConfig as ConversationalConfig
from voxflow.conversation.config import ConversationConfig as ConversationConfig
from voxflow.conversation.config import RouterConfig as RouterConfig
from voxflow.conversation.state import ChatState as ChatState
from voxflow.conversation.state import ConversationalInputs as ConversationalInputs
from voxflow.conversation.state import ConversationEvent as ConversationEvent
from voxflow.conversation.state import ConversationMessage as ConversationMessage
from voxflow.conversation.state import ConversationState as ConversationState
from voxflow.flow import CheckpointConfig as CheckpointConfig
from voxflow.flow import Flow as Flow
from voxflow.flow import FlowDefinition as FlowDefinition
from voxflow.flow import FlowEventBus as FlowEventBus
from voxflow.flow import FlowPersistence as FlowPersistence
from voxflow.flow import FlowState as FlowState
from voxflow.flow import HumanFeedbackPending as HumanFeedbackPending
from voxflow.flow import HumanFeedbackResult as HumanFeedbackResult
from voxflow.flow import SQLiteFlowPersistence as SQLiteFlowPersistence
from voxflow.flow import StreamFrame as StreamFrame
from voxflow.flow import StreamSession as StreamSession
from voxflow.flow import and_ as and_
from voxflow.flow import human_feedback as human_feedback
from voxflow.flow import listen as listen
from voxflow.flow import or_ as or_
from voxflow.flow import persist as persist
from voxflow.flow import router as router
from voxflow.flow import start as start
from voxflow.llm import LLM as LLM
from voxflow.llm import BaseLLM as BaseLLM

__all__ = [
    "LLM",
    "Agent",
    "AgentResult",
    "BaseLLM",
    "ChatState",
    "CheckpointConfig",
    "ConversationConfig",
    "ConversationEvent",
    "ConversationMessage",
    "ConversationState",
    "ConversationalConfig",
    "ConversationalInputs",
    "Flow",
    "FlowDefinition",
    "FlowEventBus",
    "FlowPersistence",
    "FlowState",
    "HumanFeedbackPending",
    "HumanFeedbackResult",
    "RouterConfig",
    "SQLiteFlowPersistence",
    "StreamFrame",
    "StreamSession",
    "and_",
    "human_feedback",
    "listen",
    "or_",
    "persist",
    "router",
    "start",
]
