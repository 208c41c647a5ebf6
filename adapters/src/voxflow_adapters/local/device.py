"""The local sound card: microphone in, speakers out, through sounddevice (PortAudio).

:class:`LocalAudio` implements :class:`~voxflow_voice.transport.AudioTransport` with one
input and one output stream, each at its device's own rate:

* *in*: the input callback copies each block; on the event loop it is converted to
  16 kHz mono (:class:`~voxflow_voice.audio.InputConverter`) and handed out in order.
  While muted, silence is handed out instead (time keeps flowing for the turn detector).
* *out*: reply chunks are resampled to the device rate when written and queued with
  their identity in a :class:`~voxflow_voice.speak.playout.PlayoutQueue` (used under a lock:
  the callback runs on PortAudio's thread); the output callback pulls what the device
  asks for and reports a
  :class:`~voxflow_voice.transport.PlaybackReceipt` for exactly the samples it consumed
  (mapped back to the chunk's own rate), a :class:`PlaybackDrained` when the queue ran
  dry, and :meth:`LocalAudio.flush` drops a fenced delivery's queued audio at once.
* *pause*: :meth:`LocalAudio.pause` holds a delivery's playout (its audio stays queued)
  and :meth:`LocalAudio.resume` plays on from the same sample, for barge-in arbitration.
* *robustness*: PortAudio missing → :class:`~.errors.AudioBackendError` naming
  ``apt-get install libportaudio2``; no or unknown device →
  :class:`~.errors.AudioDeviceError`; a stream that stops calling back (a stall,
  an unplugged device) is reopened up to ``reopen_attempts`` times. If that fails the
  input simply ends, so the voice session closes normally and the conversation (held by
  the TurnRunner's flow) is kept for a new session; :attr:`LocalAudio.error` says why.

``sounddevice`` is imported only when a stream is opened, so importing this module (or
``voxflow_adapters``) never fails on a machine without PortAudio. The streams are made
by a :class:`StreamBackend` (:class:`SoundDeviceBackend` by default), which tests replace
with a fake that plays the audio driver's part.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import numpy as np
from numpy.typing import NDArray
from pydantic import BaseModel, ConfigDict, Field
from voxflow_voice.audio import AudioChunk, ReplyChunk, resample
from voxflow_voice.listen.input_guard import InputGuard
from voxflow_voice.speak.playout import PlayoutQueue, Pulled
from voxflow_voice.transport import (
    ClientObservation,
    MuteChanged,
)

from voxflow.clock import Clock, MonotonicClock
from voxflow.errors import ResourceClosedError
from voxflow.ids import DeliveryId

from .backend import (
    PORTAUDIO_INSTALL,
    AudioStream,
    SoundDeviceBackend,
    StreamBackend,
    StreamCallback,
    StreamKind,
    load_sounddevice,
)
from .errors import AdapterBrokenError, AudioBackendError, AudioDeviceError

__all__ = [
    "PORTAUDIO_INSTALL",
    "AudioStream",
    "LocalAudio",
    "LocalAudioSettings",
    "LocalAudioStatistics",
    "LocalAudioStatus",
    "SoundDeviceBackend",
    "StreamBackend",
    "StreamCallback",
    "StreamKind",
    "load_sounddevice",
]

logger = logging.getLogger(__name__)

class LocalAudioSettings(BaseModel):
    """Which devices a local call uses and how it buffers."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    input_device: int | str | None = Field(None, description="microphone (index or name)")
    output_device: int | str | None = Field(None, description="speakers (index or name)")
    input_rate: int | None = Field(
        None, gt=0, le=384_000, description="input rate; None: the device's"
    )
    output_rate: int | None = Field(
        None, gt=0, le=384_000, description="output rate; None: the device's"
    )
    block: float = Field(0.02, gt=0, le=0.5, description="seconds per device callback")
    latency: Literal["low", "high"] | Annotated[float, Field(gt=0, le=10)] = Field(
        "low", description="PortAudio latency: low, high or seconds"
    )
    lead: float = Field(0.4, gt=0, le=10, description="seconds of reply audio queued ahead")
    stall_timeout: float = Field(
        1.5, gt=0, le=60, description="seconds without a callback that count as a stall"
    )
    reopen_attempts: int = Field(3, ge=0, le=100, description="reopen tries after a stall")
    reopen_backoff: float = Field(0.5, ge=0, le=60, description="seconds between tries (x try)")


