"""voxflow: a conversational Flow runtime for voice assistants.

The names in ``__all__`` are the public surface. They load lazily (PEP 562): ``import
voxflow`` runs no submodule, and ``from voxflow import Flow`` imports the Flow core and the
conversation built on it (:mod:`voxflow.conversation.flow`) but not the turn, reply-queue,
job or agent APIs.
The first access to a name imports its module once and caches the name here.

To re-export a name, add it in three places, kept in step by ``tests/test_import.py``:
the ``TYPE_CHECKING`` block (so mypy and pyright see it), ``_LAZY`` (name -> module) and
the sorted ``__all__``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from voxflow.agent import Agent as Agent
    from voxflow.agent import AgentResult as AgentResult
    from voxflow.conversation.config import ConversationalConfig as ConversationalConfig
    from voxflow.conversation.config import ConversationConfig as ConversationConfig
    from voxflow.conversation.config import RouterConfig as RouterConfig
    from voxflow.conversation.flow import Flow as Flow
    from voxflow.conversation.state import ChatState as ChatState
    from voxflow.conversation.state import ConversationalInputs as ConversationalInputs
    from voxflow.conversation.state import ConversationEvent as ConversationEvent
    from voxflow.conversation.state import ConversationMessage as ConversationMessage
    from voxflow.conversation.state import ConversationState as ConversationState
    from voxflow.flow import CheckpointConfig as CheckpointConfig
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

_LAZY: dict[str, str] = {
    "LLM": "voxflow.llm",
    "Agent": "voxflow.agent",
    "AgentResult": "voxflow.agent",
    "BaseLLM": "voxflow.llm",
    "ChatState": "voxflow.conversation.state",
    "CheckpointConfig": "voxflow.flow",
    "ClientActivity": "voxflow.replies",
    "ConversationConfig": "voxflow.conversation.config",
    "ConversationEvent": "voxflow.conversation.state",
    "ConversationMessage": "voxflow.conversation.state",
    "ConversationState": "voxflow.conversation.state",
    "ConversationalConfig": "voxflow.conversation.config",
    "ConversationalInputs": "voxflow.conversation.state",
    "CoveredUpdate": "voxflow.replies",
    "DeliveryFloor": "voxflow.replies",
    "DeliveryRecord": "voxflow.replies",
    "Flow": "voxflow.conversation.flow",
    "FlowDefinition": "voxflow.flow",
    "FlowEventBus": "voxflow.flow",
    "FlowPersistence": "voxflow.flow",
    "FlowState": "voxflow.flow",
    "HumanFeedbackPending": "voxflow.flow",
    "HumanFeedbackResult": "voxflow.flow",
    "JobRecord": "voxflow.jobs",
    "JobRunner": "voxflow.jobs",
    "JobState": "voxflow.jobs",
    "JobUpdate": "voxflow.jobs",
    "JobWorkFlow": "voxflow.jobs",
    "JobWorkState": "voxflow.jobs",
    "ReplyEvent": "voxflow.turns",
    "ReplyQueue": "voxflow.replies",
    "ReplyQueueState": "voxflow.replies",
    "ReplyRecord": "voxflow.turns",
    "RouterConfig": "voxflow.conversation.config",
    "SQLiteFlowPersistence": "voxflow.flow",
    "StreamFrame": "voxflow.flow",
    "StreamSession": "voxflow.flow",
    "TurnRecord": "voxflow.turns",
    "TurnRunner": "voxflow.turns",
    "TurnState": "voxflow.turns",
    "add_job": "voxflow.jobs",
    "and_": "voxflow.flow",
    "commit_job_update": "voxflow.jobs",
    "human_feedback": "voxflow.flow",
    "listen": "voxflow.flow",
    "or_": "voxflow.flow",
    "persist": "voxflow.flow",
    "router": "voxflow.flow",
    "start": "voxflow.flow",
}
"""Each public name -> the module that defines it (imported on first access)."""

_SUBMODULES: frozenset[str] = frozenset(
    {
        "agent",
        "clock",
        "conversation",
        "errors",
        "flow",
        "ids",
        "jobs",
        "llm",
        "replies",
        "testing",
        "turns",
    }
)
"""Subpackages reachable as attributes (``voxflow.flow``) without an explicit import."""


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


if not TYPE_CHECKING:  # hidden from type checkers, so a misspelt name is still an error

    def __getattr__(name: str) -> Any:
        module_name = _LAZY.get(name)
        if module_name is not None:
            value = getattr(importlib.import_module(module_name), name)
        elif name in _SUBMODULES:
            value = importlib.import_module(f"{__name__}.{name}")
        else:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        globals()[name] = value
        return value
