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
from voxflow.jobs import JobRecord as JobRecord
from voxflow.jobs import JobRunner as JobRunner
from voxflow.jobs import JobState as JobState
from voxflow.jobs import JobUpdate as JobUpdate
from voxflow.jobs import JobWorkFlow as JobWorkFlow
from voxflow.jobs import JobWorkState as JobWorkState
from voxflow.jobs import add_job as add_job
from voxflow.jobs import commit_job_update as commit_job_update
from voxflow.llm import LLM as LLM
from voxflow.llm import BaseLLM as BaseLLM
from voxflow.replies import ClientActivity as ClientActivity
from voxflow.replies import CoveredUpdate as CoveredUpdate
from voxflow.replies import DeliveryFloor as DeliveryFloor
from voxflow.replies import DeliveryRecord as DeliveryRecord
from voxflow.replies import ReplyQueue as ReplyQueue
from voxflow.replies import ReplyQueueState as ReplyQueueState
from voxflow.turns import ReplyEvent as ReplyEvent
from voxflow.turns import ReplyRecord as ReplyRecord
from voxflow.turns import TurnRecord as TurnRecord
from voxflow.turns import TurnRunner as TurnRunner
from voxflow.turns import TurnState as TurnState

__all__ = [
    "LLM",
    "Agent",
    "AgentResult",
    "BaseLLM",
    "ChatState",
    "CheckpointConfig",
    "ClientActivity",
    "ConversationConfig",
    "ConversationEvent",
    "ConversationMessage",
    "ConversationState",
    "ConversationalConfig",
    "ConversationalInputs",
    "CoveredUpdate",
    "DeliveryFloor",
    "DeliveryRecord",
    "Flow",
    "FlowDefinition",
    "FlowEventBus",
    "FlowPersistence",
    "FlowState",
    "HumanFeedbackPending",
    "HumanFeedbackResult",
    "JobRecord",
    "JobRunner",
    "JobState",
    "JobUpdate",
    "JobWorkFlow",
    "JobWorkState",
    "ReplyEvent",
    "ReplyQueue",
    "ReplyQueueState",
    "ReplyRecord",
    "RouterConfig",
    "SQLiteFlowPersistence",
    "StreamFrame",
    "StreamSession",
    "TurnRecord",
    "TurnRunner",
    "TurnState",
    "add_job",
    "and_",
    "commit_job_update",
    "human_feedback",
    "listen",
    "or_",
    "persist",
    "router",
    "start",
]
