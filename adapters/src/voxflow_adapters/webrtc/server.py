"""The ``voxflow serve`` web server: the call page and WebRTC signaling (aiohttp).

Routes:

* ``GET /``: the page (``static/index.html``), ``GET /static/...``: its script and style;
* ``POST /offer``: ``{"type": "offer", "sdp": "..."}`` with ``Authorization: Bearer
  <token>`` → ``{"type": "answer", "sdp": "...", "call_id": "..."}``. Candidates are
  gathered before answering (no trickle ICE), so one round trip sets the call up;
* ``GET /ice-servers`` (same token and Origin checks): ``{"ice_servers": [{"urls": [...],
  "username": ..., "credential": ...}]}``, the STUN/TURN servers the page uses too;
* ``GET /load`` (same checks): the process's :class:`~voxflow_adapters.hosting.admission.Load` as
  JSON (active calls, cap, headroom, recent voice-to-voice p95, model utilisation).

Admission (:mod:`voxflow_adapters.hosting.admission`): an offer is refused with 503 and a message
the page shows when the process is at ``max_calls`` or its recent answers are slower
than ``p95_target_ms``, rather than taking a call that slows every call down.

HTTPS: with ``tls_cert``/``tls_key`` (:mod:`~voxflow_adapters.hosting.tls`) the same app
is served over TLS and the Origin check expects ``https://`` origins. Behind a reverse
proxy, ``trust_forwarded`` lets the origin named by ``X-Forwarded-Proto``/``-Host``
through (never by default). ICE host candidates follow the bound interface.

Safety: the server binds to loopback by default; ``/offer`` needs the token (generated
and printed as part of the page URL unless given) and, when the request carries an
``Origin``, one the server allows (its own loopback origins, or ``allowed_origins``);
offers are size-limited; connections are bounded in number and in how long a request's
headers and body may take, and every response carries the security headers
(:mod:`~voxflow_adapters.webrtc.listener`); calls are limited in number and length; a
call whose ICE/DTLS never connects or whose peer goes silent is ended and its slot freed
(:class:`~voxflow_adapters.webrtc.peer.WebRtcPeer`).

Every call gets a fresh flow and ``VoiceSession`` from the :data:`CallFactory`; the
engines (Whisper, Piper, Silero) are loaded once and shared by all calls.

With a ``store`` (``voxflow serve`` gives the default one: ``VOXFLOW_DATABASE_URL`` or
the SQLite file), each call owns its session through a lease
(:class:`~voxflow_adapters.hosting.ownership.SessionOwnership`: acquired at call start,
renewed in the background, released at the end; every save fenced by it; a lost lease
ends the call, "the call lost its session"). An offer with ``resume`` (session id and
resume token) goes on with a stored session: the token is checked (403 if it is not that
session's), the lease is acquired (a live lease of another worker is waited out up to
``resume_wait``, never stolen: 409 if it is still held; a live call of the same session
on this server is the same page reconnecting, and it is ended first; the lease of a
holder :attr:`WebRtcServer.owner_dead` finds dead is taken over at once), and the call
continues from the stored history (:mod:`~voxflow_adapters.hosting.resume`).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import secrets
import socket
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import aioice.ice
from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field
from voxflow_voice.engines import VoiceEngines
from voxflow_voice.events import ReplyInterrupted, SessionEvent, TurnMetrics

from voxflow import telemetry
from voxflow.clock import MonotonicClock
from voxflow.errors import FencedWriteError
from voxflow.ids import SessionId
from voxflow.llm import preload
from voxflow.logs import bind_log_context
from voxflow.tasks import cancel_and_wait
from voxflow_adapters.hosting.admission import (
    Admission,
    AdmissionController,
    AdmissionSettings,
    Load,
)

from ..hosting.call_cost import WEBRTC_CALLER, CostSettings
from ..hosting.calls import Call, CallFactory, CallSession
from ..hosting.errors import CapacityExceededError, SignalingError
from ..hosting.metrics import CallMetrics, HostCounts
from ..hosting.ownership import OwnerDead, SessionOwnership
from ..hosting.wire import ResumeRequest
from ._libopus import OpusLibraryError, library_version
from ._resume import ResumeAdmission, StoredRead
from .peer import PeerStatistics, WebRtcPeer
from .protocol import HelloMessage, messages_for_event, state_message
from .rtp_send import AiortcChanged, check_internals
from .signaling import (
    DEFAULT_SERVER_SETTINGS,
    CallRefused,
    OfferAnswer,
    ServerSettings,
    SignalingServer,
    is_loopback,
)

__all__ = [
    "DEFAULT_SERVER_SETTINGS",
    "CallRefused",
    "OfferAnswer",
    "ServerSettings",
    "ServerStatistics",
    "SignalingServer",
    "WebRtcServer",
    "ignore_closed_transport_errors",
    "serve",
]

logger = logging.getLogger(__name__)


class ServerStatistics(BaseModel):
    """What the server has done so far."""

    model_config = ConfigDict(frozen=True)

    active_calls: int
    accepted: int
    rejected: dict[str, int] = Field(description="refused offers by reason")
    ended: list[PeerStatistics] = Field(description="the most recent ended calls")


class WebRtcServer(SignalingServer):
    """The page, the signaling endpoint and the calls of one process.

    Without :meth:`start` (no HTTP), it is the call host of a call worker
    (:class:`~voxflow_adapters.hosting.worker.CallWorker`): offers come to
    :meth:`answer_offer` from the database.

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
        metrics: where the calls' metrics go (``voxflow serve --metrics-port``); None:
            nowhere.
    """

    def __init__(
        self, factory: CallFactory, engines: VoiceEngines, *,
        settings: ServerSettings = DEFAULT_SERVER_SETTINGS,
        on_call: Callable[[WebRtcPeer, Call], None] | None = None,
        store: Any | None = None, worker_id: str | None = None,
        admission: AdmissionController | None = None, metrics: CallMetrics | None = None,
    ) -> None:
        if not callable(factory):
            raise TypeError("factory must be a CallFactory (an async callable)")
        super().__init__(settings=settings)
        self.factory = factory
        self.engines = engines
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
                              p95_target_ms=settings.p95_target_ms,
                              cost=CostSettings(profile=WEBRTC_CALLER)),
            scheduler=engines.scheduler, rates=engines.rates)
        self._admissions: dict[str, Admission] = {}
        self._lag_task: asyncio.Task[None] | None = None
        self.metrics = metrics
        if metrics is not None:
            metrics.watch(self.admission.load, self._counts)
        self._calls: dict[str, tuple[WebRtcPeer, asyncio.Task[None]]] = {}
        self._sessions_of: dict[str, Call] = {}  # call id -> its session (live calls)
        self._reserved = 0
        self._accepted = 0
        self._ended: deque[PeerStatistics] = deque(maxlen=100)
        self._numbers = itertools.count(1)
        self._idle_waiters: list[asyncio.Future[None]] = []
        self.call_prefix = "call"
        """Call ids are ``<call_prefix>-<n>`` (a call worker puts its id in them)."""
        self.on_call_ended: Callable[[str], None] | None = None
        """Called with the call id once a call has ended and its slot is free."""
        self._resumes = ResumeAdmission(store, settings=settings, worker_id=self.worker_id,
                                        sessions=self._sessions, calls=self._calls,
                                        metrics=metrics)

    @property
    def owner_dead(self) -> OwnerDead | None:
        """Whether the holder of a resumed session's lease is dead (a call worker sets it:
        the holder's worker stopped beating); its live lease is then taken over at once
        instead of waited out. None: every live lease is waited out."""
        return self._resumes.owner_dead

    @owner_dead.setter
    def owner_dead(self, owner_dead: OwnerDead | None) -> None:
        self._resumes.owner_dead = owner_dead

    @property
    def max_calls(self) -> int:
        """The most calls this process could hold at once (its admission's
        :attr:`~voxflow_adapters.hosting.admission.AdmissionController.ceiling`:
        ``settings.max_calls``, else unbounded but for the measured slots)."""
        return self.admission.ceiling

    async def start(self) -> str:
        """Load litellm (off the loop), then listen, and measure the event loop's lag
        (admission); the page URL.

        litellm first: every call's session starts loading it on a thread, and that
        thread's imports hold the GIL for seconds of CPU: with calls already running
        their outbound frames went out late (``webrtc_load.py --models real --calls 4``:
        16-30 % of frames more than 20 ms late, p95 1.3-2.5 s, against 0.1 % and 1.0 s
        with it loaded first).

        Raises:
            OpusLibraryError: libopus cannot be loaded (every call encodes and decodes
                with it); the error names the fix.
            AiortcChanged: aiortc or aioice is not the locked version (the reply audio's
                send path uses their internals); the error names the fix.
        """
        library_version()  # (here, not per call: a server that cannot talk is not ready)
        check_internals()
        await preload()  # (its CPU is not the process's idle cost: watch_loop restarts
        # the meter's window when it starts)
        if self._lag_task is None:
            self._lag_task = asyncio.get_running_loop().create_task(
                self.watch_loop(), name="admission.loop-lag")
        return await super().start()

    async def watch_loop(self) -> None:
        """Measure the event loop's lag until cancelled (admission refuses new calls
        while it runs late); :meth:`start` runs it, a call worker too."""
        await self.admission.meter.watch_loop()

    @property
    def calls_held(self) -> int:
        """Calls running plus offers being answered (what counts against ``max_calls``)."""
        return len(self._calls) + self._reserved

    async def answer_offer(self, sdp: str, resume: ResumeRequest | None = None, *,
                           trace_context: Any = None) -> OfferAnswer:
        """Start a call of this process for ``sdp`` (``resume``: going on with a stored
        session). ``trace_context``: the trace it continues (a front door's dispatch);
        its ``voxflow.offer`` span, when tracing, is the parent of the call's spans.

        Raises:
            CallRefused: every slot is taken (503), the SDP is refused (400), a resume is
                refused (400, 403, 409), the session store is unavailable (503), or the
                call's session could not start (500).
        """
        if resume is not None and self.store is None:
            raise CallRefused(400, "this server keeps no sessions: a call cannot be "
                              "resumed here (offer without \"resume\" for a new call)",
                              "resume")
        call_id = f"{self.call_prefix}-{next(self._numbers)}"
        replacing, read = await self._resumes.reconnecting(resume)
        try:
            admission = self.admission.admit(call_id, replacing=replacing)
        except CapacityExceededError as exc:
            raise CallRefused(503, str(exc), "busy") from None
        self._reserved += 1
        try:
            with telemetry.trace_span("voxflow.offer", {"voxflow.call_id": call_id,
                                                        "voxflow.resume": resume is not None},
                                      kind="server", context=trace_context):
                answer = await self._start_call(sdp, call_id, resume, read)
        finally:
            self._reserved -= 1
            if call_id not in self._calls:
                admission.release()  # it did not start
        self._admissions[call_id] = admission
        return answer

    def _counts(self) -> HostCounts:
        """Calls started and offers refused (for the metrics; any thread)."""
        return HostCounts(admitted=self._accepted, refused=self.refusals())

    def app(self) -> web.Application:
        """The signalling app, and ``GET /load``."""
        app = super().app()
        app.router.add_get("/load", self._load)
        return app

    async def _load(self, request: web.Request) -> web.Response:
        refused = self._refused(request)
        if refused is not None:
            return refused
        return web.json_response(self.load().as_dict(), headers={"Cache-Control": "no-store"})

    def load(self) -> Load:
        """This process's load and headroom (what ``GET /load`` returns)."""
        return self.admission.load()

    async def aclose(self) -> None:
        """End every call (each settles its deliveries) and stop listening."""
        await self.end_calls("the server is shutting down")
        if self._lag_task is not None:
            await cancel_and_wait([self._lag_task])
            self._lag_task = None
        await super().aclose()

    def end_call(self, call_id: str, reason: str) -> bool:
        """End one running call (a ``bye`` with ``reason``); False if there is none."""
        found = self._calls.get(call_id)
        if found is not None:
            found[0].close_soon(reason)
        return found is not None

    def call_ids(self) -> list[str]:
        """The running calls, oldest first."""
        return list(self._calls)

    async def hand_over(self, call_id: str, reason: str, *, quiet_within: float
                        ) -> SessionId | None:
        """Move a running call to another worker: at its next quiet moment (nothing said
        or heard, no turn under way; :attr:`VoiceSession.quiet
        <voxflow_voice.session.VoiceSession.quiet>`), or after ``quiet_within`` seconds
        whatever it is doing, the page is sent a ``handover`` (``reason``) instead of a
        ``bye``, and the call ends here: its state saved, its lease released. The page's
        resume then goes on with the session wherever a front door dispatches it.

        Returns the session handed over, once the call is closed here; None when there
        was no such call (or it keeps no session), or it ended meanwhile by itself.
        """
        found, call = self._calls.get(call_id), self._sessions_of.get(call_id)
        if found is None or call is None or self.store is None:
            return None
        peer, task = found
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0.0, quiet_within)
        quiet = call.session.quiet
        while not quiet and not peer.closed.is_set() and loop.time() < deadline:
            await asyncio.sleep(0.02)
            quiet = call.session.quiet
        if not peer.hand_over(reason):  # it was ending by itself
            return None
        session_id = call.session.session_id
        logger.info("call handed over", extra={"call_id": call_id, "session_id": session_id,
                                               "quiet": quiet})
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.shield(task)
        return session_id

    async def end_calls(self, reason: str) -> None:
        """End every running call (a ``bye`` with ``reason``) and wait until each closed."""
        calls = list(self._calls.values())
        for peer, _ in calls:
            peer.close_soon(reason)
        for _, task in calls:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _start_call(
        self, sdp: str, call_id: str, resume: ResumeRequest | None = None,
        read: StoredRead | None = None,
    ) -> OfferAnswer:
        # this request's task starts the peer's and the session's tasks: their lines too
        bind_log_context(call_id=call_id)
        clock = MonotonicClock()
        peer = WebRtcPeer(settings=self._peer_settings, clock=clock, call_id=call_id)
        ownership: SessionOwnership | None = None
        timing: dict[str, float] = {}  # (for the log line: how long a resume took where)
        if self.store is not None:
            def lost(exc: FencedWriteError) -> None:
                reason = ownership.lost_reason if ownership is not None else None
                peer.close_soon(reason or f"the call lost its session ({exc.reason})")

            try:
                began = time.monotonic()
                ownership = await self._resumes.own(call_id, resume, lost, read)
                timing["lease_ms"] = round((time.monotonic() - began) * 1000.0, 1)
            except CallRefused:
                raise
            except Exception as exc:  # the database is down or unreachable
                logger.warning("the session store failed: %s", type(exc).__name__,
                               exc_info=True, extra={"call_id": call_id})
                if self.metrics is not None:
                    self.metrics.store_failed("acquire_lease")
                raise CallRefused(503, "the session store is unavailable; try again "
                                  "shortly", "store") from None
        try:  # the lease is renewed from here on: released on every way out but the call
            return await self._answer_with(sdp, peer, clock, call_id, resume, ownership,
                                           timing)
        except BaseException:  # (a cancelled request too)
            if ownership is not None and call_id not in self._calls:
                await asyncio.shield(ownership.release())
            raise

    async def _answer_with(
        self, sdp: str, peer: WebRtcPeer, clock: MonotonicClock, call_id: str,
        resume: ResumeRequest | None, ownership: SessionOwnership | None,
        timing: dict[str, float],
    ) -> OfferAnswer:
        """Answer the offer and start the call (``_start_call``'s second half)."""
        try:
            answer = await peer.accept(sdp)
        except SignalingError as exc:
            raise CallRefused(400, str(exc), "sdp") from None
        except OpusLibraryError:  # the server's fault: its paths go to its log only
            # (reached only by a server whose start() was not run, library use: start()
            # loads libopus, and once loaded it stays loaded for the process)
            logger.exception("libopus cannot be loaded", extra={"call_id": call_id})
            raise CallRefused(500, "the server cannot encode audio (see its log)",
                              "codec") from None
        except AiortcChanged:  # (the server's fault too; start() checks it first)
            logger.exception("the reply audio's send path", extra={"call_id": call_id})
            raise CallRefused(500, "the server cannot send audio (see its log)",
                              "server") from None

        observe = self.metrics.call() if self.metrics is not None else None

        def on_event(event: SessionEvent) -> None:
            if observe is not None:
                observe(event)
            if isinstance(event, TurnMetrics) and (ms := event.voice_to_voice_ms) is not None:
                self.admission.record(ms)
            for message in messages_for_event(event, {"receive_ms": peer.receive_delay_ms}):
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
            raise CallRefused(500, "the call could not start", "factory") from None
        token = call.resume_token if resume is None else resume.token
        peer.send(HelloMessage(session_id=call.session.session_id,
                               max_call_seconds=self.settings.peer.max_call_seconds,
                               resume_token=token, resumed=resume is not None))
        peer.send(state_message("listening"))
        task = asyncio.get_running_loop().create_task(self._run_call(peer, call, ownership),
                                                      name=f"{call_id}.run")
        self._calls[call_id] = (peer, task)
        self._sessions_of[call_id] = call
        if ownership is not None:
            self._sessions[ownership.session_id] = call_id
        self._accepted += 1
        logger.info("call %s", "resumed" if resume is not None else "started",
                    extra={"call_id": call_id, "session_id": str(call.session.session_id),
                           "calls": len(self._calls), **timing})
        if self._on_call is not None:
            self._on_call(peer, call)
        return OfferAnswer(sdp=answer, call_id=call_id)

    async def _run_call(
        self, peer: WebRtcPeer, call: Call, ownership: SessionOwnership | None = None
    ) -> None:
        began = peer.clock.now()
        try:
            try:  # (the lease is renewed by the ownership until its release below)
                await call.session.run()
            except Exception:
                logger.exception("the call's session failed", extra={"call_id": peer.call_id})
            finally:
                await peer.aclose("the session ended")
                await call.aclose()  # (its last saves, while the lease is still held)
        finally:
            if ownership is not None:
                await ownership.release()
                if self._sessions.get(ownership.session_id) == peer.call_id:
                    del self._sessions[ownership.session_id]
            self._calls.pop(peer.call_id, None)
            self._sessions_of.pop(peer.call_id, None)
            admission = self._admissions.pop(peer.call_id, None)
            if admission is not None:
                admission.release()
            ended = peer.statistics()
            self._ended.append(ended)
            if self.metrics is not None:
                self.metrics.call_ended(seconds=peer.clock.now() - began,
                                        stale_samples=ended.outbound.stale_samples)
            if self.on_call_ended is not None:
                self.on_call_ended(peer.call_id)
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
    store: Any | None = None, metrics: CallMetrics | None = None,
    listening: Callable[[WebRtcServer], Any] | None = None,
) -> None:
    """Load the engines (unless given), listen, announce the URL, run until cancelled;
    ``store``: where calls' sessions are kept (resumable), None: not kept; ``metrics``:
    where the calls' metrics go; ``listening``: called once the server listens."""
    ignore_closed_transport_errors(asyncio.get_running_loop())
    # litellm off the loop (with the models) before the first call, which would import it
    # on the loop every call runs on
    llm = asyncio.ensure_future(preload())
    if engines is None:
        engines = await asyncio.to_thread(VoiceEngines.from_environment)
    await llm
    if engines.rates.warmed_up is None:  # admission's prior: this machine's models
        await engines.warm_up()
    server = WebRtcServer(factory, engines, settings=settings, store=store, metrics=metrics)
    async with server:
        if listening is not None:
            listening(server)
        announce(f"voxflow is listening: open {server.url}")
        if not is_loopback(settings.host):
            if settings.host in ("0.0.0.0", "::", ""):
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
