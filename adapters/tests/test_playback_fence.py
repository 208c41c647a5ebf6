"""The fence and the heard ledger, played through the simulated client on virtual time.

No models: reply audio is a synthetic tone with known word timings, so every sample can
be accounted for.
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from voxflow_adapters.testkit.script import CallScript
from voxflow_adapters.testkit.simulated import SimulatedClient
from voxflow_voice.audio import ReplyChunk, WordTiming
from voxflow_voice.speak.heard import HeardLedger
from voxflow_voice.speak.playback import Playback
from voxflow_voice.transport import PlaybackDrained, PlaybackReceipt

from voxflow.clock import VirtualClock
from voxflow.ids import DeliveryId

pytestmark = pytest.mark.unit

RATE = 22_050
CHUNK = 2_205  # 0.1 s


def tone_chunks(
    delivery: DeliveryId, words: list[str], *, word_seconds: float = 0.3, segment_id: int = 1
) -> list[ReplyChunk]:
    """One segment: each word lasts ``word_seconds``; chunks of 0.1 s with word timings."""
    per_word = int(word_seconds * RATE)
    total = per_word * len(words)
    t = np.arange(total) / RATE
    samples = (0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32)
    spans = [(w, i * per_word, (i + 1) * per_word) for i, w in enumerate(words)]
    chunks = []
    for begin in range(0, total, CHUNK):
        stop = min(begin + CHUNK, total)
        timing = tuple(
            WordTiming(w, a - begin, b - begin) for w, a, b in spans if begin <= a < stop
        )
        chunks.append(ReplyChunk.from_float(
            samples[begin:stop], RATE, delivery_id=delivery, segment_id=segment_id,
            start_sample=begin, words=timing,
        ))
    return chunks


async def pump(client: SimulatedClient, playback: Playback) -> None:
    async for obs in client.observations():
        if isinstance(obs, PlaybackReceipt):
            playback.on_receipt(obs)


async def feed(playback: Playback, chunks: list[ReplyChunk]) -> list[bool]:
    return [await playback.play(c) for c in chunks]


async def test_fence_stops_playback_within_a_frame_and_keeps_heard_words() -> None:
    clock = VirtualClock(autojump=True)
    client = SimulatedClient(CallScript().until(4.0), clock=clock, tail=0.0)
    playback = Playback(client)
    a = DeliveryId("reply-a")
    words = ["one", "two", "three", "four", "five", "six", "seven", "eight"]
    playback.begin_segment(a, 1, " ".join(words))
    async with clock, client:
        observer = asyncio.create_task(pump(client, playback))
        feeder = asyncio.create_task(feed(playback, tone_chunks(a, words)))
        await clock.sleep(1.0)  # 1.0 s heard: words one..three complete (0.3 s each)
        fenced_at = clock.now()
        flushed = playback.fence(a)
        results = await feeder
        await client.finished.wait()
        observer.cancel()
    assert flushed > 0
    assert client.tape.stale_samples() == 0
    # not one receipt starts after the fence
    assert all(r.at <= fenced_at for r in client.tape.receipts if r.delivery_id == a)
    assert results.count(False) >= 1  # chunks offered after the fence were dropped
    heard = playback.heard_reply(a)
    assert heard.text == "one two three"
    assert 0.9 <= heard.heard_seconds <= 1.05
    assert not heard.complete
    assert playback.statistics().chunks_dropped == results.count(False)
    # the recording has the reply up to the fence and silence after it
    track = client.tape.track("heard")
    after = track[int((fenced_at + 0.02) * 16_000) :]
    assert float(np.max(np.abs(after))) == 0.0
    assert float(np.max(np.abs(track[: int(0.9 * 16_000)]))) > 0.1


async def test_stale_fence_never_touches_newer_playback() -> None:
    clock = VirtualClock(autojump=True)
    client = SimulatedClient(CallScript().until(3.0), clock=clock, tail=0.0)
    playback = Playback(client)
    old, new = DeliveryId("old"), DeliveryId("new")
    async with clock, client:
        observer = asyncio.create_task(pump(client, playback))
        assert playback.fence(old) == 0  # nothing of it queued
        assert playback.fence(old) == 0  # idempotent
        ok = await feed(playback, tone_chunks(new, ["hello", "there"]))
        playback.seal(new)
        assert await playback.wait_played(new) is True
        observer.cancel()
    assert all(ok)
    assert client.tape.heard_seconds(new) == pytest.approx(0.6, abs=1e-6)
    assert client.tape.stale_samples() == 0


async def test_wait_played_is_false_once_fenced_and_drain_is_reported() -> None:
    clock = VirtualClock(autojump=True)
    client = SimulatedClient(CallScript().until(2.0), clock=clock, tail=0.0)
    playback = Playback(client)
    a = DeliveryId("a")
    seen: list[object] = []

    async def observe() -> None:
        async for obs in client.observations():
            seen.append(obs)
            if isinstance(obs, PlaybackReceipt):
                playback.on_receipt(obs)

    async with clock, client:
        observer = asyncio.create_task(observe())
        await feed(playback, tone_chunks(a, ["x"] * 2))
        waiter = asyncio.create_task(playback.wait_played(a))
        await clock.sleep(0.2)
        playback.fence(a)
        assert await waiter is False
        await client.finished.wait()
        observer.cancel()
    assert any(isinstance(o, PlaybackDrained) and o.delivery_id == a for o in seen)


def test_heard_ledger_without_word_timings_uses_the_played_share() -> None:
    ledger = HeardLedger()
    d = DeliveryId("d")
    ledger.begin_segment(d, 1, "First sentence here.")
    ledger.begin_segment(d, 2, "Second sentence is longer than that.")
    ledger.sent(ReplyChunk(b"\x00\x00" * 1000, 1000, delivery_id=d, segment_id=1, start_sample=0))
    ledger.end_segment(d, 1)
    ledger.sent(ReplyChunk(b"\x00\x00" * 1000, 1000, delivery_id=d, segment_id=2, start_sample=0))
    ledger.played(d, 1, 0, 1000)
    ledger.played(d, 2, 0, 500)  # half of segment 2: "Second sentence is" (cut word dropped)
    heard = ledger.heard(d)
    assert heard.text == "First sentence here. Second sentence is"
    assert heard.full_text == "First sentence here. Second sentence is longer than that."
    assert heard.heard_seconds == pytest.approx(1.5)
    assert not heard.complete


async def test_mute_and_noise_are_scripted_deterministically() -> None:
    async def run() -> tuple[list[bool], np.ndarray]:
        clock = VirtualClock(autojump=True)
        script = CallScript().with_noise(0.01, seed=3).mute(0.2, 0.4).until(0.6)
        client = SimulatedClient(script, clock=clock, tail=0.0)
        mutes: list[bool] = []

        async def observe() -> None:
            async for obs in client.observations():
                if obs.kind == "mute_changed":
                    mutes.append(obs.muted)

        async with clock, client:
            observer = asyncio.create_task(observe())
            frames = [c async for c in client.audio_input()]
            await observer
        assert all(f.sample_rate == 16_000 and f.num_samples == 320 for f in frames)
        return mutes, client.tape.track("mic")

    (mutes1, mic1), (mutes2, mic2) = await run(), await run()
    assert mutes1 == mutes2 == [True, False]
    np.testing.assert_array_equal(mic1, mic2)
    muted = mic1[int(0.2 * 16_000) : int(0.4 * 16_000)]
    assert float(np.max(np.abs(muted))) == 0.0
    assert float(np.std(mic1[: int(0.2 * 16_000)])) == pytest.approx(0.01, rel=0.2)


def test_script_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="at must be"):
        CallScript().user_says(-1, "hi")
    with pytest.raises(ValueError, match="needs text, audio"):
        CallScript().user_says(1.0)
    with pytest.raises(ValueError, match="non-empty"):
        CallScript().user_says(1.0, "  ")
    with pytest.raises(ValueError, match="start < end"):
        CallScript().mute(3, 2)
    with pytest.raises(TypeError, match="CallScript"):
        SimulatedClient("not a script", clock=VirtualClock())  # type: ignore[arg-type]


async def test_a_held_delivery_is_written_only_on_release_in_order() -> None:
    clock = VirtualClock(autojump=True)
    client = SimulatedClient(CallScript().until(3.0), clock=clock, tail=0.0)
    playback = Playback(client)
    a = DeliveryId("speculative")
    chunks = tone_chunks(a, ["ready", "when", "you", "are"])
    playback.hold(a)
    async with clock, client:
        observer = asyncio.create_task(pump(client, playback))
        assert all(await feed(playback, chunks))
        playback.seal(a)
        waiter = asyncio.create_task(playback.wait_played(a))
        await clock.sleep(0.5)
        # held: nothing reached the client, and a sealed held reply is not "played"
        assert not client.tape.receipts
        assert not waiter.done()
        assert playback.is_held(a)
        assert await playback.release(a) == len(chunks)
        assert not playback.is_held(a)
        assert await waiter is True
        observer.cancel()
    starts = [r.start_sample for r in client.tape.receipts if r.delivery_id == a]
    assert starts == sorted(starts)
    assert client.tape.heard_seconds(a) == pytest.approx(1.2, abs=1e-6)
    assert playback.statistics().chunks_written == len(chunks)


async def test_a_fenced_held_delivery_is_never_heard() -> None:
    clock = VirtualClock(autojump=True)
    client = SimulatedClient(CallScript().until(2.0), clock=clock, tail=0.0)
    playback = Playback(client)
    a = DeliveryId("discarded")
    chunks = tone_chunks(a, ["never", "heard"])
    playback.hold(a)
    async with clock, client:
        observer = asyncio.create_task(pump(client, playback))
        await feed(playback, chunks)
        waiter = asyncio.create_task(playback.wait_played(a))
        playback.fence(a)
        assert await waiter is False
        assert await playback.release(a) == 0  # nothing left to release
        assert await playback.play(chunks[0]) is False  # and nothing more is taken
        await client.finished.wait()
        observer.cancel()
    assert client.tape.heard_seconds(a) == 0.0
    assert not [r for r in client.tape.receipts if r.delivery_id == a]
    stats = playback.statistics()
    assert (stats.chunks_written, stats.chunks_dropped) == (0, len(chunks) + 1)


async def test_holding_stops_synthesis_running_ahead_until_released() -> None:
    clock = VirtualClock(autojump=True)
    client = SimulatedClient(CallScript().until(4.0), clock=clock, tail=0.0)
    playback = Playback(client)
    a = DeliveryId("long")
    chunks = tone_chunks(a, ["w"] * 8)  # 2.4 s in 0.1 s chunks
    playback.hold(a, limit_seconds=0.5)
    async with clock, client:
        observer = asyncio.create_task(pump(client, playback))
        feeder = asyncio.create_task(feed(playback, chunks))
        await clock.sleep(0.5)
        assert not feeder.done()  # blocked at the limit, not queueing the whole reply
        assert await playback.release(a) == 5  # the 0.5 s held, then the rest as usual
        assert all(await feeder)
        playback.seal(a)
        assert await playback.wait_played(a) is True
        observer.cancel()
    assert client.tape.heard_seconds(a) == pytest.approx(2.4, abs=1e-6)


async def test_hold_rejects_a_fenced_played_or_held_delivery() -> None:
    clock = VirtualClock(autojump=True)
    client = SimulatedClient(CallScript().until(1.0), clock=clock, tail=0.0)
    playback = Playback(client)
    fenced, played, held = DeliveryId("f"), DeliveryId("p"), DeliveryId("h")
    playback.fence(fenced)
    with pytest.raises(ValueError, match="fenced"):
        playback.hold(fenced)
    async with clock, client:
        await playback.play(tone_chunks(played, ["x"])[0])
        with pytest.raises(ValueError, match="already written"):
            playback.hold(played)
    playback.hold(held)
    with pytest.raises(ValueError, match="already held"):
        playback.hold(held)
    with pytest.raises(ValueError, match="limit_seconds"):
        playback.hold(DeliveryId("z"), limit_seconds=0)
