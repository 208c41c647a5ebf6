"""One phone call's media stream as an ``AudioTransport`` whose receipts are the
carrier's marks.

* *in*: each ``media`` message's μ-law is decoded and upsampled to 16 kHz by the call's
  :class:`~voxflow_adapters.phone.codec.MulawDecoder` and yielded by
  :meth:`PhoneTransport.audio_input`; ``dtmf`` goes to ``on_dtmf``; ``stop`` (the caller
  hung up) ends the input, so the session on top settles and returns.
* *out*: reply chunks are resampled to 8 kHz (each whole, like every adapter) into a
  :class:`~voxflow_voice.speak.playout.PlayoutQueue`; the sender takes 20 ms frames off
  it while less than ``lead`` seconds of sent audio are unconfirmed, sends each as
  ``media`` followed by a ``mark`` named ``<n>:<delivery id>:<sample offset>`` and keeps
  the frame's receipts **until its mark comes back**: only then are they observed (the
  carrier echoes a mark once the audio before it has played). So ``ClientActivity``, the
  floor and the heard history follow what the caller heard, not what was sent; the marks
  themselves pace the sender (nothing is sent further than ``lead`` ahead of the caller).
* *fence*: :meth:`PhoneTransport.flush` drops the delivery's queued audio and, when some
  of it is buffered at the carrier, sends ``clear`` before any other message. Every mark
  sent before the ``clear`` is then settled as *not played* when it comes back (the
  carrier echoes the pending marks on a ``clear``); the frames of other deliveries the
  ``clear`` also dropped are sent again. :meth:`PhoneTransport.pause` holds a delivery
  the same way (``clear``, its unconfirmed frames kept to send on from the same sample at
  :meth:`PhoneTransport.resume`).

The transport never writes to the WebSocket itself: ``send`` (an ``async`` callable that
sends one text message) is the server's.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

from voxflow_voice.audio import STT_SAMPLE_RATE, AudioChunk, ReplyChunk, resample
from voxflow_voice.speak.playout import PlayoutQueue
from voxflow_voice.transport import ClientObservation, PlaybackDrained, PlaybackReceipt

from voxflow.clock import Clock, MonotonicClock
from voxflow.ids import DeliveryId

from .codec import MULAW_RATE, MulawDecoder, MulawEncoder
from .wire import (
    CarrierMessageError,
    CarrierSerializer,
    Connected,
    Dtmf,
    Mark,
    Media,
    Started,
    Stopped,
)

__all__ = ["FRAME_SAMPLES", "PhoneStatistics", "PhoneTransport"]

logger = logging.getLogger(__name__)

FRAME_SAMPLES = 160
"""20 ms at 8 kHz: one ``media`` message each way."""
MAX_BAD_MESSAGES = 20
"""A call that sends this many invalid messages is ended."""
_INPUT_FRAMES = 500  # 10 s of caller audio waiting for a session that fell behind


@dataclass(frozen=True, slots=True)
class PhoneStatistics:
    """Counters of one phone call.

    Attributes:
        frames_in: caller ``media`` messages decoded.
        frames_out: reply ``media`` messages sent (a frame sent again after a ``clear``
            counts again).
        marks_played: marks echoed for audio that played (their receipts observed).
        marks_unplayed: marks echoed after a ``clear``: that audio never played.
        clears: ``clear`` messages sent.
        bad_messages: inbound messages refused.
        dtmf: digits received.
    """

    frames_in: int
    frames_out: int
    marks_played: int
    marks_unplayed: int
    clears: int
    bad_messages: int
    dtmf: int


@dataclass(slots=True)
class _Frame:
    delivery_id: DeliveryId
    payload: bytes
    receipts: tuple[PlaybackReceipt, ...]
    pulled_at: float
    samples: int

    def carries(self, delivery_id: DeliveryId) -> bool:
        """Whether some of the frame is ``delivery_id``'s audio."""
        return any(receipt.delivery_id == delivery_id for receipt in self.receipts)

    def samples_of(self, delivery_id: DeliveryId) -> int:
        """The frame's samples of ``delivery_id`` at the reply's own rate (as flush
        counts them)."""
        return sum(receipt.num_samples for receipt in self.receipts
                   if receipt.delivery_id == delivery_id)


