"""The send path of a call's reply audio: one Opus packet per 20 ms tick, straight to
the wire.

aiortc's ``RTCRtpSender._run_rtp`` takes each frame through layers built for any codec:
the track's ``recv()`` returns an ``av.Packet`` (with a ``Fraction`` time base), the
sender wraps it in an ``RTCEncodedFrame``, the encoder's ``pack`` converts its time base
back, each packet is an ``RtpPacket`` whose header extensions are re-encoded by
``HeaderExtensionsMap.set`` and joined by ``serialize``, and the bytes go down four
awaited layers (``RTCDtlsTransport._send_rtp``, ``aioice.Connection.send``, ``sendto``,
the protocol's ``send_data``) to the datagram transport. :func:`install_send_path`
replaces that loop on one sender whose track is a
:class:`~voxflow_adapters.webrtc.outbound.ReplyTrack` that encodes its own Opus:

* the track is paced as before (:meth:`ReplyTrack.next_payload`: the same deadlines,
  the same :meth:`OutboundAudio.next_frame`, so fences and receipts are unchanged) and
  hands over the Opus payload and its RTP timestamp offset as plain values;
* the RTP header is a template of the bytes aiortc's own ``serialize`` gives for this
  sender (its payload type, SSRC, marker and negotiated header extensions, checked
  against ``serialize`` on the first packet), with the sequence number, timestamp and
  ``abs-send-time`` written in place;
* the packet is protected with the DTLS transport's SRTP session and sent on the
  nominated ICE pair's datagram transport, as aiortc's layers do, and the DTLS
  transport's byte and packet counters are kept;
* what aiortc's other tasks read is kept as they expect it: the RTP history (NACKs are
  answered by aiortc's ``_retransmit``, which serializes a history entry again), and the
  last packet's NTP and RTP timestamps and the packet and octet counts that
  ``_run_rtcp`` puts in each sender report.

Measured (``benchmarks/webrtc_layers.py``, Dec 5, 2 shared cores): from the track's
packet to the datagram transport's ``sendto`` (the kernel's part excluded, the same both
ways), aiortc's loop costs 12.6 us a packet run warm, this one 4.9; in a call, where
each 20 ms tick wakes a cold loop, a server peer sending and receiving audio spent 51 us
a tick less with it (median of 5 pairs, 790 against 841 us: about 0.26 points of a core;
``webrtc_cpu.py``'s docstring has the whole call's figures). aiortc's ``_run_rtp`` reads
the NTP clock twice a packet (abs-send-time, then the sender report's timestamp after
sending); this loop reads it once, before sending, for both.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import aioice
import aioice.ice
import aiortc
from aiortc import clock
from aiortc import rtcrtpsender as _rtcrtpsender
from aiortc.mediastreams import MediaStreamError
from aiortc.rtcdtlstransport import State as _DtlsState
from aiortc.rtp import RTP_HISTORY_SIZE, RtpPacket
from aiortc.utils import random32

if TYPE_CHECKING:
    from .outbound import ReplyTrack

__all__ = ["AiortcChanged", "SendPath", "check_internals", "install_send_path"]

logger = logging.getLogger(__name__)


class AiortcChanged(RuntimeError):
    """The installed aiortc is not the version whose private parts this module uses."""


_SENDER = "_RTCRtpSender__"
_SENDER_ATTRIBUTES = (  # what the loop reads and writes on the sender
    "started", "rtp_started", "rtp_exited", "rtp_history", "rtp_header_extensions_map",
    "mid", "rtx_payload_type", "ntp_timestamp", "rtp_timestamp", "octet_count",
    "packet_count", "track", "transport",
)
_DTLS = "_RTCDtlsTransport__"
_HEADER = struct.Struct("!HL")  # sequence number, timestamp (at offset 2)
_SEQ_MASK = 0xFFFF
_TS_MASK = 0xFFFFFFFF
_ABS_SEND_TIME_PROBES = (0x000000, 0xFFFFFF)


_LOCKED = {"aiortc": "1.16.0", "aioice": "0.13.0"}  # (uv.lock): the versions read


def _require(condition: bool, what: str) -> None:
    if not condition:
        raise AiortcChanged(f"aiortc changed ({what}): the reply audio's send path cannot "
                            "be installed (pin aiortc to the locked version: aiortc "
                            f"{_LOCKED['aiortc']}, aioice {_LOCKED['aioice']}; "
                            "uv sync --locked)")


def check_internals() -> None:
    """Check, without a call, that the installed aiortc and aioice are the versions this
    module was written against (``WebRtcServer.start`` runs it; each install again).

    The datagram send bypasses ``aioice.Connection.send``/``sendto``: it is the same only
    while ``StunProtocol.send_data`` is ``self.transport.sendto(data, addr)`` (checked on
    its code). That covers every kind of pair: host, srflx, and relayed (TURN over UDP or
    TCP), where the pair's transport is ``aioice.turn.TurnTransport``, whose ``sendto``
    does the channel binding and framing.

    Raises:
        AiortcChanged: another aiortc or aioice version, or aioice's ``send_data`` does
            more than ``transport.sendto``.
    """
    for module in (aiortc, aioice):
        found = getattr(module, "__version__", None)
        _require(found == _LOCKED[module.__name__],
                 f"{module.__name__} {found}, not {_LOCKED[module.__name__]}")
    send_data = getattr(getattr(aioice.ice, "StunProtocol", None), "send_data", None)
    code = getattr(send_data, "__code__", None)
    _require(code is not None and code.co_names == ("transport", "sendto"),
             "aioice's StunProtocol.send_data is not transport.sendto")


class _Sent:
    """An RTP history entry: what aiortc's ``_retransmit`` reads of an ``RtpPacket``
    (its sequence number; ``serialize`` gives the packet's bytes again)."""

    __slots__ = ("data", "sequence_number")

    def __init__(self, sequence_number: int, data: bytes) -> None:
        self.sequence_number = sequence_number
        self.data = data

    def serialize(self, extensions_map: Any = None) -> bytes:
        return self.data


class SendPath:
    """The loop that replaced one ``RTCRtpSender``'s ``_run_rtp`` (see the module).

    Attributes:
        packets: packets sent by this loop.
        template_checked: the first packet's header matched aiortc's ``serialize``
            (else every packet is serialized by aiortc, and a warning was logged).
    """

    def __init__(self, sender: Any, track: ReplyTrack,
                 on_failure: Callable[[BaseException], None] | None = None) -> None:
        self._sender = sender
        self._track = track
        self._on_failure = on_failure
        self.failure: BaseException | None = None
        """What ended the loop when it failed (not a cancel, a lost connection or an
        ended track); ``on_failure`` was called with it."""
        self.handed_over = False
        """The sender's track was replaced (``replaceTrack``): from then on each packet
        takes aiortc's own per-packet path (see :meth:`run`)."""
        self.packets = 0
        self.template_checked = False

    def _reference(self, payload_type: int, seq: int, timestamp: int, abs_send_time: int,
                   payload: bytes) -> bytes:
        """The packet as aiortc's ``_run_rtp`` serializes it (no audio level: the track
        hands over encoded packets)."""
        s = self._sender
        packet = RtpPacket(payload_type=payload_type, sequence_number=seq, timestamp=timestamp)
        packet.ssrc = s._ssrc
        packet.payload = payload
        packet.marker = 1
        packet.extensions.abs_send_time = abs_send_time
        packet.extensions.mid = getattr(s, _SENDER + "mid")
        return bytes(packet.serialize(getattr(s, _SENDER + "rtp_header_extensions_map")))

    def _template(self, payload_type: int) -> tuple[bytearray, int | None]:
        """The header bytes and where ``abs-send-time``'s 3 bytes are (None: not
        negotiated), from two packets aiortc serializes."""
        a, b = (self._reference(payload_type, 0, 0, t, b"") for t in _ABS_SEND_TIME_PROBES)
        _require(len(a) == len(b), "RTP header length depends on abs-send-time")
        differ = [i for i in range(len(a)) if a[i] != b[i]]
        if not differ:
            return bytearray(a), None
        _require(len(differ) == 3 and differ[2] - differ[0] == 2,
                 "abs-send-time is not 3 bytes in the header")
        return bytearray(a), differ[0]

    async def run(self, codec: Any) -> None:
        """Stands in for ``RTCRtpSender._run_rtp(codec)``: started and exited as it is.

        When the sender's track is replaced (``replaceTrack``, with another track or
        None), the packet already taken is sent, neither track is stopped, and the rest
        of the call goes as in aiortc's ``_run_rtp``: idle while there is no track, else
        each frame of the new track through the sender's ``_next_encoded_frame`` and
        ``RtpPacket.serialize`` to ``RTCDtlsTransport._send_rtp``, with the same sequence
        numbers and timestamp origin continued (a new random sequence number would be
        dropped by the caller's SRTP replay check as too old, about half the time)."""
        s = self._sender
        getattr(s, _SENDER + "rtp_started").set()
        try:
            await self._send_loop(codec)
        except MediaStreamError:
            pass
        except ConnectionError as exc:  # (the peer's connection state ends the call)
            logger.info("the reply audio's RTP loop stopped: %s", exc)
        except Exception as exc:
            logger.exception("the reply audio's RTP loop failed")
            self.failure = exc
            if self._on_failure is not None:
                self._on_failure(exc)
        finally:  # (a cancel is re-raised after this: stop() waits for rtp_exited)
            # aiortc stops the sender's current track; this loop only ever its own, or
            # after a replaceTrack the one it was serving, as aiortc would
            track = getattr(s, _SENDER + "track") if self.handed_over else self._track
            if track is not None:
                track.stop()
            if getattr(s, _SENDER + "track") is track:
                setattr(s, _SENDER + "track", None)
            getattr(s, _SENDER + "rtp_exited").set()

    async def _send_loop(self, codec: Any) -> None:
        s = self._sender
        history: dict[int, Any] = getattr(s, _SENDER + "rtp_history")
        if getattr(s, _SENDER + "rtx_payload_type") is not None:  # (refused at install)
            raise AiortcChanged("an RTX stream for audio: not what this send path does")
        payload_type = codec.payloadType
        template, ast_at = self._template(payload_type)
        pack_into = _HEADER.pack_into
        seq = _rtcrtpsender.random_sequence_number()
        origin = random32()
        track = self._track
        check = True
        while True:
            if s._RTCRtpSender__track is not track:  # replaceTrack()
                self.handed_over = True
                await self._aiortc_loop(codec, seq, origin, history)
            payload, offset = await track.next_payload()
            if not s._enabled:
                continue
            timestamp = (origin + offset) & _TS_MASK
            ntp = clock.current_ntp_time()
            abs_send_time = (ntp >> 14) & 0x00FFFFFF
            pack_into(template, 2, seq, timestamp)
            if ast_at is not None:
                template[ast_at] = abs_send_time >> 16
                template[ast_at + 1] = (abs_send_time >> 8) & 0xFF
                template[ast_at + 2] = abs_send_time & 0xFF
            data = bytes(template) + payload
            if check:  # the first packet: the template is what aiortc would have sent
                check = False
                reference = self._reference(payload_type, seq, timestamp, abs_send_time,
                                            payload)
                self.template_checked = reference == data
                if not self.template_checked:
                    logger.warning("the reply audio's RTP header differs from aiortc's: "
                                   "serializing each packet with aiortc")
            if not self.template_checked:
                data = self._reference(payload_type, seq, timestamp, abs_send_time, payload)
            history[seq % RTP_HISTORY_SIZE] = _Sent(seq, data)
            # (the transport read per packet, as aiortc: setTransport may change it)
            self._send(s._RTCRtpSender__transport, data)
            self.packets += 1
            # what _run_rtcp reports (aiortc sets these after each packet it sends)
            s._RTCRtpSender__ntp_timestamp = ntp
            s._RTCRtpSender__rtp_timestamp = timestamp
            s._RTCRtpSender__octet_count += len(payload)
            s._RTCRtpSender__packet_count += 1
            seq = (seq + 1) & _SEQ_MASK

    async def _aiortc_loop(self, codec: Any, seq: int, origin: int,
                           history: dict[int, Any]) -> None:
        """aiortc's ``_run_rtp`` loop (1.16.0) from ``seq`` and ``origin`` on: whatever
        track ``replaceTrack`` put on the sender, through aiortc's own layers."""
        s = self._sender
        while True:
            if not s._RTCRtpSender__track:
                await asyncio.sleep(0.02)
                continue
            frame = await s._next_encoded_frame(codec)
            if frame is None:
                continue
            timestamp = (origin + frame.timestamp) & _TS_MASK
            for i, payload in enumerate(frame.payloads):
                packet = RtpPacket(payload_type=codec.payloadType, sequence_number=seq,
                                   timestamp=timestamp)
                packet.ssrc = s._ssrc
                packet.payload = payload
                packet.marker = 1 if i == len(frame.payloads) - 1 else 0
                packet.extensions.abs_send_time = (clock.current_ntp_time() >> 14) & 0x00FFFFFF
                packet.extensions.mid = s._RTCRtpSender__mid
                if frame.audio_level is not None:
                    packet.extensions.audio_level = (False, -frame.audio_level)
                history[seq % RTP_HISTORY_SIZE] = packet
                await s.transport._send_rtp(
                    packet.serialize(s._RTCRtpSender__rtp_header_extensions_map))
                s._RTCRtpSender__ntp_timestamp = clock.current_ntp_time()
                s._RTCRtpSender__rtp_timestamp = timestamp
                s._RTCRtpSender__octet_count += len(payload)
                s._RTCRtpSender__packet_count += 1
                seq = (seq + 1) & _SEQ_MASK

    @staticmethod
    def _send(dtls: Any, data: bytes) -> None:
        """``RTCDtlsTransport._send_rtp`` and the ICE layers under it, without awaits."""
        if dtls._state != _DtlsState.CONNECTED:
            raise ConnectionError("Cannot send encrypted RTP, not connected")
        data = dtls._tx_srtp.protect(data)
        pair = dtls.transport._connection._nominated.get(1)
        if pair is None:
            raise ConnectionError("Cannot send data, not connected")
        pair.protocol.transport.sendto(data, pair.remote_addr)
        dtls._RTCDtlsTransport__tx_bytes += len(data)
        dtls._RTCDtlsTransport__tx_packets += 1


def install_send_path(sender: Any, track: ReplyTrack, *,
                      on_failure: Callable[[BaseException], None] | None = None,
                      codecs: Sequence[Any] = ()) -> SendPath:
    """Put :class:`SendPath` in place of ``sender``'s ``_run_rtp`` (before it starts:
    right after the local description is set).

    Args:
        sender: the ``RTCRtpSender`` of ``track``.
        track: the reply track, after :meth:`ReplyTrack.encode_here`.
        on_failure: called (on the event loop) with the exception that ended the loop,
            when it failed (the call's reply audio is gone: end the call).
        codecs: the transceiver's negotiated codecs (``RTCRtpCodecParameters``): an RTX
            one is refused here (aiortc never negotiates RTX for audio; this loop sends
            no RTX stream).

    Raises:
        AiortcChanged: this aiortc's sender, DTLS or ICE transport is not the one this
            was written for (pin aiortc to the locked version).
        RuntimeError: the sender already started, or the track does not encode.
    """
    check_internals()
    _require(not any(str(getattr(c, "mimeType", "")).lower().endswith("/rtx") for c in codecs),
             "RTX negotiated for audio")
    for name in _SENDER_ATTRIBUTES:
        _require(hasattr(sender, _SENDER + name), f"RTCRtpSender has no __{name}")
    for name in ("_run_rtp", "_retransmit", "_run_rtcp", "_ssrc", "_enabled",
                 "_next_encoded_frame"):
        _require(hasattr(sender, name), f"RTCRtpSender has no {name}")
    _require(getattr(_rtcrtpsender, "RTP_HISTORY_SIZE", None) == RTP_HISTORY_SIZE
             and callable(getattr(_rtcrtpsender, "random_sequence_number", None)),
             "aiortc.rtcrtpsender's RTP_HISTORY_SIZE or random_sequence_number")
    dtls = getattr(sender, _SENDER + "transport")
    for name in ("tx_bytes", "tx_packets"):
        _require(hasattr(dtls, _DTLS + name), f"RTCDtlsTransport has no __{name}")
    _require(hasattr(dtls, "_tx_srtp") and hasattr(dtls, "_state")
             and hasattr(dtls, "_send_rtp"),
             "RTCDtlsTransport has no _tx_srtp, _state or _send_rtp")
    connection = getattr(dtls.transport, "_connection", None)
    _require(isinstance(getattr(connection, "_nominated", None), dict),
             "RTCIceTransport's aioice Connection has no _nominated pairs")
    if getattr(sender, _SENDER + "started"):
        raise RuntimeError("install_send_path() after the sender started")
    if getattr(sender, _SENDER + "track") is not track or track.encoder is None:
        raise RuntimeError("install_send_path() needs the sender's own ReplyTrack, after "
                           "encode_here()")
    path = SendPath(sender, track, on_failure)
    sender._run_rtp = path.run
    return path
