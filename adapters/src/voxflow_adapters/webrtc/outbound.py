"""The outbound side of a call: reply audio queued, paced at 20 ms, receipted as sent.

:class:`OutboundAudio` is the cadence and resampling between the playback stage and the
wire, around a :class:`~voxflow_voice.speak.playout.PlayoutQueue` (fencing, pause, receipts). Reply
chunks (any rate, e.g. Piper's 22.05 kHz) are resampled to 48 kHz (Opus's rate) each
whole, as the local adapter does: every sample of a chunk goes out and its receipts map
back to its own samples exactly (a streaming resampler kept its last ~33 ms back, so a
reply's end was receipted but never sent). At Piper's 100 ms chunks the joins differ from
one continuous resampling by ~0.6 % of full scale (a 440 Hz tone). Each call to
:meth:`OutboundAudio.next_frame` takes exactly one 20 ms frame (960 samples) off the
queue, padding with silence, and reports a :class:`PlaybackReceipt` for every piece of
reply audio in it, in the chunk's own rate and sample positions: the receipts describe
what actually went out on the track. :meth:`OutboundAudio.flush` drops every queued
sample of one delivery at once; the frame being encoded when the fence falls is the last
one that can carry it. :meth:`OutboundAudio.pause` holds a delivery (silence goes out,
its audio stays queued) and :meth:`OutboundAudio.resume` sends on from the same sample,
for the session's pause-confirm-decide barge-in.

:class:`ReplyTrack` is the aiortc ``MediaStreamTrack`` that pulls those frames: aiortc's
RTP sender calls ``recv()`` in a loop, so the track itself waits for each frame's 20 ms
deadline (measured from the first frame, so lateness never accumulates). Once the call
has negotiated Opus (:meth:`ReplyTrack.encode_here`), the track encodes each frame
itself, on the event loop, with a :class:`~voxflow_adapters.webrtc.opus.MonoOpusEncoder`
(mono, at the level aiortc's stereo encoder gave, silence encoded once it settled), and
hands the sender the packet: given a frame, the sender encodes it through
``run_in_executor``, a thread hop every 20 ms that costs the server more CPU than
encoding the frame. The server's calls then replace aiortc's sender loop with
:class:`~voxflow_adapters.webrtc.rtp_send.SendPath`, which takes the same frames at the
same deadlines through :meth:`ReplyTrack.next_payload` (the packet and its timestamp,
without an ``av.Packet``). A reply's first
frame waits for the grid's next tick (10 ms on average): the RTP timestamps run on with
the grid and the receiver plays each frame by its timestamp, so a frame sent earlier
only waits longer in the receiver's jitter buffer (measured: sending it at once gained
~10 ms at the aiortc caller, which has no playout clock, nothing in Chromium, and
Chromium then concealed more samples).

Queued ahead of the wire: up to ``lead`` (0.3 s, 15 frames) plus one chunk of reply
audio, in the playout queue, where a pause or flush reaches all of it at once; aiortc's
sender holds none (it takes one frame per ``recv()``, encodes it and sends it), so the
frame being encoded when a fence falls is the only one that can still carry it.
"""

from __future__ import annotations

import asyncio
import fractions
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import av
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack
from voxflow_voice.audio import ReplyChunk, float_to_pcm16, resample
from voxflow_voice.speak.playout import PlayoutQueue
from voxflow_voice.transport import ClientObservation

from voxflow.clock import Clock
from voxflow.ids import DeliveryId

from .opus import MonoOpusEncoder

__all__ = [
    "FRAME_SAMPLES",
    "FRAME_SECONDS",
    "OPUS_SAMPLE_RATE",
    "OutboundAudio",
    "OutboundStatistics",
    "ReplyTrack",
]

OPUS_SAMPLE_RATE = 48_000
FRAME_SECONDS = 0.02
FRAME_SAMPLES = 960  # 20 ms at 48 kHz
_SILENCE = bytes(2 * FRAME_SAMPLES)
_TIME_BASE = fractions.Fraction(1, OPUS_SAMPLE_RATE)
_KEEP_FRAME_TIMES = 30_000  # 10 minutes of frames


@dataclass(frozen=True, slots=True)
class OutboundStatistics:
    """Counters of one call's outbound audio.

    Attributes:
        frames_sent: 20 ms frames handed to the encoder (reply or silence).
        reply_frames: frames that carried reply audio.
        samples_flushed: 48 kHz samples dropped by fences.
        stale_samples: samples of a delivery sent after its flush (always 0).
        late_frames: frames produced more than one frame period after their deadline.
        queued_seconds: reply audio waiting to be sent.
    """

    frames_sent: int
    reply_frames: int
    samples_flushed: int
    stale_samples: int
    late_frames: int
    queued_seconds: float


