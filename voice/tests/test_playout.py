"""The playout queue every adapter plays from: fencing, pause/resume, receipts, drain."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from voxflow_voice.audio import AudioChunk, ReplyChunk, resample
from voxflow_voice.speak.playout import PlayoutQueue
from voxflow_voice.transport import PlaybackReceipt

from voxflow.clock import VirtualClock
from voxflow.ids import DeliveryId

pytestmark = pytest.mark.unit

A, B = DeliveryId("a"), DeliveryId("b")


def chunk(delivery: DeliveryId, start: int, n: int, rate: int = 22_050) -> ReplyChunk:
    samples = 0.2 * np.sin(np.arange(start, start + n) / 7.0)
    return ReplyChunk.from_float(samples.astype(np.float32), rate, delivery_id=delivery,
                                 segment_id=1, start_sample=start)


def put(queue: PlayoutQueue, c: ReplyChunk) -> bool:
    return queue.put(c, resample(c.samples(), c.sample_rate, queue.rate))


def spans(receipts: list[PlaybackReceipt], delivery: DeliveryId) -> list[tuple[int, int]]:
    return [(r.start_sample, r.num_samples) for r in receipts if r.delivery_id == delivery]


def contiguous(pieces: list[tuple[int, int]]) -> int:
    position = 0
    for start, count in pieces:
        assert start == position and count > 0
        position += count
    return position


def test_receipts_are_in_the_chunks_own_rate_and_cover_it_exactly() -> None:
    queue = PlayoutQueue(clock=VirtualClock(), rate=48_000)
    for start in range(0, 6615, 2205):
        assert put(queue, chunk(A, start, 2205))
    receipts: list[PlaybackReceipt] = []
    drains = []
    for _ in range(20):
        pulled = queue.pull(960)
        assert pulled.samples.size == 960
        receipts += pulled.receipts
        if pulled.drained is not None:
            drains.append(pulled.drained)
    assert contiguous(spans(receipts, A)) == 6615
    assert {r.sample_rate for r in receipts} == {22_050}
    assert [d.delivery_id for d in drains] == [A]  # once, when it ran dry
    assert queue.samples_played == 14_400 and queue.queued_samples == 0


def test_flush_drops_one_delivery_at_once_and_refuses_its_later_chunks() -> None:
    queue = PlayoutQueue(clock=VirtualClock(), rate=16_000)
    put(queue, chunk(A, 0, 2205))
    put(queue, chunk(B, 0, 2205))
    put(queue, chunk(A, 2205, 2205))
    first = queue.pull(320)
    played = sum(r.num_samples for r in first.receipts)
    assert queue.flush(A) == 4410 - played
    assert not put(queue, chunk(A, 4410, 2205))  # never a stale sample after a fence
    receipts = [r for _ in range(20) for r in queue.pull(320).receipts]
    assert spans(receipts, A) == []
    assert contiguous(spans(receipts, B)) == 2205
    assert queue.flush(A) == 0 and queue.stale == {}


def test_pause_holds_from_the_exact_sample_and_keeps_the_order() -> None:
    queue = PlayoutQueue(clock=VirtualClock(), rate=16_000)
    put(queue, chunk(A, 0, 4410))
    put(queue, chunk(B, 0, 2205))
    receipts = list(queue.pull(500).receipts)
    assert queue.pause(A) and not queue.pause(A)
    for _ in range(5):
        held = queue.pull(320)
        assert held.filled == 0 and held.held and held.drained is None and not held.receipts
    assert queue.resume(A) and not queue.resume(A)
    receipts += [r for _ in range(30) for r in queue.pull(320).receipts]
    assert contiguous(spans(receipts, A)) == 4410
    assert contiguous(spans(receipts, B)) == 2205
    last_a = max(i for i, r in enumerate(receipts) if r.delivery_id == A)
    first_b = min(i for i, r in enumerate(receipts) if r.delivery_id == B)
    assert last_a < first_b
    queue.pause(B)
    queue.flush(B)
    assert not queue.resume(B) and not queue.pause(B)


def test_receipt_times_follow_the_audio_when_the_cadence_catches_up_in_a_burst() -> None:
    clock = VirtualClock()
    queue = PlayoutQueue(clock=clock, rate=16_000)
    put(queue, chunk(A, 0, 22_050))
    times = [r.at for _ in range(3) for r in queue.pull(320).receipts]  # a burst at t=0
    assert times == pytest.approx([0.0, 0.02, 0.04])
    late = queue.pull(320, at=5.0).receipts[0]
    assert late.at == 5.0  # after a gap, the given time


def test_convert_goes_on_from_where_pulling_stopped_at_the_new_rate() -> None:
    queue = PlayoutQueue(clock=VirtualClock(), rate=48_000)
    put(queue, chunk(A, 0, 4410))
    receipts = list(queue.pull(1000).receipts)
    queue.convert(lambda rest: resample(rest.samples(), rest.sample_rate, 44_100), 44_100)
    assert queue.rate == 44_100
    receipts += [r for _ in range(20) for r in queue.pull(441).receipts]
    assert contiguous(spans(receipts, A)) == 4410


def test_bad_arguments_are_named() -> None:
    with pytest.raises(ValueError, match="rate"):
        PlayoutQueue(clock=VirtualClock(), rate=0)
    queue = PlayoutQueue(clock=VirtualClock(), rate=16_000)
    with pytest.raises(TypeError, match="ReplyChunk"):  # microphone audio is not a reply
        queue.put(AudioChunk(b"\0\0", 16_000), np.zeros(1, np.float32))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="n must be"):
        queue.pull(-1)


_OPS = st.lists(st.tuples(st.sampled_from(["put", "pull", "flush", "pause", "resume"]),
                          st.sampled_from([A, B]), st.integers(1, 3000)), max_size=60)


@settings(max_examples=150, derandomize=True, deadline=None)
@given(ops=_OPS, rate=st.sampled_from([16_000, 22_050, 48_000]))
def test_no_stale_no_gap_no_repeat_under_any_interleaving(
    ops: list[tuple[str, DeliveryId, int]], rate: int
) -> None:
    queue = PlayoutQueue(clock=VirtualClock(), rate=rate)
    written = {A: 0, B: 0}
    dropped = {A: 0, B: 0}
    receipts: list[PlaybackReceipt] = []
    flushed_at: dict[DeliveryId, int] = {}
    for op, delivery, n in ops:
        if op == "put":
            if put(queue, chunk(delivery, written[delivery], n)):
                written[delivery] += n
        elif op == "pull":
            receipts += queue.pull(n).receipts
        elif op == "flush":
            dropped[delivery] += queue.flush(delivery)
            flushed_at.setdefault(delivery, len(receipts))
        elif op == "pause":
            queue.pause(delivery)
        else:
            queue.resume(delivery)
    for delivery in (A, B):
        queue.resume(delivery)
    while queue.queued_samples:
        receipts += queue.pull(960).receipts
    for delivery in (A, B):
        played = contiguous(spans(receipts, delivery))
        assert played + dropped[delivery] == written[delivery]
        if delivery in flushed_at:
            assert spans(receipts[flushed_at[delivery]:], delivery) == []
    assert queue.stale == {}


def test_a_paused_delivery_whose_queued_audio_was_all_played_reports_no_drain() -> None:
    # Paused between two chunks (the playback stage had not written the next one yet):
    # the floor stays held until it is resumed and runs dry, or is flushed.
    queue = PlayoutQueue(clock=VirtualClock(), rate=22_050)
    put(queue, chunk(A, 0, 441))
    assert queue.pull(441).filled == 441
    assert queue.pause(A)
    held = queue.pull(441)
    assert held.drained is None and held.held and held.filled == 0
    assert queue.resume(A)
    drained = queue.pull(441).drained
    assert drained is not None and drained.delivery_id == A
