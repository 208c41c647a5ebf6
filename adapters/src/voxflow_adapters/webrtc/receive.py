"""The receive path of a call's audio: RTP packets to decoded frames with no buffering
beyond what the link needs.

aiortc's audio receiver holds every packet until four later ones have arrived
(``JitterBuffer(capacity=16, prefetch=4)``): 80 ms on every frame of every call, on
each side, whether or not a packet was ever missing, and after a lost packet it stalls
until 16 have piled up. The server does not play the caller's audio (its VAD and STT
take it as it comes), so timing jitter costs it nothing; only order matters.
:func:`install_receive_path` replaces that buffer on one ``RTCRtpReceiver``:

* a packet in order is decoded at once (no prefetch, not even the one packet aiortc's
  buffer waits for to know a frame is complete: an Opus packet is a whole frame);
* a gap (a packet missing or overtaken) holds what comes after it until the missing
  packet arrives or ``hold`` later packets are waiting, then the gap is skipped and the
  held packets go on, in order, together: the delay of a loss is at most ``hold`` x 20
  ms and never outlasts it (nothing is left behind to catch up);
* a packet older than one already passed on (too late, or a duplicate) is dropped and
  counted;
* with ``on_frame`` (the server's calls), each packet released is decoded right there,
  on the event loop (Opus straight to 16 kHz mono: :class:`~voxflow_adapters.webrtc.opus.
  MonoOpusDecoder`; another codec by the decoder aiortc would have used), and handed
  to ``on_frame``: aiortc's decoder thread and the hops to it
  and back (a ``queue.Queue`` put, then ``run_coroutine_threadsafe`` onto the loop,
  then the track's queue: two thread switches and a loop wake-up for every 20 ms
  packet) cost the server more CPU than decoding the packet (~0.1 ms of Opus);
* two consecutive packets more than 1000 behind (20 s) are a restart of the
  sender's sequence numbers (a new SSRC, a restarted encoder), not late packets: what
  was held goes on and the window follows the new numbers (else every packet after a
  jump of more than half the 16-bit circle was 'late' and the rest of the call dropped).

:class:`ReceiveTimings` records, for the benchmark and the page's latency figures, when
each packet arrived and when its frame came out of the decoder.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import statistics
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Any

import numpy as np
from aiortc.codecs import get_decoder
from aiortc.jitterbuffer import JitterFrame
from voxflow_voice.audio import AudioChunk
from voxflow_voice.listen.input_guard import InputGuard

from .opus import DecodedFrame, MonoOpusDecoder

__all__ = [
    "MAX_RECEIVE_HOLD",
    "InboundAudio",
    "ReceiveTimings",
    "ReorderWindow",
    "install_receive_path",
]

MAX_RECEIVE_HOLD = 15
"""Most packets a gap may hold (300 ms at 20 ms a packet)."""

logger = logging.getLogger(__name__)

_SEQ = 1 << 16
_RESTART_DISTANCE = 1000  # packets (20 s): far past any reordering, well inside the circle
_TS = 1 << 32


def _ahead(seq: int, of: int) -> int:
    """How far ``seq`` is after ``of`` on the 16-bit sequence circle (negative: before)."""
    delta = (seq - of) % _SEQ
    return delta - _SEQ if delta >= _SEQ // 2 else delta


class ReorderWindow:
    """In-order release of sequence-numbered items with a bounded wait on a gap.

    Args:
        hold: how many items may wait behind a missing one before it is skipped
            (0: never wait; an overtaken item is then dropped).

    Raises:
        ValueError: ``hold`` is not an int in 0..:data:`MAX_RECEIVE_HOLD`.
    """

    def __init__(self, hold: int) -> None:
        if isinstance(hold, bool) or not isinstance(hold, int) \
                or not 0 <= hold <= MAX_RECEIVE_HOLD:
            raise ValueError(f"hold must be an int from 0 to {MAX_RECEIVE_HOLD}, got {hold!r}")
        self.hold = hold
        self._next: int | None = None  # the sequence number expected next
        self._waiting: dict[int, Any] = {}
        self._stray: int | None = None  # the last packet far behind (a restart's first?)
        self.late = 0
        """Items dropped: older than one already released (late or duplicated)."""
        self.skipped = 0
        """Sequence numbers given up on (lost, or later than the wait allowed)."""

    @property
    def waiting(self) -> int:
        """Items held behind a gap."""
        return len(self._waiting)

    def push(self, seq: int, item: Any) -> list[Any]:
        """Add item number ``seq`` (16-bit, wrapping); returns the items to pass on now,
        in order."""
        if isinstance(seq, bool) or not isinstance(seq, int) or not 0 <= seq < _SEQ:
            raise ValueError(f"seq must be a 16-bit sequence number, got {seq!r}")
        if self._next is None:
            self._next = seq
        ahead = _ahead(seq, self._next)
        out: list[Any] = []
        if ahead < -_RESTART_DISTANCE:
            stray, self._stray = self._stray, seq
            if stray is None or seq != (stray + 1) % _SEQ:
                self.late += 1
                return []
            # the sender restarted its numbers: pass on what was held, follow the new ones
            self._stray = None
            while self._waiting:
                out.extend(self._skip_to_oldest())
            self._next = seq
            ahead = 0
        if ahead < 0 or seq in self._waiting:
            self.late += 1
            return out
        self._waiting[seq] = item
        while True:
            out.extend(self._release_run())
            if not self._waiting or len(self._waiting) <= self.hold:
                return out
            out.extend(self._skip_to_oldest())

    def _skip_to_oldest(self) -> list[Any]:
        """Give up on the gap: the oldest waiting item and its run go on."""
        assert self._next is not None
        oldest = min(self._waiting, key=lambda s: _ahead(s, self._next or 0))
        self.skipped += _ahead(oldest, self._next)
        self._next = oldest
        return self._release_run()

    def _release_run(self) -> list[Any]:
        out = []
        assert self._next is not None
        while self._next in self._waiting:
            out.append(self._waiting.pop(self._next))
            self._next = (self._next + 1) % _SEQ
        return out


class ReceiveTimings:
    """When each packet of one stream arrived and when its frame was decoded.

    Keyed by the frame's ``pts`` as aiortc's decoder stamps it (the RTP timestamp from
    the stream's first packet on). Keeps the last ``keep`` frames.
    """

    def __init__(self, keep: int = 3000) -> None:
        self._first_ts: int | None = None
        self._arrived: dict[int, float] = {}
        self._order: deque[int] = deque()
        self._keep = keep
        self.decoded: deque[tuple[int, float, float]] = deque(maxlen=keep)
        """(pts, arrived, decoded) per frame, ``time.monotonic()`` seconds."""

    def arrived(self, timestamp: int, at: float) -> None:
        """A packet with RTP ``timestamp`` arrived at ``at``."""
        if self._first_ts is None:
            self._first_ts = timestamp
        pts = (timestamp - self._first_ts) % _TS
        if pts not in self._arrived:
            self._arrived[pts] = at
            self._order.append(pts)
            while len(self._order) > self._keep:
                self._arrived.pop(self._order.popleft(), None)

    def frame_decoded(self, pts: int | None, at: float) -> float | None:
        """A frame came out of the decoder at ``at``; returns its packet's arrival."""
        if pts is None:
            return None
        pts %= _TS  # aiortc's mapper keeps counting past a wrap of the RTP timestamp
        arrived = self._arrived.get(pts)
        if arrived is not None:
            self.decoded.append((pts, arrived, at))
        return arrived

    def arrival_of(self, pts: int) -> float | None:
        """When the packet of frame ``pts`` arrived (None: unknown or forgotten)."""
        return self._arrived.get(pts % _TS)

    def decode_delay_ms(self) -> float | None:
        """Median packet arrival → decoded frame (ms) over the recent frames."""
        if not self.decoded:
            return None
        return statistics.median((d - a) * 1000.0 for _, a, d in self.decoded)


class _PassThrough:
    """Stands in for aiortc's ``JitterBuffer``: each packet (an Opus packet is a whole
    frame) goes to the decoder at once; order is kept by the window in front of it."""

    capacity = 1

    def add(self, packet: Any) -> tuple[bool, Any]:
        return False, JitterFrame(data=packet._data, timestamp=packet.timestamp)


class _DecodeHere:
    """Stands in for aiortc's ``JitterBuffer`` and its decoder thread: each packet (in
    order, from the window) is decoded at once (Opus to 16 kHz mono, another codec by the
    decoder aiortc would have made for it), and its frames go to ``on_frame``; nothing
    reaches the decoder thread.

    Frames are stamped as aiortc's decoder stamps them (the RTP timestamp from the
    stream's first packet on: an Opus frame's ``rtp_timestamp``, another codec's
    ``pts``), so :meth:`ReceiveTimings.frame_decoded` finds them.
    """

    capacity = 1

    def __init__(self, codecs: dict[int, Any], on_frame: Callable[[Any], None],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._codecs = codecs
        self._on_frame = on_frame
        self._decoders: dict[str, Any] = {}
        self._first_ts: int | None = None
        self._clock = clock
        self.undecodable = 0
        """Inbound packets that failed to decode (dropped, the decoder's state kept)."""
        self.empty = 0
        """Packets with no payload (RTP padding only, RFC 3550: legitimate), skipped."""
        self._reported = 0  # (how many of them a log line has counted so far)
        self._reported_at: float | None = None

    def add(self, packet: Any) -> tuple[bool, None]:
        codec = self._codecs.get(packet.payload_type)
        if codec is None:  # (aiortc checked it before; a renegotiation could race)
            return False, None
        if not packet._data:  # (aiortc passes a padding-only packet on with no payload)
            self.empty += 1
            return False, None
        if self._first_ts is None:
            self._first_ts = packet.timestamp
        encoded = JitterFrame(data=packet._data,
                              timestamp=(packet.timestamp - self._first_ts) % _TS)
        try:  # (nothing may escape: this runs inside aiortc's DTLS receive loop)
            decoder = self._decoders.get(codec.mimeType)
            if decoder is None:  # (libopus missing: OpusLibraryError, counted below)
                decoder = self._decoders[codec.mimeType] = (
                    MonoOpusDecoder() if codec.mimeType.lower() == "audio/opus"
                    else get_decoder(codec))
            frames = decoder.decode(encoded)
        except Exception as exc:  # (hostile or broken input: dropped, the call goes on)
            self._undecodable(codec.mimeType, exc)
            return False, None
        for frame in frames:
            self._on_frame(frame)
        return False, None


    def _undecodable(self, mime_type: str, exc: Exception) -> None:
        """Count a packet that did not decode; say so at most once per
        :data:`UNDECODABLE_LOG_SECONDS` (a peer sending garbage at 50 packets a second
        writes one line, not fifty), with the count since the last line."""
        self.undecodable += 1
        now = self._clock()
        if self._reported_at is not None and now - self._reported_at < UNDECODABLE_LOG_SECONDS:
            return
        logger.warning("%d inbound %s packet(s) failed to decode (dropped); the last: %s: %s",
                       self.undecodable - self._reported, mime_type, type(exc).__name__,
                       str(exc)[:200])
        self._reported, self._reported_at = self.undecodable, now


UNDECODABLE_LOG_SECONDS = 10.0
"""The least time between two log lines about inbound packets that failed to decode."""

_BUFFER_ATTRIBUTE = "_RTCRtpReceiver__jitter_buffer"
_CODECS_ATTRIBUTE = "_RTCRtpReceiver__codecs"


def install_receive_path(
    receiver: Any, *, hold: int | None, timings: ReceiveTimings | None = None,
    on_frame: Callable[[Any], None] | None = None,
) -> ReorderWindow | None:
    """Put the receive path on an audio ``RTCRtpReceiver`` (before media flows).

    Args:
        receiver: the receiver (``transceiver.receiver``).
        hold: packets a gap may hold (see :class:`ReorderWindow`); None keeps aiortc's
            own buffer (80 ms prefetch), for comparison.
        timings: records arrival times (and, through the caller, decode times).
        on_frame: decode each packet on the loop and give its frames to this instead of
            to the receiver's track (which then only ends); needs ``hold``.

    Returns:
        The window in use (None with aiortc's buffer).

    Raises:
        ValueError: ``hold`` is out of range, or None with ``on_frame``.
        RuntimeError: this aiortc version's receiver is not the one this was written for.
    """
    window = ReorderWindow(hold) if hold is not None else None
    if on_frame is not None and window is None:
        raise ValueError("on_frame needs a hold (aiortc's own buffer decodes in its thread)")
    handle = getattr(receiver, "_handle_rtp_packet", None)
    if handle is None or not hasattr(receiver, _BUFFER_ATTRIBUTE) \
            or not isinstance(getattr(receiver, _CODECS_ATTRIBUTE, None), dict):
        raise RuntimeError("aiortc's RTCRtpReceiver changed: the receive path cannot be "
                           "installed (pin aiortc to the locked version)")
    if on_frame is not None:
        setattr(receiver, _BUFFER_ATTRIBUTE,
                _DecodeHere(getattr(receiver, _CODECS_ATTRIBUTE), on_frame))
    elif window is not None:
        setattr(receiver, _BUFFER_ATTRIBUTE, _PassThrough())

    async def handle_packet(packet: Any, arrival_time_ms: int) -> None:
        if timings is not None:
            timings.arrived(packet.timestamp, time.monotonic())
        if window is None:
            await handle(packet, arrival_time_ms)
            return
        for released in window.push(packet.sequence_number, packet):
            await handle(released, arrival_time_ms)

    receiver._handle_rtp_packet = handle_packet
    return window


class InboundAudio:
    """One call's inbound audio after the receive path: each decoded frame goes through
    :class:`~voxflow_voice.listen.input_guard.InputGuard` (validated, counted; silence
    while :attr:`muted`; converted to 16 kHz mono if it is not: Opus frames come from
    libopus at 16 kHz mono already, so no resampler runs) and is queued for
    :meth:`chunks`."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[AudioChunk | None] = asyncio.Queue()
        self.windows: list[ReorderWindow | None] = []  # the receive path's reorder windows
        self.muted = False
        self.frames_in = 0
        self.guard = InputGuard()  # the inbound audio boundary
        self.last_media: float | None = None
        """When the last frame was decoded (the loop's time)."""
        self.ended = asyncio.Event()
        self.timings = ReceiveTimings()
        """Arrival and decode time of each inbound packet (for latency figures)."""
        self.delays: deque[tuple[float, float]] = deque(maxlen=3000)
        """(arrived, handed to the session): the newest packet in each chunk yielded."""
        self._newest_arrival: float | None = None

    def install(self, receiver: Any, *, hold: int | None) -> None:
        """Put the receive path on ``receiver``, its frames decoded on the loop into
        :meth:`take_frame` (with ``hold`` None, aiortc's own buffer and track)."""
        self.windows.append(install_receive_path(
            receiver, hold=hold, timings=self.timings,
            on_frame=self.take_frame if hold is not None else None))

    async def chunks(self) -> AsyncIterator[AudioChunk]:
        """16 kHz mono microphone audio until :meth:`end`.

        Frames that queued up while the session was busy are joined into one chunk: a
        session that fell behind (many calls on few cores) catches up with one VAD pass
        instead of one thread hop per 20 ms frame, and one that keeps up gets every
        frame as soon as it arrives.
        """
        while (chunk := await self.queue.get()) is not None:
            backlog: list[AudioChunk] = []
            ended = False
            while not self.queue.empty():
                more = self.queue.get_nowait()
                if more is None:
                    ended = True
                    break
                backlog.append(more)
            if backlog:
                chunk = AudioChunk(b"".join([chunk.pcm, *(c.pcm for c in backlog)]),
                                   chunk.sample_rate, start_sample=chunk.start_sample)
            if self._newest_arrival is not None:
                self.delays.append((self._newest_arrival, time.monotonic()))
            yield chunk
            if ended:
                return

    def take_frame(self, frame: Any) -> None:
        """One decoded inbound frame (a :class:`~voxflow_adapters.webrtc.opus.DecodedFrame`,
        already 16 kHz mono, or an ``av.AudioFrame``): to 16 kHz mono, queued for
        :meth:`chunks`."""
        if self.ended.is_set():
            return
        self.frames_in += 1
        self.last_media = asyncio.get_running_loop().time()
        stamp = frame.rtp_timestamp if isinstance(frame, DecodedFrame) else frame.pts
        arrived = self.timings.frame_decoded(stamp, time.monotonic())
        if arrived is not None:
            self._newest_arrival = arrived
        if isinstance(frame, DecodedFrame):  # Opus, decoded to 16 kHz mono by libopus
            samples, channels = frame.samples, 1
        else:  # an av.AudioFrame (another codec, or aiortc's own buffer and decoder)
            samples = frame.to_ndarray()
            channels = len(frame.layout.channels)
            if frame.format.is_planar:
                samples = samples.T  # (channels, n) → interleaved
            samples = np.reshape(samples, -1)
        # validated (dtype, rate, channels, NaN) and counted at the boundary
        chunk = self.guard.convert(samples, frame.sample_rate, channels, muted=self.muted)
        if chunk is not None:
            self.queue.put_nowait(chunk)

    def end(self) -> None:
        """No more audio: :meth:`chunks` ends after what is queued."""
        if not self.ended.is_set():
            self.ended.set()
            self.queue.put_nowait(None)

    def delay_ms(self, recent: int = 250) -> float | None:
        """Median inbound delay (ms) over the last ``recent`` chunks: an RTP packet's
        arrival → its audio handed to the session (receive buffer, decoder, resampling,
        waiting for the session); None before any audio."""
        delays = list(itertools.islice(reversed(self.delays), recent))
        if not delays:
            return None
        return round(statistics.median((out - arrived) * 1000.0 for arrived, out in delays), 1)
