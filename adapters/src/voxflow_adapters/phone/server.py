"""``voxflow phone``'s HTTP side: the carrier's webhook and the media WebSocket.

* ``POST /voice`` (the number's webhook): the request's signature is checked with the
  carrier's own validator (``twilio.request_validator.RequestValidator``, the account's
  auth token) and an unsigned or forged request gets 403; a signed one is answered with
  the document connecting the call to a bidirectional stream on ``/media``
  (:meth:`~voxflow_adapters.phone.wire.CarrierSerializer.answer`), carrying a one-time
  stream token as a custom parameter. Each call is admitted like a browser call, by its
  measured cost (:class:`~voxflow_adapters.hosting.admission.AdmissionController`: the
  slots the cores hold at the CPU a call costs here, at most ``max_calls``; the event
  loop's lag; the recent p95): a refused call is rejected busy
  (:meth:`~voxflow_adapters.phone.wire.CarrierSerializer.reject_busy`: the carrier
  plays the caller a busy signal and bills nothing), the reason logged. The call's slot
  is held from the webhook until its call ends, or until its stream token expires.
* ``GET /load`` (from this machine only): the admission's load, as ``voxflow serve``'s
  ``GET /load`` returns it. ``GET /health``: ``ok`` and this process's random instance
  id (:mod:`~voxflow_adapters.hosting.public_url`: the public URL is probed with it).
* ``GET /media`` (WebSocket): the stream's ``start`` must carry a stream token the
  webhook issued (once, within ``stream_token_seconds``), so nobody opens a call on the
  WebSocket without a signed webhook first. The call then runs like a browser call: the
  :data:`~voxflow_adapters.hosting.calls.CallFactory` builds the flow and its
  ``VoiceSession`` over a :class:`~voxflow_adapters.phone.transport.PhoneTransport`; the
  carrier's ``stop`` (the caller hung up) or the socket closing ends the input, so the
  session settles what was heard and returns, then the call's wiring closes. A key the
  caller presses (``dtmf``) is a turn of its own: the flow gets the digit (``"1"``) as
  the user's text (:meth:`~voxflow_voice.session.VoiceSession.submit_text`), answered
  after the reply being said.

The auth token is never logged nor shown (it is held by the validator only).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import itertools
import logging
import secrets
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from aiohttp import WSMsgType, web
from voxflow_voice.engines import VoiceEngines
from voxflow_voice.events import SessionEvent, TurnMetrics

from voxflow.clock import MonotonicClock
from voxflow.logs import bind_log_context

from ..hosting.admission import (
    UNBOUNDED_CALLS,
    Admission,
    AdmissionController,
    AdmissionSettings,
    Load,
)
from ..hosting.call_cost import PHONE_CALLER, CostSettings
from ..hosting.calls import Call, CallFactory
from ..hosting.errors import CapacityExceededError
from ..hosting.public_url import HEALTH_PATH, check_public_url, health_handler, new_instance_id
from .transport import PhoneTransport
from .twilio import TwilioSerializer
from .wire import MAX_MESSAGE_CHARS, CarrierMessageError, CarrierSerializer, Started

__all__ = ["STREAM_TOKEN_PARAMETER", "PhoneCall", "PhoneServer", "PhoneSettings",
           "SignatureCheck",
           "public_address", "signed_webhook"]

logger = logging.getLogger(__name__)

STREAM_TOKEN_PARAMETER = "voxflow_stream"
"""The custom parameter carrying the one-time stream token."""


class SignatureCheck:
    """The carrier's webhook signature, checked by ``twilio``'s ``RequestValidator``.

    Args:
        auth_token: the account's auth token (kept inside the validator only).

    Raises:
        ImportError: the ``twilio`` package is missing (``voxflow-adapters[phone]``).
    """

    def __init__(self, auth_token: str) -> None:
        if not isinstance(auth_token, str) or not auth_token:
            raise ValueError("the auth token must be a non-empty string")
        from twilio.request_validator import RequestValidator  # the optional extra

        self._validator = RequestValidator(auth_token)

    def valid(self, url: str, params: dict[str, str], signature: str | None) -> bool:
        """Whether ``signature`` (the ``X-Twilio-Signature`` header) signs the request."""
        if not signature:
            return False
        try:
            return bool(self._validator.validate(url, params, signature))
        except Exception:  # a malformed signature is a forged one
            return False

    def __repr__(self) -> str:
        return "SignatureCheck(<auth token>)"


def public_address(request: web.Request, public_url: str | None, path_qs: str, *,
                   websocket: bool = False) -> str:
    """``path_qs`` on the server as the carrier reaches it: at ``public_url``
    (``https://host``), or at the request's own address when None (loopback trials);
    ``websocket``: as a ``ws``/``wss`` URL."""
    if public_url is None:
        scheme, netloc = request.scheme, request.host
    else:
        parts = urlsplit(public_url)
        scheme, netloc = parts.scheme, parts.netloc
    if websocket:
        scheme = {"https": "wss", "http": "ws"}.get(scheme, scheme)
    path, _, query = path_qs.partition("?")
    return urlunsplit((scheme, netloc, path, query, ""))


async def signed_webhook(request: web.Request, check: SignatureCheck | None,
                         public_url: str | None) -> dict[str, str] | None:
    """The webhook's form parameters if its signature is valid (or ``check`` is None:
    unsigned trials); None if it is missing or wrong (answer 403)."""
    form = await request.post()
    params = {key: value for key, value in form.items() if isinstance(value, str)}
    if check is not None:
        url = public_address(request, public_url, request.path_qs)
        if not check.valid(url, params, request.headers.get("X-Twilio-Signature")):
            logger.warning("refused a webhook: missing or wrong signature")
            return None
    return params


@dataclass(frozen=True, slots=True)
class PhoneSettings:
    """How ``voxflow phone`` serves.

    Attributes:
        public_url: the server's address as the carrier reaches it (``https://host``;
            kept normalised: ``scheme://host[:port]``, no trailing slash); the
            webhook's signature covers it, and the stream URL is built from it.
            None: the request's own address (loopback trials).
        max_calls: concurrent calls at most (``VOXFLOW_MAX_CALLS``: an upper bound);
            None: as many as their measured cost allows (the admission's slots).
        p95_target_ms: new calls are refused while the recent voice-to-voice p95 is
            above it (``VOXFLOW_P95_TARGET_MS``).
        lead: seconds of reply audio sent ahead of the carrier's marks.
        stream_token_seconds: how long a webhook's stream token may wait for its stream.
        max_call_seconds: a call's length limit.
        webhook_path: the webhook's path.
        media_path: the WebSocket's path.
    """

    public_url: str | None = None
    max_calls: int | None = None
    p95_target_ms: float = 1000.0
    lead: float = 0.2
    stream_token_seconds: float = 60.0
    max_call_seconds: float = 3600.0
    webhook_path: str = "/voice"
    media_path: str = "/media"
    signature: SignatureCheck | None = field(default=None, repr=False)
    """The webhook's check; None accepts unsigned webhooks (loopback trials only)."""

    def __post_init__(self) -> None:
        """Raises: ValueError: a setting out of its range (a ``max_calls`` of 0 made
        every call rejected busy; a ``stream_token_seconds`` of 0 every stream refused);
        :class:`~voxflow_adapters.hosting.public_url.PublicUrlError` (a ValueError): a
        ``public_url`` that is not ``http(s)://host[:port]``."""
        if self.public_url is not None:  # (stored normalised: what the signature covers)
            object.__setattr__(self, "public_url",
                               check_public_url(self.public_url, option="public_url"))
        if self.max_calls is not None and (
                isinstance(self.max_calls, bool) or not isinstance(self.max_calls, int)
                or not 1 <= self.max_calls <= UNBOUNDED_CALLS):
            raise ValueError(f"max_calls must be None or an int from 1 to {UNBOUNDED_CALLS}, "
                             f"got {self.max_calls!r}")
        for name in ("p95_target_ms", "lead", "stream_token_seconds", "max_call_seconds"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not (
                    0 < value < float("inf")):
                raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")
        for name in ("webhook_path", "media_path"):
            if not str(getattr(self, name)).startswith("/"):
                raise ValueError(f"{name} must start with '/', got {getattr(self, name)!r}")


@dataclass(slots=True)
class PhoneCall:
    """A running call of a :class:`PhoneServer`: its transport, call and events, what
    its stream was admitted for (``ticket``) and why the server ends it."""

    transport: PhoneTransport
    call: Call
    events: list[SessionEvent]
    ticket: Any = None
    ending: str | None = None
    """Why this server ends the call (None: the stream ends it)."""
    closed: asyncio.Event = field(default_factory=asyncio.Event)
    """Set once the call is closed and its slot free."""


class PhoneServer:
    """The webhook and the media WebSocket of ``voxflow phone`` (see the module).

    Args:
        factory: builds each call's flow and session.
        engines: the process's STT, TTS and VAD.
        settings: the server's settings.
        serializer: the carrier's wire format (Twilio if None).
        admission: decides which calls are taken (one from ``settings.max_calls`` and
            ``settings.p95_target_ms`` if None; make it once the engines are loaded).
            Its prior, the cost of a call before one is measured, is derived for a
            phone call (:data:`~voxflow_adapters.hosting.call_cost.PHONE_CALLER`: the
            dense caller plus the phone transport's own work, the media WebSocket's
            JSON and base64, 8 kHz mu-law coding and resampling, +0.8 points of a
            core: the median of three runs of ``benchmarks/webrtc_cpu.py --kinds
            simulated,phone``).
        on_call: called with each started call's transport and call (tests).
    """

    def __init__(
        self, factory: CallFactory, engines: VoiceEngines, *,
        settings: PhoneSettings | None = None, serializer: CarrierSerializer | None = None,
        admission: AdmissionController | None = None,
        on_call: Callable[[PhoneTransport, Call], None] | None = None,
    ) -> None:
        if admission is not None and not isinstance(admission, AdmissionController):
            raise TypeError(
                f"admission must be an AdmissionController, got {type(admission).__name__}")
        self.factory = factory
        self.engines = engines
        self.settings = settings if settings is not None else PhoneSettings()
        self.serializer = serializer if serializer is not None else TwilioSerializer()
        self.on_call = on_call
        self.admission = admission if admission is not None else AdmissionController(
            AdmissionSettings(max_calls=self.settings.max_calls,
                              p95_target_ms=self.settings.p95_target_ms,
                              cost=CostSettings(profile=PHONE_CALLER)),
            scheduler=engines.scheduler if engines is not None else None,
            rates=engines.rates if engines is not None else None)
        self.call_prefix = "phone"
        """Call ids are ``<call_prefix>-<n>`` (a call worker puts its id in them)."""
        self._numbers = itertools.count(1)
        self._refusals: dict[str, int] = {}
        self._tokens: dict[str, float] = {}  # stream token -> when it expires
        self._held: dict[str, Admission] = {}  # stream token -> its call's slot
        self.instance = new_instance_id()
        """This process's id in its ``GET /health`` answer (the public URL's probe)."""
        self._tickets: dict[int, Any] = {}  # a started stream's ticket, by its transport
        self._calls: dict[str, PhoneCall] = {}
        self.ended: list[dict[str, Any]] = []
        self.refused_webhooks = 0

    @property
    def calls(self) -> int:
        """Calls in progress."""
        return len(self._calls)

    @property
    def max_calls(self) -> int:
        """The most calls this process could hold at once (its admission's
        :attr:`~voxflow_adapters.hosting.admission.AdmissionController.ceiling`:
        ``settings.max_calls``, else unbounded but for the measured slots)."""
        return self.admission.ceiling

    def load(self) -> Load:
        """The admission's load and headroom (what ``GET /load`` returns)."""
        return self.admission.load()

    async def watch_loop(self) -> None:
        """Measure the event loop's lag for the admission until cancelled (the app runs
        it while it serves; a call worker runs it itself)."""
        await self.admission.meter.watch_loop()

    def note_refusal(self, key: str) -> None:
        """Count a refused call under ``key``."""
        self._refusals[key] = self._refusals.get(key, 0) + 1

    def refusals(self) -> dict[str, int]:
        """Refused calls by reason (``busy``: the admission refused them)."""
        return dict(self._refusals)

    def app(self) -> web.Application:
        """The aiohttp application: the webhook, the media WebSocket, ``GET /load`` and
        ``GET /health`` (its :attr:`instance`); while it runs, the event loop's lag is
        measured for the admission."""
        app = web.Application(client_max_size=64 * 1024)
        app.router.add_post(self.settings.webhook_path, self._webhook)
        app.router.add_get(self.settings.media_path, self._media)
        app.router.add_get("/load", self._load)
        app.router.add_get(HEALTH_PATH, health_handler(self.instance))
        app.cleanup_ctx.append(self._watching)
        return app

    async def _watching(self, app: web.Application) -> AsyncIterator[None]:
        task = asyncio.get_running_loop().create_task(self.watch_loop(),
                                                      name="admission.loop-lag")
        yield
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    async def _load(self, request: web.Request) -> web.Response:
        # (from this machine only: the carrier needs no figures, nor anyone else)
        if not _from_this_machine(request):
            return web.Response(status=403, text="GET /load is served to this machine only")
        return web.json_response(self.load().as_dict(), headers={"Cache-Control": "no-store"})

    # -- the webhook -----------------------------------------------------------------

    async def _webhook(self, request: web.Request) -> web.Response:
        params = await signed_webhook(request, self.settings.signature,
                                      self.settings.public_url)
        if params is None:
            self.refused_webhooks += 1
            return web.Response(status=403, text="forbidden")
        self._expire_tokens()  # (an expired token holds no place: its stream never came)
        try:
            admission = self.admission.admit(f"{self.call_prefix}-{next(self._numbers)}")
        except CapacityExceededError as exc:
            self.note_refusal("busy")
            logger.warning("rejected a call (busy): %s", exc, extra={
                "carrier_call_id": params.get("CallSid", "?")[:64]})
            content_type, body = self.serializer.reject_busy()
            return web.Response(content_type=content_type, text=body)
        token = secrets.token_urlsafe(24)
        self._tokens[token] = time.monotonic() + self.settings.stream_token_seconds
        self._held[token] = admission
        stream_url = public_address(request, self.settings.public_url,
                                    self.settings.media_path, websocket=True)
        content_type, body = self.serializer.answer(stream_url, {STREAM_TOKEN_PARAMETER: token})
        return web.Response(text=body, content_type=content_type)

    def _expire_tokens(self) -> None:
        now = time.monotonic()
        for token in [t for t, until in self._tokens.items() if until < now]:
            del self._tokens[token]
            held = self._held.pop(token, None)
            if held is not None:
                held.release()

    def _take_token(self, token: str | None, started: Started) -> Any:
        """What the stream token ``token`` of the stream ``started`` was issued for (its
        call's :class:`~voxflow_adapters.hosting.admission.Admission`), or None: not one
        of ours, expired, or used already."""
        self._expire_tokens()
        if token is None or self._tokens.pop(token, None) is None:
            return None
        return self._held.pop(token)

    async def _open_call(self, transport: PhoneTransport, clock: MonotonicClock,
                         on_event: Callable[[SessionEvent], None], ticket: Any) -> Call:
        """The call's flow and session (a server with a store leases and loads the
        call's session here)."""
        return await self.factory(transport, self.engines, clock, on_event)

    def _event(self, ticket: Any, event: SessionEvent) -> None:
        """Each session event of the call ``ticket``: the admission records latencies."""
        if isinstance(event, TurnMetrics) and (ms := event.voice_to_voice_ms) is not None:
            self.admission.record(ms)

    async def _finish_call(self, entry: PhoneCall, how: str | None) -> None:
        """The call's session returned, ``how`` it ended for good (``hung_up``, or the
        reason this server ended it; None: the stream was lost or handed over, the call
        may go on elsewhere); its wiring is not closed yet."""

    async def _after_call(self, entry: PhoneCall | None, ticket: Any) -> None:
        """The call is closed (or never started: ``entry`` None): its slot is freed."""
        if isinstance(ticket, Admission):
            ticket.release()

    # -- the media stream ------------------------------------------------------------

    async def _media(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(max_msg_size=4 * MAX_MESSAGE_CHARS, autoping=True)
        await ws.prepare(request)
        clock = MonotonicClock()
        transport = PhoneTransport(self.serializer, ws.send_str, clock=clock,
                                   lead=self.settings.lead)
        try:
            if not await self._wait_start(ws, transport):
                await ws.close(code=1008, message=b"no valid stream start")
                return ws
            assert transport.started is not None
            await self._run_call(ws, transport, clock)
        finally:
            await transport.aclose()
            if not ws.closed:
                await ws.close()
        return ws

    async def _wait_start(self, ws: web.WebSocketResponse, transport: PhoneTransport) -> bool:
        """Read until the stream's ``start``; True if its stream token is one we issued."""
        try:
            async with asyncio.timeout(10.0):
                async for message in ws:
                    if message.type != WSMsgType.TEXT:
                        return False
                    transport.receive(message.data)
                    if transport.started is not None:
                        token = transport.started.parameters.get(STREAM_TOKEN_PARAMETER)
                        ticket = self._take_token(token, transport.started)
                        if ticket is not None:
                            self._tickets[id(transport)] = ticket
                            return True
                        logger.warning("refused a media stream: no valid stream token")
                        return False
        except (TimeoutError, CarrierMessageError):
            return False
        return False

    async def _run_call(self, ws: web.WebSocketResponse, transport: PhoneTransport,
                        clock: MonotonicClock) -> None:
        assert transport.started is not None
        call_id = transport.started.call_id
        # this task starts the session's: its lines and its call span name the call
        bind_log_context(call_id=call_id)
        events: list[SessionEvent] = []
        ticket = self._tickets.pop(id(transport), None)

        def on_event(event: SessionEvent) -> None:
            events.append(event)
            self._event(ticket, event)

        try:
            call = await self._open_call(transport, clock, on_event, ticket)
        except Exception:
            logger.exception("could not start the call's session", extra={"call_id": call_id})
            await self._after_call(None, ticket)
            return
        # keyed by this stream, not by the call id its start message gave (a second
        # stream naming the same call must not take the first one's slot, nor free it)
        key = f"{call_id}#{id(transport)}"
        entry = self._calls[key] = PhoneCall(transport, call, events, ticket)
        keys: set[asyncio.Task[None]] = set()

        def pressed(digit: str) -> None:
            # a key is the caller's turn: the flow reads the digit as the user's text
            task = asyncio.get_running_loop().create_task(call.session.submit_text(digit),
                                                          name=f"{call_id}.dtmf")
            keys.add(task)
            task.add_done_callback(keys.discard)

        transport.on_dtmf = pressed
        if self.on_call is not None:
            self.on_call(transport, call)
        logger.info("phone call started", extra={"call_id": call_id})
        began = clock.now()
        loop = asyncio.get_running_loop()
        sender = loop.create_task(transport.run(), name=f"{call_id}.send")
        session = loop.create_task(call.session.run(), name=f"{call_id}.session")
        reader = loop.create_task(self._read(ws, transport), name=f"{call_id}.read")
        try:
            async with asyncio.timeout(self.settings.max_call_seconds):
                await asyncio.wait({session, reader}, return_when=asyncio.FIRST_COMPLETED)
                transport.end_input()  # (the session returns once its input ended)
                await asyncio.wait({session})
        except TimeoutError:
            logger.info("phone call reached its length limit", extra={"call_id": call_id})
            entry.ending = entry.ending or "the call reached its length limit"
        finally:
            transport.end_input()
            for task in (reader, session, *keys):
                task.cancel()
            await asyncio.gather(reader, session, *keys, return_exceptions=True)
            if session.done() and not session.cancelled() and session.exception():
                logger.error("the call's session failed", exc_info=session.exception(),
                             extra={"call_id": call_id})
            try:
                await transport.aclose()
                sender.cancel()
                await asyncio.gather(sender, return_exceptions=True)
                await self._finish_call(entry, "hung_up" if transport.stopped
                                        else entry.ending)
                await call.aclose()
            except Exception:  # (the slot is freed and the call summarized all the same)
                logger.exception("closing the call failed", extra={"call_id": call_id})
            finally:
                # (the slot is given back, then the call leaves the count: with no await
                # in between, a worker's count of held slots never drops in the middle)
                await self._after_call(entry, ticket)
                self._calls.pop(key, None)
                entry.closed.set()
            stats = transport.statistics()
            summary = {"call_id": call_id, "seconds": round(clock.now() - began, 1),
                       "frames_in": stats.frames_in, "frames_out": stats.frames_out,
                       "marks_played": stats.marks_played,
                       "marks_unplayed": stats.marks_unplayed, "clears": stats.clears,
                       "bad_messages": stats.bad_messages}
            self.ended.append(summary)
            logger.info("phone call ended", extra=summary)

    async def _read(self, ws: web.WebSocketResponse, transport: PhoneTransport) -> None:
        """Hand every inbound text message to the transport until the stream ends."""
        try:
            async for message in ws:
                if message.type != WSMsgType.TEXT:
                    break
                transport.receive(message.data)
                if transport.input_ended:
                    break
        except CarrierMessageError:
            logger.warning("ended a call that sent too many invalid messages")
        finally:
            transport.end_input()

    def __repr__(self) -> str:
        return f"PhoneServer({self.serializer.name}, calls={len(self._calls)})"


def _from_this_machine(request: web.Request) -> bool:
    """Whether ``request`` came from a loopback address, not forwarded by a proxy."""
    if "X-Forwarded-For" in request.headers or "Forwarded" in request.headers:
        return False
    try:
        return ipaddress.ip_address(request.remote or "").is_loopback
    except ValueError:  # (a Unix socket: no address)
        return False
