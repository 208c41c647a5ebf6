"""The WebRTC receive path (issue 20): packets in order are decoded at once, a gap holds
at most ``receive_hold`` packets, the setting is validated at every entry point, and the
outbound queue stays bounded and fenceable."""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from voxflow_adapters.settings import WebRtcSection
from voxflow_adapters.webrtc import (
    PeerSettings,
    ServerSettings,
    WebRtcPeer,
    WebRtcServer,
    assistant_call_factory,
)
from voxflow_adapters.webrtc.client import LoopbackCaller, _MicTrack
from voxflow_adapters.webrtc.command import build_settings
from voxflow_adapters.webrtc.outbound import FRAME_SECONDS, OutboundAudio, ReplyTrack
from voxflow_adapters.webrtc.receive import MAX_RECEIVE_HOLD, ReorderWindow
from voxflow_voice.audio import ReplyChunk
from voxflow_voice.engines import VoiceEngines
from voxflow_voice.transport import ClientObservation

from voxflow.clock import MonotonicClock
from voxflow.ids import DeliveryId
from voxflow.settings import Settings, SettingsError

# -- the reorder window ---------------------------------------------------------------------


def test_packets_in_order_are_released_at_once_whatever_the_hold() -> None:
    for hold in (0, 3, MAX_RECEIVE_HOLD):
        window = ReorderWindow(hold)
        assert [window.push(s, s) for s in (7, 8, 9)] == [[7], [8], [9]]
        assert window.waiting == 0 and window.late == 0 and window.skipped == 0


def test_a_gap_holds_at_most_hold_packets_then_is_skipped() -> None:
    window = ReorderWindow(2)
    assert window.push(10, "a") == ["a"]
    # 11 is lost: 12 and 13 wait for it (hold=2) ...
    assert window.push(12, "c") == [] and window.push(13, "d") == []
    assert window.waiting == 2
    # ... the third packet behind the gap gives up on 11, and all three go on together
    assert window.push(14, "e") == ["c", "d", "e"]
    assert window.skipped == 1 and window.waiting == 0
    # 11 arriving now is too late
    assert window.push(11, "b") == [] and window.late == 1


def test_an_overtaken_packet_that_arrives_in_time_is_put_back_in_order() -> None:
    window = ReorderWindow(3)
    assert window.push(65534, 1) == [1]
    assert window.push(0, 3) == []  # 65535 overtaken, across the 16-bit wrap
    assert window.push(65535, 2) == [2, 3]
    assert window.push(1, 4) == [4]
    assert window.skipped == 0 and window.late == 0


def test_hold_zero_never_waits_and_drops_what_was_overtaken() -> None:
    window = ReorderWindow(0)
    assert window.push(5, 5) == [5]
    assert window.push(7, 7) == [7] and window.skipped == 1
    assert window.push(6, 6) == [] and window.late == 1
    assert window.push(7, 7) == [] and window.late == 2  # a duplicate


@pytest.mark.parametrize("hold", [0, 3, MAX_RECEIVE_HOLD])
def test_a_sequence_restart_more_than_half_the_circle_away_is_followed(hold: int) -> None:
    # the sender restarts its sequence numbers (a new SSRC on the same receiver, a
    # restarted encoder): 40000 is 'behind' 100 on the 16-bit circle, and so is every
    # packet after it; the window must not drop the rest of the call as late
    window = ReorderWindow(hold)
    assert [window.push(s, s) for s in (98, 99, 100)] == [[98], [99], [100]]
    released = [item for s in range(40000, 40010) for item in window.push(s, s)]
    assert released == list(range(40001, 40010))  # one stray packet, then followed
    assert window.late == 1 and window.waiting == 0
    # a single stray packet of the old numbers costs at most one more packet
    window.push(100, 100)
    after = [item for s in range(40010, 40015) for item in window.push(s, s)]
    assert after[-4:] == [40011, 40012, 40013, 40014]


@pytest.mark.parametrize("hold", [-1, MAX_RECEIVE_HOLD + 1, 1.5, "3", True, None])
def test_a_bad_hold_is_a_value_error(hold: Any) -> None:
    with pytest.raises(ValueError, match="hold must be an int"):
        ReorderWindow(hold)


