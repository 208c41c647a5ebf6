"""The playback stage: the last hand-off before reply audio leaves the process.

It fences by identity, not by a "bot speaking" flag: once a delivery is fenced, none of
its chunks is written again and the adapter's buffered audio of it is flushed at once.
A stale fence (for an older delivery) never touches newer playback. It also keeps the
account of what the user heard (:class:`~voxflow_voice.speak.heard.HeardLedger`) and tells
waiters when a delivery has been played whole.

A delivery can be *held* (:meth:`Playback.hold`): its chunks are kept here, not written,
until :meth:`Playback.release` writes them in order (a speculative reply, synthesized
before the user's turn is confirmed), or a fence drops them unheard.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from dataclasses import dataclass, field

from voxflow.ids import DeliveryId

from ..audio import ReplyChunk
from ..transport import AudioTransport, PausableTransport, PlaybackReceipt
from .heard import HeardLedger, HeardReply

__all__ = ["HOLD_LIMIT_SECONDS", "Playback", "PlaybackStatistics"]

HOLD_LIMIT_SECONDS = 3.0
"""Seconds of a held delivery's audio :meth:`Playback.hold` keeps, by default, before
:meth:`Playback.play` waits for the release: with the speaker's ``synthesis_ahead``, how
much of a speculative reply can be synthesized before its turn is confirmed."""

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PlaybackStatistics:
    """Counters of the playback stage.

    Attributes:
        chunks_written: chunks handed to the adapter.
        chunks_dropped: chunks refused because their delivery was fenced.
        samples_flushed: buffered samples the adapter dropped on fences.
        fenced: deliveries fenced so far.
        playing: the delivery whose audio was played last, if any.
    """

    chunks_written: int
    chunks_dropped: int
    samples_flushed: int
    fenced: int
    playing: DeliveryId | None


@dataclass(slots=True)
class _Held:
    """Chunks of a held delivery, waiting for their release."""

    limit: float  # seconds of audio held before play() waits
    chunks: deque[ReplyChunk] = field(default_factory=deque)
    seconds: float = 0.0
    opened: asyncio.Event = field(default_factory=asyncio.Event)


class Playback:
    """Writes identity-tagged reply chunks to an adapter, with fencing.

    Args:
        transport: the adapter's side of the call.
    """

    def __init__(self, transport: AudioTransport) -> None:
        self._transport = transport
        self._fenced: set[DeliveryId] = set()
        self._sealed: set[DeliveryId] = set()
        self._done: dict[DeliveryId, asyncio.Future[bool]] = {}
        self.heard = HeardLedger()
        self._written = 0
        self._dropped = 0
        self._flushed = 0
        self._playing: DeliveryId | None = None
        self._held: dict[DeliveryId, _Held] = {}

    def is_fenced(self, delivery_id: DeliveryId) -> bool:
        """Whether ``delivery_id`` was fenced."""
        return delivery_id in self._fenced

    async def play(self, chunk: ReplyChunk) -> bool:
        """Hand ``chunk`` to the adapter unless its delivery is fenced.

        Returns:
            True if written, False if dropped by the fence.
        """
        held = self._held.get(chunk.delivery_id)
        if held is not None:
            if held.seconds >= held.limit:
                await held.opened.wait()  # enough is ready: wait for the release or fence
            held = self._held.get(chunk.delivery_id)
            if held is not None:  # still held (a release empties the queue, then forgets)
                held.chunks.append(chunk)
                held.seconds += chunk.num_samples / chunk.sample_rate
                return True
        await self._transport.wait_writable()
        # No await between the fence check and the write: a fence can't slip between.
        if chunk.delivery_id in self._fenced:
            self._dropped += 1
            return False
        self.heard.sent(chunk)
        self._transport.write_nowait(chunk)
        self._written += 1
        return True

    def begin_segment(self, delivery_id: DeliveryId, segment_id: int, text: str) -> None:
        """Record a segment's text before its audio is synthesized."""
        self.heard.begin_segment(delivery_id, segment_id, text)

    def end_segment(self, delivery_id: DeliveryId, segment_id: int) -> None:
        """All audio of a segment has been handed over."""
        self.heard.end_segment(delivery_id, segment_id)

    def hold(
        self, delivery_id: DeliveryId, *, limit_seconds: float = HOLD_LIMIT_SECONDS
    ) -> None:
        """Keep ``delivery_id``'s chunks here instead of writing them, until :meth:`release`.

        Once ``limit_seconds`` of audio is held, :meth:`play` waits (for the release or a
        fence) rather than synthesizing further ahead of a reply nobody may hear.

        Raises:
            ValueError: the delivery is fenced, already written to, or already held;
                ``limit_seconds`` is not positive.
        """
        if limit_seconds <= 0:
            raise ValueError(f"limit_seconds must be positive, got {limit_seconds!r}")
        if delivery_id in self._fenced:
            raise ValueError(f"delivery {delivery_id!r} is fenced")
        if delivery_id in self._held:
            raise ValueError(f"delivery {delivery_id!r} is already held")
        if self.heard.sent_samples(delivery_id):
            raise ValueError(f"delivery {delivery_id!r} was already written to the adapter")
        self._held[delivery_id] = _Held(limit=limit_seconds)

    def is_held(self, delivery_id: DeliveryId) -> bool:
        """Whether ``delivery_id``'s audio is being held back."""
        return delivery_id in self._held

    async def release(self, delivery_id: DeliveryId) -> int:
        """Write ``delivery_id``'s held chunks in order, then play it as usual.

        Chunks that arrive while the held ones are written join the queue, so the order
        is kept. A fence during the release stops it. Returns the chunks written now.
        """
        held = self._held.get(delivery_id)
        if held is None:
            return 0
        written = 0
        try:
            while held.chunks:
                await self._transport.wait_writable()
                if delivery_id in self._fenced:
                    return written
                chunk = held.chunks.popleft()  # no await between the fence check and write
                self.heard.sent(chunk)
                self._transport.write_nowait(chunk)
                self._written += 1
                written += 1
            return written
        finally:
            if self._held.get(delivery_id) is held:
                del self._held[delivery_id]
            held.opened.set()
            self._check_done(delivery_id)

    def seal(self, delivery_id: DeliveryId) -> None:
        """No more audio will come for ``delivery_id``; it is done once all is played."""
        self._sealed.add(delivery_id)
        self._check_done(delivery_id)

    def fence(self, delivery_id: DeliveryId) -> int:
        """Fence ``delivery_id``: drop its future chunks and flush its buffered audio.

        Idempotent. Returns the samples the adapter dropped now.
        """
        if delivery_id in self._fenced:
            return 0
        self._fenced.add(delivery_id)
        held = self._held.pop(delivery_id, None)
        if held is not None:  # never written: nobody heard a sample of it
            self._dropped += len(held.chunks)
            held.chunks.clear()
            held.opened.set()
        dropped = self._transport.flush(delivery_id)
        self._flushed += dropped
        self._resolve(delivery_id, False)
        logger.debug("fenced delivery", extra={"delivery_id": delivery_id, "dropped": dropped})
        return dropped

    @property
    def can_pause(self) -> bool:
        """Whether the adapter can hold a delivery's playout (a :class:`PausableTransport`)."""
        return isinstance(self._transport, PausableTransport)

    def pause(self, delivery_id: DeliveryId) -> bool:
        """Hold ``delivery_id``'s playout at the adapter (its queued audio stays). The
        pause state is the adapter's (its :class:`~voxflow_voice.speak.playout.PlayoutQueue`).

        Returns:
            True if paused now; False if fenced, already paused, or the adapter cannot.
        """
        if delivery_id in self._fenced or not isinstance(self._transport, PausableTransport):
            return False
        return self._transport.pause(delivery_id)

    def resume(self, delivery_id: DeliveryId) -> bool:
        """Play on where ``delivery_id`` paused. Returns False if it was not paused."""
        if delivery_id in self._fenced or not isinstance(self._transport, PausableTransport):
            return False
        return self._transport.resume(delivery_id)

    def words_left(self, delivery_id: DeliveryId) -> bool:
        """Whether words of ``delivery_id`` are still to be heard: it is not sealed yet,
        or some synthesized word was not played (only trailing silence may be left)."""
        if delivery_id not in self._sealed:
            return True
        heard = self.heard.heard(delivery_id)
        return heard.text.split() != heard.full_text.split()

    def on_receipt(self, receipt: PlaybackReceipt) -> bool:
        """Account for audio the client played. Returns False for a fenced delivery's
        receipt (audio already on its way when the fence fell; counted as heard)."""
        self.heard.played(
            receipt.delivery_id, receipt.segment_id, receipt.start_sample, receipt.num_samples
        )
        self._playing = receipt.delivery_id
        self._check_done(receipt.delivery_id)
        return receipt.delivery_id not in self._fenced

    async def wait_played(self, delivery_id: DeliveryId) -> bool:
        """Wait until ``delivery_id`` was sealed and played whole (True) or fenced (False)."""
        fut = self._future(delivery_id)
        self._check_done(delivery_id)
        return await asyncio.shield(fut)

    def heard_reply(self, delivery_id: DeliveryId) -> HeardReply:
        """What the user heard of ``delivery_id``."""
        return self.heard.heard(delivery_id)

    def forget(self, delivery_id: DeliveryId) -> None:
        """Drop bookkeeping of a settled delivery (the fence stays)."""
        self.heard.forget(delivery_id)
        self._sealed.discard(delivery_id)
        self._done.pop(delivery_id, None)

    def statistics(self) -> PlaybackStatistics:
        """Counters for tests, metrics and ``repr``."""
        return PlaybackStatistics(
            chunks_written=self._written,
            chunks_dropped=self._dropped,
            samples_flushed=self._flushed,
            fenced=len(self._fenced),
            playing=self._playing,
        )

    def _future(self, delivery_id: DeliveryId) -> asyncio.Future[bool]:
        fut = self._done.get(delivery_id)
        if fut is None:
            fut = asyncio.get_running_loop().create_future()
            self._done[delivery_id] = fut
        return fut

    def _resolve(self, delivery_id: DeliveryId, played: bool) -> None:
        fut = self._done.get(delivery_id)
        if fut is None:
            try:
                fut = self._future(delivery_id)
            except RuntimeError:  # no running loop: nobody can be waiting
                return
        if not fut.done():
            fut.set_result(played)

    def _check_done(self, delivery_id: DeliveryId) -> None:
        if delivery_id in self._fenced:
            self._resolve(delivery_id, False)
            return
        if delivery_id not in self._sealed or delivery_id in self._held:
            return
        if self.heard.played_samples(delivery_id) >= self.heard.sent_samples(delivery_id):
            self._resolve(delivery_id, True)

    def __repr__(self) -> str:
        s = self.statistics()
        return (
            f"Playback(written={s.chunks_written}, dropped={s.chunks_dropped}, "
            f"flushed={s.samples_flushed}, fenced={s.fenced})"
        )
