"""The data-channel protocol between the page and the server (version 1).

Every message is one JSON object with ``"v": 1`` and a ``"type"``. The server sends
what the session did (transcripts, reply text as it streams, state, interruptions,
latency marks); the page sends what only it knows (the mute switch, whether its audio
element is playing). Page messages are validated with pydantic (``extra="forbid"``, a
size limit); an unknown or malformed message is rejected with a logged reason and an
``error`` message back, and never touches the session. Page messages are read by the
strict reader of :mod:`~voxflow_adapters.hosting.wire` (size and nesting limits,
duplicate keys refused, no type coercion: ``"v"`` is exactly the integer 1).

The README section "WebRTC browser calls" documents the messages for page authors.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field
from voxflow_voice.events import (
    AudioStarted,
    BargeIn,
    MuteObserved,
    ReplyFinished,
    ReplyInterrupted,
    ReplyTextStreamed,
    SessionClosed,
    SessionEvent,
    SpeechEnded,
    SpeechStarted,
    TurnCommitted,
    TurnMetrics,
)

from voxflow.ids import DeliveryId, SessionId, TurnId

from ..hosting.wire import ProtocolError, read_json, read_model

__all__ = [
    "MAX_MESSAGE_BYTES",
    "PROTOCOL_VERSION",
    "ByeMessage",
    "CallState",
    "ErrorMessage",
    "HandoverMessage",
    "HangupMessage",
    "HelloMessage",
    "InterruptedMessage",
    "LatencyMessage",
    "MuteAckMessage",
    "MuteMessage",
    "PageMessage",
    "PlaybackMessage",
    "ProtocolError",
    "ReplyDoneMessage",
    "ReplyTextMessage",
    "ServerMessage",
    "StateMessage",
    "TranscriptMessage",
    "messages_for_event",
    "parse_page_message",
]

PROTOCOL_VERSION = 1
"""Bumped on any incompatible change; a page sending another version is rejected."""

MAX_MESSAGE_BYTES = 4096
"""Longest page message accepted (page messages are tiny; this bounds the parser)."""

CallState = Literal["connecting", "listening", "user_speaking", "thinking", "speaking", "ended"]


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


class StateMessage(_Message):
    """What the call is doing now."""

    type: Literal["state"] = "state"
    state: CallState


class TranscriptMessage(_Message):
    """A committed user turn (what the assistant understood)."""

    type: Literal["transcript"] = "transcript"
    role: Literal["user"] = "user"
    turn_id: TurnId
    text: str


class ReplyTextMessage(_Message):
    """A segment of the assistant's reply, sent as it is handed to speech synthesis."""

    type: Literal["reply_text"] = "reply_text"
    delivery_id: DeliveryId
    segment_id: int
    text: str


class ReplyDoneMessage(_Message):
    """The reply was played whole."""

    type: Literal["reply_done"] = "reply_done"
    delivery_id: DeliveryId


class InterruptedMessage(_Message):
    """The user barged in: the reply was cut; ``heard_text`` is what they heard."""

    type: Literal["interrupted"] = "interrupted"
    delivery_id: DeliveryId
    heard_text: str | None = None


class LatencyMessage(_Message):
    """Latency marks of one turn, in ms after the end of the user's speech as the server's
    VAD heard it; ``receive_ms`` is how long the user's audio took from its RTP packet's
    arrival to the VAD (the page adds it, the network and its own jitter buffer to
    ``first_audio_ms`` for the time at the user's ear)."""

    type: Literal["latency"] = "latency"
    turn_id: TurnId
    transcript_ms: float
    first_text_ms: float | None
    first_audio_ms: float | None
    interrupted: bool
    receive_ms: float | None = None


class MuteAckMessage(_Message):
    """The server applied a mute change."""

    type: Literal["mute"] = "mute"
    muted: bool


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


ServerMessage = (
    HelloMessage | StateMessage | TranscriptMessage | ReplyTextMessage | ReplyDoneMessage
    | InterruptedMessage | LatencyMessage | MuteAckMessage | ErrorMessage | ByeMessage
    | HandoverMessage
)


def _ms(later: float | None, earlier: float) -> float | None:
    return None if later is None else round((later - earlier) * 1000.0, 1)


def messages_for_event(event: SessionEvent) -> list[ServerMessage]:
    """The page messages one session event turns into (none for internal events)."""
    if isinstance(event, SpeechStarted):
        return [StateMessage(state="user_speaking")]
    if isinstance(event, SpeechEnded):
        return [StateMessage(state="thinking")]
    if isinstance(event, TurnCommitted):
        return [TranscriptMessage(turn_id=event.turn_id, text=event.text)]
    if isinstance(event, ReplyTextStreamed):
        return [ReplyTextMessage(delivery_id=event.delivery_id, segment_id=event.segment_id,
                                 text=event.text)]
    if isinstance(event, AudioStarted):
        return [StateMessage(state="speaking")]
    if isinstance(event, BargeIn):
        return [InterruptedMessage(delivery_id=event.delivery_id)]
    if isinstance(event, ReplyInterrupted):
        return [InterruptedMessage(delivery_id=event.delivery_id, heard_text=event.heard_text),
                StateMessage(state="listening")]
    if isinstance(event, ReplyFinished):
        return [ReplyDoneMessage(delivery_id=event.delivery_id), StateMessage(state="listening")]
    if isinstance(event, TurnMetrics):
        transcript = _ms(event.transcript_final, event.speech_end)
        assert transcript is not None
        return [LatencyMessage(
            turn_id=event.turn_id, transcript_ms=transcript,
            first_text_ms=_ms(event.first_text, event.speech_end),
            first_audio_ms=_ms(event.first_audio, event.speech_end),
            interrupted=event.interrupted,
        )]
    if isinstance(event, MuteObserved):
        return [MuteAckMessage(muted=event.muted)]
    if isinstance(event, SessionClosed):
        return [StateMessage(state="ended")]
    return []
