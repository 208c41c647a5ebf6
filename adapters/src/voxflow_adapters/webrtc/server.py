"""The ``voxflow serve`` web server: the call page and WebRTC signaling (aiohttp).

Routes:

* ``GET /``: the page (``static/index.html``), ``GET /static/...``: its script and style;
* ``POST /offer``: ``{"type": "offer", "sdp": "..."}`` with ``Authorization: Bearer
  <token>`` → ``{"type": "answer", "sdp": "...", "call_id": "..."}``. Candidates are
  gathered before answering (no trickle ICE), so one round trip sets the call up;
* ``GET /ice-servers`` (same token and Origin checks): ``{"ice_servers": [{"urls": [...],
  "username": ..., "credential": ...}]}``, the STUN/TURN servers the page uses too;
* ``GET /load`` (same checks): the process's :class:`~voxflow_voice.admission.Load` as
  JSON (active calls, cap, headroom, recent voice-to-voice p95, model utilisation).

Admission (:mod:`voxflow_voice.admission`): an offer is refused with 503 and a message
the page shows when the process is at ``max_calls`` or its recent answers are slower
than ``p95_target_ms``, rather than taking a call that slows every call down.

HTTPS: with ``tls_cert``/``tls_key`` (:mod:`~voxflow_adapters.webrtc.tls`) the same app
is served over TLS and the Origin check expects ``https://`` origins. Behind a reverse
proxy, ``trust_forwarded`` lets the origin named by ``X-Forwarded-Proto``/``-Host``
through (never by default). ICE host candidates follow the bound interface.

Safety: the server binds to loopback by default; ``/offer`` needs the token (generated
and printed as part of the page URL unless given) and, when the request carries an
``Origin``, one the server allows (its own loopback origins, or ``allowed_origins``);
offers are size-limited; calls are limited in number and length; a call whose ICE/DTLS
never connects or whose peer goes silent is ended and its slot freed
(:class:`~voxflow_adapters.webrtc.peer.WebRtcPeer`).

Every call gets a fresh flow and ``VoiceSession`` from the :data:`CallFactory`; the
engines (Whisper, Piper, Silero) are loaded once and shared by all calls.

With a ``store`` (``voxflow serve`` gives the default one: ``VOXFLOW_DATABASE_URL`` or
the SQLite file), each call owns its session through a lease
(:class:`~voxflow_adapters.webrtc.ownership.SessionOwnership`: acquired at call start,
renewed in the background, released at the end; every save fenced by it; a lost lease
ends the call, "the call lost its session"). An offer with ``resume`` (session id and
resume token) goes on with a stored session: the token is checked (403 if it is not that
session's), the lease is acquired (a live lease of another worker is waited out up to
``resume_wait``, never stolen: 409 if it is still held; a live call of the same session
on this server is the same page reconnecting, and it is ended first), and the call
continues from the stored history (:mod:`~voxflow_adapters.webrtc.resume`).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import ipaddress
import itertools
import logging
import os
import secrets
import socket
import time
import uuid
from collections import Counter, deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, model_validator
from voxflow_voice.admission import Admission, AdmissionController, AdmissionSettings, Load
from voxflow_voice.engines import VoiceEngines
from voxflow_voice.events import ReplyInterrupted, SessionEvent, TurnMetrics

from voxflow.clock import MonotonicClock
from voxflow.errors import CapacityExceededError, FencedWriteError, SignalingError
from voxflow.logs import bind_log_context

from .calls import Call, CallFactory, CallSession
from .ownership import DEFAULT_LEASE_SECONDS, SessionBusyError, SessionOwnership
from .peer import DEFAULT_PEER_SETTINGS, PeerSettings, PeerStatistics, WebRtcPeer
from .protocol import HelloMessage, LatencyMessage, StateMessage, messages_for_event
from .resume import check_resume_token
from .tls import ssl_context
from .wire import ProtocolError, ResumeRequest, parse_offer

__all__ = [
    "DEFAULT_SERVER_SETTINGS",
    "ServerSettings",
    "ServerStatistics",
    "WebRtcServer",
    "ignore_closed_transport_errors",
    "serve",
]

logger = logging.getLogger(__name__)

STATIC_DIR = Path(__file__).with_name("static")
_OFFER_SHAPE = '{"type": "offer", "sdp": "..."}'


class ServerSettings(BaseModel):
    """Where the server listens and what it lets in."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    host: str = Field("127.0.0.1", min_length=1, description="bind address (loopback default)")
    port: int = Field(8080, ge=0, le=65535, description="TCP port (0: any free port)")
    token: str | None = Field(None, min_length=8, description="required for /offer; "
                              "None: a random one is generated")
    allowed_origins: tuple[str, ...] = Field(
        (), description="extra page origins allowed to POST /offer (e.g. https://host:port)"
    )
    max_sdp_bytes: int = Field(20_000, gt=0, description="largest offer SDP accepted")
    max_calls: int = Field(8, ge=1, description="concurrent calls")
    p95_target_ms: float = Field(
        1000.0, gt=0, le=60_000, description="refuse calls while the recent voice-to-voice "
        "p95 is above this (ms)",
    )
    peer: PeerSettings = Field(DEFAULT_PEER_SETTINGS, description="per-call limits and ICE")
    tls_cert: Path | None = Field(None, description="PEM certificate (chain): serve HTTPS")
    tls_key: Path | None = Field(None, description="PEM private key of tls_cert")
    trust_forwarded: bool = Field(
        False, description="behind a reverse proxy: the page's origin is the one the "
        "proxy names in X-Forwarded-Proto/X-Forwarded-Host (ignored unless set: anyone "
        "can send those headers to a server reached directly)",
    )
    lease_seconds: float = Field(DEFAULT_LEASE_SECONDS, gt=0, description="a call's "
                                 "session lease (renewed every third of it)")
    resume_wait: float = Field(DEFAULT_LEASE_SECONDS + 2.0, ge=0, description="how long "
                               "(s) a resume waits for another worker's live lease")

    @model_validator(mode="after")
    def _tls_pair(self) -> ServerSettings:
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("tls_cert and tls_key go together (the certificate and its key)")
        return self

    @property
    def scheme(self) -> str:
        """``https`` with a certificate, else ``http``."""
        return "http" if self.tls_cert is None else "https"


