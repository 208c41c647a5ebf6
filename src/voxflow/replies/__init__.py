"""Background announcements and the speaking floor (:class:`ReplyQueue`).

See :mod:`voxflow.replies.queue` for the lock model and the delivery pattern.
"""

from voxflow.replies.announced import INTERRUPTED_MARK as INTERRUPTED_MARK
from voxflow.replies.announced import record_announcement as record_announcement
from voxflow.replies.queue import ReplyQueue as ReplyQueue
from voxflow.replies.records import MAX_CLIENT_SEQ as MAX_CLIENT_SEQ
from voxflow.replies.records import MAX_CLIENT_SEQ_STEP as MAX_CLIENT_SEQ_STEP
from voxflow.replies.records import ClientActivity as ClientActivity
from voxflow.replies.records import CoveredUpdate as CoveredUpdate
from voxflow.replies.records import DeliveryFloor as DeliveryFloor
from voxflow.replies.records import DeliveryRecord as DeliveryRecord
from voxflow.replies.records import DeliveryStatus as DeliveryStatus
from voxflow.replies.records import ReplyQueueState as ReplyQueueState
from voxflow.replies.records import ReplyQueueStatistics as ReplyQueueStatistics
from voxflow.replies.records import SettleStatus as SettleStatus

__all__ = [
    "INTERRUPTED_MARK",
    "MAX_CLIENT_SEQ",
    "MAX_CLIENT_SEQ_STEP",
    "ClientActivity",
    "CoveredUpdate",
    "DeliveryFloor",
    "DeliveryRecord",
    "DeliveryStatus",
    "ReplyQueue",
    "ReplyQueueState",
    "ReplyQueueStatistics",
    "SettleStatus",
    "record_announcement",
]
