"""The transport conformance kit: one suite of the :class:`AudioTransport` contract.

Every adapter (simulated, local sound card, WebRTC, and whatever comes next: telephony,
a WebSocket) must keep the same rules, because the session's hardest guarantees rest on
them: never a stale sample after a fence, resume at the exact sample, receipts in the
reply's own samples. :func:`check_transport` runs those rules against a transport made
by a factory you pass, each check on a fresh transport::

    @contextlib.asynccontextmanager
    async def my_transport() -> AsyncIterator[TransportHarness]:
        async with MyTransport(...) as transport:
            yield TransportHarness(transport, sleep=asyncio.sleep, close=transport.aclose)

    report = await check_transport(my_transport)  # raises TransportContractError

The checks: ``receipts`` (contiguous, in the chunk's own rate and positions, all of
them), ``drain`` (after the last receipt, and not again while idle), ``fencing`` (a flush drops the
queued audio at once and accounts for every sample; later chunks of the delivery are
never played; other deliveries play whole), ``pause`` (a paused delivery plays nothing and
does not drain; resume goes on from the exact sample; a flush forgets the pause),
``mute`` (a mute and an unmute are observed, in order) and ``close`` (input and
observations end). ``pause`` needs a :class:`PausableTransport` and ``mute`` a
``TransportHarness.mute``; without them those checks are reported as skipped.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field

import numpy as np

from voxflow.ids import DeliveryId
from voxflow.tasks import background

from .audio import ReplyChunk
from .transport import (
    AudioTransport,
    ClientObservation,
    MuteChanged,
    PausableTransport,
    PlaybackDrained,
    PlaybackReceipt,
)

__all__ = [
    "CHECKS",
    "TransportContractError",
    "TransportFactory",
    "TransportHarness",
    "check_transport",
    "reply_chunks",
]

CHECKS = ("receipts", "drain", "fencing", "pause", "mute", "close")
REPLY_RATE = 22_050  # Piper's rate: every adapter resamples it
_STEP = 0.02


class TransportContractError(AssertionError):
    """A transport broke a rule of the contract; the message names the check and rule."""


@dataclass(slots=True)
class TransportHarness:
    """A transport under test and the few things the kit cannot do through the port.

    Attributes:
        transport: the transport, open and playing out on its own cadence.
        sleep: waits on the call's clock while the cadence plays on (``asyncio.sleep``
            for a real-time transport, a virtual clock's ``sleep`` for a simulated one).
        close: ends the call (idempotent).
        mute: mutes (True) or unmutes the client's microphone, as the user would; None if
            the transport has no way to.
        limit: clock seconds a check waits for something before it fails.
    """

    transport: AudioTransport
    sleep: Callable[[float], Awaitable[None]]
    close: Callable[[], Awaitable[None]]
    mute: Callable[[bool], Awaitable[None]] | None = None
    limit: float = 10.0


TransportFactory = Callable[[], AbstractAsyncContextManager[TransportHarness]]
"""Makes a fresh, open transport per check (and closes it on exit)."""


def reply_chunks(delivery_id: DeliveryId, seconds: float, *, rate: int = REPLY_RATE,
                 chunk_seconds: float = 0.1, segment_id: int = 1) -> list[ReplyChunk]:
    """A reply's audio: a tone cut into identity-tagged chunks with contiguous positions."""
    total = round(seconds * rate)
    t = np.arange(total) / rate
    samples = (0.3 * np.sin(2 * np.pi * 330 * t)).astype(np.float32)
    step = round(chunk_seconds * rate)
    return [ReplyChunk.from_float(samples[i : i + step], rate, delivery_id=delivery_id,
                                  segment_id=segment_id, start_sample=i)
            for i in range(0, total, step)]


