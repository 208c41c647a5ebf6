"""WebRTC calls end to end, in process: an aiortc caller dials ``voxflow serve`` over
loopback, speaks synthesized WAV audio, and the example assistant answers on the real
models (Whisper tiny.en, Piper, Silero)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from voxflow_adapters.webrtc import (
    Call,
    PeerSettings,
    ServerSettings,
    WebRtcPeer,
    WebRtcServer,
    assistant_call_factory,
)
from voxflow_adapters.webrtc.client import LoopbackCaller
from voxflow_voice.audio import AudioChunk, read_wav, write_wav
from voxflow_voice.engines import VoiceEngines
from voxflow_voice.events import (
    BargeInPaused,
    DeliverySettled,
    MuteObserved,
    ReplyFinished,
    ReplyInterrupted,
    TurnCommitted,
)
from voxflow_voice.speak.history import INTERRUPTED_MARK

pytestmark = pytest.mark.models

LOOPBACK = PeerSettings(ice_host_addresses=("127.0.0.1",))


def speech_wav(engines: VoiceEngines, text: str, path: Path) -> Path:
    """Synthesize ``text`` with the bundled voice into a 16-bit WAV file."""
    samples = np.concatenate([np.asarray(s.samples, np.float32)
                              for s in engines.tts.synthesize(text)])
    write_wav(path, AudioChunk.from_float(samples, engines.tts.sample_rate))
    return path


def say(engines: VoiceEngines, text: str, tmp_path: Path) -> AudioChunk:
    name = "".join(c for c in text.lower() if c.isalpha())[:20] or "speech"
    return read_wav(speech_wav(engines, text, tmp_path / f"{name}.wav"))


@contextlib.asynccontextmanager
async def serving(
    engines: VoiceEngines, **settings: Any
) -> AsyncIterator[tuple[WebRtcServer, list[tuple[WebRtcPeer, Call]]]]:
    calls: list[tuple[WebRtcPeer, Call]] = []
    options: dict[str, Any] = {"port": 0, "peer": LOOPBACK, **settings}
    server = WebRtcServer(assistant_call_factory(), engines, settings=ServerSettings(**options),
                          on_call=lambda peer, call: calls.append((peer, call)))
    async with server:
        yield server, calls


async def until_no_calls(server: WebRtcServer) -> None:
    async with asyncio.timeout(20):
        await server.wait_idle()


async def test_calls_from_a_wav_commit_the_transcript_and_play_the_reply(
    engines: VoiceEngines, tmp_path: Path
) -> None:
    hello = say(engines, "Hello there!", tmp_path)

    async def one_call(caller: LoopbackCaller) -> tuple[dict[str, Any], ...]:
        async with caller:
            caller.say(hello)
            transcript = await caller.wait_message("transcript")
            done = await caller.wait_message("reply_done")
            latency = await caller.wait_message("latency")
        return transcript, done, latency

    async with serving(engines) as (server, calls):
        base = f"http://127.0.0.1:{server.port}"
        # A browser sends its page's Origin; the server's own loopback origins are allowed.
        callers = [LoopbackCaller(base, server.token, origin=base),
                   LoopbackCaller(base, server.token, origin=f"http://localhost:{server.port}")]
        results = await asyncio.gather(*(one_call(c) for c in callers))  # two at once
        await until_no_calls(server)
    assert len(calls) == 2
    by_id = {peer.call_id: (peer, call) for peer, call in calls}
    for caller, (transcript, done, latency) in zip(callers, results, strict=True):
        assert caller.call_id is not None
        peer, call = by_id[caller.call_id]
        assert call.session.engines is engines  # one set of models for every call
        assert "hello" in transcript["text"].lower()
        assert caller.of_type("hello")[0]["session_id"] == str(call.session.session_id)
        reply_text = " ".join(m["text"] for m in caller.of_type("reply_text")
                              if m["delivery_id"] == done["delivery_id"])
        assert reply_text == "Hello! How can I help you today?"
        assert latency["first_audio_ms"] is not None and latency["interrupted"] is False
        # The reply was heard: decoded audio arrived, and the session saw it played whole.
        assert caller.audible_frames() > 25  # over half a second of assistant audio
        committed = [e for e in call.session.events if isinstance(e, TurnCommitted)]
        finished = [e for e in call.session.events if isinstance(e, ReplyFinished)]
        assert [e.text for e in committed] == [transcript["text"]]
        assert [e.delivery_id for e in finished] == [done["delivery_id"]]
        stats = peer.statistics()
        assert stats.frames_in > 0 and stats.outbound.reply_frames > 0
        assert stats.outbound.stale_samples == 0
        assert stats.close_reason is not None  # the hang-up freed the call


async def test_barge_in_stops_the_reply_at_the_fence(engines: VoiceEngines, tmp_path: Path) -> None:
    async with serving(engines) as (server, calls):
        caller = LoopbackCaller(f"http://127.0.0.1:{server.port}", server.token)
        async with caller:
            caller.say(say(engines, "Tell me a story.", tmp_path))
            await caller.wait_message("state", state="speaking")
            await caller.wait_for(lambda: caller.audible_frames() >= 50, what="story audio")
            caller.say(say(engines, "Stop, thanks.", tmp_path))
            cut = await caller.wait_message("interrupted")
            await caller.wait_message("reply_done")  # the answer to "stop" played whole
        await until_no_calls(server)
    peer, call = calls[0]
    story = cut["delivery_id"]
    interrupted = [e for e in call.session.events if isinstance(e, ReplyInterrupted)]
    assert [e.delivery_id for e in interrupted] == [story]
    assert 0 < interrupted[0].heard_seconds < 20  # cut early in a ~30 s story
    # The peer is a PausableTransport: the story was held at the first speech frame,
    # while the barge-in was confirmed, then fenced.
    assert any(isinstance(e, BargeInPaused) and e.delivery_id == story
               for e in call.session.events)
    out = peer.outbound
    # Not one sample of the story left the server after its fence: the last frame that
    # carried it is the one being produced when the fence fell, or an earlier one.
    assert out.statistics().stale_samples == 0
    assert out.last_frame_of[story] < out.flush_frame_of[story]
    assert out.statistics().samples_flushed > 0  # queued story audio was dropped at once
    assert any(m["type"] == "interrupted" and m.get("heard_text") for m in caller.messages)


async def test_mute_over_the_data_channel_silences_the_microphone(
    engines: VoiceEngines, tmp_path: Path
) -> None:
    async with serving(engines) as (server, calls):
        caller = LoopbackCaller(f"http://127.0.0.1:{server.port}", server.token)
        async with caller:
            caller.send({"v": 1, "type": "mute", "muted": True})
            await caller.wait_message("mute", muted=True)
            caller.say(say(engines, "Hello there!", tmp_path))  # spoken while muted
            await caller.wait_for(lambda: not caller.mic.speaking, what="muted speech sent")
            caller.send({"v": 1, "type": "mute", "muted": False})
            await caller.wait_message("mute", muted=False)
            caller.say(say(engines, "What can you do?", tmp_path))
            first = await caller.wait_message("transcript")
        await until_no_calls(server)
    _, call = calls[0]
    assert "what can you do" in first["text"].lower()  # the muted greeting never arrived
    mutes = [e.muted for e in call.session.events if isinstance(e, MuteObserved)]
    assert mutes == [True, False]


async def test_a_mute_over_the_data_channel_cuts_the_reply_playing(
    engines: VoiceEngines, tmp_path: Path
) -> None:
    async with serving(engines) as (server, calls):
        caller = LoopbackCaller(f"http://127.0.0.1:{server.port}", server.token)
        async with caller:
            caller.say(say(engines, "Tell me a story.", tmp_path))
            await caller.wait_message("state", state="speaking")
            await caller.wait_for(lambda: caller.audible_frames() >= 50, what="story audio")
            caller.send({"v": 1, "type": "mute", "muted": True})
            cut = await caller.wait_message("interrupted")
            await caller.wait_for(lambda: any(m["type"] == "interrupted" and m["heard_text"]
                                              for m in caller.messages), what="heard text")
        await until_no_calls(server)
    peer, call = calls[0]
    story = cut["delivery_id"]
    [interrupted] = [e for e in call.session.events if isinstance(e, ReplyInterrupted)]
    assert interrupted.delivery_id == story and 0 < interrupted.heard_seconds < 20
    muted = [e for e in call.session.events if isinstance(e, MuteObserved) and e.muted]
    assert muted and muted[0].at <= interrupted.at
    said = call.flow.state.messages[-1]  # history: what was heard, marked cut
    assert said.role == "assistant" and said.content.endswith(INTERRUPTED_MARK)
    assert said.content.startswith(interrupted.heard_text)
    out = peer.outbound
    assert out.statistics().stale_samples == 0
    assert out.last_frame_of[story] < out.flush_frame_of[story]


async def test_a_mute_over_the_data_channel_cuts_the_announcement_playing(
    engines: VoiceEngines, tmp_path: Path
) -> None:
    async with serving(engines) as (server, calls):
        caller = LoopbackCaller(f"http://127.0.0.1:{server.port}", server.token)
        async with caller:
            caller.say(say(engines, "Where is my order?", tmp_path))
            checking = await caller.wait_message("reply_done")  # "I'm checking" played
            await caller.wait_for(lambda: any(
                m["type"] == "reply_text" and m["delivery_id"] != checking["delivery_id"]
                for m in caller.messages), what="the announcement")
            began = time.monotonic()
            await caller.wait_for(lambda: caller.audible_frames(after=began) >= 25,
                                  what="announcement audio")
            caller.send({"v": 1, "type": "mute", "muted": True})
            cut = await caller.wait_message("interrupted")
            await caller.wait_for(lambda: any(m["type"] == "interrupted" and m["heard_text"]
                                              for m in caller.messages), what="heard text")
        await until_no_calls(server)
    peer, call = calls[0]
    announcement = cut["delivery_id"]
    assert announcement != checking["delivery_id"]
    settled = [e for e in call.session.events if isinstance(e, DeliverySettled)]
    assert [(e.delivery_id, e.status) for e in settled] == [(announcement, "interrupted")]
    said = call.flow.state.messages[-1]  # what was heard of it, marked as an announcement
    assert said.metadata["announcement"] and said.metadata["interrupted"]
    assert said.metadata["delivery_id"] == announcement
    [job] = call.flow.state.jobs.values()
    assert said.metadata["job_ids"] == [job.job_id]
    assert job.announcement.startswith(said.metadata["heard_text"].rstrip(".,"))
    assert said.metadata["heard_text"] != job.announcement
    out = peer.outbound
    assert out.statistics().stale_samples == 0
    assert out.last_frame_of[announcement] < out.flush_frame_of[announcement]


async def test_the_peer_vanishing_mid_reply_settles_it_and_frees_the_call(
    engines: VoiceEngines, tmp_path: Path
) -> None:
    async with serving(engines) as (server, calls):
        caller = LoopbackCaller(f"http://127.0.0.1:{server.port}", server.token)
        await caller.connect()
        caller.say(say(engines, "Tell me a story.", tmp_path))
        await caller.wait_message("state", state="speaking")
        await caller.aclose()  # like closing the tab: no hang-up message
        await until_no_calls(server)
        peer, call = calls[0]
        assert call.session.replies is not None
        floor = call.session.replies.statistics()
    interrupted = [e for e in call.session.events if isinstance(e, ReplyInterrupted)]
    assert len(interrupted) == 1
    assert call.session.events[-1].kind == "session_closed"
    assert peer.closed.is_set() and peer.connection_state == "closed"
    assert floor.active_delivery_id is None and floor.closed  # the floor is free
