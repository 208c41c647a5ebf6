"""A front door (``voxflow serve --front-door``): the page and ``POST /offer``, with the
offer handed to a call worker through PostgreSQL.

The HTTP contract, the token and the Origin checks are those of ``voxflow serve``
(:class:`~voxflow_adapters.webrtc.server.SignalingServer`). A valid offer is posted to
the offers table (:mod:`~voxflow_adapters.hosting.dispatch`); a call worker with a free
slot claims it and writes its answer, whose ICE candidates are the worker's: the media
go between the caller and that worker, never through the front door. The front door
holds no call state, so any number of them can serve one database (behind any load
balancer, no sticky sessions).

Refusals are immediate when no live worker has a free slot (503, saying so; when none is
registered in this front door's schema but live ones are in another, the 503 says the
processes do not share one ``VOXFLOW_DATABASE_URL`` and the log names the schemas), and after
``offer_timeout`` seconds when no worker answered (503): the offer is then withdrawn, and
a worker that answers late ends the call it started.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from voxflow import telemetry

from ..hosting.dispatch import DispatchStore, DispatchUnavailableError, OfferResult
from ..hosting.wire import ResumeRequest
from .signaling import (
    DEFAULT_SERVER_SETTINGS,
    CallRefused,
    OfferAnswer,
    ServerSettings,
    SignalingServer,
)

__all__ = ["FrontDoor"]

logger = logging.getLogger(__name__)


class FrontDoor(SignalingServer):
    """The page and signalling, with calls answered by call workers.

    Args:
        store: the dispatch tables.
        settings: bind address, token, Origin rules, size limits (``max_calls`` is not
            used: the workers' slots are).
        offer_timeout: how long (s) an offer waits for a worker's answer.
        poll_interval: seconds between looks at the offer's row when no ``NOTIFY`` came.
        purge_interval: seconds between purges of offers expired a minute ago (their
            rows hold resume tokens and ICE credentials; a front door that died while
            waiting leaves them), besides the purge at start. The rows of dead workers
            are removed every ``store.forget_after / 2`` seconds
            (:meth:`~voxflow_adapters.hosting.dispatch.DispatchStore.forget_dead_workers`).
    """

    def __init__(
        self, store: DispatchStore, *, settings: ServerSettings = DEFAULT_SERVER_SETTINGS,
        offer_timeout: float = 10.0, poll_interval: float = 0.5, purge_interval: float = 60.0,
    ) -> None:
        super().__init__(settings=settings)
        if not offer_timeout > 0 or not poll_interval > 0 or not purge_interval > 0:
            raise ValueError("offer_timeout, poll_interval and purge_interval must be > 0 "
                             "seconds")
        self.purge_interval = float(purge_interval)
        self.store = store
        self.offer_timeout = float(offer_timeout)
        self.poll_interval = float(poll_interval)
        self.dispatched = 0
        """Offers answered by a worker so far."""
        self._waiting: dict[str, asyncio.Event] = {}
        self._elsewhere: tuple[float, dict[str, int]] = (float("-inf"), {})
        self._mismatch_said = float("-inf")
        self._listen_task: asyncio.Task[None] | None = None
        self._purge_task: asyncio.Task[None] | None = None

    async def start(self) -> str:
        """Connect to the database, listen for answers, then serve HTTP.

        Raises:
            DispatchUnavailableError: the database cannot be used.
        """
        await self.store.open()
        await self.store.forget_expired()
        await self.store.forget_dead_workers()
        if not await self.store.workers():  # none registered here: are they elsewhere?
            await self._workers_elsewhere()
        self._listen_task = await self.store.listen(self.store.answers_channel, self._notified,
                                                    on_reconnect=self._wake_all)
        self._purge_task = asyncio.get_running_loop().create_task(
            self._purge_expired(), name="front-door.purge")
        return await super().start()

    async def _purge_expired(self) -> None:
        """Every ``purge_interval`` seconds, delete the offers that expired a minute ago;
        every ``forget_after / 2`` seconds of the store, the rows of workers whose
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
        """Stop serving and close the database connections."""
        await super().aclose()
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

    async def answer_offer(self, sdp: str, resume: ResumeRequest | None = None) -> OfferAnswer:
        """Hand ``sdp`` (and ``resume``: the stored session it goes on with, checked by
        the worker) to a call worker and return its answer.

        Raises:
            CallRefused: 503 when no live worker has a free slot, none answered in time
                or the database is unreachable; the worker's own refusal otherwise.
        """
        try:
            free, live = await self.store.free_slots()
            if (free <= 0 and live == 0 and not await self.store.workers()
                    and await self._workers_elsewhere()):
                raise CallRefused(
                    503, "no call worker is registered where this front door looks, but "
                    "some are in another schema of the database: give every front door "
                    "and worker the same VOXFLOW_DATABASE_URL (see the front door's log)",
                    "schema")
            if free <= 0:
                raise CallRefused(
                    503, f"no call worker has a free slot ({live} live worker(s), all busy "
                    "or draining): start another with `voxflow serve --worker`, or retry",
                    "busy")
            result = await self._dispatch(
                sdp, None if resume is None else resume.model_dump_json())
        except DispatchUnavailableError as exc:
            logger.error("dispatch failed: %s", exc)
            raise CallRefused(503, "the call dispatch database is unreachable; retry shortly",
                              "database") from None
        if result.state == "answered" and result.answer_sdp and result.call_id:
            self.dispatched += 1
            logger.info("offer dispatched", extra={"call_id": result.call_id,
                                                   "worker_id": result.worker_id})
            return OfferAnswer(sdp=result.answer_sdp, call_id=result.call_id)
        if result.state == "failed":
            raise CallRefused(result.status or 500, result.error or "the call worker refused "
                              "the offer", "worker")
        raise CallRefused(503, f"no call worker answered within {self.offer_timeout:g} s "
                          "(every worker busy, or none reachable): retry", "timeout")

    async def _workers_elsewhere(self) -> dict[str, int]:
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

    async def _dispatch(self, sdp: str, resume: str | None) -> OfferResult:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.offer_timeout
        woken = asyncio.Event()
        with telemetry.trace_span("voxflow.dispatch", kind="producer"):
            # the worker's call continues this trace (W3C traceparent in the offer's row)
            carrier = telemetry.inject_context({})
            offer_id = await self.store.post_offer(sdp, expires_in=self.offer_timeout,
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
        return (f"FrontDoor({self.settings.host}:{self.port}, dispatched={self.dispatched}, "
                f"rejected={sum(self._rejected.values())})")
