"""The Flow core: an event-driven graph of methods sharing one state.

Public names are re-exported here and from :mod:`voxflow`; the submodules are
implementation detail (see ``runtime.py`` for the documented behaviour). ``Flow`` here is
the core, without conversation; :class:`voxflow.Flow` builds conversational mode on it
(:mod:`voxflow.conversation.flow`). Nothing in this package imports
:mod:`voxflow.conversation`.
"""

from __future__ import annotations

from voxflow.flow.checkpoint import CheckpointConfig as CheckpointConfig
from voxflow.flow.definition import FlowDefinition as FlowDefinition
from voxflow.flow.definition import MethodDefinition as MethodDefinition
from voxflow.flow.dsl import Condition as Condition
from voxflow.flow.dsl import and_ as and_
from voxflow.flow.dsl import listen as listen
from voxflow.flow.dsl import or_ as or_
from voxflow.flow.dsl import router as router
from voxflow.flow.dsl import start as start
from voxflow.flow.events import FlowEvent as FlowEvent
from voxflow.flow.events import FlowEventBus as FlowEventBus
from voxflow.flow.events import FlowFailed as FlowFailed
from voxflow.flow.events import FlowFinished as FlowFinished
from voxflow.flow.events import FlowPaused as FlowPaused
from voxflow.flow.events import FlowStarted as FlowStarted
from voxflow.flow.events import MethodCancelled as MethodCancelled
from voxflow.flow.events import MethodFailed as MethodFailed
from voxflow.flow.events import MethodFinished as MethodFinished
from voxflow.flow.events import MethodStarted as MethodStarted
from voxflow.flow.events import Subscription as Subscription
from voxflow.flow.events import flow_event_bus as flow_event_bus
from voxflow.flow.feedback import ConsoleFeedbackProvider as ConsoleFeedbackProvider
from voxflow.flow.feedback import FeedbackContext as FeedbackContext
from voxflow.flow.feedback import FeedbackProvider as FeedbackProvider
from voxflow.flow.feedback import HumanFeedbackPending as HumanFeedbackPending
from voxflow.flow.feedback import HumanFeedbackResult as HumanFeedbackResult
from voxflow.flow.feedback import InputHistoryEntry as InputHistoryEntry
from voxflow.flow.feedback import PauseForFeedback as PauseForFeedback
from voxflow.flow.feedback import collapse_feedback as collapse_feedback
from voxflow.flow.feedback import human_feedback as human_feedback
from voxflow.flow.persistence import FlowPersistence as FlowPersistence
from voxflow.flow.persistence import SQLiteFlowPersistence as SQLiteFlowPersistence
from voxflow.flow.persistence import default_data_dir as default_data_dir
from voxflow.flow.persistence import persist as persist
from voxflow.flow.rollback import RollbackPoint as RollbackPoint
from voxflow.flow.runtime import Flow as Flow
from voxflow.flow.state import FlowState as FlowState
from voxflow.flow.streaming import StreamFrame as StreamFrame
from voxflow.flow.streaming import StreamSession as StreamSession

__all__ = [
    "CheckpointConfig",
    "Condition",
    "ConsoleFeedbackProvider",
    "FeedbackContext",
    "FeedbackProvider",
    "Flow",
    "FlowDefinition",
    "FlowEvent",
    "FlowEventBus",
    "FlowFailed",
    "FlowFinished",
    "FlowPaused",
    "FlowPersistence",
    "FlowStarted",
    "FlowState",
    "HumanFeedbackPending",
    "HumanFeedbackResult",
    "InputHistoryEntry",
    "MethodCancelled",
    "MethodDefinition",
    "MethodFailed",
    "MethodFinished",
    "MethodStarted",
    "PauseForFeedback",
    "RollbackPoint",
    "SQLiteFlowPersistence",
    "StreamFrame",
    "StreamSession",
    "Subscription",
    "and_",
    "collapse_feedback",
    "default_data_dir",
    "flow_event_bus",
    "human_feedback",
    "listen",
    "or_",
    "persist",
    "router",
    "start",
]