DEFAULT_SERVER_SETTINGS = ServerSettings()


class ServerStatistics(BaseModel):
    """What the server has done so far."""

    model_config = ConfigDict(frozen=True)

    active_calls: int
    accepted: int
    rejected: dict[str, int] = Field(description="refused offers by reason")
    ended: list[PeerStatistics] = Field(description="the most recent ended calls")


def _first(header: str | None) -> str:
    """The first (the client-side proxy's) value of a comma-separated forwarding header."""
    return header.split(",", 1)[0].strip() if header else ""


def _bound_host_addresses(settings: ServerSettings) -> PeerSettings:
    """ICE host candidates follow the bound interface: a server bound to one non-loopback
    address offers that address (unless ``ice_host_addresses`` says otherwise); loopback
    and wildcard binds keep every non-loopback interface (browsers ignore loopback
    candidates, and the same-machine path over the machine's own address stays local)."""
    peer = settings.peer
    if peer.ice_host_addresses is not None:
        return peer
    try:
        address = ipaddress.ip_address(settings.host)
    except ValueError:
        return peer
    if address.is_loopback or address.is_unspecified:
        return peer
    return peer.model_copy(update={"ice_host_addresses": (str(address),)})


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class WebRtcServer:
    """The page, the signaling endpoint and the calls of one process.

    Args:
        factory: builds each call's flow and session.
        engines: the shared STT/TTS/VAD engines.
        settings: bind address, token, limits.
        on_call: called with each accepted call's peer and :class:`Call` (tests, metrics).
        store: where calls' sessions are kept (a ``RowStore``: SQLite or PostgreSQL);
            None: calls are not persisted and cannot be resumed.
        worker_id: this server's name in lease owners (default: host, pid, random).
        admission: decides which calls are taken; one from ``settings.max_calls`` and
            ``settings.p95_target_ms`` if ``None``.
    """

    def __init__(
        self, factory: CallFactory, engines: VoiceEngines, *,
        settings: ServerSettings = DEFAULT_SERVER_SETTINGS,
        on_call: Callable[[WebRtcPeer, Call], None] | None = None,
        store: Any | None = None, worker_id: str | None = None,
        admission: AdmissionController | None = None,
    ) -> None:
        if not callable(factory):
            raise TypeError("factory must be a CallFactory (an async callable)")
        if not isinstance(settings, ServerSettings):
            raise TypeError(f"settings must be ServerSettings, got {type(settings).__name__}")
        self.factory = factory
        self.engines = engines
        self.settings = settings
        self.token = settings.token if settings.token is not None else secrets.token_urlsafe(18)
        self._peer_settings = _bound_host_addresses(settings)
        self._on_call = on_call
        self.store = store
        self.worker_id = worker_id or f"{socket.gethostname()}:{os.getpid()}:" \
                                      f"{secrets.token_hex(3)}"
        self._sessions: dict[str, str] = {}  # session id -> call id (live calls)
        if admission is not None and not isinstance(admission, AdmissionController):
            raise TypeError(
                f"admission must be an AdmissionController, got {type(admission).__name__}")
        self.admission = admission if admission is not None else AdmissionController(
            AdmissionSettings(max_calls=settings.max_calls,
                              p95_target_ms=settings.p95_target_ms),
            scheduler=engines.scheduler)
        self._calls: dict[str, tuple[WebRtcPeer, asyncio.Task[None]]] = {}
        self._accepted = 0
        self._rejected: Counter[str] = Counter()
        self._ended: deque[PeerStatistics] = deque(maxlen=100)
        self._numbers = itertools.count(1)
        self._runner: web.AppRunner | None = None
        self._idle_waiters: list[asyncio.Future[None]] = []
        self._admissions: dict[str, Admission] = {}
        self.port: int | None = None

    # -- the app --------------------------------------------------------------------

    def app(self) -> web.Application:
        """The aiohttp application (routes and body size limit)."""
        app = web.Application(client_max_size=self.settings.max_sdp_bytes + 4096)
        app.router.add_get("/", self._page)
        app.router.add_get("/favicon.ico", self._favicon)
        app.router.add_static("/static/", STATIC_DIR, show_index=False)
        app.router.add_get("/ice-servers", self._ice_servers)
        app.router.add_post("/offer", self._offer)
        app.router.add_get("/load", self._load)
        return app

    async def start(self) -> str:
        """Listen; returns the page URL (with the token)."""
        settings = self.settings
        context = None
        if settings.tls_cert is not None and settings.tls_key is not None:
            context = ssl_context(settings.tls_cert, settings.tls_key)
        runner = web.AppRunner(self.app(), access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, settings.host, settings.port, ssl_context=context)
        await site.start()
        self._runner = runner
        addresses = runner.addresses
        self.port = int(addresses[0][1]) if addresses else self.settings.port
        return self.url

    @property
    def url(self) -> str:
        """``http(s)://host:port/?token=...`` (what a person opens)."""
        return self.url_for(self.settings.host)

    def url_for(self, host: str) -> str:
        """The page URL with ``host`` in it (an address the server is reached by)."""
        shown = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
        if ":" in shown:
            shown = f"[{shown}]"
        return f"{self.settings.scheme}://{shown}:{self.port}/?token={self.token}"

    async def aclose(self) -> None:
        """End every call (each settles its deliveries) and stop listening."""
        calls = list(self._calls.values())
        for peer, _ in calls:
            peer.close_soon("the server is shutting down")
        for _, task in calls:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> WebRtcServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- handlers -------------------------------------------------------------------

    async def _page(self, request: web.Request) -> web.StreamResponse:
        return web.FileResponse(STATIC_DIR / "index.html", headers={
            "Cache-Control": "no-store",
            "Content-Security-Policy": "default-src 'self'; connect-src 'self'; "
                                       "media-src 'self' blob: mediastream:",
            "X-Content-Type-Options": "nosniff",
            "Referrer-Policy": "no-referrer",
        })

    async def _favicon(self, request: web.Request) -> web.StreamResponse:
        return web.FileResponse(STATIC_DIR / "favicon.svg", headers={
            "Content-Type": "image/svg+xml", "Cache-Control": "max-age=86400",
            "X-Content-Type-Options": "nosniff",
        })

    def _reject(self, status: int, reason: str, key: str) -> web.Response:
        self._rejected[key] += 1
        logger.warning("offer rejected (%s): %s", key, reason)
        return web.json_response({"error": reason}, status=status)

    def _origin_allowed(self, request: web.Request, origin: str) -> bool:
        settings = self.settings
        allowed = set(settings.allowed_origins)
        scheme = settings.scheme
        if _is_loopback(settings.host):
            for name in ("127.0.0.1", "localhost", "[::1]"):
                allowed.add(f"{scheme}://{name}:{self.port}")
        else:
            # Not bound to loopback: the page's own origin, as the client named the host.
            allowed.add(f"{scheme}://{request.host}")
        if settings.trust_forwarded:
            proto = _first(request.headers.get("X-Forwarded-Proto"))
            host = _first(request.headers.get("X-Forwarded-Host"))
            if proto in ("http", "https") and host:
                allowed.add(f"{proto}://{host}")
        return origin in allowed

    def _refused(self, request: web.Request) -> web.Response | None:
        """The response refusing ``request`` (a foreign Origin, a missing or wrong token),
        or None when it may go on."""
        origin = request.headers.get("Origin")
        if origin is not None and not self._origin_allowed(request, origin):
            return self._reject(403, f"origin {origin!r} is not allowed", "origin")
        auth = request.headers.get("Authorization", "")
        given = auth[len("Bearer "):] if auth.startswith("Bearer ") else ""
        if not hmac.compare_digest(given.encode(), self.token.encode()):
            return self._reject(401, "missing or wrong token", "token")
        return None

    async def _ice_servers(self, request: web.Request) -> web.Response:
        """The STUN/TURN servers the page's own RTCPeerConnection should use (the ones the
        server uses: both ends then gather server-reflexive and relay candidates). TURN
        credentials go only to a caller holding the token."""
        refused = self._refused(request)
        if refused is not None:
            return refused
        servers = [server.model_dump(exclude_none=True, mode="json")
                   for server in self._peer_settings.ice_servers]
        return web.json_response({"ice_servers": servers},
                                 headers={"Cache-Control": "no-store"})

    async def _load(self, request: web.Request) -> web.Response:
        refused = self._refused(request)
        if refused is not None:
            return refused
        return web.json_response(self.load().as_dict(), headers={"Cache-Control": "no-store"})

    async def _offer(self, request: web.Request) -> web.Response:
        refused = self._refused(request)
        if refused is not None:
            return refused
        limit = self.settings.max_sdp_bytes
        if request.content_length is not None and request.content_length > limit + 4096:
            return self._reject(413, f"offer larger than {limit} bytes", "size")
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return self._reject(413, f"offer larger than {limit} bytes", "size")
        try:
            offer = parse_offer(body, max_bytes=limit + 4096)
        except ProtocolError as exc:
            return self._reject(400, f"the body must be JSON {_OFFER_SHAPE}: {exc.reason}",
                                "malformed")
        sdp = offer.sdp
        if len(sdp.encode()) > limit:
            return self._reject(413, f"offer SDP larger than {limit} bytes", "size")
        if offer.resume is not None and self.store is None:
            return self._reject(400, "this server keeps no sessions: a call cannot be "
                                "resumed here (offer without \"resume\" for a new call)",
                                "resume")
        call_id = f"call-{next(self._numbers)}"
        try:
            admission = self.admission.admit(call_id)
        except CapacityExceededError as exc:
            return self._reject(503, str(exc), "busy")
        try:
            response = await self._start_call(sdp, call_id, offer.resume)
        finally:
            if call_id not in self._calls:
                admission.release()  # it did not start
        if call_id in self._calls:
            self._admissions[call_id] = admission
        return response

    async def _own(
        self, call_id: str, resume: ResumeRequest | None, on_lost: Callable[[FencedWriteError],
                                                                            None],
    ) -> SessionOwnership | web.Response:
        """The lease of the call's session (a new one, or the resumed one once its token
        is checked), or the response refusing the offer."""
        assert self.store is not None
        settings, owner = self.settings, f"{self.worker_id}/{call_id}"
        if resume is None:
            return await SessionOwnership.acquire(
                self.store, str(uuid.uuid4()), owner, ttl=settings.lease_seconds,
                on_lost=on_lost)
        stored = await asyncio.to_thread(self.store.load_state, resume.session_id)
        if not check_resume_token(stored, resume.token):
            return self._reject(403, "resume refused: no such session, or the resume token "
                                "is not this session's (start a new call)", "resume_token")
        live = self._sessions.get(resume.session_id)
        if live is not None and live in self._calls:  # the same page reconnecting
            old_peer, old_task = self._calls[live]
            old_peer.close_soon("the page reconnected: the call goes on in a new connection")
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(old_task)
        try:
            return await SessionOwnership.acquire(
                self.store, resume.session_id, owner, ttl=settings.lease_seconds,
                wait=settings.resume_wait, on_lost=on_lost)
        except SessionBusyError:
            return self._reject(409, f"the session is live on another worker (still held "
                                f"after {settings.resume_wait:g} s); retry the resume later",
                                "resume_busy")

    async def _start_call(
        self, sdp: str, call_id: str, resume: ResumeRequest | None = None
    ) -> web.Response:
        # this request's task starts the peer's and the session's tasks: their lines too
        bind_log_context(call_id=call_id)
        clock = MonotonicClock()
        peer = WebRtcPeer(settings=self._peer_settings, clock=clock, call_id=call_id)
        ownership: SessionOwnership | None = None
        timing: dict[str, float] = {}  # (for the log line: how long a resume took where)
        if self.store is not None:
            def lost(exc: FencedWriteError) -> None:
                peer.close_soon(f"the call lost its session ({exc.reason}): another worker "
                                "took it over or its lease ran out; nothing more is saved")

            try:
                began = time.monotonic()
                owned = await self._own(call_id, resume, lost)
                timing["lease_ms"] = round((time.monotonic() - began) * 1000.0, 1)
            except Exception as exc:  # the database is down or unreachable
                logger.warning("the session store failed: %s", type(exc).__name__,
                               exc_info=True, extra={"call_id": call_id})
                return self._reject(503, "the session store is unavailable; try again "
                                    "shortly", "store")
            if isinstance(owned, web.Response):
                return owned
            ownership = owned
        try:
            answer = await peer.accept(sdp)
        except SignalingError as exc:
            if ownership is not None:
                await ownership.release()
            return self._reject(400, str(exc), "sdp")

        def on_event(event: SessionEvent) -> None:
            if isinstance(event, TurnMetrics) and (ms := event.voice_to_voice_ms) is not None:
                self.admission.record(ms)
            for message in messages_for_event(event):
                if isinstance(message, LatencyMessage):
                    message = message.model_copy(update={"receive_ms": peer.receive_delay_ms()})
                peer.send(message)

        try:
            if ownership is None:
                call = await self.factory(peer, self.engines, clock, on_event)
            else:
                session = CallSession(ownership.session_id, ownership.persistence,
                                      resume=resume is not None)
                began = time.monotonic()
                call = await self.factory(peer, self.engines, clock, on_event, session=session)
                timing["state_load_ms"] = round((time.monotonic() - began) * 1000.0, 1)
        except Exception:
            logger.exception("could not start the call's session", extra={"call_id": call_id})
            await peer.aclose("the call could not start")
            if ownership is not None:
                await ownership.release()
            return self._reject(500, "the call could not start", "factory")
        token = call.resume_token if resume is None else resume.token
        peer.send(HelloMessage(session_id=call.session.session_id,
                               max_call_seconds=self.settings.peer.max_call_seconds,
                               resume_token=token, resumed=resume is not None))
        peer.send(StateMessage(state="listening"))
        task = asyncio.get_running_loop().create_task(self._run_call(peer, call, ownership),
                                                      name=f"{call_id}.run")
        self._calls[call_id] = (peer, task)
        if ownership is not None:
            self._sessions[ownership.session_id] = call_id
        self._accepted += 1
        logger.info("call %s", "resumed" if resume is not None else "started",
                    extra={"call_id": call_id, "session_id": str(call.session.session_id),
                           "calls": len(self._calls), **timing})
        if self._on_call is not None:
            self._on_call(peer, call)
        return web.json_response({"type": "answer", "sdp": answer, "call_id": call_id})

    async def _run_call(
        self, peer: WebRtcPeer, call: Call, ownership: SessionOwnership | None = None
    ) -> None:
        began = peer.clock.now()
        renewing = None
        if ownership is not None:
            renewing = asyncio.get_running_loop().create_task(
                ownership.run(), name=f"{peer.call_id}.lease")
        try:
            await call.session.run()
        except Exception:
            logger.exception("the call's session failed", extra={"call_id": peer.call_id})
        finally:
            await peer.aclose("the session ended")
            try:
                await call.aclose()  # (its last saves, while the lease is still held)
            finally:
                if renewing is not None and ownership is not None:
                    renewing.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await renewing
                    await ownership.release()
                    if self._sessions.get(ownership.session_id) == peer.call_id:
                        del self._sessions[ownership.session_id]
            self._calls.pop(peer.call_id, None)
            admission = self._admissions.pop(peer.call_id, None)
            if admission is not None:
                admission.release()
            self._ended.append(peer.statistics())
            logger.info("call ended", extra=_call_summary(peer, call, peer.clock.now() - began))
            if not self._calls:
                waiters, self._idle_waiters = self._idle_waiters, []
                for waiter in waiters:
                    if not waiter.done():
                        waiter.set_result(None)

    async def wait_idle(self) -> None:
        """Return once no call is active (every ended call's session has closed)."""
        if not self._calls:
            return
        waiter = asyncio.get_running_loop().create_future()
        self._idle_waiters.append(waiter)
        await waiter

    # -- introspection --------------------------------------------------------------

    def peers(self) -> list[WebRtcPeer]:
        """The peers of the active calls."""
        return [peer for peer, _ in self._calls.values()]

    def load(self) -> Load:
        """This process's load and headroom (what ``GET /load`` returns)."""
        return self.admission.load()

    def statistics(self) -> ServerStatistics:
        """Active calls, accepted and refused offers, the latest ended calls."""
        return ServerStatistics(active_calls=len(self._calls), accepted=self._accepted,
                                rejected=dict(self._rejected), ended=list(self._ended))

    def __repr__(self) -> str:
        return (f"WebRtcServer({self.settings.host}:{self.port}, calls={len(self._calls)}, "
                f"accepted={self._accepted}, rejected={sum(self._rejected.values())})")


