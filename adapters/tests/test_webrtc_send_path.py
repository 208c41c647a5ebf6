"""The reply audio's own RTP loop (:mod:`voxflow_adapters.webrtc.rtp_send`) against a
real aiortc caller on loopback: the packets are byte for byte what aiortc's
``_run_rtp`` would have sent, the payloads are the frames the track took and nothing
else (a flush fences the wire), sequence numbers and timestamps run on the 20 ms grid,
sender reports count what went out, and a NACK is answered."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aioice.ice
import numpy as np
import pytest
from aiortc import (
    RTCConfiguration,
    RTCPeerConnection,
    RTCRtpCodecParameters,
    RTCSessionDescription,
)
from aiortc.mediastreams import AudioStreamTrack
from aiortc.rtp import RtcpPacket, RtcpSrPacket, RtpPacket
from voxflow_adapters.webrtc import PeerSettings
from voxflow_adapters.webrtc._ice import host_addresses
from voxflow_adapters.webrtc.opus import MonoOpusEncoder
from voxflow_adapters.webrtc.outbound import _SILENCE, FRAME_SAMPLES, OPUS_SAMPLE_RATE
from voxflow_adapters.webrtc.peer import WebRtcPeer
from voxflow_adapters.webrtc.rtp_send import (
    AiortcChanged,
    SendPath,
    check_internals,
    install_send_path,
)
from voxflow_voice.audio import ReplyChunk

from voxflow.ids import DeliveryId

pytestmark = pytest.mark.unit

LOOPBACK = PeerSettings(ice_host_addresses=("127.0.0.1",))


@dataclass
class Wire:
    """What the caller got from the server: each RTP packet's bytes (after SRTP), in
    arrival order, and the sender reports."""

    packets: list[bytes] = field(default_factory=list)
    reports: list[RtcpSrPacket] = field(default_factory=list)

    def parsed(self) -> list[RtpPacket]:
        return [RtpPacket.parse(p) for p in self.packets]


@dataclass
class Call:
    peer: WebRtcPeer
    caller: Any
    wire: Wire
    frames: list[bytes]  # the PCM frames the server's track took, in order


@contextlib.asynccontextmanager
async def call() -> AsyncIterator[Call]:
    """A WebRtcPeer answering a receive-only aiortc caller; the caller's DTLS transport
    records every RTP packet and sender report it decrypts."""
    peer = WebRtcPeer(settings=LOOPBACK)
    frames: list[bytes] = []
    take = peer.outbound.next_frame

    def next_frame(*, late: bool = False) -> bytes:
        frames.append(frame := take(late=late))
        return frame

    peer.outbound.next_frame = next_frame  # type: ignore[method-assign]
    caller = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    caller.addTransceiver("audio", direction="recvonly")
    wire = Wire()
    readers: list[asyncio.Task[None]] = []

    async def drain(track: Any) -> None:
        with contextlib.suppress(Exception):
            while True:
                await track.recv()

    caller.on("track", lambda track: readers.append(asyncio.create_task(drain(track))))
    with host_addresses(("127.0.0.1",)):
        await caller.setLocalDescription(await caller.createOffer())
    answer = await peer.accept(caller.localDescription.sdp)
    (transceiver,) = caller.getTransceivers()
    dtls = transceiver.receiver.transport
    handle_rtp = dtls._handle_rtp_data
    handle_rtcp = dtls._handle_rtcp_data

    async def rtp(data: bytes, arrival_time_ms: int) -> None:
        wire.packets.append(bytes(data))
        await handle_rtp(data, arrival_time_ms)

    async def rtcp(data: bytes) -> None:
        wire.reports.extend(p for p in RtcpPacket.parse(data) if isinstance(p, RtcpSrPacket))
        await handle_rtcp(data)

    dtls._handle_rtp_data, dtls._handle_rtcp_data = rtp, rtcp
    await caller.setRemoteDescription(RTCSessionDescription(sdp=answer, type="answer"))
    try:
        yield Call(peer, caller, wire, frames)
    finally:
        await peer.aclose()
        await caller.close()
        for task in readers:
            task.cancel()


def _tone(seconds: float, delivery: str) -> ReplyChunk:
    t = np.arange(int(seconds * OPUS_SAMPLE_RATE)) / OPUS_SAMPLE_RATE
    return ReplyChunk.from_float((0.3 * np.sin(2 * np.pi * 330 * t)).astype(np.float32),
                                 OPUS_SAMPLE_RATE, delivery_id=DeliveryId(delivery),
                                 segment_id=1, start_sample=0)


async def _until(condition: Any, within: float = 20.0) -> None:
    async with asyncio.timeout(within):
        while not condition():  # noqa: ASYNC110  # (polls the wire: no event to wait on)
            await asyncio.sleep(0.01)


def _sender(peer: WebRtcPeer) -> Any:
    (transceiver,) = [t for t in peer._pc.getTransceivers() if t.kind == "audio"]
    return transceiver.sender


def _aiortc_bytes(sender: Any, packet: RtpPacket) -> bytes:
    """The packet as aiortc's own ``_run_rtp`` builds and serializes it."""
    again = RtpPacket(payload_type=packet.payload_type, sequence_number=packet.sequence_number,
                      timestamp=packet.timestamp)
    again.ssrc = sender._ssrc
    again.payload = packet.payload
    again.marker = 1
    again.extensions.abs_send_time = packet.extensions.abs_send_time
    again.extensions.mid = sender._RTCRtpSender__mid
    return bytes(again.serialize(sender._RTCRtpSender__rtp_header_extensions_map))


