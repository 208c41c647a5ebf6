"""A phone call worker's calls (``voxflow phone --worker``): the media WebSocket of
:class:`~voxflow_adapters.phone.server.PhoneServer`, its calls dispatched through
PostgreSQL by a :class:`~voxflow_adapters.hosting.worker.CallWorker` and kept in the
shared session store.

* **A request** (:class:`~voxflow_adapters.phone.dispatch.PhoneRequest`: the carrier's
  call id) is admitted like a browser offer (the worker's slot, then the
  :class:`~voxflow_adapters.hosting.admission.AdmissionController`), and answered with
  this worker's media stream address and a one-time stream token
  (:class:`~voxflow_adapters.phone.dispatch.StreamAnswer`), bound to that call id. The
  slot is held until the call ends, or for ``stream_token_seconds`` when its stream
  never comes.
* **The stream** must carry that token and that call id. The call's session is
  :func:`~voxflow_adapters.phone.dispatch.phone_session_id` of its call id: its lease is
  acquired (:class:`~voxflow_adapters.hosting.ownership.SessionOwnership`; the lease of
  a worker whose heartbeat stopped is taken over at once, another live one waited out
  up to ``resume_wait``), and a stored session is loaded and goes on, the answers its
  dead worker was saying cut at what the carrier's marks proved heard
  (:func:`~voxflow_adapters.hosting.resume.settle_dropped_replies`).
* **The end.** When the carrier says the caller hung up (``stop``), or this worker ends
  the call (its length limit, :meth:`PhoneHost.end_call`), the session saves that it
  ended (:data:`~voxflow_adapters.hosting.resume.CALL_ENDED_EVENT`) *before* the stream
  is closed: the front door, asked by the carrier what next, then hangs up. A stream
  that is lost (the worker died, the network) or handed over
  (:meth:`PhoneHost.hand_over`, a draining worker) saves no such thing: the front door
  reconnects the call to a live worker.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from pydantic import ValidationError
from voxflow_voice.engines import VoiceEngines
from voxflow_voice.events import SessionEvent

from voxflow.clock import MonotonicClock
from voxflow.errors import FencedWriteError
from voxflow.ids import SessionId

from ..hosting.admission import Admission, AdmissionController
from ..hosting.calls import Call, CallFactory, CallSession
from ..hosting.errors import CapacityExceededError
from ..hosting.host import CallRefused, OfferAnswer
from ..hosting.ownership import (
    DEFAULT_LEASE_SECONDS,
    OwnerDead,
    SessionBusyError,
    SessionOwnership,
)
from ..hosting.public_url import HEALTH_PATH, health_handler
from ..hosting.wire import ResumeRequest
from .dispatch import PhoneRequest, StreamAnswer, phone_session_id
from .server import PhoneCall, PhoneServer, PhoneSettings
from .transport import PhoneTransport
from .wire import Started

__all__ = ["PhoneHost"]

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class _Ticket:
    """A dispatched call this worker answered: its stream is expected."""

    call_id: str
    carrier_call_id: str
    admission: Admission
    expiry: asyncio.TimerHandle | None = None
    ownership: SessionOwnership | None = None


class PhoneHost(PhoneServer):
    """The phone calls of one call worker (see the module); a
    :class:`~voxflow_adapters.hosting.host.CallHost`.

    Args:
        factory: builds each call's flow and session (given a
            :class:`~voxflow_adapters.hosting.calls.CallSession`).
        engines: the process's STT, TTS and VAD.
        store: the session store shared by every worker (PostgreSQL).
        media_url: the media WebSocket as the carrier reaches it
            (``wss://worker-3.example.com/media``).
        settings: the calls' settings (``max_calls``: the upper bound of the worker's
            slots; None: as many as the calls' measured cost allows).
        worker_id: its name in lease owners (default: host, pid, random).
        admission: decides which calls are taken (one from ``settings.max_calls`` and
            ``settings.p95_target_ms`` if None).
        lease_seconds: a call's lease without renewal.
        resume_wait: how long a stream waits for a live lease of another worker.
        on_call: called with each started call's transport and call (tests).
    """

    def __init__(
        self, factory: CallFactory, engines: VoiceEngines, *, store: Any, media_url: str,
        settings: PhoneSettings | None = None, worker_id: str | None = None,
        admission: AdmissionController | None = None,
        lease_seconds: float = DEFAULT_LEASE_SECONDS, resume_wait: float = 10.0,
        on_call: Callable[[PhoneTransport, Call], None] | None = None,
    ) -> None:
        super().__init__(factory, engines, settings=settings, admission=admission,
                         on_call=on_call)
        if not media_url.startswith(("ws://", "wss://")):
            raise ValueError(f"media_url must be a ws:// or wss:// URL, got {media_url!r}")
        self.store = store
        self.media_url = media_url
        self.worker_id = worker_id or (f"{socket.gethostname()}:{os.getpid()}:"
                                       f"{secrets.token_hex(3)}")
        self.lease_seconds = float(lease_seconds)
        self.resume_wait = float(resume_wait)
        self.on_call_ended: Callable[[str], None] | None = None
        self.owner_dead: OwnerDead | None = None
        self._expected: dict[str, _Ticket] = {}  # stream token -> its call
        self._opening: set[int] = set()  # streams begun, their sessions being restored

    def app(self) -> web.Application:
        """The media WebSocket, ``GET /load`` and ``GET /health`` (the webhooks are the
        front door's; the :class:`~voxflow_adapters.hosting.worker.CallWorker` measures
        the loop's lag)."""
        app = web.Application(client_max_size=64 * 1024)
        app.router.add_get(self.settings.media_path, self._media)
        app.router.add_get("/load", self._load)
        app.router.add_get(HEALTH_PATH, health_handler(self.instance))
        return app

    # -- CallHost ---------------------------------------------------------------------

    @property
    def calls_held(self) -> int:
        """Calls running, streams expected and streams whose session is being opened."""
        return len(self._calls) + len(self._expected) + len(self._opening)

    async def answer_offer(self, sdp: str, resume: ResumeRequest | None = None, *,
                           trace_context: Any = None) -> OfferAnswer:
        """Expect the stream of the phone call ``sdp`` (a
        :class:`~voxflow_adapters.phone.dispatch.PhoneRequest` as JSON): its answer is
        the media stream's address and a one-time token (``resume`` is not used: the
        call id names the session).

        Raises:
            CallRefused: the request is malformed (400) or the worker is full (503).
        """
        try:
            request = PhoneRequest.model_validate_json(sdp)
        except ValidationError:
            raise CallRefused(400, "not a phone call request", "request") from None
        call_id = f"{self.call_prefix}-{next(self._numbers)}"
        try:
            admission = self.admission.admit(call_id)
        except CapacityExceededError as exc:
            raise CallRefused(503, str(exc), "busy") from None
        token = secrets.token_urlsafe(24)
        ticket = _Ticket(call_id, request.call_id, admission)
        ticket.expiry = asyncio.get_running_loop().call_later(
            self.settings.stream_token_seconds, self._stream_never_came, token)
        self._expected[token] = ticket
        logger.info("phone call dispatched here", extra={
            "call_id": call_id, "reconnect": request.reconnect})
        answer = StreamAnswer(stream_url=self.media_url, token=token)
        return OfferAnswer(sdp=answer.model_dump_json(), call_id=call_id)

    def _stream_never_came(self, token: str) -> None:
        ticket = self._expected.pop(token, None)
        if ticket is not None:
            logger.warning("a dispatched phone call's stream never came",
                           extra={"call_id": ticket.call_id})
            self._free(ticket)

    def _free(self, ticket: _Ticket) -> None:
        ticket.admission.release()
        if self.on_call_ended is not None:
            self.on_call_ended(ticket.call_id)

    def _entry(self, call_id: str) -> PhoneCall | None:
        return next((e for e in self._calls.values()
                     if isinstance(e.ticket, _Ticket) and e.ticket.call_id == call_id), None)

    def end_call(self, call_id: str, reason: str) -> bool:
        """End one running call for good (the front door then hangs up); False if there
        is none."""
        entry = self._entry(call_id)
        if entry is None:
            return False
        entry.ending = entry.ending or reason
        entry.transport.end_input()
        return True

    def call_ids(self) -> list[str]:
        """The running calls, oldest first."""
        return [e.ticket.call_id for e in self._calls.values() if isinstance(e.ticket, _Ticket)]

    async def hand_over(self, call_id: str, reason: str, *, quiet_within: float
                        ) -> SessionId | None:
        """Close the call's stream at its next quiet moment (or after ``quiet_within``
        seconds) without ending its session: the carrier asks the front door what next,
        and it reconnects the call to another worker. The session handed over, once
        closed here; None if there is no such call."""
        entry = self._entry(call_id)
        if entry is None:
            return None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0.0, quiet_within)
        while not entry.call.session.quiet and loop.time() < deadline:
            if entry.transport.input_ended:
                return None  # it was ending by itself
            await asyncio.sleep(0.02)
        if entry.transport.input_ended or entry.ending is not None:
            return None
        entry.transport.end_input()  # (ending None: its session is not ended)
        session_id = entry.call.session.session_id
        logger.info("phone call handed over", extra={"call_id": call_id, "reason": reason})
        await entry.closed.wait()
        return session_id

    async def end_calls(self, reason: str) -> None:
        """End every running call for good and wait until each closed."""
        entries = list(self._calls.values())
        for call_id in self.call_ids():
            self.end_call(call_id, reason)
        for entry in entries:
            await entry.closed.wait()

    # -- the stream -------------------------------------------------------------------

    def _take_token(self, token: str | None, started: Started) -> Any:
        ticket = self._expected.get(token) if token is not None else None
        if ticket is None or ticket.carrier_call_id != started.call_id:
            return None  # (a token issued for another call is not spent by this one)
        del self._expected[token]  # type: ignore[arg-type]
        self._opening.add(id(ticket))  # (still held: from expected to opening at once)
        if ticket.expiry is not None:
            ticket.expiry.cancel()
        return ticket

    async def _open_call(self, transport: PhoneTransport, clock: MonotonicClock,
                         on_event: Callable[[SessionEvent], None], ticket: Any) -> Call:
        assert isinstance(ticket, _Ticket)
        session_id = phone_session_id(ticket.carrier_call_id)

        def lost(exc: FencedWriteError) -> None:  # another worker took the session
            logger.warning("the phone call lost its session", extra={
                "call_id": ticket.call_id, "reason": exc.reason})
            for entry in self._calls.values():
                if entry.ticket is ticket:
                    entry.ending = f"the call lost its session ({exc.reason})"
            transport.end_input()

        try:
            ticket.ownership = await SessionOwnership.acquire(
                self.store, session_id, f"{self.worker_id}/{ticket.call_id}",
                ttl=self.lease_seconds, wait=self.resume_wait, on_lost=lost,
                owner_dead=self.owner_dead)
        except SessionBusyError:
            logger.warning("the phone call's session is live on another worker",
                           extra={"call_id": ticket.call_id})
            raise
        stored = await asyncio.to_thread(self.store.load_state, session_id)
        session = CallSession(session_id, ticket.ownership.persistence,
                              resume=stored is not None)
        call = await self.factory(transport, self.engines, clock, on_event, session=session)
        self._opening.discard(id(ticket))  # (the server registers the call at once)
        logger.info("phone call %s", "resumed" if session.resume else "started",
                    extra={"call_id": ticket.call_id, "session_id": session_id})
        return call

    async def _finish_call(self, entry: PhoneCall, how: str | None) -> None:
        call_id = entry.ticket.call_id if isinstance(entry.ticket, _Ticket) else None
        if how is None or entry.call.record_end is None:
            logger.info("phone call's stream ended, its session not ended (%s)",
                        "lost or handed over" if how is None else "not persisted",
                        extra={"call_id": call_id})
            return
        try:
            await entry.call.record_end(how)
        except FencedWriteError as exc:  # (taken over: it ends elsewhere)
            logger.warning("the phone call's end (%s) was not saved: its session's write "
                           "was refused (%s)", how, exc.reason,
                           extra={"call_id": call_id})
            return
        logger.info("phone call's end recorded: %s", how,
                    extra={"call_id": call_id})

    async def _after_call(self, entry: PhoneCall | None, ticket: Any) -> None:
        if not isinstance(ticket, _Ticket):
            return
        if ticket.ownership is not None:
            await ticket.ownership.release()
        self._opening.discard(id(ticket))  # (its session could not be opened)
        self._free(ticket)

    def __repr__(self) -> str:
        return (f"PhoneHost({self.worker_id!r}, calls={len(self._calls)}, "
                f"expected={len(self._expected)})")
