"""Twilio Media Streams (bidirectional ``<Connect><Stream>``), the carrier's wire format.

Inbound: ``connected``, ``start`` (``streamSid``, ``callSid``, ``mediaFormat``,
``customParameters``), ``media`` (base64 μ-law, 20 ms), ``dtmf``, ``mark``, ``stop``.
Outbound: ``media``, ``mark``, ``clear``. The webhook is answered with TwiML::

    <Response><Connect><Stream url="wss://host/media">
        <Parameter name="..." value="..."/></Stream></Connect></Response>

Every field is checked for its type and bound (:mod:`~voxflow_adapters.phone.wire`); an
unknown ``event`` is refused like a malformed one. This module imports nothing of the
``twilio`` package: the webhook's signature is checked in
:mod:`~voxflow_adapters.phone.server`.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from typing import Any
from xml.sax.saxutils import escape, quoteattr

from .wire import (
    DTMF_DIGITS,
    MAX_MARK_NAME,
    MAX_MEDIA_BYTES,
    MAX_MESSAGE_CHARS,
    MAX_PARAMETERS,
    CarrierMessageError,
    Connected,
    Dtmf,
    InboundMessage,
    Mark,
    Media,
    Started,
    Stopped,
)

__all__ = ["TwilioSerializer"]

_MAX_ID = 64
_MAX_PARAMETER_NAME = 64
_MAX_PARAMETER_VALUE = 512
_MAX_PAYLOAD_CHARS = 4 * ((MAX_MEDIA_BYTES + 2) // 3)


def _object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise CarrierMessageError(f"{where} must be an object")
    return value


def _text(value: Any, where: str, limit: int, *, empty: bool = False) -> str:
    if not isinstance(value, str):
        raise CarrierMessageError(f"{where} must be a string")
    if len(value) > limit:
        raise CarrierMessageError(f"{where} is longer than {limit} characters")
    if not empty and not value:
        raise CarrierMessageError(f"{where} is empty")
    if not value.isprintable():
        raise CarrierMessageError(f"{where} holds control characters")
    return value


def _integer(value: Any, where: str, low: int, high: int) -> int:
    """An int, or a decimal string of one (Twilio sends counters as strings)."""
    if isinstance(value, str) and 0 < len(value) <= 12 and value.isascii() and value.isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise CarrierMessageError(f"{where} must be an integer")
    if not low <= value <= high:
        raise CarrierMessageError(f"{where} must be within {low}..{high}")
    return value


class TwilioSerializer:
    """Twilio Media Streams JSON (see the module); stateless, one for every call."""

    name = "twilio"

    def parse(self, text: str) -> InboundMessage:
        """One inbound message, validated (see :class:`~voxflow_adapters.phone.wire.
        CarrierSerializer`).

        Raises:
            CarrierMessageError: the reason, never the message.
        """
        if not isinstance(text, str):
            raise CarrierMessageError("a message must be text")
        if len(text) > MAX_MESSAGE_CHARS:
            raise CarrierMessageError(f"a message is longer than {MAX_MESSAGE_CHARS} characters")
        try:
            raw = json.loads(text)
        except (ValueError, RecursionError):
            raise CarrierMessageError("a message is not JSON") from None
        message = _object(raw, "a message")
        event = message.get("event")
        if event == "media":
            return self._media(_object(message.get("media"), "media"))
        if event == "mark":
            mark = _object(message.get("mark"), "mark")
            return Mark(_text(mark.get("name"), "mark.name", MAX_MARK_NAME))
        if event == "dtmf":
            digit = _object(message.get("dtmf"), "dtmf").get("digit")
            if not isinstance(digit, str) or digit not in DTMF_DIGITS:
                raise CarrierMessageError("dtmf.digit must be one of 0-9, *, #, A-D")
            return Dtmf(digit)
        if event == "start":
            return self._start(message)
        if event == "stop":
            return Stopped()
        if event == "connected":
            return Connected()
        if isinstance(event, str) and len(event) <= 32 and event.isprintable():
            raise CarrierMessageError(f"unknown event {event!r}")
        raise CarrierMessageError("event must be a known event name")

    def _media(self, media: dict[str, Any]) -> Media:
        track = media.get("track", "inbound")
        if track not in ("inbound", "inbound_track"):
            raise CarrierMessageError("media.track must be inbound")
        payload = media.get("payload")
        if not isinstance(payload, str):
            raise CarrierMessageError("media.payload must be a string")
        if len(payload) > _MAX_PAYLOAD_CHARS:
            raise CarrierMessageError(f"media.payload holds more than {MAX_MEDIA_BYTES} bytes")
        try:
            audio = base64.b64decode(payload, validate=True)
        except (binascii.Error, ValueError):
            raise CarrierMessageError("media.payload is not base64") from None
        timestamp = media.get("timestamp")
        at = None if timestamp is None else _integer(timestamp, "media.timestamp", 0,
                                                    10**11)
        return Media(audio, at)

    def _start(self, message: dict[str, Any]) -> Started:
        start = _object(message.get("start"), "start")
        stream = start.get("streamSid", message.get("streamSid"))
        stream_id = _text(stream, "start.streamSid", _MAX_ID)
        call_id = _text(start.get("callSid"), "start.callSid", _MAX_ID)
        media_format = _object(start.get("mediaFormat"), "start.mediaFormat")
        encoding = _text(media_format.get("encoding"), "start.mediaFormat.encoding", 32)
        if encoding != "audio/x-mulaw":
            raise CarrierMessageError("start.mediaFormat.encoding must be audio/x-mulaw")
        rate = _integer(media_format.get("sampleRate"), "start.mediaFormat.sampleRate",
                        8000, 8000)
        channels = _integer(media_format.get("channels"), "start.mediaFormat.channels", 1, 1)
        given = start.get("customParameters", {})
        given = {} if given is None else _object(given, "start.customParameters")
        if len(given) > MAX_PARAMETERS:
            raise CarrierMessageError(
                f"start.customParameters has more than {MAX_PARAMETERS} entries")
        parameters = {
            _text(name, "a custom parameter's name", _MAX_PARAMETER_NAME):
                _text(value, "a custom parameter's value", _MAX_PARAMETER_VALUE, empty=True)
            for name, value in given.items()
        }
        return Started(stream_id, call_id, encoding, rate, channels, parameters)

    def media(self, stream_id: str, payload: bytes) -> str:
        """``{"event": "media", "streamSid": ..., "media": {"payload": base64}}``."""
        encoded = base64.b64encode(payload).decode("ascii")
        return ('{"event":"media","streamSid":' + json.dumps(stream_id)
                + ',"media":{"payload":"' + encoded + '"}}')

    def mark(self, stream_id: str, name: str) -> str:
        """``{"event": "mark", "streamSid": ..., "mark": {"name": ...}}``."""
        return json.dumps({"event": "mark", "streamSid": stream_id, "mark": {"name": name}})

    def clear(self, stream_id: str) -> str:
        """``{"event": "clear", "streamSid": ...}``."""
        return json.dumps({"event": "clear", "streamSid": stream_id})

    def answer(self, stream_url: str, parameters: Mapping[str, str], *,
               action: str | None = None) -> tuple[str, str]:
        """TwiML connecting the call to a bidirectional stream at ``stream_url``; with
        ``action``, Twilio requests that URL when the stream ends (``<Connect action>``)
        and goes on with the TwiML it answers."""
        inner = "".join(f"<Parameter name={quoteattr(name)} value={quoteattr(value)}/>"
                        for name, value in parameters.items())
        connect = "<Connect>" if action is None else f"<Connect action={quoteattr(action)}>"
        body = (f'<?xml version="1.0" encoding="UTF-8"?><Response>{connect}'
                f"<Stream url={quoteattr(stream_url)}>{inner}</Stream>"
                "</Connect></Response>")
        return "text/xml", body

    def hang_up(self, say: str | None = None) -> tuple[str, str]:
        """TwiML ending the call (after saying ``say``, if given)."""
        words = "" if say is None else f"<Say>{escape(say)}</Say>"
        return "text/xml", (f'<?xml version="1.0" encoding="UTF-8"?><Response>{words}'
                            "<Hangup/></Response>")

    def reject_busy(self) -> tuple[str, str]:
        """TwiML refusing the call with a busy tone (it is never answered)."""
        return "text/xml", ('<?xml version="1.0" encoding="UTF-8"?><Response>'
                            '<Reject reason="busy"/></Response>')