@pytest.mark.parametrize("seq", [-1, 65536, 2.0, "1", None])
def test_a_bad_sequence_number_is_a_value_error(seq: Any) -> None:
    with pytest.raises(ValueError, match="16-bit"):
        ReorderWindow(3).push(seq, None)


@settings(max_examples=300, deadline=None)
@given(hold=st.integers(0, MAX_RECEIVE_HOLD), start=st.integers(0, 65535),
       moves=st.lists(st.integers(-20, 40), max_size=200))
def test_whatever_arrives_releases_in_order_once_and_never_holds_more_than_hold(
    hold: int, start: int, moves: list[int]
) -> None:
    window = ReorderWindow(hold)
    released: list[int] = []
    for move in [0, *moves]:
        seq = (start + move) % 65536
        released += window.push(seq, start + move)  # the item: its unwrapped number
        assert window.waiting <= hold
    assert released == sorted(set(released))  # increasing: in order, each once
    pushed = 1 + len(moves)
    assert len(released) + window.waiting + window.late == pushed


# -- settings ---------------------------------------------------------------------------------


@pytest.mark.parametrize("raw", ["abc", "-1", "16", "1.5", "1e9", "0x3", "true", "3 ms"])
def test_a_hostile_receive_hold_variable_names_the_variable_and_the_fix(raw: str) -> None:
    with pytest.raises(SettingsError) as caught:
        Settings.from_env({"VOXFLOW_WEBRTC_RECEIVE_HOLD": raw})
    message = str(caught.value)
    assert "VOXFLOW_WEBRTC_RECEIVE_HOLD" in message and "from 0 to 15" in message


def test_the_receive_hold_variable_reaches_the_server_settings() -> None:
    settings = Settings.from_env({"VOXFLOW_WEBRTC_RECEIVE_HOLD": " 0 "})
    built = build_settings(host="127.0.0.1", port=0, token=None,
                           receive_hold=settings.section(WebRtcSection).webrtc_receive_hold)
    assert built.peer.receive_hold == 0
    assert build_settings(host="127.0.0.1", port=0, token=None).peer.receive_hold == 3


@pytest.mark.parametrize("hold", [-1, 16, "many", 2.5])
def test_peer_settings_refuse_a_bad_receive_hold(hold: Any) -> None:
    with pytest.raises(ValidationError, match="receive_hold"):
        PeerSettings(receive_hold=hold)


# -- over a real aiortc call -------------------------------------------------------------------


class _CountedMic(_MicTrack):
    """A microphone that sends ``count`` frames of a tone, then nothing at all."""

    def __init__(self, count: int) -> None:
        super().__init__()
        self.count = count
        self.feed(np.full(960 * count, 0.2, np.float32))

    async def recv(self) -> Any:
        if self._index >= self.count:
            await asyncio.Event().wait()  # no more packets (the connection stays up)
        return await super().recv()


async def test_the_server_decodes_the_last_packet_without_waiting_for_later_ones(
    engines: VoiceEngines,
) -> None:
    """aiortc's jitter buffer releases a packet only once four later ones have come, so
    the last four frames before a pause reached the VAD only when speech resumed. Here
    the caller sends 30 frames and stops: all 30 are decoded and handed on."""
    peers: list[WebRtcPeer] = []
    peer_settings = PeerSettings(ice_host_addresses=("127.0.0.1",), receive_hold=3)
    server = WebRtcServer(assistant_call_factory(), engines,
                          settings=ServerSettings(port=0, peer=peer_settings),
                          on_call=lambda peer, call: peers.append(peer))
    async with server:
        caller = LoopbackCaller(server.url.split("/?")[0], server.token)
        caller.mic = _CountedMic(30)
        await caller.connect()
        try:
            for _ in range(400):  # up to 20 s
                if peers and peers[0].statistics().frames_in >= 30:
                    break
                await asyncio.sleep(0.05)
            peer = peers[0]
            stats = peer.statistics()
            assert stats.frames_in == 30
            assert stats.packets_late == 0 and stats.packets_skipped == 0
            # every decoded frame was matched to its packet's arrival
            assert len(peer.receive_timings.decoded) == 30
            assert peer.receive_delay_ms() is not None
        finally:
            await caller.aclose()
        async with asyncio.timeout(20):
            await server.wait_idle()