class OutboundAudio:
    """Reply audio waiting for the wire, taken 20 ms at a time.

    Args:
        clock: the session clock (receipt times).
        on_observation: receives every receipt and drain, in order.
        lead: seconds of queued audio above which :meth:`wait_writable` waits; small, so
            that little audio sits between a fence and the wire.
    """

    def __init__(
        self, *, clock: Clock, on_observation: Callable[[ClientObservation], None],
        lead: float = 0.3,
    ) -> None:
        if lead <= 0:
            raise ValueError(f"lead must be > 0, got {lead}")
        self._clock = clock
        self._emit = on_observation
        self._lead = lead
        self._playout = PlayoutQueue(clock=clock, rate=OPUS_SAMPLE_RATE)
        self._writable = asyncio.Event()
        self._writable.set()
        self._frames = 0
        self._reply_frames = 0
        self._late = 0
        self.last_frame_of: dict[DeliveryId, int] = {}
        """Index of the last frame that carried each delivery's audio."""
        self.flush_frame_of: dict[DeliveryId, int] = {}
        """Index of the next frame to be produced when each delivery was flushed."""
        self.first_frame_of: dict[DeliveryId, int] = {}
        """Index of the first frame that carried each delivery's audio."""
        self.first_written_at: dict[DeliveryId, float] = {}
        """When each delivery's first chunk was queued (clock time)."""
        self.paused_at: dict[DeliveryId, float] = {}
        """When each delivery was last paused (clock time)."""
        self._frame_times: deque[float] = deque(maxlen=_KEEP_FRAME_TIMES)

    @property
    def frame_index(self) -> int:
        """Frames produced so far."""
        return self._frames

    async def wait_writable(self) -> None:
        """Wait until less than ``lead`` seconds are queued."""
        while self._playout.queued_seconds >= self._lead:
            self._writable.clear()
            await self._writable.wait()

    def write_nowait(self, chunk: ReplyChunk) -> None:
        """Queue a reply chunk (resampled to 48 kHz now, on the loop: chunks are short)."""
        if not isinstance(chunk, ReplyChunk):
            raise TypeError(f"chunk must be a ReplyChunk, got {type(chunk).__name__}")
        delivery = chunk.delivery_id
        if self._playout.is_flushed(delivery):
            return  # the playback stage fences first; this is a second guard
        self.first_written_at.setdefault(delivery, self._clock.now())
        self._playout.put(chunk, resample(chunk.samples(), chunk.sample_rate, OPUS_SAMPLE_RATE))

    def flush(self, delivery_id: DeliveryId) -> int:
        """Drop every queued sample of ``delivery_id`` now; returns the samples dropped
        (at the chunks' own rate, as the playback stage counts them)."""
        dropped = self._playout.flush(delivery_id)
        self.flush_frame_of[delivery_id] = self._frames
        self._wake_writer()
        return dropped

    def pause(self, delivery_id: DeliveryId) -> bool:
        """Hold ``delivery_id`` from the next frame on; its queued audio stays queued.
        False if it is already paused or was flushed."""
        paused = self._playout.pause(delivery_id)
        if paused:
            self.paused_at[delivery_id] = self._clock.now()
        return paused

    def resume(self, delivery_id: DeliveryId) -> bool:
        """Send on from the sample where ``delivery_id`` paused; False if not paused."""
        return self._playout.resume(delivery_id)

    def next_frame(self, *, late: bool = False) -> bytes:
        """Take the next 20 ms frame (48 kHz mono s16le), receipting its reply audio."""
        index = self._frames
        self._frames += 1
        if late:
            self._late += 1
        self._frame_times.append(self._clock.now())
        pulled = self._playout.pull(FRAME_SAMPLES)
        for receipt in pulled.receipts:
            self.first_frame_of.setdefault(receipt.delivery_id, index)
            self.last_frame_of[receipt.delivery_id] = index
            self._emit(receipt)
        if pulled.drained is not None:
            self._emit(pulled.drained)
        self._wake_writer()
        if not pulled.filled:
            return _SILENCE  # nothing queued, or paused: the floor stays held
        self._reply_frames += 1
        return float_to_pcm16(pulled.samples)

    def frame_time(self, index: int) -> float | None:
        """When frame ``index`` was taken for the encoder (clock time; None: not yet, or
        forgotten after ten minutes)."""
        first = self._frames - len(self._frame_times)
        if not first <= index < self._frames:
            return None
        return self._frame_times[index - first]

    def _wake_writer(self) -> None:
        if self._playout.queued_seconds < self._lead:
            self._writable.set()

    def statistics(self) -> OutboundStatistics:
        """Counters for tests, benchmarks and ``repr``."""
        return OutboundStatistics(
            frames_sent=self._frames, reply_frames=self._reply_frames,
            samples_flushed=self._playout.samples_flushed,
            stale_samples=sum(self._playout.stale.values()),
            late_frames=self._late, queued_seconds=self._playout.queued_seconds,
        )

    def __repr__(self) -> str:
        s = self.statistics()
        return (f"OutboundAudio(frames={s.frames_sent}, reply_frames={s.reply_frames}, "
                f"queued={s.queued_seconds:.2f}s, stale={s.stale_samples})")


