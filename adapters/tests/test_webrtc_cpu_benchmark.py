"""``benchmarks/webrtc_cpu.py``'s simulated caller, in real time (on the virtual clock
synthesis takes no time, and a clock.sleep in the TTS hung the call past 300 s, so no
pause runs dry): it hears each reply whole, even through a pause between two sentences
longer than its GAP; and
``benchmarks/cpu_budget.py`` times the reply track's Opus encoder.

On a slow machine the pause after "Sure." (the next sentence still being synthesized)
ran dry for longer than GAP: the testkit's ``reply_end`` step took it for the reply's
end and asked again, cutting the reply, so the simulated and the WebRTC calls did
different work. The benchmark's figures are real-time measurements it prints; this
only checks the caller.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from voxflow_adapters.testkit.flows import Teller
from voxflow_adapters.testkit.scenario import run_call
from voxflow_voice.audio import ReplyChunk
from voxflow_voice.engines import VoiceEngines

from voxflow.clock import MonotonicClock
from voxflow.ids import DeliveryId

from .conftest import benchmark_module

STALL = 2.0  # s: each later sentence's synthesis waits this long (a slow machine)
SHORT = "Sure. This afternoon you have a design review at two, with the whole product team."
"""The benchmark's REPLY cut to its first two sentences: one pause, a shorter call."""



class _StallingTts:
    """The real TTS, each segment after a reply's first one starting STALL s late."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    @property
    def sample_rate(self) -> int:
        return int(self.inner.sample_rate)

    def synthesize(self, text: str) -> Any:
        return self.inner.synthesize(text)

    async def stream(self, text: str, *, delivery_id: DeliveryId,
                     segment_id: int) -> AsyncIterator[ReplyChunk]:
        if segment_id > 1:
            await asyncio.sleep(STALL)
        async for chunk in self.inner.stream(text, delivery_id=delivery_id,
                                             segment_id=segment_id):
            yield chunk


@pytest.mark.models
async def test_the_simulated_caller_hears_each_reply_whole_through_a_long_pause(
    engines: VoiceEngines,
) -> None:
    cpu, calls = benchmark_module("webrtc_cpu"), benchmark_module("_capacity_calls")
    clock = MonotonicClock()
    slow = VoiceEngines(stt=engines.stt, tts=_StallingTts(engines.tts),
                        make_vad=engines.make_vad, end_of_turn=engines.end_of_turn,
                        scheduler=engines.scheduler)
    settled: set[str] = set()

    def record(event: Any) -> None:
        if event.kind in ("reply_finished", "reply_interrupted"):
            settled.add(event.delivery_id)

    with cpu._replies_heard_whole(settled):
        call = await run_call(Teller(story=SHORT, trigger=None),
                              calls.caller_script(calls.question_audio(engines), 2, 0.5),
                              slow, clock=clock, tail=cpu.TAIL, on_event=record)
    replies = call.replies()
    assert len(replies) == 2
    assert call.of_kind("barge_in") == []  # the caller never spoke over a reply
    assert [call.settled(r) for r in replies] == ["completed", "completed"]
    assert all(call.heard_seconds(r) > 4.0 for r in replies)  # the ~4.6 s reply, whole


def test_cpu_budget_times_the_encoder_the_reply_track_uses(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The reply track encodes with MonoOpusEncoder (250f616); cpu_budget.py's Opus
    figure timed aiortc's stereo encoder, which no call uses any more."""
    from voxflow_adapters.webrtc.opus import MonoOpusEncoder

    budget = benchmark_module("cpu_budget")
    encode = MonoOpusEncoder.encode
    frames: list[int] = []

    def counted(self: MonoOpusEncoder, pcm: bytes, *, silent: bool = False) -> bytes:
        frames.append(len(pcm))
        return encode(self, pcm, silent=silent)

    monkeypatch.setattr(MonoOpusEncoder, "encode", counted)
    encoding, decoding = budget._opus_ms_per_s(0.2, 1)
    assert frames == [1920] * 10  # each 20 ms frame of the 0.2 s tone, mono s16
    assert encoding > 0 and decoding > 0
