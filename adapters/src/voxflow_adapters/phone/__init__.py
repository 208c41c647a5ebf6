"""Phone calls: ``voxflow phone``, a carrier's media stream as a voxflow transport.

The carrier (Twilio first) calls the webhook; the answer connects the call to a
bidirectional media stream on this server's WebSocket, where 8 kHz μ-law flows both ways
and the carrier's echoed marks are the playback receipts (what the caller heard).

* :mod:`~voxflow_adapters.phone.wire`: the typed inbound messages and the
  :class:`CarrierSerializer` port, one module per carrier
  (:mod:`~voxflow_adapters.phone.twilio`);
* :mod:`~voxflow_adapters.phone.codec`: μ-law both ways with no per-frame allocation;
* :class:`PhoneTransport`: one call's ``AudioTransport``, marks as receipts, ``clear`` on a
  fence;
* :class:`PhoneServer`: the webhook (signature checked) and the media WebSocket.
"""

from .codec import MULAW_RATE as MULAW_RATE
from .codec import MulawDecoder as MulawDecoder
from .codec import MulawEncoder as MulawEncoder
from .transport import PhoneStatistics as PhoneStatistics
from .transport import PhoneTransport as PhoneTransport
from .twilio import TwilioSerializer as TwilioSerializer
from .wire import CarrierMessageError as CarrierMessageError
from .wire import CarrierSerializer as CarrierSerializer

__all__ = [
    "MULAW_RATE",
    "CarrierMessageError",
    "CarrierSerializer",
    "MulawDecoder",
    "MulawEncoder",
    "PhoneStatistics",
    "PhoneTransport",
    "TwilioSerializer",
]
