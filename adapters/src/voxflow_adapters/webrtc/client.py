"""A scripted aiortc caller for ``voxflow serve``: what tests and the load benchmark dial.

:class:`LoopbackCaller` does what the page does, without a browser: it creates the
``voxflow`` data channel and a microphone track, posts the offer with the token, and
then speaks whatever audio it is given (paced at 20 ms, silence in between), records
every frame of assistant audio it receives (its level and arrival time) and every
data-channel message.

It resumes like the page: it keeps the session id and resume token of the ``hello``
message, and :meth:`LoopbackCaller.reconnect` (or, with :meth:`LoopbackCaller.
keep_connected`, automatically once nothing arrived from the server for
``peer_timeout`` seconds, or at once when the server hands the call over: a
``handover`` message) offers again with them, retrying with backoff while the server is
down or the session's old lease is still held; each reconnection's timing is kept in
:attr:`LoopbackCaller.reconnects` (detection, reconnect).
"""

from __future__ import annotations

import asyncio
import contextlib
import fractions
import json
import os
import ssl as ssl_module
import sys
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp
import av
import numpy as np
from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack
from numpy.typing import NDArray
from voxflow_voice.audio import AudioChunk, float_to_pcm16, read_wav, resample

from ..hosting.errors import SignalingError
from ._ice import host_addresses
from .outbound import FRAME_SAMPLES, FRAME_SECONDS, OPUS_SAMPLE_RATE
from .peer import DEFAULT_RECEIVE_HOLD
from .receive import ReceiveTimings, ReorderWindow, install_receive_path

__all__ = ["CALLER_TOKEN_ENV", "LoopbackCaller", "OfferRejected", "ReceivedFrame",
           "Reconnection"]

CALLER_TOKEN_ENV = "VOXFLOW_CALLER_TOKEN"
"""Where ``python -m voxflow_adapters.webrtc.client`` reads the server's token (not argv,
which every user of the machine can read)."""

AUDIBLE = 0.01
"""Peak level above which a received frame counts as assistant audio (Opus silence
decodes to near-zero samples)."""


class OfferRejected(SignalingError):
    """The server refused the offer; ``status`` is the HTTP status, ``reason`` its text."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(f"{status}: {reason}")
        self.status = status
        self.reason = reason


@dataclass(frozen=True, slots=True)
class ReceivedFrame:
    """One frame of assistant audio as the caller received it.

    Attributes:
        at: ``time.monotonic()`` on arrival.
        peak: the largest absolute sample, in [0, 1].
        samples: samples per channel.
        pts: the frame's RTP time (48 kHz samples from the stream's first packet): frame
            ``pts // 960`` is the server's outbound frame of that index.
    """

    at: float
    peak: float
    samples: int
    pts: int | None = None

    @property
    def audible(self) -> bool:
        """Whether the frame carries assistant audio."""
        return self.peak > AUDIBLE


@dataclass(frozen=True, slots=True)
class Reconnection:
    """One reconnection of a caller (``time.monotonic()`` instants).

    Attributes:
        last_heard: the last frame or message from the old connection.
        detected: when the caller decided the connection was gone.
        connected: when the new connection's data channel opened (its offer answered).
        attempts: offers made (the refused ones included).
        handover: the server handed the call over (a ``handover`` message), rather than
            the caller noticing a silence.
    """

    last_heard: float
    detected: float
    connected: float
    attempts: int
    handover: bool = False

    @property
    def detection_seconds(self) -> float:
        """From the last thing heard to the decision to reconnect."""
        return self.detected - self.last_heard

    @property
    def reconnect_seconds(self) -> float:
        """From the decision to the new connection's open data channel."""
        return self.connected - self.detected


_RETRY_STATUSES = (409, 502, 503, 504)  # the session's old lease, a server not up yet


