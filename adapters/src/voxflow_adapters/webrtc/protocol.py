"""The data-channel protocol between the page and the server (version 1).

Every message is one JSON object with ``"v": 1`` and a ``"type"``. The server sends
what the session did (transcripts, reply text as it streams, state, interruptions,
latency marks): each session event's class declares its messages once
(:class:`~voxflow_voice.events.WireView`), and :func:`messages_for_event` encodes any
event from that declaration; the call's own messages (``hello``, ``error``, ``bye``,
``handover``) are declared here. The page sends what only it knows (the mute switch,
whether its audio element is playing). Page messages are validated with pydantic
(``extra="forbid"``, a size limit); an unknown or malformed message is rejected with a
logged reason and an ``error`` message back, and never touches the session. Page
messages are read by the
strict reader of :mod:`~voxflow_adapters.hosting.wire` (size and nesting limits,
duplicate keys refused, no type coercion: ``"v"`` is exactly the integer 1).

The README section "WebRTC browser calls" documents the messages for page authors.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field
from voxflow_voice.events import CallState, SessionEvent, WireView, state_view

from voxflow.ids import SessionId

from ..hosting.wire import ProtocolError, read_json, read_model

__all__ = [
    "MAX_MESSAGE_BYTES",
    "PROTOCOL_VERSION",
    "ByeMessage",
    "CallState",
    "ErrorMessage",
    "EventMessage",
    "HandoverMessage",
    "HangupMessage",
    "HelloMessage",
    "MuteMessage",
    "PageMessage",
    "PlaybackMessage",
    "ProtocolError",
    "ServerMessage",
    "messages_for_event",
    "parse_page_message",
    "state_message",
]

PROTOCOL_VERSION = 1
"""Bumped on any incompatible change; a page sending another version is rejected."""

MAX_MESSAGE_BYTES = 4096
"""Longest page message accepted (page messages are tiny; this bounds the parser)."""

class _Message(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    v: Literal[1] = Field(1, description="protocol version (PROTOCOL_VERSION)")


# -- page → server ----------------------------------------------------------------------


class MuteMessage(_Message):
    """The user switched the microphone off (``muted=true``) or on."""

    type: Literal["mute"]
    muted: bool


class PlaybackMessage(_Message):
    """The page's audio element started (``playing=true``) or stopped playing."""

    type: Literal["playback"]
    playing: bool


class HangupMessage(_Message):
    """The user hung up: end the call now (closing the tab ends it too, a bit later)."""

    type: Literal["hangup"]


PageMessage = Annotated[
    MuteMessage | PlaybackMessage | HangupMessage, Field(discriminator="type")
]


_PAGE_TYPES: dict[str, type[MuteMessage | PlaybackMessage | HangupMessage]] = {
    "mute": MuteMessage, "playback": PlaybackMessage, "hangup": HangupMessage,
}


def _short(value: object, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def parse_page_message(raw: str | bytes) -> MuteMessage | PlaybackMessage | HangupMessage:
    """Validate one page message (never raises anything but :class:`ProtocolError`).

    Raises:
        ProtocolError: too long, nested too deep, not UTF-8 JSON, a duplicate key, not an
            object, a version other than the integer 1, an unknown type, or missing,
            extra or mistyped fields (the reason names which).
    """
    data = read_json(raw, max_bytes=MAX_MESSAGE_BYTES)
    if not isinstance(data, dict):
        raise ProtocolError(f"message must be a JSON object, got {type(data).__name__}")
    version = data.get("v")
    if type(version) is not int or version != PROTOCOL_VERSION:  # True and 1.0 are not 1
        raise ProtocolError(f"unsupported protocol version {_short(version)}, "
                            f"expected {PROTOCOL_VERSION}")
    kind = data.get("type")
    model = _PAGE_TYPES.get(kind) if isinstance(kind, str) else None
    if model is None:
        raise ProtocolError(f"unknown message type {_short(kind)}")
    return read_model(data, model, what=f"{kind} message")


# -- server → page ----------------------------------------------------------------------


class EventMessage(_Message):
    """A message told of a session event: its ``type`` and fields (after ``v`` and
    ``type``, in the order declared) are what the event's class declares
    (:class:`~voxflow_voice.events.WireView`); built by :func:`messages_for_event`."""

    model_config = ConfigDict(frozen=True, extra="allow")

    type: str


def _encode(view: WireView, event: object,
            supplied: Mapping[str, Callable[[], object]]) -> EventMessage:
    fields: dict[str, object] = {}
    for name in view.fields:
        if name in view.fixed:
            fields[name] = view.fixed[name]
        elif name in view.supplied:
            supply = supplied.get(name)
            fields[name] = None if supply is None else supply()
        else:
            fields[name] = getattr(event, name)
    return EventMessage.model_validate({"type": view.type, **fields})


def messages_for_event(
    event: SessionEvent, supplied: Mapping[str, Callable[[], object]] | None = None,
) -> list[EventMessage]:
    """The page messages one session event turns into, as its class declares them (none
    for internal events). ``supplied``: the transport's measurements by field name (the
    ``latency`` message's ``receive_ms``), read only for a message that carries them."""
    return [_encode(view, event, supplied or {}) for view in type(event).wire]


def state_message(state: CallState) -> EventMessage:
    """The ``state`` message (the call's first, ``listening``, is not an event's)."""
    return _encode(state_view(state), None, {})


class HelloMessage(_Message):
    """First message: the call is set up; limits the page should know. With a server
    that stores sessions, ``resume_token`` (the same for the whole session) lets the page
    resume the call after a drop (see the ``resume`` field of ``POST /offer``), and
    ``resumed`` says this call goes on with a stored session."""

    type: Literal["hello"] = "hello"
    session_id: SessionId
    max_call_seconds: float
    resume_token: str | None = Field(None, repr=False)
    resumed: bool = False


class ErrorMessage(_Message):
    """A page message was rejected (the call goes on)."""

    type: Literal["error"] = "error"
    reason: str


class ByeMessage(_Message):
    """The server ends the call (time limit, silent peer, shutdown)."""

    type: Literal["bye"] = "bye"
    reason: str


class HandoverMessage(_Message):
    """The call moves to another worker (this one is shutting down): the page resumes
    the session now, as after a drop (``POST /offer`` with ``resume``), without waiting
    to notice the silence. Its state was saved and its lease released here; nothing
    follows it on this connection."""

    type: Literal["handover"] = "handover"
    reason: str


ServerMessage = HelloMessage | EventMessage | ErrorMessage | ByeMessage | HandoverMessage