class ReplyTrack(MediaStreamTrack):
    """The outbound aiortc audio track: one 20 ms, 48 kHz mono frame per ``recv()``, or
    its Opus packet once :meth:`encode_here` was called.

    Args:
        outbound: the queue the frames come from.
        keep_offsets: how many recent pacing offsets (ms after each frame's deadline) to
            keep for :meth:`pacing_offsets`.
    """

    kind = "audio"

    def __init__(self, outbound: OutboundAudio, *, keep_offsets: int = 3000) -> None:
        super().__init__()
        self._outbound = outbound
        self._start: float | None = None
        self._offsets: deque[float] = deque(maxlen=keep_offsets)
        self._encoder: MonoOpusEncoder | None = None

    def encode_here(self) -> None:
        """The call sends Opus: encode each frame in :meth:`recv` (on the loop) and return
        the packet, which aiortc's sender only packs (before the first ``recv()``)."""
        if self._start is not None:
            raise RuntimeError("encode_here() after the first frame: the sender's encoder "
                               "has the stream's state")
        self._encoder = MonoOpusEncoder()

    async def _next_pcm(self) -> tuple[bytes, int]:
        """Wait for the next frame's deadline, then take it: (pcm, frame index)."""
        if self.readyState != "live":
            raise MediaStreamError
        index = self._outbound.frame_index
        now = time.monotonic()
        if self._start is None:
            self._start = now - index * FRAME_SECONDS
        deadline = self._start + index * FRAME_SECONDS
        if deadline > now:
            await asyncio.sleep(deadline - now)
            now = time.monotonic()
        offset = now - deadline
        if offset > 5 * FRAME_SECONDS:
            # Far behind (a stalled loop): restart the schedule instead of bursting frames.
            self._start = now - index * FRAME_SECONDS
        self._offsets.append(offset * 1000.0)
        return self._outbound.next_frame(late=offset > FRAME_SECONDS), index

    async def recv(self) -> Any:
        """Wait for the next frame's deadline, then return it as an ``av.AudioFrame`` (or,
        after :meth:`encode_here`, as its ``av.Packet``)."""
        pcm, index = await self._next_pcm()
        if self._encoder is not None:
            packet = av.Packet(self._encoder.encode(pcm, silent=pcm is _SILENCE))
            packet.pts = index * FRAME_SAMPLES  # aiortc's sender: the RTP timestamp
            packet.time_base = _TIME_BASE
            return packet
        frame = av.AudioFrame(format="s16", layout="mono", samples=FRAME_SAMPLES)
        frame.planes[0].update(pcm)
        frame.sample_rate = OPUS_SAMPLE_RATE
        frame.pts = index * FRAME_SAMPLES
        frame.time_base = _TIME_BASE
        return frame

    async def next_payload(self) -> tuple[bytes, int]:
        """As :meth:`recv` after :meth:`encode_here`, for
        :class:`~voxflow_adapters.webrtc.rtp_send.SendPath`: the next frame's Opus packet
        and its RTP timestamp offset (48 kHz samples from the first frame), at the same
        deadline, with no ``av.Packet`` around them."""
        if self._encoder is None:
            raise RuntimeError("next_payload() before encode_here()")
        pcm, index = await self._next_pcm()
        return self._encoder.encode(pcm, silent=pcm is _SILENCE), index * FRAME_SAMPLES

    @property
    def encoder(self) -> MonoOpusEncoder | None:
        """The Opus encoder after :meth:`encode_here` (its counters)."""
        return self._encoder

    def pacing_offsets(self) -> list[float]:
        """Recent frame send times, ms after their deadline (jitter figures)."""
        return list(self._offsets)