class _MicTrack(MediaStreamTrack):
    """The caller's microphone: queued speech at 48 kHz, silence otherwise, every 20 ms."""

    kind = "audio"

    def __init__(self) -> None:
        super().__init__()
        self._pending: deque[NDArray[np.float32]] = deque()
        self._index = 0
        self._start: float | None = None
        self.sent_at: list[float] = []
        """When each frame (by index) was handed to the encoder (``time.monotonic()``)."""

    def feed(self, samples: NDArray[np.float32]) -> int:
        """Queue ``samples`` (48 kHz); returns the index of the frame they start in."""
        first = self._index + len(self._pending)
        for begin in range(0, samples.size, FRAME_SAMPLES):
            frame = samples[begin : begin + FRAME_SAMPLES]
            if frame.size < FRAME_SAMPLES:
                frame = np.pad(frame, (0, FRAME_SAMPLES - frame.size))
            self._pending.append(frame)
        return first

    @property
    def speaking(self) -> bool:
        return bool(self._pending)

    async def recv(self) -> Any:
        if self.readyState != "live":
            raise MediaStreamError
        now = time.monotonic()
        if self._start is None:
            self._start = now
        deadline = self._start + self._index * FRAME_SECONDS
        if deadline > now:
            await asyncio.sleep(deadline - now)
        frame_samples = self._pending.popleft() if self._pending else None
        pcm = float_to_pcm16(frame_samples) if frame_samples is not None \
            else bytes(2 * FRAME_SAMPLES)
        frame = av.AudioFrame(format="s16", layout="mono", samples=FRAME_SAMPLES)
        frame.planes[0].update(pcm)
        frame.sample_rate = OPUS_SAMPLE_RATE
        frame.pts = self._index * FRAME_SAMPLES
        frame.time_base = fractions.Fraction(1, OPUS_SAMPLE_RATE)
        self._index += 1
        self.sent_at.append(time.monotonic())
        return frame


