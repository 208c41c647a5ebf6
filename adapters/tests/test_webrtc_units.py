"""The WebRTC adapter's parts without a network: the outbound frame queue (pacing units,
receipts, flush), the data-channel protocol and the settings' validation."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from pydantic import ValidationError
from voxflow_adapters.webrtc import IceServer, PeerSettings, ServerSettings, host_addresses
from voxflow_adapters.webrtc.outbound import FRAME_SAMPLES, OutboundAudio
from voxflow_adapters.webrtc.protocol import (
    HangupMessage,
    MuteMessage,
    PlaybackMessage,
    ProtocolError,
    messages_for_event,
    parse_page_message,
)
from voxflow_voice.audio import ReplyChunk, float_to_pcm16, resample
from voxflow_voice.events import BargeIn, ReplyInterrupted, TurnCommitted
from voxflow_voice.transport import ClientObservation, PlaybackDrained, PlaybackReceipt

from voxflow.clock import VirtualClock
from voxflow.ids import DeliveryId, SessionId, TurnId

A, B = DeliveryId("a"), DeliveryId("b")


def tone(seconds: float, rate: int, delivery: DeliveryId, segment: int = 1,
         start: int = 0) -> ReplyChunk:
    t = np.arange(round(seconds * rate)) / rate
    return ReplyChunk.from_float(0.5 * np.sin(2 * np.pi * 440 * t), rate, delivery_id=delivery,
                                 segment_id=segment, start_sample=start)


def queue(lead: float = 10.0) -> tuple[OutboundAudio, list[ClientObservation]]:
    seen: list[ClientObservation] = []
    return OutboundAudio(clock=VirtualClock(), on_observation=seen.append, lead=lead), seen


async def test_receipts_cover_exactly_the_chunks_sent_in_their_own_rate() -> None:
    out, seen = queue()
    first, second = tone(0.1, 22050, A), tone(0.05, 22050, A, start=2205)
    out.write_nowait(first)
    out.write_nowait(second)
    frames = [out.next_frame() for _ in range(12)]
    receipts = [o for o in seen if isinstance(o, PlaybackReceipt)]
    assert all(len(f) == 2 * FRAME_SAMPLES for f in frames)
    assert sum(r.num_samples for r in receipts) == first.num_samples + second.num_samples
    # Contiguous, in order, in the chunk's rate and positions.
    position = 0
    for r in receipts:
        assert (r.delivery_id, r.sample_rate, r.start_sample) == (A, 22050, position)
        position += r.num_samples
    assert isinstance(seen[-1], PlaybackDrained) and seen[-1].delivery_id == A
    assert out.statistics().reply_frames < 12  # the rest was silence


async def test_every_sample_of_a_reply_is_sent_none_held_in_a_resampler_tail() -> None:
    # The receipts say the whole chunk played: so must the track. A streaming resampler
    # kept its look-ahead (~33 ms at 22.05 -> 48 kHz) back, and the reply's end was never
    # sent, while its receipts claimed it.
    out, seen = queue()
    chunk = tone(0.1, 22050, A)
    out.write_nowait(chunk)
    sent = np.frombuffer(b"".join(out.next_frame() for _ in range(8)), np.int16)
    expected = np.frombuffer(float_to_pcm16(resample(chunk.samples(), 22050, 48000)), np.int16)
    assert np.array_equal(sent[: expected.size], expected)
    assert not sent[expected.size :].any()
    assert sum(r.num_samples for r in seen if isinstance(r, PlaybackReceipt)) == 2205


async def test_flush_drops_one_delivery_at_once_and_keeps_the_other() -> None:
    out, seen = queue()
    out.write_nowait(tone(1.0, 16000, A))
    out.write_nowait(tone(0.1, 16000, B))
    out.next_frame()
    dropped = out.flush(A)
    sent = sum(r.num_samples for r in seen if isinstance(r, PlaybackReceipt))
    assert 0 < sent <= 400  # about one 20 ms frame of A went out (resampler look-ahead)
    assert dropped == 16000 - sent  # the rest of A is dropped: every sample accounted for
    out.write_nowait(tone(0.2, 16000, A))  # a late chunk of a flushed delivery is refused
    for _ in range(10):
        out.next_frame()
    carried = {r.delivery_id for r in seen[1:] if isinstance(r, PlaybackReceipt)}
    assert carried == {B}
    assert out.last_frame_of[A] < out.flush_frame_of[A]
    assert out.statistics().stale_samples == 0


async def test_pause_holds_a_delivery_and_resume_sends_on_from_the_same_sample() -> None:
    out, seen = queue()
    out.write_nowait(tone(0.2, 16000, A))
    out.next_frame()
    assert out.pause(A) and not out.pause(A)
    held = [out.next_frame() for _ in range(5)]
    assert all(frame == bytes(len(frame)) for frame in held)  # silence while paused
    assert not any(isinstance(o, PlaybackDrained) for o in seen)  # the floor stays held
    receipts_before = [o for o in seen if isinstance(o, PlaybackReceipt)]
    assert out.resume(A) and not out.resume(A)
    for _ in range(12):
        out.next_frame()
    receipts = [o for o in seen if isinstance(o, PlaybackReceipt)]
    assert len(receipts) > len(receipts_before)
    position = 0
    for r in receipts:  # contiguous across the pause: no gap, no repeat
        assert r.start_sample == position
        position += r.num_samples
    assert position == 3200
    assert out.pause(A) is True and out.flush(A) == 0 and out.resume(A) is False


async def test_wait_writable_blocks_above_the_lead_until_frames_go_out() -> None:
    out, _ = queue(lead=0.05)
    out.write_nowait(tone(0.1, 48000, A))
    waiter = asyncio.ensure_future(out.wait_writable())
    await asyncio.sleep(0)
    assert not waiter.done()
    for _ in range(3):
        out.next_frame()
    await asyncio.wait_for(waiter, 1)


def test_page_messages_parse_and_bad_ones_name_the_problem() -> None:
    assert parse_page_message('{"v":1,"type":"mute","muted":true}') == MuteMessage(
        type="mute", muted=True)
    assert isinstance(parse_page_message(b'{"v":1,"type":"playback","playing":false}'),
                      PlaybackMessage)
    assert isinstance(parse_page_message('{"v":1,"type":"hangup"}'), HangupMessage)
    for raw, reason in [
        ("{", "not JSON"), ('"mute"', "JSON object"), ('{"type":"mute"}', "version None"),
        ('{"v":1,"type":"dance"}', "unknown message type 'dance'"),
        ('{"v":1,"type":"mute"}', "muted"), ("x" * 5000, "exceeds"),
    ]:
        with pytest.raises(ProtocolError, match=reason):
            parse_page_message(raw)


def test_session_events_become_page_messages() -> None:
    sid, tid = SessionId("s"), TurnId("t")
    [transcript] = messages_for_event(
        TurnCommitted(session_id=sid, at=1.0, turn_id=tid, text="hi", speech_end_at=0.5))
    assert transcript.model_dump() == {"v": 1, "type": "transcript", "role": "user",
                                       "turn_id": "t", "text": "hi"}
    [cut] = messages_for_event(BargeIn(session_id=sid, at=2.0, delivery_id=A, onset_at=1.9))
    assert cut.type == "interrupted"
    heard, state = messages_for_event(ReplyInterrupted(
        session_id=sid, at=3.0, turn_id=tid, delivery_id=A, heard_text="Once",
        full_text="Once upon", heard_seconds=0.4))
    assert heard.model_dump()["heard_text"] == "Once" and state.model_dump()["state"] == "listening"


def test_settings_refuse_bad_values_by_name() -> None:
    with pytest.raises(ValidationError, match="port"):
        ServerSettings(port=70000)
    with pytest.raises(ValidationError, match="token"):
        ServerSettings(token="short")
    with pytest.raises(ValidationError, match="stun:"):
        IceServer(urls=("stun.example.org:3478",))
    with pytest.raises(ValidationError, match="not an IP address"):
        PeerSettings(ice_host_addresses=("localhost",))
    with pytest.raises(ValueError, match="not an IP address"), host_addresses(["nope"]):
        pass
    assert ServerSettings().host == "127.0.0.1" and ServerSettings().peer.ice_servers == ()


def test_voxflow_serve_refuses_bad_options_before_loading_anything(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from voxflow.cli import main

    assert main(["serve", "--port", "70000"]) == 2
    assert "port" in capsys.readouterr().err
    assert main(["serve", "--ice-server", "stun.example.org"]) == 2
    assert "stun:" in capsys.readouterr().err
    assert main(["serve", "no/such/flow.py:Flow"]) == 2
    assert "not found" in capsys.readouterr().err
