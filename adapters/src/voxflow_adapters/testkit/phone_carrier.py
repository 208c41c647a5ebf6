"""A simulated phone carrier: a real Twilio Media Streams client for tests and benchmarks.

:class:`SimulatedCarrier` dials a ``voxflow phone`` server the way the carrier does: it
``POST`` s the webhook (signed like Twilio when given the auth token: HMAC-SHA1 of the URL
and the sorted form parameters, base64), reads the TwiML answer's ``<Stream url>`` and
its ``<Parameter>`` s, opens the WebSocket and sends ``connected`` and ``start``. Then,
every 20 ms of the wall clock:

* it sends one ``media`` message of caller audio (what :meth:`SimulatedCarrier.say`
  queued, WAV files or samples as 8 kHz μ-law; silence otherwise), like a phone line;
* it *plays* 20 ms of the reply audio it was sent, from its own buffer, and echoes each
  ``mark`` only once all the audio received before it has played (Twilio's rule), and
  records what played, per reply (the delivery id in voxflow's mark names);
* a ``clear`` drops the buffered audio at once and echoes every pending mark (as Twilio
  documents it): those marks' audio never played.

When the answer's ``<Connect>`` has an ``action`` URL, the carrier follows it as Twilio
does: when the stream ends without the caller hanging up (the server closed it, or its
process died), it ``POST`` s the action URL (signed, ``CallStatus=in-progress``) and goes
on with the TwiML answered: a new ``<Connect><Stream>`` is a new stream of the same call
(``reconnects``), a ``<Hangup/>`` ends the call (``hung_up_by_server``). After
:meth:`SimulatedCarrier.hang_up` it asks the action URL once more, with
``CallStatus=completed``, and keeps the answer (``after_hang_up``).

It records what it received and when (``clears``, ``marks``), the caller's speech
onsets, and per reply the samples received after the last ``clear`` that cleared it
(:meth:`SimulatedCarrier.samples_after_clear`: for a reply the barge-in cut, stale
audio; a reply only held by a ``clear`` and resumed legitimately comes again). Its μ-law
coding is its own (the G.711 formula), not the transport's.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import json
import secrets
import time
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import numpy as np
from numpy.typing import NDArray

__all__ = ["CarrierMark", "SimulatedCarrier", "mulaw_to_pcm16", "pcm16_to_mulaw",
           "phone_call", "twilio_signature"]

RATE = 8_000
FRAME = 160  # 20 ms
_SILENCE = b"\xff" * FRAME


def pcm16_to_mulaw(samples: NDArray[Any]) -> bytes:
    """s16 samples → G.711 μ-law bytes (the formula, sample by sample in numpy)."""
    x = np.asarray(samples, np.int32)
    sign = (x < 0).astype(np.int32) << 7
    magnitude = np.minimum(np.abs(x), 32635) + 0x84
    exponent = np.zeros_like(magnitude)
    for e in range(7, 0, -1):  # the highest set bit above bit 7
        exponent = np.where((exponent == 0) & (magnitude >= (0x80 << e)), e, exponent)
    mantissa = (magnitude >> (exponent + 3)) & 0x0F
    return bytes((~(sign | (exponent << 4) | mantissa) & 0xFF).astype(np.uint8))


def mulaw_to_pcm16(data: bytes) -> NDArray[np.int16]:
    """G.711 μ-law bytes → s16 samples."""
    codes = ~np.frombuffer(data, np.uint8).astype(np.int32) & 0xFF
    magnitude = ((((codes & 0x0F) << 3) + 0x84) << ((codes >> 4) & 0x07)) - 0x84
    return np.where(codes & 0x80, -magnitude, magnitude).astype(np.int16)


def twilio_signature(auth_token: str, url: str, params: dict[str, str]) -> str:
    """The ``X-Twilio-Signature`` of a webhook request (Twilio's documented scheme)."""
    data = url + "".join(key + params[key] for key in sorted(params))
    digest = hmac.new(auth_token.encode(), data.encode(), hashlib.sha1).digest()
    return base64.b64encode(digest).decode()


@dataclass(frozen=True, slots=True)
class CarrierMark:
    """A mark the carrier echoed: ``played`` False if a ``clear`` dropped its audio."""

    name: str
    at: float
    played: bool

    @property
    def delivery_id(self) -> str | None:
        """The reply it belongs to, read from voxflow's ``n:delivery:offset`` names."""
        parts = self.name.split(":")
        return ":".join(parts[1:-1]) if len(parts) >= 3 else None


def _delivery_of(name: str) -> str | None:
    parts = name.split(":")
    return ":".join(parts[1:-1]) if len(parts) >= 3 else None


@dataclass(slots=True)
class _Audio:
    data: bytes
    delivery: str | None = None
    offset: int = 0


@dataclass(slots=True)
class SimulatedCarrier:
    """One simulated phone call to ``webhook_url`` (use ``async with``; see the module).

    Args:
        webhook_url: the ``voxflow phone`` server's webhook (``http://host:port/voice``).
        auth_token: sign the webhook like Twilio with this token (None: unsigned).
        caller: the caller's number (the ``From`` parameter).
    """

    webhook_url: str
    auth_token: str | None = field(default=None, repr=False)
    caller: str = "+15550100"
    call_sid: str = field(default_factory=lambda: "CA" + secrets.token_hex(16))
    stream_sid: str = field(default_factory=lambda: "MZ" + secrets.token_hex(16))
    parameters: dict[str, str] = field(default_factory=dict)
    """The custom parameters of the answer's ``<Stream>``."""
    stream_url: str | None = None
    marks: list[CarrierMark] = field(default_factory=list)
    """Every mark echoed, in order."""
    clears: list[float] = field(default_factory=list)
    """When each ``clear`` arrived (``time.monotonic()``)."""
    speech_onsets: list[float] = field(default_factory=list)
    """When the first sample of each :meth:`say` was sent."""
    speech_ends: list[float] = field(default_factory=list)
    """When the last frame of each :meth:`say` was sent."""
    first_audio: list[float] = field(default_factory=list)
    """When reply audio began to arrive after each quiet spell (> 0.5 s)."""
    received_samples: int = 0
    action_url: str | None = None
    """The ``<Connect action>`` URL of the current stream (None: none given)."""
    reconnects: list[float] = field(default_factory=list)
    """When each new stream of the call opened after the action URL's answer."""
    stream_ends: list[float] = field(default_factory=list)
    """When each stream ended without the caller hanging up."""
    hung_up_by_server: bool = False
    """The action URL answered a hang-up after the stream ended."""
    after_hang_up: str | None = None
    """The action URL's answer after the caller hung up."""
    played: dict[str, list[NDArray[np.int16]]] = field(default_factory=dict)
    """The reply audio that played, per delivery id (8 kHz s16)."""
    _session: Any = None
    _ws: Any = None
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)
    _say: deque[bytes] = field(default_factory=deque)
    _buffer: deque[_Audio | str] = field(default_factory=deque)
    _unmarked: list[_Audio] = field(default_factory=list)
    _cleared: dict[str, int] = field(default_factory=dict)  # delivery -> clear number
    _after_clear: dict[str, int] = field(default_factory=dict)
    _last_audio: float = 0.0
    _said: asyncio.Event = field(default_factory=asyncio.Event)
    _done: asyncio.Event = field(default_factory=asyncio.Event)
    _sequence: int = 0

    async def __aenter__(self) -> SimulatedCarrier:
        import aiohttp  # (the voxflow-adapters[phone] extra)

        self._session = aiohttp.ClientSession()
        try:
            await self._dial()
        except BaseException:
            await self._session.close()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.hang_up()

    async def _request(self, url: str, status: str = "ringing") -> str:
        """POST a webhook (or the action URL) like the carrier; the TwiML answered."""
        params = {"AccountSid": "AC" + "0" * 32, "CallSid": self.call_sid,
                  "From": self.caller, "To": "+15550199", "Direction": "inbound",
                  "CallStatus": status}
        headers = {}
        if self.auth_token is not None:
            headers["X-Twilio-Signature"] = twilio_signature(self.auth_token, url, params)
        async with self._session.post(url, data=params, headers=headers) as response:
            body = await response.text()
            if response.status != 200:
                raise ConnectionRefusedError(f"the webhook answered {response.status}")
        return str(body)

    async def _dial(self) -> None:
        body = await self._request(self.webhook_url)
        if not await self._open(body):
            raise ConnectionRefusedError("the webhook's answer connects no stream")
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._tick(), name="carrier.tick"),
                       loop.create_task(self._receive(), name="carrier.receive")]

    async def _open(self, body: str) -> bool:
        """Open the stream the TwiML ``body`` connects to; False if it connects none."""
        connect = ElementTree.fromstring(body).find("./Connect")
        stream = None if connect is None else connect.find("Stream")
        if connect is None or stream is None:
            return False
        self.action_url = connect.get("action")
        self.stream_url = stream.get("url")
        self.parameters = {p.get("name", ""): p.get("value", "")
                           for p in stream.findall("Parameter")}
        self._ws = await self._session.ws_connect(self.stream_url)
        await self._send({"event": "connected", "protocol": "Call", "version": "1.0.0"})
        await self._send({
            "event": "start", "sequenceNumber": "1", "streamSid": self.stream_sid,
            "start": {"accountSid": "AC" + "0" * 32, "streamSid": self.stream_sid,
                      "callSid": self.call_sid, "tracks": ["inbound"],
                      "customParameters": self.parameters,
                      "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000,
                                      "channels": 1}}})
        return True

    async def _send(self, message: dict[str, Any]) -> None:
        if self._ws.closed:
            return  # (between two streams: the line carries nothing)
        self._sequence += 1
        with contextlib.suppress(ConnectionResetError):
            await self._ws.send_str(json.dumps(message))

    # -- the caller -------------------------------------------------------------------

    def say(self, audio: str | Path | NDArray[Any], rate: int = RATE) -> None:
        """Queue caller audio: a WAV file, or s16/float samples at ``rate``."""
        from voxflow_voice.audio import (  # the kit's modules load no numpy pipeline early
            float_to_pcm16,
            read_wav,
            resample,
        )

        if isinstance(audio, str | Path):
            samples = np.frombuffer(read_wav(audio, sample_rate=RATE).pcm, np.int16)
        else:
            array = np.asarray(audio)
            floats = (array.astype(np.float32) / 32768.0 if array.dtype == np.int16
                      else array.astype(np.float32))
            samples = np.frombuffer(float_to_pcm16(resample(floats, rate, RATE)), np.int16)
        data = pcm16_to_mulaw(samples)
        for start in range(0, len(data), FRAME):
            self._say.append(data[start : start + FRAME].ljust(FRAME, b"\xff"))
        self._say.append(b"")  # the end of this utterance
        self._said.clear()

    async def said(self) -> None:
        """Wait until everything :meth:`say` queued has been sent."""
        while self._say:
            await self._said.wait()

    async def press(self, digit: str) -> None:
        """The caller presses a key."""
        await self._send({"event": "dtmf", "streamSid": self.stream_sid,
                          "dtmf": {"track": "inbound_track", "digit": digit}})

    async def hang_up(self) -> None:
        """Send ``stop`` and close the stream (idempotent)."""
        if self._done.is_set():
            return
        self._done.set()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        with contextlib.suppress(Exception):
            if self._ws is not None and not self._ws.closed:
                await self._send({"event": "stop", "streamSid": self.stream_sid,
                                  "stop": {"callSid": self.call_sid}})
                await self._ws.close()
        if self.action_url is not None and not self.hung_up_by_server:
            with contextlib.suppress(Exception):  # (the front door may be gone already)
                self.after_hang_up = await self._request(self.action_url, "completed")
        if self._session is not None:
            await self._session.close()

    # -- the line ---------------------------------------------------------------------

    async def _tick(self) -> None:
        loop = asyncio.get_running_loop()
        started = loop.time()
        tick = 0
        speaking = False
        last_sent = 0.0
        while True:
            frame = self._say.popleft() if self._say else None
            if frame == b"":
                speaking = False
                self.speech_ends.append(last_sent)
                frame = self._say.popleft() if self._say else None
            if frame is not None and not speaking:
                speaking = True
                self.speech_onsets.append(time.monotonic())
            if not self._say:
                self._said.set()
            payload = base64.b64encode(frame or _SILENCE).decode()
            await self._send({"event": "media", "streamSid": self.stream_sid,
                              "media": {"track": "inbound", "chunk": str(tick),
                                        "timestamp": str(tick * 20), "payload": payload}})
            last_sent = time.monotonic()
            await self._echo_played()
            self._play(FRAME)
            tick += 1
            await asyncio.sleep(max(0.0, started + tick * 0.02 - loop.time()))

    def _play(self, n: int) -> None:
        """Play ``n`` samples of the buffer (this tick's 20 ms)."""
        while n and self._buffer:
            head = self._buffer[0]
            if isinstance(head, str):
                return  # a mark: echoed once this tick's audio has played
            take = min(n, len(head.data) - head.offset)
            piece = head.data[head.offset : head.offset + take]
            self.played.setdefault(head.delivery or "", []).append(mulaw_to_pcm16(piece))
            head.offset += take
            n -= take
            if head.offset == len(head.data):
                self._buffer.popleft()

    async def _echo_played(self) -> None:
        """Echo the marks whose audio before them has all played."""
        while self._buffer and isinstance(self._buffer[0], str):
            name = self._buffer.popleft()
            assert isinstance(name, str)
            self.marks.append(CarrierMark(name, time.monotonic(), True))
            await self._send({"event": "mark", "streamSid": self.stream_sid,
                              "mark": {"name": name}})

    async def _receive(self) -> None:
        """Read each stream of the call; when one ends without the caller hanging up,
        follow the action URL (a new stream, or the end of the call)."""
        while True:
            await self._read_stream()
            if self._done.is_set() or self.action_url is None:
                return
            self.stream_ends.append(time.monotonic())
            self._buffer.clear()  # (what the old stream had sent is lost with it)
            self._unmarked = []
            body = await self._request(self.action_url, "in-progress")
            self.stream_sid = "MZ" + secrets.token_hex(16)
            if not await self._open(body):
                self.hung_up_by_server = True
                return
            self.reconnects.append(time.monotonic())

    async def _read_stream(self) -> None:
        import aiohttp  # (the voxflow-adapters[phone] extra)

        async for message in self._ws:
            if message.type != aiohttp.WSMsgType.TEXT:
                break
            data = json.loads(message.data)
            event = data.get("event")
            if event == "media":
                audio = _Audio(base64.b64decode(data["media"]["payload"]))
                now = time.monotonic()
                if now - self._last_audio > 0.5:
                    self.first_audio.append(now)
                self._last_audio = now
                self.received_samples += len(audio.data)
                self._buffer.append(audio)
                self._unmarked.append(audio)
            elif event == "mark":
                name = data["mark"]["name"]
                delivery = _delivery_of(name)
                for audio in self._unmarked:
                    audio.delivery = delivery
                    if delivery is not None and delivery in self._cleared:
                        self._after_clear[delivery] = (self._after_clear.get(delivery, 0)
                                                       + len(audio.data))
                self._unmarked = []
                self._buffer.append(name)
            elif event == "clear":
                self.clears.append(time.monotonic())
                pending = [item for item in self._buffer if isinstance(item, str)]
                self._buffer.clear()
                self._unmarked = []
                for name in pending:
                    delivery = _delivery_of(name)
                    if delivery is not None:
                        self._cleared[delivery] = len(self.clears)
                        self._after_clear[delivery] = 0
                    self.marks.append(CarrierMark(name, time.monotonic(), False))
                    await self._send({"event": "mark", "streamSid": self.stream_sid,
                                      "mark": {"name": name}})

    # -- what was heard ---------------------------------------------------------------

    def played_audio(self, delivery_id: str) -> NDArray[np.int16]:
        """The samples of ``delivery_id`` that played (8 kHz s16)."""
        pieces = self.played.get(delivery_id, [])
        return np.concatenate(pieces) if pieces else np.zeros(0, np.int16)

    def samples_after_clear(self, delivery_id: str) -> int:
        """Samples of ``delivery_id`` received after the last ``clear`` that cleared it
        (0 if none cleared it): stale audio, if that clear was its fence."""
        return self._after_clear.get(delivery_id, 0)

    def cleared(self) -> list[str]:
        """The replies some ``clear`` cleared."""
        return list(self._cleared)

    def deliveries(self) -> list[str]:
        """The replies that played some audio, in order."""
        return [delivery for delivery in self.played if delivery]


@contextlib.asynccontextmanager
async def phone_call(webhook_url: str, *, auth_token: str | None = None
                     ) -> AsyncIterator[SimulatedCarrier]:
    """A :class:`SimulatedCarrier` dialled to ``webhook_url`` for the block's length."""
    async with SimulatedCarrier(webhook_url, auth_token=auth_token) as carrier:
        yield carrier