def ignore_closed_transport_errors(loop: asyncio.AbstractEventLoop) -> None:
    """Log at DEBUG the ``ConnectionError`` s aiortc's SCTP tasks raise, unawaited, when a
    peer vanishes mid-send (its own background tasks; the call is already ending); every
    other unhandled task error still goes to the loop's default handler."""

    def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        task = context.get("future")
        coro = getattr(task, "get_coro", lambda: None)()
        name = getattr(coro, "__qualname__", "")
        if isinstance(exc, ConnectionError) and name.startswith("RTCSctpTransport."):
            logger.debug("aiortc SCTP send after the peer left: %s", exc)
            return
        loop.default_exception_handler(context)

    loop.set_exception_handler(handler)


async def serve(
    factory: CallFactory, *, settings: ServerSettings = DEFAULT_SERVER_SETTINGS,
    engines: VoiceEngines | None = None, announce: Callable[[str], Any] = print,
    store: Any | None = None,
) -> None:
    """Load the engines (unless given), listen, announce the URL, run until cancelled;
    ``store``: where calls' sessions are kept (resumable), None: not kept."""
    ignore_closed_transport_errors(asyncio.get_running_loop())
    if engines is None:
        engines = await asyncio.to_thread(VoiceEngines.load)
    server = WebRtcServer(factory, engines, settings=settings, store=store)
    async with server:
        announce(f"voxflow is listening: open {server.url}")
        if not _is_loopback(settings.host):
            if settings.host in ("0.0.0.0", "::", ""):
                import aioice.ice

                for address in aioice.ice.get_host_addresses(use_ipv4=True, use_ipv6=False):
                    announce(f"  from another device: {server.url_for(address)}")
            if settings.tls_cert is None:
                announce("warning: not bound to loopback and not https: browsers on other "
                         "devices will not open the microphone (use --tls-cert/--tls-key, "
                         "--self-signed, or an https reverse proxy); the token is all that "
                         "guards /offer")
        await asyncio.Event().wait()


def _call_summary(peer: WebRtcPeer, call: Call, seconds: float) -> dict[str, Any]:
    """The figures of the one INFO line that ends a call (``extra=`` of the log record)."""
    events = list(getattr(call.session, "events", ()))
    latencies = sorted(v for m in events
                       if isinstance(m, TurnMetrics) and (v := m.voice_to_voice_ms) is not None)
    median = latencies[len(latencies) // 2] if latencies else None
    return {
        "call_id": peer.call_id, "session_id": str(call.session.session_id),
        "reason": peer.close_reason, "duration_s": round(seconds, 1),
        "turns": sum(1 for e in events if isinstance(e, TurnMetrics)),
        "interruptions": sum(1 for e in events if isinstance(e, ReplyInterrupted)),
        "voice_to_voice_median_ms": None if median is None else round(median),
        "rejected_messages": peer.statistics().rejected_messages,
    }
