"""The page and WebRTC signalling of ``voxflow serve`` (aiohttp), whoever answers the
offers: :class:`SignalingServer` serves ``GET /`` (the page), ``GET /ice-servers`` and
``POST /offer`` with the token, Origin, size and shape checks, and hands a valid offer to
:meth:`SignalingServer.answer_offer`: a call of this process
(:class:`~voxflow_adapters.webrtc.server.WebRtcServer`) or one dispatched to a call
worker (:class:`~voxflow_adapters.webrtc.front_door.FrontDoor`).
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import secrets
from collections import Counter
from pathlib import Path
from typing import Self

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..hosting.host import CallRefused, OfferAnswer
from ..hosting.ownership import DEFAULT_LEASE_SECONDS
from ..hosting.tls import ssl_context
from ..hosting.wire import ProtocolError, ResumeRequest, parse_offer
from .listener import BodyTimeoutError, Listener, read_body
from .peer import DEFAULT_PEER_SETTINGS, PeerSettings

__all__ = [
    "DEFAULT_SERVER_SETTINGS",
    "CallRefused",
    "OfferAnswer",
    "ServerSettings",
    "SignalingServer",
    "is_loopback",
]

logger = logging.getLogger("voxflow_adapters.webrtc.server")

STATIC_DIR = Path(__file__).with_name("static")
_OFFER_SHAPE = '{"type": "offer", "sdp": "..."}'


class ServerSettings(BaseModel):
    """Where the server listens and what it lets in."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    host: str = Field("127.0.0.1", min_length=1, description="bind address (loopback default)")
    port: int = Field(8080, ge=0, le=65535, description="TCP port (0: any free port)")
    token: str | None = Field(None, min_length=8, description="required for /offer; "
                              "None: a random one is generated")
    allowed_origins: tuple[str, ...] = Field(
        (), description="extra page origins allowed to POST /offer (e.g. https://host:port)"
    )
    max_sdp_bytes: int = Field(20_000, gt=0, le=1_000_000, description="largest offer SDP accepted")
    header_timeout: float = Field(
        10.0, gt=0, le=300, description="a request's headers (or a TLS handshake) must "
        "arrive within this (s) of the connection opening or the previous response; an "
        "idle keep-alive connection is closed then too",
    )
    body_timeout: float = Field(10.0, gt=0, le=300, description="an offer's body must "
                                "arrive within this (s): 408 otherwise")
    max_connections: int = Field(256, ge=1, le=100_000, description="open HTTP connections "
                                 "beyond which a new one is answered 503 and closed")
    max_calls: int | None = Field(
        None, ge=1, le=10_000, description="concurrent calls at most (None: as many as "
        "the calls' measured cost allows: voxflow_adapters.hosting.admission)",
    )
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
    lease_seconds: float = Field(DEFAULT_LEASE_SECONDS, gt=0, le=3600, description="a call's "
                                 "session lease (renewed every third of it)")
    resume_wait: float = Field(DEFAULT_LEASE_SECONDS + 2.0, ge=0, le=3600, description="how long "
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


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False

class SignalingServer:
    """The page and the signaling endpoint (token, Origin, size and shape checks): what
    answers a valid offer is :meth:`answer_offer`, a call of this process
    (:class:`WebRtcServer`) or one dispatched to a call worker
    (:class:`~voxflow_adapters.webrtc.front_door.FrontDoor`).

    Args:
        settings: bind address, token, limits.
    """

    def __init__(self, *, settings: ServerSettings = DEFAULT_SERVER_SETTINGS) -> None:
        if not isinstance(settings, ServerSettings):
            raise TypeError(f"settings must be ServerSettings, got {type(settings).__name__}")
        self.settings = settings
        self.token = settings.token if settings.token is not None else secrets.token_urlsafe(18)
        self._peer_settings = _bound_host_addresses(settings)
        self._rejected: Counter[str] = Counter()
        self._listener: Listener | None = None
        self.port: int | None = None

    async def answer_offer(self, sdp: str, resume: ResumeRequest | None = None) -> OfferAnswer:
        """Answer a checked offer SDP (``resume``: the stored session it goes on with).

        Raises:
            CallRefused: the offer is not answered (the status and reason say why).
        """
        raise NotImplementedError

    def refusals(self) -> dict[str, int]:
        """Offers refused so far, by reason key (``token``, ``busy``, ...); any thread."""
        return dict(self._rejected)

    def note_refusal(self, key: str) -> None:
        """Count an offer refused elsewhere than ``POST /offer`` (a call worker's)."""
        self._rejected[key] += 1

    # -- the app --------------------------------------------------------------------

    def app(self) -> web.Application:
        """The aiohttp application (routes and body size limit)."""
        app = web.Application(client_max_size=self.settings.max_sdp_bytes + 4096)
        app.router.add_get("/", self._page)
        app.router.add_get("/favicon.ico", self._favicon)
        app.router.add_static("/static/", STATIC_DIR, show_index=False)
        app.router.add_get("/ice-servers", self._ice_servers)
        app.router.add_post("/offer", self._offer)
        return app

    async def start(self) -> str:
        """Listen; returns the page URL (with the token)."""
        settings = self.settings
        context = None
        if settings.tls_cert is not None and settings.tls_key is not None:
            context = ssl_context(settings.tls_cert, settings.tls_key)
        listener = Listener(self.app(), host=settings.host, port=settings.port,
                            ssl_context=context, header_timeout=settings.header_timeout,
                            max_connections=settings.max_connections,
                            lingering=min(settings.body_timeout, 2.0))
        self.port = await listener.start()
        self._listener = listener
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
        """Stop listening."""
        if self._listener is not None:
            await self._listener.aclose()
            self._listener = None

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- handlers -------------------------------------------------------------------

    async def _page(self, request: web.Request) -> web.StreamResponse:
        return web.FileResponse(STATIC_DIR / "index.html", headers={
            "Cache-Control": "no-store",
            "Content-Security-Policy": "default-src 'self'; connect-src 'self'; "
                                       "media-src 'self' blob: mediastream:; "
                                       "frame-ancestors 'none'; base-uri 'none'; "
                                       "form-action 'none'; object-src 'none'",
        })  # (nosniff, no referrer, no frame: harden_headers, as every response)

    async def _favicon(self, request: web.Request) -> web.StreamResponse:
        return web.FileResponse(STATIC_DIR / "favicon.svg", headers={
            "Content-Type": "image/svg+xml", "Cache-Control": "max-age=86400",
        })

    def _reject(self, status: int, reason: str, key: str) -> web.Response:
        self.note_refusal(key)
        logger.warning("offer rejected (%s): %s", key, reason)
        return web.json_response({"error": reason}, status=status)

    def _origin_allowed(self, request: web.Request, origin: str) -> bool:
        settings = self.settings
        allowed = set(settings.allowed_origins)
        scheme = settings.scheme
        if is_loopback(settings.host):
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

    async def _offer(self, request: web.Request) -> web.Response:
        refused = self._refused(request)
        if refused is not None:
            return refused
        limit = self.settings.max_sdp_bytes
        if request.content_length is not None and request.content_length > limit + 4096:
            return self._reject(413, f"offer larger than {limit} bytes", "size")
        try:
            body = await read_body(request, self.settings.body_timeout)
        except web.HTTPRequestEntityTooLarge:
            return self._reject(413, f"offer larger than {limit} bytes", "size")
        except BodyTimeoutError as exc:
            response = self._reject(408, f"the offer's {exc}", "body_timeout")
            response.force_close()
            return response
        try:
            offer = parse_offer(body, max_bytes=limit + 4096)
        except ProtocolError as exc:
            return self._reject(400, f"the body must be JSON {_OFFER_SHAPE}: {exc.reason}",
                                "malformed")
        sdp = offer.sdp
        if len(sdp.encode()) > limit:
            return self._reject(413, f"offer SDP larger than {limit} bytes", "size")
        try:
            answer = await self.answer_offer(sdp, offer.resume)
        except CallRefused as exc:
            return self._reject(exc.status, exc.reason, exc.key)
        return web.json_response(answer.model_dump())
