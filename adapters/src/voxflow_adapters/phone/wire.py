"""What a carrier's media stream says, whatever the carrier: the typed inbound messages a
serializer parses its wire format into, and the :class:`CarrierSerializer` port.

One module per carrier implements the port (:mod:`~voxflow_adapters.phone.twilio`
first); the transport and the server speak only these types, so another carrier (Telnyx,
Plivo, Vonage: the same shape with other field names) is one new module.

Every inbound message is validated before anything acts on it: a message that is not
one of these, or breaks a bound below, raises :class:`CarrierMessageError` (the
transport logs the reason, without the message, and ends a call that keeps sending
them).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

__all__ = [
    "DTMF_DIGITS",
    "MAX_MARK_NAME",
    "MAX_MEDIA_BYTES",
    "MAX_MESSAGE_CHARS",
    "MAX_PARAMETERS",
    "CarrierMessageError",
    "CarrierSerializer",
    "Connected",
    "Dtmf",
    "InboundMessage",
    "Mark",
    "Media",
    "Started",
    "Stopped",
]

MAX_MESSAGE_CHARS = 16_384
"""The longest inbound message read (20 ms of μ-law is ~400 characters of JSON)."""
MAX_MEDIA_BYTES = 4_000
"""The most audio one ``media`` message may carry (0.5 s of 8 kHz μ-law)."""
MAX_MARK_NAME = 128
"""The longest mark name (ours are ~60 characters)."""
MAX_PARAMETERS = 32
"""The most custom parameters a ``start`` may carry (each name <= 64, value <= 512)."""
DTMF_DIGITS = frozenset("0123456789*#ABCD")


class CarrierMessageError(ValueError):
    """An inbound message is malformed, of an unknown kind, or breaks a size bound.

    Attributes:
        reason: what is wrong, never echoing the message itself.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Connected:
    """The carrier opened the stream (nothing of the call yet)."""


@dataclass(frozen=True, slots=True)
class Started:
    """The call's stream began.

    Attributes:
        stream_id: the stream's id (every outbound message names it).
        call_id: the carrier's id of the call.
        encoding: the inbound audio's encoding (``audio/x-mulaw``).
        sample_rate: its rate (8000).
        channels: its channels (1).
        parameters: the custom parameters the answer document gave the stream.
    """

    stream_id: str
    call_id: str
    encoding: str
    sample_rate: int
    channels: int
    parameters: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Media:
    """Caller audio (μ-law bytes, 20 ms by default); ``timestamp_ms`` from the stream
    start when the carrier gives one."""

    payload: bytes
    timestamp_ms: int | None = None


@dataclass(frozen=True, slots=True)
class Dtmf:
    """The caller pressed a key (``0``-``9``, ``*``, ``#``, ``A``-``D``)."""

    digit: str


@dataclass(frozen=True, slots=True)
class Mark:
    """The carrier played the audio sent before the mark of this name (or, after a
    ``clear``, dropped it: the transport tells the two apart)."""

    name: str


@dataclass(frozen=True, slots=True)
class Stopped:
    """The stream ended (the caller hung up, or the call moved on)."""


InboundMessage = Connected | Started | Media | Dtmf | Mark | Stopped


class CarrierSerializer(Protocol):
    """One carrier's wire format: inbound text → :data:`InboundMessage`, outbound
    messages → text, and the webhook's answer document."""

    name: str
    """The carrier's name (``twilio``)."""

    def parse(self, text: str) -> InboundMessage:
        """One inbound WebSocket text message, validated.

        Raises:
            CarrierMessageError: malformed, unknown, or out of bounds.
        """
        ...

    def media(self, stream_id: str, payload: bytes) -> str:
        """An outbound ``media`` message carrying ``payload`` (μ-law bytes)."""
        ...

    def mark(self, stream_id: str, name: str) -> str:
        """An outbound ``mark`` message: echoed once the audio sent before it played."""
        ...

    def clear(self, stream_id: str) -> str:
        """An outbound ``clear``: drop the audio buffered at the carrier now."""
        ...

    def answer(self, stream_url: str, parameters: Mapping[str, str], *,
               action: str | None = None) -> tuple[str, str]:
        """The webhook's answer connecting the call to ``stream_url``: (content type,
        body); ``action``: the URL the carrier asks what next when the stream ends."""
        ...

    def hang_up(self, say: str | None = None) -> tuple[str, str]:
        """An answer ending the call (after saying ``say``)."""
        ...

    def reject_busy(self) -> tuple[str, str]:
        """An answer refusing the call, busy."""
        ...
