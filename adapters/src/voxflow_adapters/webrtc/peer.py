"""One browser call: an aiortc ``RTCPeerConnection`` that implements ``AudioTransport``
(and ``PausableTransport``, so a barge-in holds the reply at once while it is confirmed).

:class:`WebRtcPeer` answers the page's offer and then moves audio both ways:

* *in*: the page's microphone track (Opus, negotiated as 48 kHz stereo) goes through the
  receive path of :mod:`~voxflow_adapters.webrtc.receive` (each packet decoded as it
  arrives, on the event loop, straight to 16 kHz mono by
  :class:`~voxflow_adapters.webrtc.opus.MonoOpusDecoder`: 320 samples a 20 ms packet; a
  gap holds at most ``receive_hold`` packets), is checked by the input guard and yielded
  by :meth:`WebRtcPeer.audio_input`; while the page is muted, silence is yielded instead;
* *out*: :class:`~voxflow_adapters.webrtc.outbound.ReplyTrack` sends 20 ms frames from
  the reply queue (encoded to Opus on the loop when the call negotiated Opus); receipts
  come from what was actually sent;
* *data channel* ``voxflow``: session facts go to the page
  (:mod:`~voxflow_adapters.webrtc.protocol`); page messages (mute, playback, hang-up)
  are validated, and a bad one is rejected with a logged reason.

A watchdog ends the call (with a ``bye`` message and a logged reason) when ICE/DTLS does
not connect in time, when the peer sends no audio for ``media_timeout`` seconds, when
nothing at all arrives from it (RTP, RTCP, DTLS/SCTP: the DTLS transport's packet
counter) for ``peer_timeout`` seconds (a vanished peer), when the connection or ICE
fails, or at the call length limit. The ``bye`` is the last message (or, for a call
handed over to another worker, the ``handover``: :meth:`WebRtcPeer.hand_over`), and it
is given ``bye_grace`` to leave before the connection closes (closing aborts the SCTP
association and drops what is still queued). Ending the call ends
:meth:`audio_input`, so the ``VoiceSession`` on top cuts what it was saying, settles
every delivery and returns.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections import deque
from collections.abc import AsyncIterator, Coroutine
from typing import Any

from aiortc import RTCConfiguration, RTCIceServer, RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import MediaStreamError
from aiortc.stats import RTCTransportStats
from pydantic import BaseModel, ConfigDict, Field, field_validator
from voxflow_voice.audio import AudioChunk, ReplyChunk
from voxflow_voice.transport import ClientObservation, MuteChanged

from voxflow.clock import Clock, MonotonicClock
from voxflow.ids import DeliveryId

from ..hosting.errors import SignalingError
from ._ice import gather_timeout, host_addresses, validate_addresses
from ._ice_url import check_ice_url
from ._libopus import OpusLibraryError
from .outbound import OutboundAudio, OutboundStatistics, ReplyTrack
from .protocol import (
    ByeMessage,
    ErrorMessage,
    HandoverMessage,
    HangupMessage,
    MuteMessage,
    PlaybackMessage,
    ProtocolError,
    ServerMessage,
    parse_page_message,
)
from .receive import MAX_RECEIVE_HOLD, InboundAudio
from .rtp_send import AiortcChanged, SendPath, install_send_path

__all__ = [
    "DEFAULT_ICE_GATHER_TIMEOUT", "DEFAULT_PEER_SETTINGS", "DEFAULT_RECEIVE_HOLD", "IceServer",
    "PeerSettings", "PeerStatistics", "WebRtcPeer",
]

logger = logging.getLogger(__name__)

DATA_CHANNEL_LABEL = "voxflow"
_MAX_REJECTED = 50  # malformed page messages tolerated before the call is ended
_call_numbers = itertools.count(1)
DEFAULT_RECEIVE_HOLD = 3
"""Packets a gap may hold by default (60 ms, only after a loss or reordering)."""
DEFAULT_ICE_GATHER_TIMEOUT = 2.0
"""Seconds the answer waits for STUN/TURN candidates by default: a STUN answer lost once
is retransmitted after 0.5 s, and a TURN allocation takes two round trips."""


class IceServer(BaseModel):
    """A STUN/TURN server (none are used unless configured: no public STUN by default)."""

    # (a refused URL may hold a credential: errors never show the input)
    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True)

    urls: tuple[str, ...] = Field(min_length=1, description="stun:/turn: URLs that aiortc "
                                  "parses and uses (check_ice_url)")
    username: str | None = None
    credential: str | None = Field(None, repr=False)  # a TURN password: never in a repr

    @field_validator("urls")
    @classmethod
    def _check_urls(cls, urls: tuple[str, ...]) -> tuple[str, ...]:
        for url in urls:
            check_ice_url(url)
        return urls


class PeerSettings(BaseModel):
    """Limits and network options of one call."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    ice_servers: tuple[IceServer, ...] = Field(
        (), description="STUN/TURN servers; empty: host candidates only, no public STUN"
    )
    ice_host_addresses: tuple[str, ...] | None = Field(
        None, description="local IPs offered as host candidates; None: every non-loopback "
        "interface (aioice's default). ('127.0.0.1',) for same-machine calls without a network",
    )
    ice_gather_timeout: float = Field(
        DEFAULT_ICE_GATHER_TIMEOUT, gt=0, le=30, description="how long (s) the answer waits "
        "for the STUN/TURN servers' candidates (the host candidates are there at once): a "
        "server that never answers delays every call by this much, not aioice's 5 s",
    )
    connect_timeout: float = Field(
        15.0, gt=0, le=300, description="ICE+DTLS must connect within (s)"
    )
    media_timeout: float = Field(20.0, gt=0, le=3600, description="end the call after this "
                                 "much (s) without audio from the peer")
    peer_timeout: float = Field(
        4.0, gt=0, le=300, description="end the call when nothing at all (RTP, RTCP, "
        "DTLS/SCTP) has arrived from the peer for this long (s): the peer vanished (a "
        "killed browser or process, a dropped network), well before the ICE consent expiry "
        "(~30 s)",
    )
    bye_grace: float = Field(1.0, ge=0, le=30, description="how long (s) the last messages "
                             "(the bye) may take to leave before the connection is closed")
    max_call_seconds: float = Field(1800.0, gt=0, le=86_400, description="longest call (s)")
    lead: float = Field(0.3, gt=0, le=10, description="reply audio (s) queued ahead of the wire")
    receive_hold: int | None = Field(
        DEFAULT_RECEIVE_HOLD, ge=0, le=MAX_RECEIVE_HOLD, description="inbound RTP packets "
        "a gap (a lost or overtaken packet) may hold before it is skipped; packets in order "
        "are decoded at once. None: aiortc's own jitter buffer (80 ms on every packet)",
    )

    @field_validator("ice_host_addresses")
    @classmethod
    def _check_addresses(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        return None if value is None else validate_addresses(value)


DEFAULT_PEER_SETTINGS = PeerSettings()


class PeerStatistics(BaseModel):
    """What one call moved (for tests, benchmarks and logs)."""

    model_config = ConfigDict(frozen=True)

    call_id: str
    connection_state: str
    frames_in: int
    frames_dropped: int = Field(0, description="inbound frames refused (dtype, rate, shape)")
    frames_zeroed: int = Field(0, description="inbound frames with NaN/inf, passed as silence")
    packets_late: int = Field(0, description="inbound RTP packets dropped: older than one "
                              "already decoded (late or duplicated)")
    packets_skipped: int = Field(0, description="inbound RTP sequence numbers given up on "
                                 "(lost, or later than receive_hold allowed)")
    receive_ms: float | None = Field(None, description="median inbound delay (ms): RTP "
                                     "packet arrival → its audio handed to the session")
    outbound: OutboundStatistics = Field(description="the reply track's counters")
    page_messages: int
    rejected_messages: int
    muted: bool
    page_playing: bool | None
    close_reason: str | None


class WebRtcPeer:
    """The server side of one browser call (an :class:`AudioTransport`).

    Args:
        settings: limits, timeouts and ICE options.
        clock: the session clock (receipt and observation times).
        call_id: a name for logs; generated if omitted.
    """

    def __init__(
        self, *, settings: PeerSettings = DEFAULT_PEER_SETTINGS, clock: Clock | None = None,
        call_id: str | None = None,
    ) -> None:
        if not isinstance(settings, PeerSettings):
            raise TypeError(f"settings must be PeerSettings, got {type(settings).__name__}")
        self.settings = settings
        self.clock: Clock = clock if clock is not None else MonotonicClock()
        self.call_id = call_id or f"call-{next(_call_numbers)}"
        self._observations: asyncio.Queue[ClientObservation | None] = asyncio.Queue()
        self.outbound = OutboundAudio(clock=self.clock, on_observation=self._observe,
                                      lead=settings.lead)
        self.track = ReplyTrack(self.outbound)
        self.send_path: SendPath | None = None
        """The reply audio's RTP loop once the call sends Opus (None: aiortc's own)."""
        self._pc: Any = None
        self._channel: Any = None
        self._pending: deque[str] = deque(maxlen=256)  # messages before the channel opened
        self._tasks: set[asyncio.Task[Any]] = set()
        self._connected = asyncio.Event()
        self.closed = asyncio.Event()
        """Set once the call has ended (for whatever reason)."""
        self.close_reason: str | None = None
        self._closing: asyncio.Task[None] | None = None
        self._said_bye = False
        self._page_playing: bool | None = None
        self._page_messages = 0
        self._rejected = 0
        self.inbound = InboundAudio()
        """The caller's audio on its way to :meth:`audio_input` (and its timings)."""
        self.input_ended = self.inbound.ended
        self.receive_timings = self.inbound.timings  # (for latency figures)
        self.inbound_delays = self.inbound.delays

    # -- signaling ------------------------------------------------------------------

    async def accept(self, offer_sdp: str) -> str:
        """Answer the page's offer; returns the answer SDP (with all candidates).

        Raises:
            TypeError: ``offer_sdp`` is not a string.
            SignalingError: the offer is not a valid SDP offer with an audio track.
        """
        if not isinstance(offer_sdp, str):
            raise TypeError(f"offer_sdp must be a str, got {type(offer_sdp).__name__}")
        if self._pc is not None:
            raise RuntimeError("accept() was already called; one offer per peer")
        if "m=audio" not in offer_sdp:
            raise SignalingError("the offer has no audio track (m=audio)")
        servers = [RTCIceServer(urls=list(s.urls), username=s.username, credential=s.credential)
                   for s in self.settings.ice_servers]
        # iceServers=[] explicitly: aiortc adds a public STUN server when given None.
        pc = RTCPeerConnection(RTCConfiguration(iceServers=servers))
        self._pc = pc
        pc.on("track", self._on_track)
        pc.on("datachannel", self._on_datachannel)
        pc.on("connectionstatechange", self._on_connection_state)
        pc.on("iceconnectionstatechange", self._on_ice_state)
        try:
            await pc.setRemoteDescription(RTCSessionDescription(sdp=offer_sdp, type="offer"))
            for transceiver in pc.getTransceivers():
                if transceiver.kind == "audio":
                    self.inbound.install(transceiver.receiver, hold=self.settings.receive_hold)
            sender = pc.addTrack(self.track)
            answer = await pc.createAnswer()
            with host_addresses(self.settings.ice_host_addresses), \
                    gather_timeout(self.settings.ice_gather_timeout):
                await pc.setLocalDescription(answer)
            for transceiver in pc.getTransceivers():
                # the codec the sender will use (aiortc sends with the first negotiated)
                if transceiver.sender is sender and transceiver._codecs \
                        and transceiver._codecs[0].mimeType.lower() == "audio/opus":
                    self.track.encode_here()
                    self.send_path = install_send_path(
                        sender, self.track, on_failure=self._send_path_failed,
                        codecs=transceiver._codecs)
        except Exception as exc:
            await self.aclose(f"signaling failed: {type(exc).__name__}")
            if isinstance(exc, OpusLibraryError | AiortcChanged):
                raise  # (not the offer's fault)
            raise SignalingError(f"the offer was refused: {exc}") from exc
        self._spawn(self._watch(), "watch")
        return str(pc.localDescription.sdp)

    # -- AudioTransport -------------------------------------------------------------

    async def audio_input(self) -> AsyncIterator[AudioChunk]:
        """16 kHz mono microphone audio until the call ends (a backlog joined into one
        chunk: :meth:`InboundAudio.chunks`)."""
        async for chunk in self.inbound.chunks():
            yield chunk

    async def wait_writable(self) -> None:
        """Wait until the outbound queue has room."""
        await self.outbound.wait_writable()

    def write_nowait(self, chunk: ReplyChunk) -> None:
        """Queue one reply chunk for the outbound track."""
        self.outbound.write_nowait(chunk)

    def flush(self, delivery_id: DeliveryId) -> int:
        """Drop the queued audio of ``delivery_id`` now."""
        return self.outbound.flush(delivery_id)

    def pause(self, delivery_id: DeliveryId) -> bool:
        """Hold ``delivery_id``'s audio from the next frame on (``PausableTransport``)."""
        return self.outbound.pause(delivery_id)

    def resume(self, delivery_id: DeliveryId) -> bool:
        """Send on from the sample where ``delivery_id`` paused."""
        return self.outbound.resume(delivery_id)

    async def observations(self) -> AsyncIterator[ClientObservation]:
        """Receipts (from the outbound track), drains and mute changes, in order."""
        while (item := await self._observations.get()) is not None:
            yield item

    def _observe(self, observation: ClientObservation) -> None:
        if not self.closed.is_set():
            self._observations.put_nowait(observation)

    # -- the page -------------------------------------------------------------------

    def send(self, message: ServerMessage) -> None:
        """Send one message to the page (queued until the data channel is open); nothing
        follows the ``bye`` (or the ``handover``)."""
        if self._said_bye:
            return
        self._said_bye = isinstance(message, ByeMessage | HandoverMessage)
        text = message.model_dump_json()
        channel = self._channel
        if channel is not None and channel.readyState == "open":
            # Past "connected" the transport is going away: aiortc would fail the send in a
            # background task nobody awaits, so the message is dropped here instead.
            if self.connection_state == "connected":
                channel.send(text)
        elif not self.closed.is_set():
            self._pending.append(text)

    def _on_datachannel(self, channel: Any) -> None:
        if channel.label != DATA_CHANNEL_LABEL or self._channel is not None:
            logger.warning("unexpected data channel refused",
                           extra={"call_id": self.call_id, "label": channel.label})
            channel.close()
            return
        self._channel = channel
        channel.on("message", self._on_page_message)
        while self._pending and channel.readyState == "open":
            channel.send(self._pending.popleft())

    def _on_page_message(self, raw: Any) -> None:
        self._page_messages += 1
        try:
            message = parse_page_message(raw)
        except ProtocolError as exc:
            self._rejected += 1
            logger.warning("page message rejected: %s", exc.reason)  # call_id: bound by serve
            self.send(ErrorMessage(reason=exc.reason))
            if self._rejected >= _MAX_REJECTED:
                self.close_soon("too many malformed data-channel messages")
            return
        if isinstance(message, MuteMessage):
            if message.muted != self.inbound.muted:
                self.inbound.muted = message.muted
                self._observe(MuteChanged(muted=message.muted, at=self.clock.now()))
        elif isinstance(message, PlaybackMessage):
            self._page_playing = message.playing
        elif isinstance(message, HangupMessage):
            self.close_soon("the page hung up")

    # -- media ----------------------------------------------------------------------

    def _on_track(self, track: Any) -> None:
        if track.kind == "audio" and self.inbound.frames_in == 0 and not self._has_reader():
            self._spawn(self._read_audio(track), "inbound")

    def _has_reader(self) -> bool:
        return any(t.get_name().endswith(".inbound") for t in self._tasks)

    async def _read_audio(self, track: Any) -> None:
        """Wait for the inbound track to end (its frames come to ``inbound.take_frame``
        from the receive path, decoded on the loop; only with aiortc's own buffer,
        ``receive_hold=None``, do they come through the track)."""
        try:
            while True:
                try:
                    frame = await track.recv()
                except MediaStreamError:
                    break
                self.inbound.take_frame(frame)
        finally:
            self.inbound.end()
        self.close_soon("the peer's audio track ended")

    # -- supervision ----------------------------------------------------------------

    def _on_connection_state(self) -> None:
        state = self._pc.connectionState if self._pc is not None else "closed"
        logger.debug("connection state %s", state, extra={"call_id": self.call_id})
        if state == "connected":
            self._connected.set()
        elif state == "failed":
            self.close_soon("ICE/DTLS connection failed")
        elif state == "closed":
            self.close_soon("the connection was closed")

    def _on_ice_state(self) -> None:
        state = self._pc.iceConnectionState if self._pc is not None else "closed"
        if state in ("failed", "closed"):
            self.close_soon(f"ICE {state}: the peer is unreachable")

    async def _packets_received(self) -> int:
        """Datagrams received on the call's DTLS transport(s): RTP, RTCP and DTLS (SCTP)."""
        report = await self._pc.getStats()
        return sum(s.packetsReceived for s in report.values()
                   if isinstance(s, RTCTransportStats))

    async def _watch(self) -> None:
        loop = asyncio.get_running_loop()
        settings = self.settings
        started = loop.time()
        try:
            async with asyncio.timeout(settings.connect_timeout):
                await self._connected.wait()
        except TimeoutError:
            self.close_soon(f"ICE/DTLS did not connect within {settings.connect_timeout:g} s")
            return
        connected = loop.time()
        tick = min(0.5, settings.media_timeout / 4, settings.peer_timeout / 4)
        received = await self._packets_received()
        heard = woke = loop.time()
        while not self.closed.is_set():
            await asyncio.sleep(tick)
            now = loop.time()
            if now - started >= settings.max_call_seconds:
                self.close_soon(f"the call reached its {settings.max_call_seconds:g} s limit")
                return
            last = self.inbound.last_media
            last = last if last is not None else connected
            if now - last >= settings.media_timeout:
                self.close_soon(f"no audio from the peer for {settings.media_timeout:g} s")
                return
            count = await self._packets_received()
            # A stalled event loop (a busy machine) leaves datagrams unread in the socket:
            # silence is only counted across ticks that woke on time.
            if count != received or now - woke > tick + 1.0:
                received, heard = count, now
            woke = now
            if now - heard >= settings.peer_timeout:
                self.close_soon(f"the peer vanished: nothing received for "
                                f"{settings.peer_timeout:g} s")
                return

    def _send_path_failed(self, exc: BaseException) -> None:
        self.close_soon(f"the reply audio's send path failed: {type(exc).__name__}: {exc}")

    def close_soon(self, reason: str) -> None:
        """End the call in the background (safe from event handlers and our own tasks).

        The first reason given is the one reported; later calls change nothing."""
        self._close_soon(reason, ByeMessage(reason=reason))

    def hand_over(self, reason: str) -> bool:
        """End the call here with a ``handover`` message instead of a ``bye``: the page
        resumes its session at once on another worker (``reason``: why it moves). As
        :meth:`close_soon` otherwise; False (nothing done) when the call is already
        ending."""
        return self._close_soon(f"handed over to another worker: {reason}",
                                HandoverMessage(reason=reason))

    def _close_soon(self, reason: str, last: ByeMessage | HandoverMessage) -> bool:
        if self._closing is not None:
            return False
        self._closing = asyncio.get_running_loop().create_task(
            self._close(reason, last), name=f"{self.call_id}.close"
        )
        return True

    async def aclose(self, reason: str = "closed by the server") -> None:
        """End the call and wait until it is closed (idempotent): bye to the page, input
        and observations end, the peer connection closes, every task of ours is awaited."""
        self.close_soon(reason)
        assert self._closing is not None
        if self._closing is not asyncio.current_task():
            await asyncio.shield(self._closing)

    async def _close(self, reason: str, last: ByeMessage | HandoverMessage) -> None:
        self.close_reason = reason
        # A hang-up or a closed tab is the normal end, a handover too; timeouts and
        # failures are warnings.
        quiet = reason.startswith(("the page", "closed by", "the session ended",
                                   "the peer's audio track ended", "the connection was closed",
                                   "handed over"))
        # (the server logs the INFO line of a call's end, with its figures)
        logger.log(logging.DEBUG if quiet else logging.WARNING, "call ended: %s", reason,
                   extra={"call_id": self.call_id})
        self.send(last)
        await self._drain_channel()
        self.closed.set()
        self.inbound.end()
        self._observations.put_nowait(None)
        self.track.stop()
        tasks = [t for t in self._tasks if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._pc is not None:
            await self._pc.close()

    async def _drain_channel(self) -> None:
        """Give the queued messages (the bye last) up to ``bye_grace`` to leave: closing the
        connection aborts the SCTP association and drops whatever is still queued."""
        channel = self._channel
        if channel is None or channel.readyState != "open" or self.connection_state != "connected":
            return
        if channel.bufferedAmount == 0:
            return
        drained = asyncio.Event()
        channel.on("bufferedamountlow", drained.set)  # fired when it falls to 0
        try:
            async with asyncio.timeout(self.settings.bye_grace):
                await drained.wait()
        except TimeoutError:
            logger.info("the bye may not have left within %g s", self.settings.bye_grace,
                        extra={"call_id": self.call_id})
        finally:
            channel.remove_listener("bufferedamountlow", drained.set)

    async def wait_closed(self) -> None:
        """Wait until the call has ended and its peer connection is closed."""
        await self.closed.wait()
        if self._closing is not None:
            await asyncio.shield(self._closing)

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        task = asyncio.get_running_loop().create_task(coro, name=f"{self.call_id}.{name}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- introspection --------------------------------------------------------------

    @property
    def connection_state(self) -> str:
        """aiortc's ``connectionState`` (``new`` before :meth:`accept`)."""
        return str(self._pc.connectionState) if self._pc is not None else "new"

    def receive_delay_ms(self, recent: int = 250) -> float | None:
        """:meth:`InboundAudio.delay_ms`: RTP arrival → audio handed to the session."""
        return self.inbound.delay_ms(recent)

    def statistics(self) -> PeerStatistics:
        """Counters of this call."""
        outbound: OutboundStatistics = self.outbound.statistics()
        inbound = self.inbound
        guarded = inbound.guard.statistics()
        return PeerStatistics(
            call_id=self.call_id, connection_state=self.connection_state,
            frames_in=inbound.frames_in, frames_dropped=guarded.dropped,
            frames_zeroed=guarded.zeroed,
            packets_late=sum(w.late for w in inbound.windows if w is not None),
            packets_skipped=sum(w.skipped for w in inbound.windows if w is not None),
            receive_ms=self.receive_delay_ms(), outbound=outbound,
            page_messages=self._page_messages,
            rejected_messages=self._rejected, muted=inbound.muted,
            page_playing=self._page_playing, close_reason=self.close_reason,
        )

    def __repr__(self) -> str:
        return (f"WebRtcPeer({self.call_id!r}, state={self.connection_state}, "
                f"frames_in={self.inbound.frames_in}, muted={self.inbound.muted}, "
                f"{self.outbound!r})")
