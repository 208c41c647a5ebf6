"""Tracked turns and public replies: identities, the transport fence, interruption.

:class:`TurnLedger` holds the rules (pure, no flow); :class:`TurnRunner` drives a
conversational Flow's streaming turn through them.
"""

from voxflow.turns.ledger import ActiveTurn as ActiveTurn
from voxflow.turns.ledger import TurnLedger as TurnLedger
from voxflow.turns.records import ReplyEvent as ReplyEvent
from voxflow.turns.records import ReplyEventType as ReplyEventType
from voxflow.turns.records import ReplyKind as ReplyKind
from voxflow.turns.records import ReplyRecord as ReplyRecord
from voxflow.turns.records import ReplyStatus as ReplyStatus
from voxflow.turns.records import TurnRecord as TurnRecord
from voxflow.turns.records import TurnState as TurnState
from voxflow.turns.records import TurnStatus as TurnStatus
from voxflow.turns.runner import DEFAULT_PUBLIC_METHODS as DEFAULT_PUBLIC_METHODS
from voxflow.turns.runner import ReplyStream as ReplyStream
from voxflow.turns.runner import TurnRunner as TurnRunner

__all__ = [
    "DEFAULT_PUBLIC_METHODS",
    "ActiveTurn",
    "ReplyEvent",
    "ReplyEventType",
    "ReplyKind",
    "ReplyRecord",
    "ReplyStatus",
    "ReplyStream",
    "TurnLedger",
    "TurnRecord",
    "TurnRunner",
    "TurnState",
    "TurnStatus",
]
