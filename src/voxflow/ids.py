"""Typed identities: session → turn → delivery → segment (see ARCHITECTURE.md).

They are ``NewType``s over ``str``, so they cost nothing at run time and a type
checker keeps a ``TurnId`` from being passed where a ``DeliveryId`` is expected.
"""

from __future__ import annotations

import uuid
from typing import NewType

__all__ = [
    "DeliveryId",
    "JobId",
    "SessionId",
    "TurnId",
    "new_delivery_id",
    "new_job_id",
    "new_session_id",
    "new_turn_id",
]

SessionId = NewType("SessionId", str)
TurnId = NewType("TurnId", str)
DeliveryId = NewType("DeliveryId", str)
JobId = NewType("JobId", str)


def new_session_id() -> SessionId:
    """A fresh random session identity (uuid4)."""
    return SessionId(str(uuid.uuid4()))


def new_turn_id() -> TurnId:
    """A fresh random turn identity (uuid4)."""
    return TurnId(str(uuid.uuid4()))


def new_delivery_id() -> DeliveryId:
    """A fresh random delivery (reply) identity (uuid4)."""
    return DeliveryId(str(uuid.uuid4()))


def new_job_id() -> JobId:
    """A fresh random job identity (uuid4)."""
    return JobId(str(uuid.uuid4()))