class PhoneTransport:
    """A phone call's ``AudioTransport`` and ``PausableTransport`` (see the module).

    Args:
        serializer: the carrier's wire format.
        send: sends one text message on the call's WebSocket.
        clock: receipt and drain times (monotonic if None).
        lead: seconds of sent audio that may wait for their marks (the carrier's buffer).
        on_dtmf: called with each key the caller presses.
    """

    def __init__(
        self, serializer: CarrierSerializer, send: Callable[[str], Awaitable[None]], *,
        clock: Clock | None = None, lead: float = 0.2,
        on_dtmf: Callable[[str], None] | None = None, writable_seconds: float = 0.3,
    ) -> None:
        if not 0.02 <= lead <= 5.0:
            raise ValueError(f"lead must be within 0.02..5 seconds, got {lead!r}")
        self.serializer = serializer
        self.clock: Clock = clock if clock is not None else MonotonicClock()
        self.on_dtmf = on_dtmf
        self.started: Started | None = None
        self.stopped = False
        """The carrier said the stream ended (``stop``: the caller hung up)."""
        self._send = send
        self._lead = round(lead * MULAW_RATE)
        self._writable_seconds = writable_seconds
        self._decoder = MulawDecoder()
        self._encoder = MulawEncoder(FRAME_SAMPLES)
        self._queue = PlayoutQueue(clock=self.clock, rate=MULAW_RATE)
        self._resend: deque[_Frame] = deque()
        self._pending: OrderedDict[str, _Frame] = OrderedDict()
        self._unacked = 0
        self._cleared: set[str] = set()
        self._clear_needed = False
        self._drained: PlaybackDrained | None = None
        self._wake = asyncio.Event()
        self._writable = asyncio.Event()
        self._writable.set()
        self._input: deque[AudioChunk] = deque()
        self._input_ready = asyncio.Event()
        self._input_ended = False
        self._observed: asyncio.Queue[ClientObservation | None] = asyncio.Queue()
        self._closed = False
        self._started = asyncio.Event()
        self._sequence = 0
        self._position = 0
        self._frames_in = self._frames_out = self._marks_played = self._marks_unplayed = 0
        self._clears = self._bad = self._dtmf = 0

    # -- inbound (the server hands over each WebSocket text message) -----------------

    def receive(self, text: str) -> None:
        """Act on one inbound message; an invalid one is counted and logged (its reason
        only), and too many of them end the call.

        Raises:
            CarrierMessageError: the call sent :data:`MAX_BAD_MESSAGES` invalid ones.
        """
        try:
            message = self.serializer.parse(text)
        except CarrierMessageError as exc:
            self._bad += 1
            logger.warning("refused a carrier message: %s", exc.reason)
            if self._bad >= MAX_BAD_MESSAGES:
                self.end_input()
                raise
            return
        if isinstance(message, Media):
            self._on_media(message)
        elif isinstance(message, Mark):
            self._on_mark(message.name)
        elif isinstance(message, Dtmf):
            self._dtmf += 1
            if self.on_dtmf is not None:
                self.on_dtmf(message.digit)
        elif isinstance(message, Started):
            if self.started is None:
                self.started = message
                self._started.set()
                self._wake.set()
        elif isinstance(message, Stopped):
            self.stopped = True
            self.end_input()
        else:
            assert isinstance(message, Connected)

    def _on_media(self, media: Media) -> None:
        if self._input_ended or not media.payload:
            return
        pcm = self._decoder.decode(media.payload)
        chunk = AudioChunk(pcm, STT_SAMPLE_RATE, start_sample=self._position)
        self._position += chunk.num_samples
        self._frames_in += 1
        if len(self._input) >= _INPUT_FRAMES:
            self._input.popleft()  # the session fell 10 s behind: the oldest goes
        self._input.append(chunk)
        self._input_ready.set()

    def _on_mark(self, name: str) -> None:
        if name in self._cleared:
            self._cleared.discard(name)
            self._marks_unplayed += 1  # its audio was cleared, not played
            return
        if name not in self._pending:
            logger.warning("a mark the call never sent came back")
            return
        now = self.clock.now()
        while self._pending:  # marks come back in order: the earlier ones played too
            sent, frame = self._pending.popitem(last=False)
            self._unacked -= frame.samples
            self._marks_played += 1
            began = now - frame.samples / MULAW_RATE
            for receipt in frame.receipts:
                self._observed.put_nowait(dataclasses.replace(
                    receipt, at=began + (receipt.at - frame.pulled_at)))
            if sent == name:
                break
        self._report_drain()
        self._wake.set()

    @property
    def input_ended(self) -> bool:
        """The stream ended (or the call closed): no more caller audio."""
        return self._input_ended

    def end_input(self) -> None:
        """The stream ended (``stop``, or the WebSocket closed): the input ends."""
        self._input_ended = True
        self._input_ready.set()

    # -- AudioTransport --------------------------------------------------------------

    async def audio_input(self) -> AsyncIterator[AudioChunk]:
        """The caller's audio at 16 kHz, until the stream ends."""
        while True:
            while self._input:
                yield self._input.popleft()
            if self._input_ended:
                return
            self._input_ready.clear()
            await self._input_ready.wait()

    async def wait_writable(self) -> None:
        """Return while less than ``writable_seconds`` of reply audio wait to be sent."""
        while not self._closed and self._queue.queued_seconds >= self._writable_seconds:
            self._writable.clear()
            await self._writable.wait()

    def write_nowait(self, chunk: ReplyChunk) -> None:
        """Queue one reply chunk (resampled to 8 kHz whole)."""
        if self._closed:
            return
        samples = chunk.samples()
        out = resample(samples, chunk.sample_rate, MULAW_RATE) if samples.size else samples
        if self._queue.put(chunk, out):
            self._wake.set()

    def flush(self, delivery_id: DeliveryId) -> int:
        """Drop ``delivery_id``'s audio now: the queued samples, and what the carrier
        buffers (``clear``, sent before anything else); returns its samples dropped."""
        dropped = self._queue.flush(delivery_id)
        if any(frame.carries(delivery_id) for frame in self._pending.values()):
            dropped += sum(frame.samples_of(delivery_id) for frame in self._pending.values())
            self._clear_carrier(keep=lambda frame: not frame.carries(delivery_id))
        kept: deque[_Frame] = deque()
        for frame in self._resend:
            if frame.carries(delivery_id):
                dropped += frame.samples_of(delivery_id)
            else:
                kept.append(frame)
        self._resend = kept
        self._wake.set()
        self._writable.set()
        return dropped

    def pause(self, delivery_id: DeliveryId) -> bool:
        """Hold ``delivery_id`` now (``clear`` at the carrier, its unconfirmed frames
        kept); False if it was paused already or flushed."""
        if not self._queue.pause(delivery_id):
            return False
        if any(frame.carries(delivery_id) for frame in self._pending.values()):
            self._clear_carrier(keep=lambda frame: True)
        return True

    def resume(self, delivery_id: DeliveryId) -> bool:
        """Send on from the sample where ``delivery_id`` was held; False if not held."""
        if not self._queue.resume(delivery_id):
            return False
        self._wake.set()
        return True

    async def observations(self) -> AsyncIterator[ClientObservation]:
        """Receipts (from echoed marks) and drains, in order, until the call closes."""
        while (item := await self._observed.get()) is not None:
            yield item

    # -- outbound --------------------------------------------------------------------

    def _clear_carrier(self, keep: Callable[[_Frame], bool]) -> None:
        """Everything sent but unconfirmed is dropped at the carrier: its marks will
        come back unplayed; the frames ``keep`` says go out again, first."""
        frames = [frame for frame in self._pending.values() if keep(frame)]
        self._cleared.update(self._pending)
        self._pending.clear()
        self._unacked = 0
        self._resend.extendleft(reversed(frames))
        self._clear_needed = True
        self._wake.set()

    def _next_frame(self) -> _Frame | None:
        if self._resend:
            if self._queue.is_paused(self._resend[0].delivery_id):
                return None  # held: nothing after it goes either (order is kept)
            return self._resend.popleft()
        if self._unacked >= self._lead:
            return None
        pulled = self._queue.pull(FRAME_SAMPLES) if self._queue.queued_samples else None
        if pulled is None or not pulled.filled:
            drained = self._queue.pull(0).drained
            if drained is not None:
                self._drained = drained
                self._report_drain()
            return None
        self._writable.set()
        if not pulled.receipts:
            self._wake.set()  # (no whole reply sample in it: nothing to prove; go on)
            return None
        receipt = pulled.receipts[0]
        payload = self._encoder.encode(pulled.samples[: pulled.filled])
        return _Frame(receipt.delivery_id, payload, pulled.receipts, receipt.at,
                      pulled.filled)

    def _report_drain(self) -> None:
        if self._drained is not None and not self._pending and not self._resend:
            drained, self._drained = self._drained, None
            self._observed.put_nowait(dataclasses.replace(drained, at=self.clock.now()))

    async def run(self) -> None:
        """Send the reply audio, marks and clears until :meth:`aclose` (the server runs
        it beside the call)."""
        await self._started.wait()
        if self.started is None:
            return  # closed before the stream started
        stream = self.started.stream_id
        while not self._closed:
            if self._clear_needed:
                self._clear_needed = False
                self._clears += 1
                await self._send(self.serializer.clear(stream))
                continue
            frame = self._next_frame()
            if frame is None:
                self._wake.clear()
                await self._wake.wait()
                continue
            self._sequence += 1
            first = frame.receipts[0]
            name = f"{self._sequence}:{frame.delivery_id}:{first.start_sample}"
            self._pending[name] = frame
            self._unacked += frame.samples
            self._frames_out += 1
            await self._send(self.serializer.media(stream, frame.payload))
            await self._send(self.serializer.mark(stream, name))

    async def aclose(self) -> None:
        """End the input and the observations (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self.end_input()
        self._writable.set()
        self._wake.set()
        self._started.set()
        self._observed.put_nowait(None)

    def statistics(self) -> PhoneStatistics:
        """The call's counters so far."""
        return PhoneStatistics(
            frames_in=self._frames_in, frames_out=self._frames_out,
            marks_played=self._marks_played, marks_unplayed=self._marks_unplayed,
            clears=self._clears, bad_messages=self._bad,
            dtmf=self._dtmf)

    def __repr__(self) -> str:
        stream = None if self.started is None else self.started.stream_id
        return (f"PhoneTransport({self.serializer.name}, stream={stream!r}, "
                f"unconfirmed={len(self._pending)} marks)")