@dataclass(frozen=True, slots=True)
class LocalAudioStatus:
    """A change of the devices' state, for the user interface.

    Attributes:
        state: ``open`` (streams running), ``stalled`` (no callbacks: reopening),
            ``reopened``, ``reopen_failed`` (one try failed), ``broken`` (gave up).
        message: what happened, for a person.
        at: clock time.
    """

    state: Literal["open", "stalled", "reopened", "reopen_failed", "broken"]
    message: str
    at: float


@dataclass(frozen=True, slots=True)
class LocalAudioStatistics:
    """Counters of a local call.

    Attributes:
        input_rate: the input stream's rate (0 before it opened).
        output_rate: the output stream's rate (0 before it opened).
        input_blocks: input callbacks so far.
        output_blocks: output callbacks so far.
        xruns: callbacks whose status reported an overflow or underflow.
        reopens: successful reopens after a stall.
        queued_seconds: reply audio waiting for the device.
        samples_played: device samples of reply audio played.
        samples_flushed: device samples dropped by flushes.
        input_frames_dropped: input blocks refused at the audio boundary (bad shape, rate).
        input_frames_zeroed: input blocks holding NaN/infinity, passed on as silence.
    """

    input_rate: int
    output_rate: int
    input_blocks: int
    output_blocks: int
    xruns: int
    reopens: int
    queued_seconds: float
    samples_played: int
    samples_flushed: int
    input_frames_dropped: int = 0
    input_frames_zeroed: int = 0