async def test_the_server_decodes_and_encodes_on_the_event_loop(
    engines: VoiceEngines, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """aiortc decodes in its own thread and hops every frame back onto the loop, and
    encodes through run_in_executor (thread switches every 20 ms, each way): the server
    decodes each packet where it is handled and encodes each frame in its track, with
    the receive path's MonoOpusDecoder (to 16 kHz mono: the caller's frames are no
    longer decoded to stereo 48 kHz, averaged and decimated) and the reply track's
    MonoOpusEncoder, and the session gets the tone that was sent. (The caller keeps
    aiortc's threads: its decodes and encodes are the ones off the loop.)"""
    from aiortc.codecs.opus import OpusEncoder
    from voxflow_adapters.webrtc.opus import MonoOpusDecoder, MonoOpusEncoder

    decode, encode, mono = MonoOpusDecoder.decode, OpusEncoder.encode, MonoOpusEncoder.encode
    on_loop: list[bool] = []
    encoded_on_loop: list[bool] = []
    server_encoded_on_loop: list[bool] = []

    def recorded(self: MonoOpusDecoder, encoded: Any) -> Any:
        frames = decode(self, encoded)
        on_loop.extend(threading.current_thread() is threading.main_thread()
                       and f.sample_rate == 16_000 and f.samples.shape == (320,)
                       for f in frames)
        return frames

    def recorded_encode(self: OpusEncoder, frame: Any, force_keyframe: bool = False) -> Any:
        encoded_on_loop.append(threading.current_thread() is threading.main_thread())
        return encode(self, frame, force_keyframe)

    monkeypatch.setattr(MonoOpusDecoder, "decode", recorded)
    def recorded_mono(self: MonoOpusEncoder, pcm: bytes, *, silent: bool = False) -> bytes:
        server_encoded_on_loop.append(threading.current_thread() is threading.main_thread())
        return mono(self, pcm, silent=silent)

    monkeypatch.setattr(OpusEncoder, "encode", recorded_encode)
    monkeypatch.setattr(MonoOpusEncoder, "encode", recorded_mono)
    peers: list[WebRtcPeer] = []
    heard: list[np.ndarray] = []

    def on_call(peer: WebRtcPeer, call: Any) -> None:
        put = peer.inbound.queue.put_nowait

        def keep(chunk: Any) -> None:
            if chunk is not None:
                heard.append(chunk.samples())
            put(chunk)

        peer.inbound.queue.put_nowait = keep  # type: ignore[method-assign]
        peers.append(peer)

    server = WebRtcServer(assistant_call_factory(), engines, settings=ServerSettings(
        port=0, peer=PeerSettings(ice_host_addresses=("127.0.0.1",), receive_hold=3)),
        on_call=on_call)
    async with server:
        caller = LoopbackCaller(server.url.split("/?")[0], server.token)
        caller.mic = _CountedMic(30)
        caller.mic._pending.clear()  # a 440 Hz tone at 0.2 (Opus drops a constant)
        caller.mic.feed(0.2 * np.sin(2 * np.pi * 440 * np.arange(960 * 30) / 48_000,
                                     dtype=np.float32))
        await caller.connect()
        try:
            for _ in range(400):  # up to 20 s
                if peers and peers[0].statistics().frames_in >= 30:
                    break
                await asyncio.sleep(0.05)
            assert peers[0].statistics().frames_in == 30
            # the server's 30 packets, each decoded on the loop, to 16 kHz mono
            assert len(on_loop) == 30 and all(on_loop)
            # the server's frames (silence until a reply), each on the loop
            assert server_encoded_on_loop and all(server_encoded_on_loop)
            assert encoded_on_loop and not any(encoded_on_loop)  # the caller's: executor
            tone = np.concatenate(heard)[4800:]  # 16 kHz, past the codec's onset
            rms = float(np.sqrt(np.mean(tone**2)))
            assert 0.08 < rms < 0.12  # 0.2 / sqrt(2), -3 dB (the caller's encoder's upmix)
        finally:
            await caller.aclose()
        async with asyncio.timeout(20):
            await server.wait_idle()


# -- the outbound queue --------------------------------------------------------------------


def _chunk(delivery: str, seconds: float, start: int = 0, rate: int = 22050) -> ReplyChunk:
    samples = np.full(round(seconds * rate), 0.3, np.float32)
    return ReplyChunk.from_float(samples, rate, delivery_id=DeliveryId(delivery), segment_id=1,
                                 start_sample=start)


async def test_the_outbound_queue_holds_at_most_lead_plus_one_chunk() -> None:
    """A writer that respects wait_writable never queues more than ``lead`` + one chunk
    ahead of the wire, however fast it writes (no timing: frames are pulled by hand)."""
    seen: list[ClientObservation] = []
    lead, chunk_seconds = 0.1, 0.05
    outbound = OutboundAudio(clock=MonotonicClock(), on_observation=seen.append, lead=lead)
    depth: list[float] = []

    async def writer() -> None:
        for i in range(40):
            await outbound.wait_writable()
            outbound.write_nowait(_chunk("d1", chunk_seconds, start=i * 1102))
            depth.append(outbound.statistics().queued_seconds)

    task = asyncio.create_task(writer())
    for _ in range(200):
        await asyncio.sleep(0)  # let the writer fill up to the bound
        await asyncio.sleep(0)
        outbound.next_frame()
        depth.append(outbound.statistics().queued_seconds)
        if task.done():
            break
    await task
    assert max(depth) <= lead + chunk_seconds + 1e-6
    assert max(depth) >= lead  # the writer did run ahead (the bound was reached)


def test_a_flush_drops_every_frame_not_yet_sent_and_nothing_of_it_goes_out_after() -> None:
    seen: list[ClientObservation] = []
    outbound = OutboundAudio(clock=MonotonicClock(), on_observation=seen.append, lead=1.0)
    outbound.write_nowait(_chunk("d1", 0.3))
    sent = [outbound.next_frame() for _ in range(3)]  # 60 ms went out
    assert all(any(sent_frame) for sent_frame in sent)
    queued = outbound.statistics().queued_seconds
    assert queued == pytest.approx(0.3 - 3 * FRAME_SECONDS, abs=1e-3)
    dropped = outbound.flush(DeliveryId("d1"))
    assert dropped == pytest.approx(round(0.3 * 22050) - round(0.06 * 22050), abs=2)
    after = [outbound.next_frame() for _ in range(20)]
    assert not any(any(frame) for frame in after)  # silence only
    stats = outbound.statistics()
    assert stats.stale_samples == 0 and stats.queued_seconds == 0
    assert stats.samples_flushed == pytest.approx(queued * 48_000, abs=2)
    assert outbound.last_frame_of[DeliveryId("d1")] == 2 < outbound.flush_frame_of[DeliveryId("d1")]
    outbound.write_nowait(_chunk("d1", 0.1))  # a late chunk of the fenced delivery
    assert outbound.statistics().queued_seconds == 0


async def test_the_reply_track_encodes_each_frame_to_its_packet_on_the_loop() -> None:
    """After encode_here() the track returns each frame's Opus packet, encoded on the loop
    by a MonoOpusEncoder: the bytes it makes of the frames the track would have given
    aiortc's sender, and the frame's own RTP time. (That those packets decode to the
    audio aiortc's stereo encoder sent: test_webrtc_opus.)"""
    from voxflow_adapters.webrtc.opus import MonoOpusEncoder

    def track() -> ReplyTrack:
        outbound = OutboundAudio(clock=MonotonicClock(), on_observation=lambda o: None)
        outbound.write_nowait(ReplyChunk.from_float(
            0.3 * np.sin(2 * np.pi * 330 * np.arange(4410) / 22050, dtype=np.float32), 22050,
            delivery_id=DeliveryId("d1"), segment_id=1, start_sample=0))
        return ReplyTrack(outbound)

    here, there, encoder = track(), track(), MonoOpusEncoder()
    here.encode_here()
    for index in range(12):  # 200 ms of reply, then silence
        packet, frame = await here.recv(), await there.recv()
        pcm = bytes(frame.planes[0])[:2 * 960]
        assert bytes(packet) == encoder.encode(pcm, silent=not any(pcm))
        assert packet.pts == frame.pts == index * 960
        assert packet.time_base == frame.time_base
    with pytest.raises(RuntimeError, match="after the first frame"):
        here.encode_here()


def test_a_pause_holds_the_next_frame_and_resume_sends_on_from_the_same_sample() -> None:
    seen: list[ClientObservation] = []
    outbound = OutboundAudio(clock=MonotonicClock(), on_observation=seen.append, lead=1.0)
    outbound.write_nowait(_chunk("d1", 0.1))
    outbound.next_frame()
    assert outbound.pause(DeliveryId("d1"))
    assert DeliveryId("d1") in outbound.paused_at
    assert not any(outbound.next_frame())  # the very next frame is silence
    assert outbound.resume(DeliveryId("d1"))
    assert any(outbound.next_frame())
    assert outbound.first_frame_of[DeliveryId("d1")] == 0
    assert outbound.frame_time(0) is not None and outbound.frame_time(99) is None



def test_a_peer_sending_undecodable_packets_is_counted_and_said_once_per_interval(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Hostile input on the media path: garbage Opus packets (50 a second) are dropped and
    counted by the receive path's Opus decoder on the loop, and logged at most once per
    UNDECODABLE_LOG_SECONDS with how many failed, not once per packet; a good packet after
    them still decodes."""
    from fractions import Fraction

    from aiortc.codecs import get_encoder
    from aiortc.rtcrtpparameters import RTCRtpCodecParameters
    from aiortc.rtp import RtpPacket
    from av import AudioFrame
    from voxflow_adapters.webrtc.receive import UNDECODABLE_LOG_SECONDS, _DecodeHere

    codec = RTCRtpCodecParameters(mimeType="audio/opus", clockRate=48000, channels=2,
                                  payloadType=111)
    frames: list[Any] = []
    now = [0.0]
    decode = _DecodeHere({111: codec}, frames.append, clock=lambda: now[0])
    seconds = 25.0
    garbage = round(seconds / 0.02)
    with caplog.at_level(logging.WARNING, logger="voxflow_adapters.webrtc.receive"):
        for n in range(garbage):
            packet = RtpPacket(payload_type=111, sequence_number=n, timestamp=n * 960)
            packet._data = b"\xff\xff\xff"  # (an Opus frame-count byte promising more)
            decode.add(packet)
            now[0] += 0.02
    lines = [r for r in caplog.records if "failed to decode" in r.getMessage()]
    assert decode.undecodable == garbage
    assert len(lines) == int(seconds // UNDECODABLE_LOG_SECONDS) + 1  # 0 s, 10 s, 20 s
    assert sum(int(r.getMessage().split()[0]) for r in lines) < garbage  # counts, not lines
    tone = AudioFrame.from_ndarray(np.zeros((1, 1920), np.int16), format="s16",
                                   layout="stereo")
    tone.sample_rate, tone.pts, tone.time_base = 48000, 0, Fraction(1, 48000)
    [payload], _ = get_encoder(codec).encode(tone)
    good = RtpPacket(payload_type=111, sequence_number=garbage, timestamp=garbage * 960)
    good._data = payload
    decode.add(good)
    assert len(frames) == 1


def _opus_decode_here() -> tuple[Any, list[Any]]:
    from aiortc.rtcrtpparameters import RTCRtpCodecParameters
    from voxflow_adapters.webrtc.receive import _DecodeHere

    codec = RTCRtpCodecParameters(mimeType="audio/opus", clockRate=48000, channels=2,
                                  payloadType=111)
    frames: list[Any] = []
    return _DecodeHere({111: codec}, frames.append), frames


def _rtp(n: int, payload: bytes) -> Any:
    from aiortc.rtp import RtpPacket

    packet = RtpPacket(payload_type=111, sequence_number=n % 65536, timestamp=n * 960)
    packet._data = payload
    return packet


def _opus_packet(samples: int, channels: int) -> bytes:
    from voxflow_adapters.webrtc._libopus import APPLICATION_AUDIO, OpusEncoderHandle

    tone = 8000 * np.sin(2 * np.pi * 440 * np.arange(samples) / 48_000)
    encoder = OpusEncoderHandle(48_000, channels, APPLICATION_AUDIO)
    return encoder.encode(np.repeat(tone, channels).astype(np.int16))


def test_oversized_and_corrupt_packets_are_dropped_and_counted_odd_valid_ones_decode(
) -> None:
    """One past 3 x 1275 bytes and corrupt ones are dropped and counted; a stereo packet,
    a 120 ms one and a TOC byte alone (DTX) decode to 16 kHz mono of their own length,
    stamped with their RTP time (48 kHz units from the stream's first packet, a dropped
    one too)."""
    decode, frames = _opus_decode_here()
    hostile = [bytes(4000), b"\x03", bytes(range(7, 207))]
    for n, payload in enumerate(hostile):
        decode.add(_rtp(n, payload))
    assert decode.undecodable == len(hostile) and frames == []
    valid = [(_opus_packet(960, 2), 320), (_opus_packet(5760, 1), 1920),
             (bytes([0xF8]), 320)]
    for n, (payload, _) in enumerate(valid, start=len(hostile)):
        decode.add(_rtp(n, payload))
    assert decode.undecodable == len(hostile)
    assert [f.samples.shape for f in frames] == [(samples,) for _, samples in valid]
    assert {f.sample_rate for f in frames} == {16_000}
    assert [f.rtp_timestamp for f in frames] == [n * 960 for n in range(len(hostile), n + 1)]


def test_padding_only_packets_are_skipped_quietly_and_the_audio_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """aiortc passes an RTP packet of padding alone (RFC 3550: legitimate) on with an
    empty payload: it is skipped and counted as empty, not as undecodable, nothing is
    logged, and the packets around it decode."""
    decode, frames = _opus_decode_here()
    good = _opus_packet(960, 1)
    with caplog.at_level(logging.WARNING, logger="voxflow_adapters.webrtc.receive"):
        for n, payload in enumerate([good, b"", b"", good]):
            decode.add(_rtp(n, payload))
    assert (decode.empty, decode.undecodable) == (2, 0)
    assert [f.samples.shape for f in frames] == [(320,), (320,)]
    assert caplog.records == []


def test_no_libopus_on_the_receive_path_is_counted_not_raised_into_aiortc(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    """The Opus decoder is made when the first packet comes; libopus failing to load then
    (OpusLibraryError) is counted and logged like an undecodable packet, never raised
    out of add() (aiortc's DTLS loop would log it and close the transport). The library
    is searched for once, not per packet (find_library runs a subprocess, on the event
    loop here): the failure is kept."""
    import ctypes.util

    from voxflow_adapters.webrtc import _libopus

    searched = {"candidates": 0, "find_library": 0}

    def candidates() -> list[str]:
        searched["candidates"] += 1
        return []

    def find_library(name: str) -> None:
        searched["find_library"] += 1

    monkeypatch.setattr(_libopus, "_lib", None)
    monkeypatch.setattr(_libopus, "_candidates", candidates)
    monkeypatch.setattr(ctypes.util, "find_library", find_library)
    decode, frames = _opus_decode_here()
    with caplog.at_level(logging.WARNING, logger="voxflow_adapters.webrtc.receive"):
        for n in range(10):
            assert decode.add(_rtp(n, b"\xf8")) == (False, None)
    assert decode.undecodable == 10 and frames == []
    assert searched == {"candidates": 1, "find_library": 1}
    [line] = [r.getMessage() for r in caplog.records if "failed to decode" in r.getMessage()]
    assert "OpusLibraryError" in line


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=5000), min_size=1, max_size=8))
def test_random_payloads_never_break_the_receive_path(payloads: list[bytes]) -> None:
    """Random bytes as Opus payloads: each packet gives one frame of at most 120 ms or is
    counted as undecodable (an empty one as empty); nothing raises, and a good packet
    after them decodes."""
    decode, frames = _opus_decode_here()
    for n, payload in enumerate(payloads):
        decode.add(_rtp(n, payload))
    assert decode.undecodable + len(frames) + decode.empty == len(payloads)
    assert decode.empty == payloads.count(b"")
    assert all(f.samples.size <= 1920 for f in frames)
    decode.add(_rtp(len(payloads), _opus_packet(960, 1)))
    assert frames[-1].samples.shape == (320,)
