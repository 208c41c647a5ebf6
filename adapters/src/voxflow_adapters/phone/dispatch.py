"""A phone call in the dispatch tables: what the phone front door asks a phone call worker
(:class:`PhoneRequest`, in the request row's body), what the worker answers
(:class:`StreamAnswer`: its media stream's address and the one-time stream token), and
the session a carrier's call is kept in (:func:`phone_session_id`: one call id, one
session, however many streams and workers it goes through).
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field

from voxflow.ids import SessionId

__all__ = ["CALL_ID_PATTERN", "PhoneRequest", "StreamAnswer", "phone_session_id"]

CALL_ID_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
"""A carrier's call id as the front door accepts it (Twilio's ``CA`` + 32 hex)."""


class PhoneRequest(BaseModel):
    """A phone call for a call worker (the JSON body of its request row)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: str = Field("phone", pattern="^phone$")
    call_id: str = Field(pattern=CALL_ID_PATTERN.pattern)
    """The carrier's id of the call (Twilio's ``CallSid``)."""
    reconnect: int = Field(0, ge=0, le=100)
    """0 for the call's first stream; n for its n-th reconnection after a stream ended
    that the session did not end (a worker died, or handed the call over)."""


class StreamAnswer(BaseModel):
    """A phone call worker's answer: where the carrier opens the call's media stream."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    stream_url: str = Field(pattern="^wss?://")
    token: str = Field(min_length=16, max_length=128, repr=False)
    """The one-time stream token the stream's ``start`` must carry."""


def phone_session_id(call_id: str) -> SessionId:
    """The session of the carrier's call ``call_id``: every stream of the call, on any
    worker, goes on with it.

    Raises:
        ValueError: ``call_id`` is not a call id (:data:`CALL_ID_PATTERN`).
    """
    if not isinstance(call_id, str) or not CALL_ID_PATTERN.fullmatch(call_id):
        raise ValueError("call_id must be 1-64 letters, digits, '_' or '-'")
    return SessionId(f"phone-{call_id}")