async def test_the_wire_is_aiortcs_bytes_and_exactly_the_frames_the_track_took() -> None:
    async with call() as c:
        assert isinstance(c.peer.send_path, SendPath)
        await _until(lambda: len(c.wire.packets) >= 10)
        c.peer.write_nowait(_tone(1.0, "d1"))
        await _until(lambda: c.peer.outbound.statistics().reply_frames >= 50
                     and len(c.wire.packets) >= len(c.frames) - 1)
        await asyncio.sleep(0.2)
        sender = _sender(c.peer)
        packets = c.wire.parsed()
        assert c.peer.send_path.template_checked
        assert c.peer.send_path.packets == len(c.frames) >= len(packets)
        # byte for byte what aiortc serializes for the same fields
        assert all(_aiortc_bytes(sender, p) == raw for p, raw in zip(packets, c.wire.packets,
                                                                      strict=True))
        assert {p.ssrc for p in packets} == {sender._ssrc}
        # the payloads are the encoder's packets of the frames taken, in order, no more
        encoder = MonoOpusEncoder()
        expected = [encoder.encode(f, silent=f is _SILENCE)
                    for f in c.frames[:len(packets)]]
        assert [p.payload for p in packets] == expected
        # on the grid: +1 sequence number and +960 samples a packet, none skipped
        assert all((b.sequence_number - a.sequence_number) % 65536 == 1
                   for a, b in itertools.pairwise(packets))
        assert all((b.timestamp - a.timestamp) % 2**32 == FRAME_SAMPLES
                   for a, b in itertools.pairwise(packets))
        assert sum(f != _SILENCE for f in c.frames) == 50


async def test_a_flush_fences_the_wire_not_one_sample_after_it() -> None:
    async with call() as c:
        await _until(lambda: len(c.wire.packets) >= 5)
        c.peer.write_nowait(_tone(2.0, "d1"))
        await _until(lambda: c.peer.outbound.statistics().reply_frames >= 10)
        c.peer.flush(DeliveryId("d1"))
        fence = c.peer.outbound.flush_frame_of[DeliveryId("d1")]
        await _until(lambda: len(c.wire.packets) >= fence + 20)
        stats = c.peer.outbound.statistics()
        assert stats.stale_samples == 0 and stats.samples_flushed > 0
        assert all(f is _SILENCE for f in c.frames[fence:])
        first = RtpPacket.parse(c.wire.packets[0]).timestamp
        encoder = MonoOpusEncoder()
        sent = {(p.timestamp - first) % 2**32 // FRAME_SAMPLES: p.payload
                for p in c.wire.parsed()}
        for index, frame in enumerate(c.frames[:max(sent) + 1]):
            payload = encoder.encode(frame, silent=frame is _SILENCE)
            assert sent[index] == payload  # frame by frame what the track took