@dataclass(slots=True)
class _Call:
    """One transport under test: its observations, collected as they come."""

    harness: TransportHarness
    seen: list[ClientObservation] = field(default_factory=list)
    written: dict[DeliveryId, int] = field(default_factory=dict)
    collector: asyncio.Task[None] | None = None

    @property
    def transport(self) -> AudioTransport:
        return self.harness.transport

    async def _collect(self) -> None:
        async for item in self.transport.observations():
            self.seen.append(item)

    def receipts(self, delivery_id: DeliveryId) -> list[PlaybackReceipt]:
        return [o for o in self.seen
                if isinstance(o, PlaybackReceipt) and o.delivery_id == delivery_id]

    def received(self, delivery_id: DeliveryId) -> int:
        return sum(r.num_samples for r in self.receipts(delivery_id))

    def drains(self, delivery_id: DeliveryId) -> list[int]:
        return [i for i, o in enumerate(self.seen)
                if isinstance(o, PlaybackDrained) and o.delivery_id == delivery_id]

    async def write(self, chunks: Sequence[ReplyChunk]) -> None:
        for chunk in chunks:
            await self.transport.wait_writable()
            self.transport.write_nowait(chunk)
            self.written[chunk.delivery_id] = (self.written.get(chunk.delivery_id, 0)
                                               + chunk.num_samples)

    def put(self, chunks: Sequence[ReplyChunk]) -> None:
        """Queue all of ``chunks`` at once (a short reply: no underrun between chunks)."""
        for chunk in chunks:
            self.transport.write_nowait(chunk)
            self.written[chunk.delivery_id] = (self.written.get(chunk.delivery_id, 0)
                                               + chunk.num_samples)

    def whole(self, delivery_id: DeliveryId) -> Callable[[], bool]:
        """Whether every sample written of ``delivery_id`` was receipted (or more)."""
        return lambda: self.received(delivery_id) >= self.written.get(delivery_id, 0)

    async def until(self, check: str, what: str, done: Callable[[], bool]) -> None:
        waited = 0.0
        while not done():
            if waited >= self.harness.limit:
                raise TransportContractError(
                    f"{check}: {what} did not happen within {self.harness.limit:g} s")
            await self.harness.sleep(_STEP)
            waited += _STEP


def _fail(check: str, rule: str) -> TransportContractError:
    return TransportContractError(f"{check}: {rule}")


def _last_receipt(call: _Call) -> int:
    return max((i for i, o in enumerate(call.seen) if isinstance(o, PlaybackReceipt)),
               default=-1)


def _contiguous(check: str, call: _Call, delivery_id: DeliveryId, total: int) -> None:
    """The delivery's receipts cover 0..total once each, in order, in the reply's rate."""
    position = 0
    for receipt in call.receipts(delivery_id):
        if receipt.sample_rate != REPLY_RATE:
            raise _fail(check, f"a receipt is at {receipt.sample_rate} Hz, not the reply's "
                               f"own {REPLY_RATE} Hz")
        if receipt.start_sample != position:
            raise _fail(check, f"receipts of {delivery_id} jump from sample {position} to "
                               f"{receipt.start_sample} (a gap or a repeat)")
        if receipt.num_samples <= 0:
            raise _fail(check, "a receipt covers no samples")
        position += receipt.num_samples
    if position != total:
        raise _fail(check, f"receipts of {delivery_id} cover {position} samples, "
                           f"expected {total}")


async def _receipts(call: _Call) -> None:
    a = DeliveryId("conformance-a")
    await call.write(reply_chunks(a, 0.6))  # at the transport's pace (wait_writable)
    await call.until("receipts", "the whole reply played", call.whole(a))
    await call.until("receipts", "the drain after the reply",
                     lambda: any(i > _last_receipt(call) for i in call.drains(a)))
    _contiguous("receipts", call, a, call.written[a])
    if any(r.segment_id != 1 for r in call.receipts(a)):
        raise _fail("receipts", "a receipt lost its segment id")
    times = [r.at for r in call.receipts(a)]
    if times != sorted(times):
        raise _fail("receipts", "receipt times go backwards")


async def _drain(call: _Call) -> None:
    a = DeliveryId("conformance-a")
    call.put(reply_chunks(a, 0.3))
    await call.until("drain", "the whole reply played", call.whole(a))
    await call.until("drain", "a drain after the last receipt",
                     lambda: any(i > _last_receipt(call) for i in call.drains(a)))
    drains = len(call.drains(a))
    await call.harness.sleep(0.3)
    if len(call.drains(a)) != drains:
        raise _fail("drain", "a drain was reported again while nothing played")