class LocalAudio:
    """The computer's microphone and speakers as an :class:`AudioTransport`.

    Use as an async context manager (it opens the streams on entry)::

        async with LocalAudio(LocalAudioSettings(input_device=2)) as audio:
            await VoiceSession(turns, audio, engines).run()

    Args:
        settings: devices and buffering; the defaults use the default devices.
        clock: the call's clock (receipts and the stall watchdog use it); monotonic if None.
        backend: opens the streams; :class:`SoundDeviceBackend` if None.
        on_status: called with every :class:`LocalAudioStatus` (on the event loop).
    """

    def __init__(
        self, settings: LocalAudioSettings | None = None, *, clock: Clock | None = None,
        backend: StreamBackend | None = None,
        on_status: Callable[[LocalAudioStatus], None] | None = None,
    ) -> None:
        if settings is not None and not isinstance(settings, LocalAudioSettings):
            raise TypeError(f"settings must be LocalAudioSettings, got {type(settings).__name__}")
        self.settings = settings if settings is not None else LocalAudioSettings()
        self.clock: Clock = clock if clock is not None else MonotonicClock()
        self._backend = backend
        self._on_status = on_status
        self.error: AdapterBrokenError | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._input_stream: AudioStream | None = None
        self._output_stream: AudioStream | None = None
        self._input_rate = 0
        self._output_rate = 0
        self._guard = InputGuard()
        self._input: asyncio.Queue[AudioChunk | None] = asyncio.Queue()
        self._observations: asyncio.Queue[ClientObservation | None] = asyncio.Queue()
        self._lock = threading.Lock()  # the queue is shared with the output callback
        self._playout: PlayoutQueue | None = None  # at the device rate, made on open
        self._writable = asyncio.Event()
        self._writable.set()
        self._muted = False
        self._closed = False
        self._ended = False
        self._watchdog: asyncio.Task[None] | None = None
        self._input_blocks = 0
        self._output_blocks = 0
        self._xruns = 0
        self._reopens = 0

    # -- lifetime -------------------------------------------------------------------

    async def __aenter__(self) -> LocalAudio:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def open(self) -> None:
        """Open and start both streams, and the stall watchdog.

        Raises:
            AudioBackendError: PortAudio is missing (names the package to install).
            AudioDeviceError: a device is missing or refused the settings.
            ResourceClosedError: the adapter was closed.
        """
        if self._closed:
            raise ResourceClosedError("LocalAudio is closed; create a new one per call")
        if self._watchdog is not None:
            return
        self._loop = asyncio.get_running_loop()
        if self._backend is None:
            self._backend = SoundDeviceBackend()
        self._open_streams()
        self._status("open", f"microphone at {self._input_rate} Hz, "
                             f"speakers at {self._output_rate} Hz")
        self._watchdog = asyncio.create_task(self._watch(), name="LocalAudio.watchdog")

    async def aclose(self) -> None:
        """Stop the streams and end the input and observations (idempotent)."""
        if self._closed:
            return
        self._closed = True
        if self._watchdog is not None:
            self._watchdog.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watchdog
        self._close_streams()
        self._end()

    def _open_streams(self) -> None:
        backend = self._backend
        assert backend is not None
        s = self.settings
        self._close_streams()
        try:
            self._input_stream = backend.open(
                "input", device=s.input_device, samplerate=s.input_rate, block=s.block,
                latency=s.latency, callback=self._on_input,
            )
            self._output_stream = backend.open(
                "output", device=s.output_device, samplerate=s.output_rate, block=s.block,
                latency=s.latency, callback=self._on_output,
            )
            output_rate = round(self._output_stream.samplerate)
            with self._lock:
                if self._playout is None:
                    self._playout = PlayoutQueue(clock=self.clock, rate=output_rate)
                elif output_rate != self._playout.rate:  # a reopen at another rate:
                    self._playout.convert(  # the queued audio follows
                        lambda rest: self._to_device(rest, output_rate), output_rate)
            self._input_rate = round(self._input_stream.samplerate)
            self._output_rate = output_rate
            self._input_stream.start()
            self._output_stream.start()
        except BaseException:
            self._close_streams()
            raise

    def _close_streams(self) -> None:
        for stream in (self._input_stream, self._output_stream):
            if stream is not None:
                try:
                    stream.close(ignore_errors=True)
                except Exception:  # a lost device may fail even to close
                    logger.debug("closing a stream failed", exc_info=True)
        self._input_stream = self._output_stream = None

    def _end(self) -> None:
        if self._ended:
            return
        self._ended = True
        self._writable.set()  # nobody waits for a device that is gone
        self._input.put_nowait(None)
        self._observations.put_nowait(None)

    # -- AudioTransport ---------------------------------------------------------------

    async def audio_input(self) -> AsyncIterator[AudioChunk]:
        """Microphone audio at 16 kHz mono, in order, until the call ends."""
        while True:
            chunk = await self._input.get()
            if chunk is None:
                self._input.put_nowait(None)  # a second reader also ends
                return
            yield chunk

    async def wait_writable(self) -> None:
        """Wait until less than ``lead`` seconds of reply audio is queued."""
        while not self._ended and self._queued_seconds() >= self.settings.lead:
            self._writable.clear()
            await self._writable.wait()

    def write_nowait(self, chunk: ReplyChunk) -> None:
        """Queue one reply chunk, converted to the device rate."""
        if not isinstance(chunk, ReplyChunk):
            raise TypeError(f"chunk must be a ReplyChunk, got {type(chunk).__name__}")
        if self._ended:
            raise ResourceClosedError("LocalAudio is closed: no more reply audio is played")
        playout = self._playout
        if playout is None:
            raise ResourceClosedError("LocalAudio is not open yet: use `async with LocalAudio()`")
        with self._lock:
            rate = playout.rate
        device = self._to_device(chunk, rate)
        with self._lock:
            if playout.rate == rate:
                playout.put(chunk, device)
                return
        self.write_nowait(chunk)  # the device reopened at another rate meanwhile

    def flush(self, delivery_id: DeliveryId) -> int:
        """Drop the queued audio of ``delivery_id`` now; returns its samples dropped
        (at the chunks' own rate)."""
        if self._playout is None:
            return 0
        with self._lock:
            dropped = self._playout.flush(delivery_id)
        self._writable.set()
        return dropped

    def pause(self, delivery_id: DeliveryId) -> bool:
        """Hold ``delivery_id``'s playout from the next device buffer on; its queued audio
        stays (and the floor stays held: no drain is reported while paused).

        Returns:
            False if it was already paused or was flushed.
        """
        if not isinstance(delivery_id, str):
            raise TypeError(f"delivery_id must be a DeliveryId, got {type(delivery_id).__name__}")
        if self._playout is None:
            return False
        with self._lock:
            return self._playout.pause(delivery_id)

    def resume(self, delivery_id: DeliveryId) -> bool:
        """Play on from the exact sample where ``delivery_id`` paused; False if not paused."""
        if self._playout is None:
            return False
        with self._lock:
            return self._playout.resume(delivery_id)

    async def observations(self) -> AsyncIterator[ClientObservation]:
        """Receipts, drains and mute changes, in order."""
        while True:
            item = await self._observations.get()
            if item is None:
                self._observations.put_nowait(None)
                return
            yield item

    # -- controls ---------------------------------------------------------------------

    @property
    def muted(self) -> bool:
        """Whether the microphone is muted (silence is sent instead)."""
        return self._muted

    def set_muted(self, muted: bool) -> None:
        """Mute or unmute the microphone; the session observes it as a mute change."""
        if not isinstance(muted, bool):
            raise TypeError(f"muted must be a bool, got {type(muted).__name__}")
        if muted == self._muted or self._ended:
            return
        self._muted = muted
        self._observations.put_nowait(MuteChanged(muted=muted, at=self.clock.now()))

    def statistics(self) -> LocalAudioStatistics:
        """Counters of the call so far."""
        guarded = self._guard.statistics()
        return LocalAudioStatistics(
            input_rate=self._input_rate, output_rate=self._output_rate,
            input_blocks=self._input_blocks, output_blocks=self._output_blocks,
            xruns=self._xruns, reopens=self._reopens, queued_seconds=self._queued_seconds(),
            samples_played=self._playout.samples_played if self._playout else 0,
            samples_flushed=self._playout.samples_flushed if self._playout else 0,
            input_frames_dropped=guarded.dropped, input_frames_zeroed=guarded.zeroed,
        )

    # -- device callbacks (PortAudio's thread) -----------------------------------------

    def _on_input(self, indata: NDArray[np.float32], frames: int, time_info: Any,
                  status: Any) -> None:
        self._input_blocks += 1
        if status:
            self._xruns += 1
        block = np.array(indata[:frames, 0], dtype=np.float32)
        self._post(self._take_input, block, self._input_rate)

    def _on_output(self, outdata: NDArray[np.float32], frames: int, time_info: Any,
                   status: Any) -> None:
        self._output_blocks += 1
        if status:
            self._xruns += 1
        out = outdata[:frames, 0]
        # When the first sample of this buffer reaches the speaker, on the call's clock.
        dac = getattr(time_info, "outputBufferDacTime", 0.0) or 0.0
        now = getattr(time_info, "currentTime", 0.0) or 0.0
        at = self.clock.now() + max(0.0, float(dac) - float(now))
        playout = self._playout
        if playout is None:
            out.fill(0.0)
            return
        with self._lock:
            pulled = playout.pull(frames, at=at)
        out[:] = pulled.samples
        self._post(self._report_played, pulled)

    def _post(self, handler: Callable[..., None], *args: Any) -> None:
        loop = self._loop
        if loop is None or self._ended:
            return
        with contextlib.suppress(RuntimeError):  # the loop closed under a late callback
            loop.call_soon_threadsafe(handler, *args)

    # -- on the event loop -------------------------------------------------------------

    def _take_input(self, block: NDArray[np.float32], rate: int) -> None:
        if self._ended or not rate:
            return
        chunk = self._guard.convert(block, rate, muted=self._muted)  # validated, counted
        if chunk is not None and chunk.num_samples:
            self._input.put_nowait(chunk)

    def _report_played(self, pulled: Pulled) -> None:
        if self._ended:
            return
        for receipt in pulled.receipts:
            self._observations.put_nowait(receipt)
        if pulled.drained is not None:
            self._observations.put_nowait(pulled.drained)
        if self._queued_seconds() < self.settings.lead:
            self._writable.set()

    # -- stalls and lost devices -------------------------------------------------------

    async def _watch(self) -> None:
        """Reopen the streams when either stops calling back (a stall, a lost device)."""
        seen = (self._input_blocks, self._output_blocks)
        while not self._ended:
            await self.clock.sleep(self.settings.stall_timeout)
            now = (self._input_blocks, self._output_blocks)
            dead = [kind for kind, before, after in zip(("input", "output"), seen, now,
                                                        strict=True) if after == before]
            streams = (self._input_stream, self._output_stream)
            if any(stream is not None and not stream.active for stream in streams):
                dead = dead or ["stream"]
            if dead:
                await self._recover(" and ".join(dead))
            seen = (self._input_blocks, self._output_blocks)

    async def _recover(self, what: str) -> None:
        s = self.settings
        self._status("stalled", f"the {what} stopped for {s.stall_timeout:g} s "
                                "(device unplugged or stalled): reopening")
        backend = self._backend
        assert backend is not None
        last: Exception | None = None
        for attempt in range(1, s.reopen_attempts + 1):
            try:
                self._close_streams()
                backend.refresh()
                self._open_streams()
            except (AudioDeviceError, AudioBackendError, OSError) as exc:
                last = exc
                self._status("reopen_failed", f"reopen {attempt}/{s.reopen_attempts} failed: "
                                              f"{exc}")
                await self.clock.sleep(s.reopen_backoff * attempt)
                continue
            self._reopens += 1
            self._status("reopened", f"audio devices reopened (try {attempt})")
            return
        error = AdapterBrokenError(
            f"the audio devices stopped ({what}) and could not be reopened after "
            f"{s.reopen_attempts} tries; the conversation is kept: start a new voice session"
        )
        error.__cause__ = last
        self.error = error
        self._status("broken", str(error))
        self._close_streams()
        self._end()

    # -- helpers ----------------------------------------------------------------------

    def _status(self, state: Literal["open", "stalled", "reopened", "reopen_failed", "broken"],
                message: str) -> None:
        if state in ("open", "reopened"):
            logger.info("local audio %s", state, extra={"detail": message})
        else:
            logger.warning("local audio %s", state, extra={"detail": message})
        if self._on_status is not None:
            try:
                self._on_status(LocalAudioStatus(state, message, self.clock.now()))
            except Exception:  # a broken observer must not break the call
                logger.exception("status callback failed")

    def _queued_seconds(self) -> float:
        return self._playout.queued_seconds if self._playout is not None else 0.0

    @staticmethod
    def _to_device(chunk: ReplyChunk, rate: int) -> NDArray[np.float32]:
        samples = chunk.samples()
        if chunk.sample_rate == rate:
            return samples
        # Each chunk is resampled whole, so its device samples map back to its own
        # samples exactly (receipts) and nothing is held back in a resampler's tail.
        return resample(samples, chunk.sample_rate, rate)

    def __repr__(self) -> str:
        s = self.statistics()
        return (f"LocalAudio(in={s.input_rate} Hz, out={s.output_rate} Hz, "
                f"queued={s.queued_seconds:.2f}s, muted={self._muted}, reopens={s.reopens})")