async def test_sender_reports_count_the_packets_and_octets_sent() -> None:
    async with call() as c:
        c.peer.write_nowait(_tone(3.0, "d1"))
        await _until(lambda: len(c.wire.reports) >= 2, within=30.0)
        packets = c.wire.parsed()
        by_timestamp = {p.timestamp: i for i, p in enumerate(packets)}
        report = c.wire.reports[-1].sender_info
        index = by_timestamp[report.rtp_timestamp]  # the last packet sent before it
        assert report.packet_count == index + 1
        assert report.octet_count == sum(len(p.payload) for p in packets[:index + 1])
        sender = _sender(c.peer)
        assert sender._RTCRtpSender__packet_count == c.peer.send_path.packets


async def test_the_dtls_transports_counters_count_each_rtp_packet_sent() -> None:
    """Every datagram after STUN (first byte >= 20: DTLS, RTP, RTCP) counts once in the
    DTLS transport's packets and bytes sent, and this loop's RTP packets are exactly
    the RTP packets (not RTCP: second byte 200-204) on the wire."""
    async with call() as c:
        await _until(lambda: len(c.wire.packets) >= 5)
        dtls = _sender(c.peer).transport
        pair = dtls.transport._connection._nominated[1]
        sent: list[bytes] = []
        datagram = pair.protocol.transport
        sendto = datagram.sendto

        def record(data: bytes, addr: Any = None) -> None:
            if data[0] >= 20:
                sent.append(bytes(data))
            sendto(data, addr)

        path = c.peer.send_path
        packets, tx, tx_bytes = (path.packets, dtls._RTCDtlsTransport__tx_packets,
                                 dtls._RTCDtlsTransport__tx_bytes)
        pair.protocol.transport = _Recording(datagram, record)
        c.peer.write_nowait(_tone(1.0, "d1"))
        await _until(lambda: path.packets >= packets + 60)
        pair.protocol.transport = datagram
        assert dtls._RTCDtlsTransport__tx_packets - tx == len(sent)
        assert dtls._RTCDtlsTransport__tx_bytes - tx_bytes == sum(map(len, sent))
        rtp = [d for d in sent if 128 <= d[0] < 192 and not 200 <= d[1] <= 204]
        assert len(rtp) == path.packets - packets


class _Recording:
    """A datagram transport whose ``sendto`` is recorded (the rest passed through)."""

    def __init__(self, inner: Any, sendto: Any) -> None:
        self._inner = inner
        self.sendto = sendto

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


async def test_a_cancelled_loop_ends_cancelled_after_setting_rtp_exited() -> None:
    async with call() as c:
        await _until(lambda: len(c.wire.packets) >= 5)
        sender = _sender(c.peer)
        task = sender._RTCRtpSender__rtp_task
    assert task.cancelled()
    assert sender._RTCRtpSender__rtp_exited.is_set()
    assert c.peer.track.readyState == "ended"


def test_rtx_negotiated_for_audio_is_refused_at_install() -> None:
    class Sender:
        _run_rtp = None

    rtx = RTCRtpCodecParameters(mimeType="audio/rtx", clockRate=48000, payloadType=97)
    with pytest.raises(AiortcChanged, match="RTX negotiated for audio"):
        install_send_path(Sender(), object(), codecs=[rtx])  # type: ignore[arg-type]


async def test_a_nack_is_answered_with_the_packet_again() -> None:
    """aiortc's ``_retransmit`` finds the packet in the history this loop keeps and sends
    its bytes again (SRTP-protected by the DTLS transport; this caller's SRTP then drops
    the repeated index as a replay, as it does behind aiortc's own loop)."""
    async with call() as c:
        c.peer.write_nowait(_tone(1.0, "d1"))
        await _until(lambda: c.peer.outbound.statistics().reply_frames >= 20)
        packets = c.wire.parsed()
        lost = packets[-5]
        dtls = _sender(c.peer).transport
        send_rtp = dtls._send_rtp
        resent: list[bytes] = []

        async def record(data: bytes) -> None:
            resent.append(bytes(data))
            await send_rtp(data)

        dtls._send_rtp = record  # (the loop itself sends below this layer)
        (transceiver,) = c.caller.getTransceivers()
        await transceiver.receiver._send_rtcp_nack(lost.ssrc, [lost.sequence_number])
        original = c.wire.packets[packets.index(lost)]
        await _until(lambda: original in resent)


