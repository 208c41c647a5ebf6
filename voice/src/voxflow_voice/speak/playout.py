"""The one playout queue every adapter plays reply audio from.

An adapter owns a *cadence* (a sound card's callback, the 20 ms RTP tick, a simulated
tick) and a *resampling* (to its device or codec rate). Everything between the playback
stage and that cadence is the same for all of them and lives here, once:

* identity-tagged chunks, queued with their samples at the output rate (the adapter
  converts them before :meth:`PlayoutQueue.put`);
* :meth:`PlayoutQueue.flush` drops every queued sample of one delivery at once, and a
  flushed delivery's later chunks are refused: never a stale sample after a fence;
* :meth:`PlayoutQueue.pause` holds a delivery (nothing of it, or after it, is pulled; no
  drain is reported) and :meth:`PlayoutQueue.resume` plays on from the exact sample;
* :meth:`PlayoutQueue.pull` takes up to ``n`` output samples and returns them with a
  :class:`~voxflow_voice.transport.PlaybackReceipt` per piece, in the chunk's *own* rate
  and sample positions (a reply's own samples, whatever the device rate), and a
  :class:`~voxflow_voice.transport.PlaybackDrained` when the queue ran dry after playing.

The queue is synchronous and not thread-safe: an adapter whose cadence runs on another
thread (PortAudio) calls it under its own lock. Time comes from the injected clock, or
from ``at=`` when the adapter knows better (the moment a buffer reaches the speaker).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import NDArray

from voxflow.clock import Clock
from voxflow.ids import DeliveryId

from ..audio import ReplyChunk
from ..transport import PlaybackDrained, PlaybackReceipt

__all__ = ["PlayoutQueue", "Pulled"]


@dataclass(frozen=True, slots=True)
class Pulled:
    """What one :meth:`PlayoutQueue.pull` played.

    Attributes:
        samples: ``n`` samples at the output rate: reply audio, then silence.
        filled: how many of them are reply audio.
        receipts: one per piece of a chunk played, in the chunks' own rate and positions.
        drained: set when the queue ran dry after playing (reported once).
        held: the head of the queue, or the delivery that played last when nothing is
            queued, is paused (silence, but the floor stays held: no drain).
    """

    samples: NDArray[np.float32]
    filled: int
    receipts: tuple[PlaybackReceipt, ...]
    drained: PlaybackDrained | None
    held: bool


@dataclass(slots=True)
class _Queued:
    """A chunk's samples from ``base`` on at the output rate, and how much was pulled."""

    chunk: ReplyChunk
    out: NDArray[np.float32]
    base: int = 0  # the chunk sample (its own rate) that out[0] stands for
    offset: int = 0  # output samples already pulled
    receipted: int = 0  # chunk samples (own rate) already receipted

    @property
    def remaining(self) -> int:
        return self.out.size - self.offset

    def source_at(self, index: int) -> int:
        """The chunk sample (own rate) that output sample ``index`` maps to."""
        if index >= self.out.size:
            return self.chunk.num_samples
        span = self.chunk.num_samples - self.base
        return self.base + index * span // max(1, self.out.size)