class LoopbackCaller:
    """An aiortc peer that calls a :class:`~voxflow_adapters.webrtc.WebRtcServer`.

    Args:
        base_url: ``http://host:port``.
        token: the server's token (sent as ``Authorization: Bearer``).
        origin: an ``Origin`` header to send (None: none, as a non-browser client).
        send_audio: offer a microphone track (False: receive only, a silent peer).
        ice_host_addresses: local addresses for host candidates (loopback by default).
        ssl: for ``https://``: the TLS context that verifies the server (None: the
            system's trusted certificates).
        receive_hold: the receive path of the assistant's audio, as the server's
            (:class:`~voxflow_adapters.webrtc.PeerSettings` ``receive_hold``; None:
            aiortc's own jitter buffer, 80 ms).
    """

    def __init__(
        self, base_url: str, token: str, *, origin: str | None = None, send_audio: bool = True,
        ice_host_addresses: Sequence[str] | None = ("127.0.0.1",),
        ssl: ssl_module.SSLContext | None = None, receive_hold: int | None = DEFAULT_RECEIVE_HOLD,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.origin = origin
        self.send_audio = send_audio
        self.ice_host_addresses = ice_host_addresses
        self.ssl = ssl
        self.receive_hold = receive_hold
        self.receive_timings = ReceiveTimings()
        """Arrival time of each packet of the assistant's audio."""
        self.receive_windows: list[ReorderWindow] = []
        """The receive path's reorder window (none with aiortc's jitter buffer)."""
        self.answer_sdp: str | None = None
        """The server's answer (its ICE candidates), once connected."""
        self.mic = _MicTrack()
        self.frames: list[ReceivedFrame] = []
        self.messages: list[dict[str, Any]] = []
        self.call_id: str | None = None
        self._pc: Any = None
        self._channel: Any = None
        self._tasks: list[asyncio.Task[None]] = []
        self._changed = asyncio.Event()
        self.session_id: str | None = None
        """The call's session (from the ``hello`` message), for resuming."""
        self._resume_token: str | None = None  # never printed, never logged
        self.connections = 0
        self.reconnects: list[Reconnection] = []
        self.last_heard = time.monotonic()
        self._watch: asyncio.Task[None] | None = None
        self._handed_over = asyncio.Event()  # a handover came on the current connection

    async def connect(
        self, *, transform_offer: Callable[[str], str] | None = None, resume: bool = False,
        resume_as: tuple[str, str] | None = None,
    ) -> None:
        """Offer, post, apply the answer; returns once the data channel is open.

        Args:
            transform_offer: changes the offer SDP before it is posted (tests).
            resume: go on with this caller's session (its ``hello``'s id and token).
            resume_as: ``(session_id, token)`` to send instead (tests of refusals).

        Raises:
            OfferRejected: the server answered with an error status.
            RuntimeError: ``resume`` before any ``hello`` gave a session and token.
        """
        body_resume: dict[str, Any] | None = None
        if resume_as is not None:
            body_resume = {"v": 1, "session_id": resume_as[0], "token": resume_as[1]}
        elif resume:
            if self.session_id is None or self._resume_token is None:
                raise RuntimeError("nothing to resume: no hello with a resume token yet")
            body_resume = {"v": 1, "session_id": self.session_id, "token": self._resume_token}
        if self.mic.readyState != "live":  # a new connection: a new microphone, with the
            pending, self.mic = self.mic._pending, _MicTrack()  # speech not yet sent
            self.mic._pending = pending
        pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        self._pc = pc
        channel = pc.createDataChannel("voxflow")
        self._channel = channel
        opened = asyncio.Event()
        channel.on("open", opened.set)
        channel.on("message", self._on_message)
        if self.send_audio:
            pc.addTrack(self.mic)
        else:
            pc.addTransceiver("audio", direction="recvonly")
        pc.on("track", self._on_track)
        for transceiver in pc.getTransceivers():
            if transceiver.kind == "audio":
                window = install_receive_path(transceiver.receiver, hold=self.receive_hold,
                                              timings=self.receive_timings)
                if window is not None:
                    self.receive_windows.append(window)
        offer = await pc.createOffer()
        with host_addresses(self.ice_host_addresses):
            await pc.setLocalDescription(offer)
        sdp = pc.localDescription.sdp
        if transform_offer is not None:
            sdp = transform_offer(sdp)
        headers = {"Authorization": f"Bearer {self.token}"}
        if self.origin is not None:
            headers["Origin"] = self.origin
        offer_body: dict[str, Any] = {"type": "offer", "sdp": sdp}
        if body_resume is not None:
            offer_body["resume"] = body_resume
        try:
            async with aiohttp.ClientSession() as http, http.post(
                f"{self.base_url}/offer", json=offer_body, headers=headers,
                ssl=self.ssl if self.ssl is not None else True,
            ) as response:
                body = await response.json(content_type=None)
                if response.status != 200:
                    raise OfferRejected(response.status, str(body.get("error", body)))
        except BaseException:
            await pc.close()
            raise
        self.call_id = body["call_id"]
        self.answer_sdp = body["sdp"]
        self.connections += 1
        await pc.setRemoteDescription(RTCSessionDescription(sdp=body["sdp"], type="answer"))
        await opened.wait()
        self.last_heard = time.monotonic()

    async def reconnect(
        self, *, backoff: Sequence[float] = (0.1, 0.25, 0.5, 1.0, 2.0), within: float = 60.0,
        last_heard: float | None = None, handover: bool = False,
    ) -> Reconnection:
        """Drop the current connection and resume the session in a new one, retrying
        (with ``backoff`` delays, the last one repeated) while the server is unreachable
        or answers 409/5xx, for up to ``within`` seconds (``handover``: the server asked
        for it, recorded in the :class:`Reconnection`).

        Raises:
            OfferRejected: refused for good (e.g. 403: the token is not the session's),
                or still refused after ``within`` seconds.
        """
        detected = time.monotonic()
        heard = last_heard if last_heard is not None else self.last_heard
        self._handed_over.clear()
        await self._drop_connection()
        attempts, deadline = 0, detected + within
        while True:
            attempts += 1
            try:
                await self.connect(resume=True)
                break
            except OfferRejected as exc:
                if exc.status not in _RETRY_STATUSES or time.monotonic() >= deadline:
                    raise
            except (aiohttp.ClientError, OSError):
                if time.monotonic() >= deadline:
                    raise OfferRejected(0, "the server did not answer") from None
            await asyncio.sleep(backoff[min(attempts - 1, len(backoff) - 1)])
        done = Reconnection(last_heard=heard, detected=detected, connected=time.monotonic(),
                            attempts=attempts, handover=handover)
        self.reconnects.append(done)
        return done

    def keep_connected(self, *, peer_timeout: float = 2.0, within: float = 60.0) -> None:
        """Reconnect automatically (as the page does) whenever nothing (no audio frame, no
        message) arrived from the server for ``peer_timeout`` seconds (the server sends
        a frame every 20 ms, silence included), and at once when the server hands the
        call over (a ``handover`` message). A ``bye`` on the current connection (the
        server ended the call on purpose) stops it."""

        async def watch() -> None:
            while True:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(min(0.1, peer_timeout / 4)):
                        await self._handed_over.wait()
                if self._handed_over.is_set():
                    await self.reconnect(within=within, handover=True)
                    continue
                if self.of_type("bye") and self._said_bye_on_current():
                    return
                if time.monotonic() - self.last_heard >= peer_timeout:
                    await self.reconnect(within=within)

        if self._watch is None:
            self._watch = asyncio.get_running_loop().create_task(watch(), name="caller.watch")

    def _said_bye_on_current(self) -> bool:
        return any(m.get("type") == "bye" and m.get("_conn") == self.connections
                   for m in self.messages)

    async def _drop_connection(self) -> None:
        """Close the current peer connection (the server sees the page vanish)."""
        old, self._pc = self._pc, None
        self.mic.stop()
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
        if old is not None:
            await old.close()

    def _on_track(self, track: Any) -> None:
        if track.kind == "audio":
            self._tasks.append(asyncio.get_running_loop().create_task(self._receive(track)))

    async def _receive(self, track: Any) -> None:
        with contextlib.suppress(MediaStreamError):
            while True:
                frame = await track.recv()
                samples = frame.to_ndarray()
                peak = float(np.abs(samples).max()) / 32768.0 if samples.size else 0.0
                now = time.monotonic()
                self.frames.append(ReceivedFrame(now, peak, frame.samples, frame.pts))
                self.last_heard = now
                self._changed.set()

    def _on_message(self, raw: Any) -> None:
        try:
            message = json.loads(raw)
        except ValueError:
            return
        if isinstance(message, dict):
            message["_at"] = self.last_heard = time.monotonic()
            message["_conn"] = self.connections
            if message.get("type") == "hello":
                self.session_id = message.get("session_id")
                self._resume_token = message.pop("resume_token", None) or self._resume_token
            elif message.get("type") == "handover":
                self._handed_over.set()
            self.messages.append(message)
            self._changed.set()

    # -- acting ---------------------------------------------------------------------

    def say(self, audio: AudioChunk) -> int:
        """Speak ``audio`` (any rate) into the microphone after what is queued; returns
        the index of the microphone frame it starts in (``mic.sent_at`` times it)."""
        samples = resample(audio.samples(), audio.sample_rate, OPUS_SAMPLE_RATE)
        return self.mic.feed(samples)

    def send(self, message: dict[str, Any] | str | bytes) -> None:
        """Send a data-channel message (a dict as JSON, a string or bytes as is)."""
        self._channel.send(message if isinstance(message, str | bytes) else json.dumps(message))

    async def wait_for(
        self, condition: Callable[[], bool], *, within: float = 30.0, what: str = "condition"
    ) -> None:
        """Wait until ``condition()`` holds (checked on every frame or message).

        Raises:
            TimeoutError: it did not hold within ``within`` seconds.
        """
        try:
            async with asyncio.timeout(within):
                while not condition():
                    self._changed.clear()
                    await self._changed.wait()
        except TimeoutError:
            raise TimeoutError(f"{what} did not happen within {within} s") from None

    async def wait_message(
        self, kind: str, *, within: float = 30.0, **fields: Any
    ) -> dict[str, Any]:
        """The first message of type ``kind`` (with ``fields``), waiting for it."""
        def find() -> dict[str, Any] | None:
            for m in self.messages:
                if m.get("type") == kind and all(m.get(k) == v for k, v in fields.items()):
                    return m
            return None

        await self.wait_for(lambda: find() is not None, within=within, what=f"{kind!r} message")
        found = find()
        assert found is not None
        return found

    def of_type(self, kind: str) -> list[dict[str, Any]]:
        """Every received message of type ``kind``."""
        return [m for m in self.messages if m.get("type") == kind]

    def audible_frames(self, *, after: float = 0.0) -> int:
        """Frames of assistant audio received after ``after`` (monotonic time)."""
        return sum(1 for f in self.frames if f.audible and f.at > after)

    @property
    def resumable(self) -> bool:
        """Whether a ``hello`` gave this caller a session and resume token."""
        return self.session_id is not None and self._resume_token is not None

    @property
    def connection_state(self) -> str:
        """The caller's ``connectionState``."""
        return str(self._pc.connectionState) if self._pc is not None else "new"

    async def aclose(self) -> None:
        """Hang up (closes the peer connection, as closing a tab does)."""
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._watch
            self._watch = None
        self.mic.stop()
        if self._pc is not None:
            await self._pc.close()
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()

    async def __aenter__(self) -> LoopbackCaller:
        await self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


async def _call_until_heard(base_url: str, wav: str) -> None:
    caller = LoopbackCaller(base_url, os.environ[CALLER_TOKEN_ENV])
    await caller.connect()
    caller.say(read_wav(wav))
    await caller.wait_for(lambda: caller.audible_frames() >= 5, within=90, what="the reply")
    print("hearing", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    # A caller in its own process (tests and benchmarks kill it mid-reply):
    # ``python -m voxflow_adapters.webrtc.client URL WAV`` with the token in
    # VOXFLOW_CALLER_TOKEN; says the WAV, prints "hearing" once the reply is audible,
    # then stays on the call until killed.
    asyncio.run(_call_until_heard(sys.argv[1], sys.argv[2]))