def test_an_aiortc_without_the_expected_internals_is_refused_by_name() -> None:
    class Sender:
        _run_rtp = None

    with pytest.raises(AiortcChanged, match="pin aiortc to the locked version"):
        install_send_path(Sender(), object())  # type: ignore[arg-type]


def test_an_aioice_whose_send_data_does_more_than_sendto_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The send path writes to the pair's datagram transport itself: only right while
    aioice's ``StunProtocol.send_data`` is ``transport.sendto`` and nothing else."""
    check_internals()
    original = aioice.ice.StunProtocol.send_data

    async def framed(self: Any, data: bytes, addr: tuple[str, int]) -> None:
        self.transport.write(len(data).to_bytes(2, "big") + data)

    monkeypatch.setattr(aioice.ice.StunProtocol, "send_data", framed)
    with pytest.raises(AiortcChanged, match=r"send_data is not transport\.sendto"):
        check_internals()
    monkeypatch.setattr(aioice.ice.StunProtocol, "send_data", original)
    monkeypatch.setattr(aioice, "__version__", "0.14.0")
    with pytest.raises(AiortcChanged, match=r"aioice 0\.14\.0, not 0\.13\.0"):
        check_internals()


async def test_replace_track_hands_the_sender_to_aiortcs_loop_and_the_new_track_plays() -> None:
    """``replaceTrack(other)``: the new track is not stopped and its packets keep coming
    (aiortc's own ``_run_rtp`` serves it, as it would have without this loop)."""
    async with call() as c:
        await _until(lambda: len(c.wire.packets) >= 5)
        sender = _sender(c.peer)
        other = AudioStreamTrack()
        sender.replaceTrack(other)
        await _until(lambda: c.peer.send_path.handed_over)
        before = len(c.wire.packets)
        await _until(lambda: len(c.wire.packets) >= before + 25)
        assert other.readyState == "live"
        assert sender.track is other
        assert not sender._RTCRtpSender__rtp_exited.is_set()
        packets = c.wire.parsed()  # one stream: the sequence numbers go on, none skipped
        assert all((b.sequence_number - a.sequence_number) % 65536 == 1
                   for a, b in itertools.pairwise(packets))


async def test_replace_track_with_none_then_a_track_plays_it() -> None:
    async with call() as c:
        await _until(lambda: len(c.wire.packets) >= 5)
        sender = _sender(c.peer)
        sender.replaceTrack(None)
        await _until(lambda: c.peer.send_path.handed_over)
        assert c.peer.track.readyState == "live"  # (ours is left alone too)
        other = AudioStreamTrack()
        sender.replaceTrack(other)
        before = len(c.wire.packets)
        await _until(lambda: len(c.wire.packets) >= before + 25)
        assert other.readyState == "live"


async def test_a_failing_send_loop_ends_the_call_naming_the_send_path() -> None:
    async with call() as c:
        await _until(lambda: len(c.wire.packets) >= 5)

        async def broken() -> tuple[bytes, int]:
            raise RuntimeError("encoder broke")

        c.peer.track.next_payload = broken  # type: ignore[method-assign]
        await _until(c.peer.closed.is_set)
        assert c.peer.close_reason == ("the reply audio's send path failed: "
                                       "RuntimeError: encoder broke")
        assert isinstance(c.peer.send_path.failure, RuntimeError)


async def test_a_lost_connection_ends_the_loop_not_as_a_failure() -> None:
    """The caller closes mid-reply: the loop stops (rtp_exited set, the sender's stop()
    returns), no failure is reported, and the call ends on the connection's state."""
    async with call() as c:
        c.peer.write_nowait(_tone(2.0, "d1"))
        await _until(lambda: c.peer.send_path.packets >= 10)
        await c.caller.close()
        await _until(c.peer.closed.is_set)
        sender = _sender(c.peer)
        await _until(sender._RTCRtpSender__rtp_exited.is_set)
        assert c.peer.send_path.failure is None
        assert c.peer.close_reason is not None
        assert "send path" not in c.peer.close_reason
