"""The phone's front door (``voxflow phone --front-door``): the carrier's webhooks, with
every call answered by a phone call worker through PostgreSQL.

* ``POST /voice`` (the number's webhook): its signature is checked (403 otherwise); the
  call (its ``CallSid``) is dispatched like a browser offer
  (:class:`~voxflow_adapters.hosting.dispatcher.Dispatcher`: a worker with a free slot
  and admission headroom claims it) and the answer is TwiML connecting the call to that
  worker's media stream with a one-time stream token, inside ``<Connect
  action="/voice/after?reconnects=0">``. No worker free: ``<Reject reason="busy"/>``.
* ``POST /voice/after`` (the ``<Connect>`` action URL): the carrier asks it, signed, when
  the call's stream ended. If the call is over (``CallStatus`` ``completed`` and the
  like) or its session saved that it ended for good
  (:func:`~voxflow_adapters.hosting.resume.call_ended`: the caller hung up, the worker
  ended it), the answer is ``<Hangup/>``: a normal end is never reconnected. Otherwise
  the stream was lost (its worker died) or handed over (its worker drains): the call is
  dispatched again, and the worker that takes it restores the session of that call id
  (:mod:`~voxflow_adapters.phone.host`), the action URL counting the reconnection. After
  ``max_reconnects`` of them, or when no worker can take it, the caller hears
  ``sorry`` and the call ends.

**What the caller hears meanwhile**: silence, nothing else. Between the stream's end and
the new stream's first reply audio the caller hears nothing and may speak: the new
stream's audio is read once the session is restored, so a word said in the gap is heard
then (the transport holds up to 10 s of it). The gap is the carrier noticing the end
(at once for a killed process: its socket is closed by the kernel), the action request,
a claim, and the takeover of the dead worker's lease (at most ``dead_after``: two
missed heartbeats). A ``<Say>`` would only lengthen it: TwiML runs its verbs one after
the other, so the stream would begin after the words.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from aiohttp import web
from pydantic import ValidationError

from ..hosting.dispatch import DispatchStore
from ..hosting.dispatcher import Dispatcher
from ..hosting.host import CallRefused
from ..hosting.public_url import HEALTH_PATH, check_public_url, health_handler, new_instance_id
from ..hosting.resume import call_ended
from .dispatch import CALL_ID_PATTERN, PhoneRequest, StreamAnswer, phone_session_id
from .server import STREAM_TOKEN_PARAMETER, SignatureCheck, public_address, signed_webhook
from .twilio import TwilioSerializer
from .wire import CarrierSerializer

__all__ = ["ENDED_STATUSES", "PhoneFrontDoor"]

logger = logging.getLogger(__name__)

ENDED_STATUSES = frozenset({"completed", "busy", "failed", "no-answer", "canceled"})
"""A ``CallStatus`` saying the call is over: nothing to reconnect."""

SORRY = "Sorry, the assistant cannot take your call now. Please call again later."


class PhoneFrontDoor:
    """The carrier's webhooks, calls dispatched to phone call workers (see the module).

    Args:
        store: the dispatch tables (``kind="phone"``).
        sessions: the session store the workers share (read here: did a session end?).
        signature: the webhooks' check; None accepts unsigned ones (loopback trials).
        public_url: this front door as the carrier reaches it (the signature covers it,
            the action URL is built on it); None: each request's own address.
        offer_timeout: how long (s) a call waits for a worker's answer.
        max_reconnects: how many times one call is reconnected.
        serializer: the carrier's answers (Twilio if None).
        webhook_path: the number's webhook (the action URL is ``<it>/after``).
    """

    def __init__(
        self, store: DispatchStore, sessions: Any, *, signature: SignatureCheck | None,
        public_url: str | None = None, offer_timeout: float = 10.0, max_reconnects: int = 3,
        serializer: CarrierSerializer | None = None, webhook_path: str = "/voice",
    ) -> None:
        if store.kind != "phone":
            raise ValueError(f"the phone front door needs a phone dispatch store "
                             f"(kind='phone'), got kind={store.kind!r}")
        if public_url is not None:  # (kept normalised: what the signature covers)
            public_url = check_public_url(public_url, option="public_url")
        if not 0 <= max_reconnects <= 100:
            raise ValueError(f"max_reconnects must be within 0..100, got {max_reconnects!r}")
        self.dispatcher = Dispatcher(store, offer_timeout=offer_timeout,
                                     start_hint="voxflow phone --worker")
        self.store = store
        self.sessions = sessions
        self.signature = signature
        self.public_url = public_url
        self.max_reconnects = max_reconnects
        self.serializer = serializer if serializer is not None else TwilioSerializer()
        self.webhook_path = webhook_path
        self.instance = new_instance_id()
        """This process's id in its ``GET /health`` answer (the public URL's probe)."""
        self.deployment: str | None = None
        """The hash of the deployment it serves, in its ``GET /health`` answer once
        :meth:`start` read it: the public URL's probe accepts any front door of it."""
        self.refused_webhooks = 0
        self.reconnected = 0
        """Calls dispatched again after their stream ended unfinished."""
        self.hung_up = 0
        """Action requests answered with a hang-up (the call had ended)."""

    @property
    def action_path(self) -> str:
        """The ``<Connect>`` action URL's path."""
        return f"{self.webhook_path}/after"

    async def start(self) -> None:
        """Connect to the database and listen for answers.

        Raises:
            DispatchUnavailableError: the database cannot be used.
        """
        await self.dispatcher.start()
        self.deployment = await self.store.deployment()

    async def aclose(self) -> None:
        """Close the database connections."""
        await self.dispatcher.aclose()

    def app(self) -> web.Application:
        """The webhook, the action URL and ``GET /health`` (its :attr:`instance` and
        :attr:`deployment`)."""
        app = web.Application(client_max_size=64 * 1024)
        app.router.add_post(self.webhook_path, self._webhook)
        app.router.add_post(self.action_path, self._after)
        app.router.add_get(HEALTH_PATH, health_handler(self.instance,
                                                       lambda: self.deployment))
        return app

    def _xml(self, answer: tuple[str, str]) -> web.Response:
        content_type, body = answer
        return web.Response(content_type=content_type, text=body)

    async def _params(self, request: web.Request) -> tuple[dict[str, str], str] | web.Response:
        """The signed webhook's parameters and its call id, or the refusal to answer
        (403 unsigned or forged, 400 without a valid ``CallSid``)."""
        params = await signed_webhook(request, self.signature, self.public_url)
        if params is None:
            self.refused_webhooks += 1
            return web.Response(status=403, text="forbidden")
        call_id = params.get("CallSid", "")
        if not CALL_ID_PATTERN.fullmatch(call_id):
            return web.Response(status=400, text="no valid CallSid")
        return params, call_id

    async def _webhook(self, request: web.Request) -> web.Response:
        checked = await self._params(request)
        if isinstance(checked, web.Response):
            return checked
        _, call_id = checked
        return await self._connect(request, call_id, 0,
                                   refused=self.serializer.reject_busy())

    async def _after(self, request: web.Request) -> web.Response:
        checked = await self._params(request)
        if isinstance(checked, web.Response):
            return checked
        params, call_id = checked
        try:
            done = int(request.query.get("reconnects", "0"))
        except ValueError:
            return web.Response(status=400, text="bad reconnects")
        if params.get("CallStatus") in ENDED_STATUSES:
            self.hung_up += 1
            return self._xml(self.serializer.hang_up())
        try:
            stored = await asyncio.to_thread(self.sessions.load_state,
                                             phone_session_id(call_id))
        except Exception as exc:  # the store is down: the call cannot be restored
            logger.error("could not read the phone call's session: %s", type(exc).__name__,
                         extra={"carrier_call_id": call_id})
            return self._xml(self.serializer.hang_up(SORRY))
        if call_ended(stored):
            self.hung_up += 1
            return self._xml(self.serializer.hang_up())
        if done >= self.max_reconnects:
            logger.warning("a phone call's stream ended again: not reconnected after %d "
                           "reconnection(s)", done, extra={"carrier_call_id": call_id})
            return self._xml(self.serializer.hang_up(SORRY))
        logger.info("reconnecting a phone call whose stream ended unfinished",
                    extra={"carrier_call_id": call_id, "reconnect": done + 1})
        self.reconnected += 1
        return await self._connect(request, call_id, done + 1,
                                   refused=self.serializer.hang_up(SORRY))

    async def _connect(self, request: web.Request, call_id: str, reconnect: int, *,
                       refused: tuple[str, str]) -> web.Response:
        """Dispatch the call to a worker; TwiML connecting it to that worker's stream
        (``refused`` when no worker takes it)."""
        body = PhoneRequest(call_id=call_id, reconnect=reconnect).model_dump_json()
        try:
            result = await self.dispatcher.request(body)
            assert result.answer_sdp is not None
            answer = StreamAnswer.model_validate_json(result.answer_sdp)
        except CallRefused as exc:
            logger.warning("a phone call was not taken: %s", exc.reason,
                           extra={"carrier_call_id": call_id})
            return self._xml(refused)
        except ValidationError:
            logger.error("a phone call worker answered something else than a stream")
            return self._xml(refused)
        action = public_address(request, self.public_url,
                                f"{self.action_path}?reconnects={reconnect}")
        return self._xml(self.serializer.answer(
            answer.stream_url, {STREAM_TOKEN_PARAMETER: answer.token}, action=action))

    def __repr__(self) -> str:
        return (f"PhoneFrontDoor(dispatched={self.dispatcher.dispatched}, "
                f"reconnected={self.reconnected})")