async def _fencing(call: _Call) -> None:
    a, b = DeliveryId("conformance-a"), DeliveryId("conformance-b")
    async with background(call.write(reply_chunks(a, 1.0) + reply_chunks(b, 0.3)),
                          name="conformance.writer") as writer:
        await call.until("fencing", "0.1 s of the first reply played",
                         lambda: call.received(a) >= REPLY_RATE // 10)
        before = call.written.get(a, 0)
        dropped = call.transport.flush(a)  # (0 only if the device ate the queue already)
        await writer  # the rest of A is offered after the flush: it must never play
        await call.until("fencing", "the second reply played whole", call.whole(b))
    played = call.received(a)
    if played + dropped != before:
        raise _fail("fencing", f"{played} samples played + {dropped} dropped != {before} "
                               "written before the flush (a stale or lost sample)")
    _contiguous("fencing", call, a, played)
    _contiguous("fencing", call, b, call.written[b])
    first_b = next(i for i, o in enumerate(call.seen)
                   if isinstance(o, PlaybackReceipt) and o.delivery_id == b)
    if any(isinstance(o, PlaybackReceipt) and o.delivery_id == a
           for o in call.seen[first_b:]):
        raise _fail("fencing", "the flushed reply played after the next one started")
    if call.transport.flush(a) != 0:
        raise _fail("fencing", "a second flush dropped samples")


async def _pause(call: _Call) -> None:
    transport = call.transport
    assert isinstance(transport, PausableTransport)
    a, c = DeliveryId("conformance-a"), DeliveryId("conformance-c")
    async with background(call.write(reply_chunks(a, 0.6)), name="conformance.writer") as writer:
        await call.until("pause", "0.1 s played", lambda: call.received(a) >= REPLY_RATE // 10)
        if not transport.pause(a) or transport.pause(a):
            raise _fail("pause", "pause() must be True once, then False while paused")
        await call.harness.sleep(0.1)  # audio already on its way when the pause fell
        held, drains = call.received(a), len(call.drains(a))
        await call.harness.sleep(0.3)
        if call.received(a) != held:
            raise _fail("pause", f"{call.received(a) - held} samples played while paused")
        if len(call.drains(a)) != drains:
            raise _fail("pause", "a paused reply reported a drain (the floor must stay held)")
        if not transport.resume(a) or transport.resume(a):
            raise _fail("pause", "resume() must be True once, then False")
        await writer
        await call.until("pause", "the resumed reply played whole", call.whole(a))
    _contiguous("pause", call, a, call.written[a])  # resumed at the exact sample
    call.put(reply_chunks(c, 0.3))
    await call.until("pause", "a reply played", lambda: call.received(c) > 0)
    transport.pause(c)
    transport.flush(c)
    if transport.resume(c) or transport.pause(c):
        raise _fail("pause", "a flushed reply can still be resumed or paused")
    await call.until("pause", "the drain after flushing a paused reply",
                     lambda: bool(call.drains(c)))


async def _mute(call: _Call) -> None:
    mute = call.harness.mute
    assert mute is not None
    a = DeliveryId("conformance-a")
    call.put(reply_chunks(a, 0.3))

    def changes() -> list[bool]:
        return [o.muted for o in call.seen if isinstance(o, MuteChanged)]

    await mute(True)
    await call.until("mute", "MuteChanged(muted=True)", lambda: changes() == [True])
    await mute(False)
    await call.until("mute", "MuteChanged(muted=False)", lambda: changes() == [True, False])
    await call.until("mute", "the reply played whole", call.whole(a))
    _contiguous("mute", call, a, call.written[a])  # the transport itself cuts nothing


async def _close(call: _Call) -> None:
    a = DeliveryId("conformance-a")
    call.put(reply_chunks(a, 0.3))
    await call.until("close", "a receipt", lambda: call.received(a) > 0)

    async def read_input() -> None:
        async for _ in call.transport.audio_input():
            pass

    async with background(read_input(), name="conformance.reader") as reader:
        await call.harness.close()
        try:
            await asyncio.wait_for(asyncio.shield(reader), 10.0)
            assert call.collector is not None
            await asyncio.wait_for(asyncio.shield(call.collector), 10.0)
        except TimeoutError:
            raise _fail("close", "audio_input() or observations() did not end on close"
                        ) from None


_RUN: dict[str, Callable[[_Call], Awaitable[None]]] = {
    "receipts": _receipts, "drain": _drain, "fencing": _fencing, "pause": _pause,
    "mute": _mute, "close": _close,
}


async def check_transport(factory: TransportFactory, *,
                          checks: Sequence[str] = CHECKS) -> dict[str, str]:
    """Run the contract against fresh transports from ``factory``, one per check.

    Returns:
        Each check's outcome: ``"passed"`` or ``"skipped: <why>"``.

    Raises:
        TransportContractError: the first rule broken, naming the check.
        ValueError: an unknown check name.
    """
    unknown = [name for name in checks if name not in _RUN]
    if unknown:
        raise ValueError(f"unknown checks {unknown}; choose from {list(CHECKS)}")
    report: dict[str, str] = {}
    for name in checks:
        async with factory() as harness:
            if name == "pause" and not isinstance(harness.transport, PausableTransport):
                report[name] = "skipped: not a PausableTransport"
                continue
            if name == "mute" and harness.mute is None:
                report[name] = "skipped: the harness cannot mute"
                continue
            call = _Call(harness)
            async with background(call._collect(), name="conformance.collector") as collector:
                call.collector = collector
                await _RUN[name](call)
        report[name] = "passed"
    return report