class PlayoutQueue:
    """Identity-tagged reply audio waiting for an adapter's cadence.

    Args:
        clock: receipt and drain times when ``pull`` is not given ``at``.
        rate: the output rate (the samples handed to :meth:`put`, returned by :meth:`pull`).
    """

    def __init__(self, *, clock: Clock, rate: int) -> None:
        if isinstance(rate, bool) or not isinstance(rate, int) or rate <= 0:
            raise ValueError(f"rate must be a positive int, got {rate!r}")
        self._clock = clock
        self._rate = rate
        self._queue: deque[_Queued] = deque()
        self._queued = 0
        self._paused: set[DeliveryId] = set()
        self._flushed: set[DeliveryId] = set()
        self._playing: DeliveryId | None = None
        self._played_until = float("-inf")  # when the audio pulled so far ends playing
        self.samples_played = 0
        """Output samples of reply audio pulled so far."""
        self.samples_flushed = 0
        """Output samples dropped by flushes."""
        self.stale: dict[DeliveryId, int] = {}
        """Output samples of a delivery pulled after its flush (by construction, none)."""

    @property
    def rate(self) -> int:
        """The output rate."""
        return self._rate

    @property
    def queued_samples(self) -> int:
        """Output samples waiting to be pulled."""
        return self._queued

    @property
    def queued_seconds(self) -> float:
        """Seconds of reply audio waiting to be pulled."""
        return self._queued / self._rate

    def put(self, chunk: ReplyChunk, out: NDArray[np.float32]) -> bool:
        """Queue ``chunk`` whose samples at the output rate are ``out``.

        Returns:
            False (nothing queued) if the chunk's delivery was flushed.

        Raises:
            TypeError: ``chunk`` is not a :class:`~voxflow_voice.audio.ReplyChunk`.
        """
        if not isinstance(chunk, ReplyChunk):
            raise TypeError(f"chunk must be a ReplyChunk, got {type(chunk).__name__}")
        if chunk.delivery_id in self._flushed:
            return False
        samples = np.asarray(out, dtype=np.float32).reshape(-1)
        self._queue.append(_Queued(chunk, samples))
        self._queued += samples.size
        return True

    def flush(self, delivery_id: DeliveryId) -> int:
        """Drop every queued sample of ``delivery_id`` now and refuse its later chunks.

        Returns:
            The samples dropped, at the chunks' own rate (as the playback stage counts).
        """
        dropped = 0
        kept: deque[_Queued] = deque()
        for item in self._queue:
            if item.chunk.delivery_id == delivery_id:
                dropped += item.chunk.num_samples - item.receipted
                self.samples_flushed += item.remaining
            else:
                kept.append(item)
        self._queue = kept
        self._queued = sum(item.remaining for item in kept)
        self._flushed.add(delivery_id)
        self._paused.discard(delivery_id)
        return dropped

    def is_flushed(self, delivery_id: DeliveryId) -> bool:
        """Whether ``delivery_id`` was flushed."""
        return delivery_id in self._flushed

    def pause(self, delivery_id: DeliveryId) -> bool:
        """Hold ``delivery_id`` from the next pull on; its queued audio stays.

        Returns:
            False if it is already paused or was flushed.
        """
        if not isinstance(delivery_id, str):
            raise TypeError(f"delivery_id must be a DeliveryId, got {type(delivery_id).__name__}")
        if delivery_id in self._paused or delivery_id in self._flushed:
            return False
        self._paused.add(delivery_id)
        return True

    def resume(self, delivery_id: DeliveryId) -> bool:
        """Play on from the sample where ``delivery_id`` paused; False if not paused."""
        if delivery_id not in self._paused:
            return False
        self._paused.discard(delivery_id)
        return True

    def is_paused(self, delivery_id: DeliveryId) -> bool:
        """Whether ``delivery_id`` is paused."""
        return delivery_id in self._paused

    def pull(self, n: int, *, at: float | None = None) -> Pulled:
        """Take up to ``n`` output samples of reply audio, padded with silence to ``n``.

        A paused delivery stops the pull where it starts (the audio queued after it
        waits too: order is kept). ``at`` is when the first sample plays (clock now if
        None, but never before the audio pulled earlier ends: a cadence that catches up
        in a burst keeps receipt times in playing order); each receipt's time is offset by
        the output samples before it.
        """
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValueError(f"n must be an int >= 0, got {n!r}")
        start = max(self._clock.now() if at is None else at, self._played_until)
        samples = np.zeros(n, np.float32)
        receipts: list[PlaybackReceipt] = []
        filled = 0
        held = False
        while filled < n and self._queue:
            item = self._queue[0]
            delivery = item.chunk.delivery_id
            if delivery in self._paused:
                held = True
                break
            take = min(n - filled, item.remaining)
            samples[filled : filled + take] = item.out[item.offset : item.offset + take]
            if delivery in self._flushed:
                self.stale[delivery] = self.stale.get(delivery, 0) + take
            item.offset += take
            receipt = self._receipt(item, start + filled / self._rate)
            if receipt is not None:
                receipts.append(receipt)
            self._playing = delivery
            filled += take
            if item.remaining == 0:
                self._queue.popleft()
        self._queued -= filled
        self.samples_played += filled
        if filled:
            self._played_until = start + filled / self._rate
        drained = None
        if not self._queue and filled == 0 and self._playing in self._paused:
            held = True  # paused between two chunks: no drain, the floor stays held
        elif not self._queue and filled == 0 and self._playing is not None:
            drained = PlaybackDrained(at=start, delivery_id=self._playing)
            self._playing = None
        return Pulled(samples, filled, tuple(receipts), drained, held)

    def convert(self, to_out: Callable[[ReplyChunk], NDArray[np.float32]], rate: int) -> None:
        """Re-convert the queued audio to a new output rate, from where pulling stopped
        (a device reopened at another rate). ``to_out`` converts a chunk's remaining
        samples (a :class:`~voxflow_voice.audio.ReplyChunk` at its own rate)."""
        queued: deque[_Queued] = deque()
        for item in self._queue:
            base = item.source_at(item.offset)
            rest = replace(item.chunk, pcm=item.chunk.pcm[2 * base :],
                           start_sample=item.chunk.start_sample + base, words=())
            queued.append(_Queued(item.chunk, to_out(rest), base=base, receipted=base))
        self._queue = queued
        self._queued = sum(item.remaining for item in queued)
        self._rate = rate

    def _receipt(self, item: _Queued, at: float) -> PlaybackReceipt | None:
        """Receipt the chunk's own samples the output samples pulled so far stand for."""
        upto = item.source_at(item.offset)
        count = upto - item.receipted
        if count <= 0:
            return None
        chunk = item.chunk
        receipt = PlaybackReceipt(
            delivery_id=chunk.delivery_id, segment_id=chunk.segment_id,
            start_sample=chunk.start_sample + item.receipted, num_samples=count,
            sample_rate=chunk.sample_rate, at=at,
        )
        item.receipted = upto
        return receipt

    def __repr__(self) -> str:
        return (f"PlayoutQueue(rate={self._rate}, queued={self.queued_seconds:.2f}s, "
                f"paused={len(self._paused)}, flushed={len(self._flushed)})")
