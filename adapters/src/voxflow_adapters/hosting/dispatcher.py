"""A front door's side of dispatch, whatever the transport: post a call request to the
offers table and wait for the call worker's answer.

:class:`Dispatcher` is what a front door (a browser's, :class:`~voxflow_adapters.webrtc.
front_door.FrontDoor`, or a carrier's, :class:`~voxflow_adapters.phone.front_door.
PhoneFrontDoor`) holds: it refuses at once when no live worker of its kind has a free
slot (and says so when none is registered in its schema but live ones are in another:
the processes do not share one ``VOXFLOW_DATABASE_URL``, the log names the schemas),
posts the request, waits for the answer (``NOTIFY``, or a poll every
``poll_interval``), and gives up after ``offer_timeout`` seconds, withdrawing it (a
worker that answers late ends the call it started). It holds no call state, so any
number of front doors can serve one database.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from voxflow import telemetry

from .dispatch import DispatchStore
from .dispatch_tables import DispatchUnavailableError, OfferResult
from .host import CallRefused

__all__ = ["Dispatcher"]

logger = logging.getLogger(__name__)


class Dispatcher:
    """Posts call requests for call workers and waits for their answers (see the module).

    Args:
        store: the dispatch tables (of the front door's kind of call).
        offer_timeout: how long (s) a request waits for a worker's answer.
        poll_interval: seconds between looks at the request's row when no ``NOTIFY`` came.
        purge_interval: seconds between purges of requests expired a minute ago (their
            rows hold credentials; a front door that died while waiting leaves them),
            besides the purge at start. The rows of dead workers are removed every
            ``store.forget_after / 2`` seconds
            (:meth:`~voxflow_adapters.hosting.dispatch.DispatchStore.forget_dead_workers`).
        start_hint: how to start another worker (said when every slot is taken).
    """

    def __init__(
        self, store: DispatchStore, *, offer_timeout: float = 10.0, poll_interval: float = 0.5,
        purge_interval: float = 60.0, start_hint: str = "voxflow serve --worker",
    ) -> None:
        if not offer_timeout > 0 or not poll_interval > 0 or not purge_interval > 0:
            raise ValueError("offer_timeout, poll_interval and purge_interval must be > 0 "
                             "seconds")
        self.store = store
        self.offer_timeout = float(offer_timeout)
        self.poll_interval = float(poll_interval)
        self.purge_interval = float(purge_interval)
        self.start_hint = start_hint
        self.dispatched = 0
        """Requests answered by a worker so far."""
        self._waiting: dict[str, asyncio.Event] = {}
        self._elsewhere: tuple[float, dict[str, int]] = (float("-inf"), {})
        self._mismatch_said = float("-inf")
        self._listen_task: asyncio.Task[None] | None = None
        self._purge_task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Connect to the database and listen for answers.

        Raises:
            DispatchUnavailableError: the database cannot be used.
        """
        await self.store.open()
        await self.store.forget_expired()
        await self.store.forget_dead_workers()
        if not await self.store.workers():  # none registered here: are they elsewhere?
            await self.workers_elsewhere()
        self._listen_task = await self.store.listen(self.store.answers_channel, self._notified,
                                                    on_reconnect=self._wake_all)
        self._purge_task = asyncio.get_running_loop().create_task(
            self._purge_expired(), name="front-door.purge")

    async def _purge_expired(self) -> None:
        """Every ``purge_interval`` seconds, delete the requests that expired a minute
        ago; every ``forget_after / 2`` seconds of the store, the rows of workers whose
        heartbeat stopped (each death is logged once, by whoever removes the row)."""
        loop = asyncio.get_running_loop()
        purged_at = loop.time()
        while True:
            await asyncio.sleep(min(self.purge_interval, self.store.forget_after / 2))
            try:
                await self.store.forget_dead_workers()
                if loop.time() - purged_at < self.purge_interval:
                    continue
                purged_at = loop.time()
                deleted = await self.store.forget_expired()
            except DispatchUnavailableError as exc:  # the next round tries again
                logger.warning("purging expired offers or dead workers failed: %s", exc)
                continue
            if deleted:
                logger.info("purged %d expired offer(s)", deleted)

    async def aclose(self) -> None:
        """Stop listening and close the database connections."""
        for task in (self._listen_task, self._purge_task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        await self.store.aclose()

    def _notified(self, offer_id: str) -> None:
        event = self._waiting.get(offer_id)
        if event is not None:
            event.set()

    def _wake_all(self) -> None:
        """The listener was made again: an answer may have come meanwhile, unnotified."""
        for event in self._waiting.values():
            event.set()

    async def request(self, body: str, resume: str | None = None) -> OfferResult:
        """Hand ``body`` (an SDP offer, a phone call's request; ``resume``: the stored
        session it goes on with, JSON) to a call worker; its answer (state
        ``answered``, with ``answer_sdp`` and ``call_id``).

        Raises:
            CallRefused: 503 when no live worker has a free slot, none answered in time
                or the database is unreachable; the worker's own refusal otherwise.
        """
        try:
            free, live = await self.store.free_slots()
            if (free <= 0 and live == 0 and not await self.store.workers()
                    and await self.workers_elsewhere()):
                raise CallRefused(
                    503, "no call worker is registered where this front door looks, but "
                    "some are in another schema of the database: give every front door "
                    "and worker the same VOXFLOW_DATABASE_URL (see the front door's log)",
                    "schema")
            if free <= 0:
                raise CallRefused(
                    503, f"no call worker has a free slot ({live} live worker(s), all busy "
                    f"or draining): start another with `{self.start_hint}`, or retry",
                    "busy")
            result = await self._dispatch(body, resume)
        except DispatchUnavailableError as exc:
            logger.error("dispatch failed: %s", exc)
            raise CallRefused(503, "the call dispatch database is unreachable; retry shortly",
                              "database") from None
        if result.state == "answered" and result.answer_sdp and result.call_id:
            self.dispatched += 1
            logger.info("offer dispatched", extra={"call_id": result.call_id,
                                                   "worker_id": result.worker_id})
            return result
        if result.state == "failed":
            raise CallRefused(result.status or 500, result.error or "the call worker refused "
                              "the offer", "worker")
        raise CallRefused(503, f"no call worker answered within {self.offer_timeout:g} s "
                          "(every worker busy, or none reachable): retry", "timeout")

    async def workers_elsewhere(self) -> dict[str, int]:
        """Live call workers in other schemas of the database (looked up at most every
        5 s), asked when none is registered in this one; when there are, a WARNING (at
        most once a minute) names them and this front door's schema: the deployment's
        processes do not share one ``search_path``."""
        loop = asyncio.get_running_loop()
        at, found = self._elsewhere
        if loop.time() - at >= 5.0:
            try:
                found = await self.store.live_workers_elsewhere()
            except DispatchUnavailableError:  # (the refusal says the rest)
                found = {}
            self._elsewhere = (loop.time(), found)
        if found and loop.time() - self._mismatch_said >= 60.0:
            self._mismatch_said = loop.time()
            where = ", ".join(f"{n} in schema {name!r}" for name, n in found.items())
            logger.warning(
                "no call worker is registered in schema %r, where this front door looks "
                "(the first of VOXFLOW_DATABASE_URL's search_path), but live ones are: %s. "
                "Front doors and workers meet in one schema: give every process the same "
                "VOXFLOW_DATABASE_URL", self.store.schema, where)
        return found

    async def _dispatch(self, body: str, resume: str | None) -> OfferResult:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.offer_timeout
        woken = asyncio.Event()
        with telemetry.trace_span("voxflow.dispatch", kind="producer"):
            # the worker's call continues this trace (W3C traceparent in the offer's row)
            carrier = telemetry.inject_context({})
            offer_id = await self.store.post_offer(body, expires_in=self.offer_timeout,
                                                   resume=resume,
                                                   traceparent=carrier.get("traceparent"))
        self._waiting[offer_id] = woken
        done = False
        try:
            while True:
                woken.clear()
                result = await self.store.take_result(offer_id)
                if result is not None:
                    done = True
                    return result
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(min(self.poll_interval, remaining)):
                        await woken.wait()
            given_up = await self.store.take_result(offer_id, give_up=True)
            done = True
            return given_up if given_up is not None else OfferResult(state="pending")
        finally:
            self._waiting.pop(offer_id, None)
            if not done:  # cancelled: withdraw the offer (a late answer ends its call)
                with contextlib.suppress(DispatchUnavailableError):
                    await asyncio.shield(self.store.take_result(offer_id, give_up=True))

    def __repr__(self) -> str:
        return f"Dispatcher({self.store!r}, dispatched={self.dispatched})"
