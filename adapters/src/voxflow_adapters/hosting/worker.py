"""A call worker (``voxflow serve --worker``, ``voxflow phone --worker``): calls
dispatched through PostgreSQL, whatever their transport.

The worker claims the requests front doors post (:mod:`~voxflow_adapters.hosting.dispatch`:
browser offers, or phone calls, each worker taking its own kind), answers each with a
call of its :class:`~voxflow_adapters.hosting.host.CallHost` (the engines loaded once,
shared by its calls) and writes the answer back. The media then flow between the caller
and this worker directly: a browser answer carries the worker's ICE candidates, a phone
answer the worker's media stream address; the front door only relays the signalling.

* **Slots.** A claim takes one of the worker's slots in the claim's own transaction
  (:meth:`DispatchStore.claim`), and the worker only claims while it holds fewer calls
  (running, being answered, being claimed) than its slots. Each claimed slot is given
  back exactly once: when the offer could not be answered, or when its call ends.
* **Who claims first.** Every worker is woken by ``NOTIFY`` (and polls, the table being
  the truth); a worker waits ``spread * held / slots`` seconds before claiming (its
  admission's measured slots, :mod:`~voxflow_adapters.hosting.admission`), so the
  least loaded worker usually wins. A preference only: correctness never depends on it.
* **Heartbeat.** :class:`~voxflow_adapters.hosting.heartbeat.Heartbeat` writes it from
  its own thread and connection, so a busy event loop (speech models, many calls) never
  delays it; a worker whose heartbeat is stale cannot claim and is not counted by the
  front doors. One whose heartbeat stopped (``dead_after``, two beats) is dead: a resume
  of one of its calls takes the call's lease over at once
  (:meth:`CallWorker.owner_dead`) instead of waiting it out, and the fence refuses
  whatever the old worker might still write.
* **Drain** (SIGTERM): :meth:`CallWorker.drain` marks the worker draining (no claim
  succeeds after that) and hands each running call over to another live worker with a
  free slot, at the call's next quiet moment: the page is told to resume the session
  now (a ``handover`` message), the call's state is saved and its lease released here,
  and the page's resume goes on with it on another worker, as after a drop but without
  waiting to notice the silence. Calls no worker can take go on up to
  ``drain_seconds`` and then end with a ``bye``. The worker's row is removed and it
  stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import AsyncIterator
from typing import Any

from voxflow import telemetry
from voxflow.ids import SessionId
from voxflow.tasks import cancel_and_wait

from .admission import Load
from .dispatch import DispatchStore
from .dispatch_tables import ClaimedOffer, DispatchUnavailableError, WorkerReport
from .heartbeat import Heartbeat
from .host import CallHost, CallRefused
from .wire import ResumeRequest

__all__ = ["CallWorker"]

logger = logging.getLogger(__name__)

class CallWorker:
    """Claims dispatched offers and answers them with calls of ``host``.

    Args:
        host: this process's calls (its ``max_calls`` are the worker's registered slots,
            its admission's measured headroom the part of them it claims); not
            listening on HTTP.
        store: the dispatch tables.
        worker_id: this worker's name (default: ``host.worker_id``, its lease owner name).
        drain_seconds: how long running calls may go on after :meth:`drain` starts.
        poll_interval: seconds between looks at the table when no ``NOTIFY`` came.
        spread: the longest head start (s) a less loaded worker gets when claiming.
    """

    def __init__(
        self, host: CallHost, store: DispatchStore, *, worker_id: str | None = None,
        drain_seconds: float = 60.0, poll_interval: float = 1.0, spread: float = 0.05,
    ) -> None:
        if not callable(getattr(host, "answer_offer", None)):
            raise TypeError(f"host must be a CallHost, got {type(host).__name__}")
        if drain_seconds < 0 or not poll_interval > 0 or spread < 0:
            raise ValueError("drain_seconds and spread must be >= 0, poll_interval > 0")
        self.host = host
        self.store = store
        self.hostname = socket.gethostname()
        self.worker_id = worker_id or host.worker_id
        self.slots = host.max_calls
        self.drain_seconds = float(drain_seconds)
        self.poll_interval = float(poll_interval)
        self.spread = float(spread)
        self._dropped: list[str] = []  # (the load's fields last left out of the report)
        self.heartbeat = Heartbeat(store, self.worker_id, interval=store.stale_after / 5,
                                   report=self.report, used=self.slot_count,
                                   on_missing=self._row_missing)
        host.call_prefix = self.worker_id
        host.on_call_ended = self._on_call_ended
        host.owner_dead = self.owner_dead
        self.draining = False
        self._claiming = 0
        self._owed_releases = 0
        # claims, releases and (re)registration one at a time; the count they leave is
        # published for the heartbeat thread as one (version, count) tuple
        self._slot_lock = asyncio.Lock()
        self._slot_version = 0
        self._slot_view: tuple[int, int] | None = None
        self._gone = False  # deregistered: never registered again
        self._reregistering = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._forgot_at = float("-inf")
        self._wake = asyncio.Event()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._loop_task: asyncio.Task[None] | None = None
        self._lag_task: asyncio.Task[None] | None = None
        self._listen_task: asyncio.Task[Any] | None = None

    @property
    def held(self) -> int:
        """Slots held: calls running, offers being answered or claimed."""
        return self.host.calls_held + self._claiming

    async def start(self) -> None:
        """Register, start the heartbeat, listen for offers and claim them.

        Raises:
            DispatchUnavailableError: the database cannot be used.
        """
        await self.store.open()
        self._loop = asyncio.get_running_loop()
        async with self._slot_op():
            await self.store.register(self.worker_id, slots=self.slots, host=self.hostname,
                                      pid=os.getpid())
        self.heartbeat.start()
        if self.store.created_schema:
            await self._say_other_schemas()
        self._listen_task = await self.store.listen(self.store.offers_channel,
                                                    lambda _: self._wake.set(),
                                                    on_reconnect=self._wake.set)
        self._loop_task = asyncio.get_running_loop().create_task(
            self._claim_loop(), name=f"{self.worker_id}.claims")
        self._lag_task = asyncio.get_running_loop().create_task(
            self.host.watch_loop(), name=f"{self.worker_id}.loop-lag")
        logger.info("call worker ready", extra={"worker_id": self.worker_id,
                                                "slots": self.slots})

    async def _say_other_schemas(self) -> None:
        """This worker made its schema: if call workers live in other schemas of the
        database, it is likely cut off from their front doors (a mistyped
        ``search_path``): say so, naming them."""
        try:
            elsewhere = await self.store.live_workers_elsewhere()
        except DispatchUnavailableError:
            return
        if elsewhere:
            where = ", ".join(f"{n} in schema {name!r}" for name, n in elsewhere.items())
            logger.warning(
                "schema %r (the first of VOXFLOW_DATABASE_URL's search_path) did not exist: "
                "created it for this worker, while live call workers are registered in "
                "other schemas (%s). Front doors and workers meet in one schema: if they "
                "are this deployment's, give every process the same VOXFLOW_DATABASE_URL",
                self.store.schema, where, extra={"worker_id": self.worker_id})

    async def drain(self) -> None:
        """No new calls; the running calls move to other workers, or finish here: each is
        handed over (:meth:`CallHost.hand_over`, at its next quiet moment) while
        another live worker has a free slot for it; the others go on until
        ``drain_seconds``, when those a worker can take are handed over whatever they
        are doing and the rest end with a ``bye`` ("the worker is shutting down"). The
        worker's row is removed and the heartbeat stops."""
        if self.draining:
            return
        self.draining = True
        logger.info("draining", extra={"worker_id": self.worker_id,
                                       "calls": self.host.calls_held,
                                       "deadline_s": self.drain_seconds})
        with contextlib.suppress(DispatchUnavailableError):
            await self.store.set_draining(self.worker_id)
        if self._loop_task is not None:
            # the loop ends by itself now (draining): a claim in flight is committed in
            # the database and must become a call or a refusal, not be cancelled (its
            # offer would stay claimed, its front door waiting until its timeout)
            self._wake.set()
            done, _ = await asyncio.wait({self._loop_task},
                                         timeout=self.store.connect_timeout + 5.0)
            if not done:
                self._loop_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop_task
        if self._tasks:  # offers being answered become calls (or are refused) first
            await asyncio.wait(self._tasks)  # (a failure is logged as it happens)
        await self._move_calls(asyncio.get_running_loop().time() + self.drain_seconds)
        if self.host.call_ids():
            logger.warning("drain deadline reached: ending %d call(s)",
                           len(self.host.call_ids()))
            await self.host.end_calls("the worker is shutting down")
        if self._tasks:
            await asyncio.wait(self._tasks)
        self.heartbeat.stop()  # first: a beat finding no row would register it again
        async with self._slot_lock:
            self._gone = True
            with contextlib.suppress(DispatchUnavailableError):
                await self.store.deregister(self.worker_id)
        logger.info("drained", extra={"worker_id": self.worker_id})

    async def _move_calls(self, deadline: float) -> None:
        """Until no call is left here, or ``deadline`` (loop time) passed and no handover
        is under way: hand calls over while other live workers have free slots, as many
        at once as they have (less the calls handed over whose resume did not reach a
        worker yet), each at its next quiet moment, or at ``deadline`` whatever it does.
        A call no worker can take goes on here (every call of a host without a session
        store: it could not be resumed elsewhere)."""
        loop = asyncio.get_running_loop()
        moving: dict[str, asyncio.Task[SessionId | None]] = {}
        arriving: dict[SessionId, float] = {}  # handed over, not yet taken elsewhere
        ending: set[str] = set()  # calls that were ending by themselves: left to end
        try:
            while True:
                for call_id, task in list(moving.items()):
                    if task.done():
                        del moving[call_id]
                        if task.cancelled() or (session := task.result()) is None:
                            ending.add(call_id)
                        else:
                            arriving[session] = loop.time()
                waiting = [c for c in self.host.call_ids() if c not in moving]
                if self.host.store is None:
                    ending.update(waiting)
                waiting = [c for c in waiting if c not in ending]
                now = loop.time()
                if not self.host.call_ids():
                    return
                if waiting:
                    await self._forget_arrived(arriving)
                    room = await self._free_elsewhere() - len(moving) - len(arriving)
                    for call_id in waiting[:max(0, room)]:
                        moving[call_id] = loop.create_task(self.host.hand_over(
                            call_id, "the worker is shutting down",
                            quiet_within=deadline - now), name=f"{call_id}.handover")
                if not moving and now >= deadline:
                    return
                if moving:
                    await asyncio.wait(moving.values(), timeout=0.5,
                                       return_when=asyncio.FIRST_COMPLETED)
                else:
                    await asyncio.sleep(min(0.5, max(0.0, deadline - now)))
        finally:
            for task in moving.values():  # (cancelled drain: the calls are ended after)
                task.cancel()

    async def _free_elsewhere(self) -> int:
        """Free slots of the other live workers (this one drains: it is not counted);
        0 when the database cannot tell."""
        try:
            free, _ = await self.store.free_slots()
        except DispatchUnavailableError:
            return 0
        return free

    async def _forget_arrived(self, arriving: dict[SessionId, float]) -> None:
        """Drop from ``arriving`` the sessions another worker took (their lease is held
        by another owner: the resume claimed a slot) or that were handed over 10 s ago
        (their page never came back, or came back elsewhere)."""
        store, now = self.host.store, asyncio.get_running_loop().time()
        assert store is not None  # (only calls of a host with a store are handed over)
        for session_id, since in list(arriving.items()):
            lease = None
            with contextlib.suppress(Exception):  # unreadable: counted until its 10 s
                lease = await asyncio.to_thread(store.lease_of, session_id)
            if now - since > 10.0 or (lease is not None and lease.owner
                                      and not lease.owner.startswith(f"{self.worker_id}/")):
                del arriving[session_id]

    async def aclose(self) -> None:
        """Drain (if not done) and close the store."""
        await self.drain()
        if self._lag_task is not None:
            await cancel_and_wait([self._lag_task])
        if self._listen_task is not None:
            self._listen_task.cancel()
        await self.store.aclose()

    async def owner_dead(self, holder: str) -> bool:
        """Whether the lease holder ``holder`` (``<worker id>/<call id>``, the owner name
        of a dispatched call) is a call worker whose heartbeat stopped: none for the
        store's ``dead_after`` seconds. Its calls' leases are then taken over by their
        resumes at once (the fence refuses whatever it might still write). A holder that
        is this worker, or no registered worker (a one-process ``voxflow serve`` sharing
        the database), or a database that cannot answer: False, the lease waited out."""
        worker_id, slash, _ = holder.partition("/")
        if not slash or worker_id == self.worker_id:
            return False
        try:
            age = await self.store.heartbeat_age(worker_id)
        except DispatchUnavailableError:
            return False
        return age is not None and age > self.store.dead_after

    # -- claiming ---------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _slot_op(self) -> AsyncIterator[None]:
        """One claim, release or registration at a time; the heartbeat leaves the row's
        count alone while one is under way, and gets the count it leaves after."""
        async with self._slot_lock:
            self._slot_view = None
            try:
                yield
            finally:
                self._publish_count()

    def _publish_count(self) -> None:
        self._slot_version += 1
        self._slot_view = (self._slot_version, self.held + self._owed_releases)

    def slot_count(self) -> tuple[int, int] | None:
        """The slots this worker holds in the database's eyes (calls running, offers
        being answered or claimed, and slots owed back), with a version that changes
        with every claim and release; None while one is under way. Thread-safe (the
        heartbeat reads it)."""
        return self._slot_view

    def _row_missing(self) -> None:
        """(heartbeat thread) The row is gone: written again from the event loop."""
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._register_again)

    def _register_again(self) -> None:
        if not self._gone and not self._reregistering:
            self._reregistering = True
            self._spawn(self._reregister())

    async def _reregister(self) -> None:
        try:
            async with self._slot_op():
                if self._gone:
                    return
                await self.store.register(
                    self.worker_id, slots=self.slots, host=self.hostname, pid=os.getpid(),
                    used=self.held + self._owed_releases, draining=self.draining)
            logger.warning("call worker %s registered again: its row had been removed "
                           "while its heartbeat could not be written", self.worker_id,
                           extra={"worker_id": self.worker_id})
        except DispatchUnavailableError as exc:  # the next beat finds it missing again
            logger.warning("cannot register again yet: %s", exc)
        finally:
            self._reregistering = False

    async def _forget_dead_workers(self) -> None:
        """Every ``forget_after / 2`` seconds, remove (and report) dead workers' rows."""
        now = asyncio.get_running_loop().time()
        if now - self._forgot_at >= self.store.forget_after / 2:
            self._forgot_at = now
            await self.store.forget_dead_workers()

    async def _claim_loop(self) -> None:
        while not self.draining:
            self._wake.clear()
            await self._pay_releases()
            with contextlib.suppress(DispatchUnavailableError):  # (said by the claims)
                await self._forget_dead_workers()
            view = self._slot_view  # (a count changed outside a claim or release: a bug)
            if (not self._slot_lock.locked() and view is not None
                    and view[1] != self.held + self._owed_releases):
                self._publish_count()
            try:
                await self._claim_available()
            except DispatchUnavailableError as exc:
                logger.warning("cannot claim offers: %s", exc)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.poll_interval):
                    await self._wake.wait()

    def can_take(self) -> bool:
        """Whether a claim may be made now: not draining, the host's admission accepting
        (its recent voice-to-voice p95 within target, its loop on time) and a slot free
        of its measured slots, counting the offers being claimed and answered (they are
        not admitted yet: a burst of offers is claimed only as far as the slots go, not
        up to the registered ones)."""
        if self.draining:
            return False
        load = self.host.load()
        return load.accepting and self.held < min(self.slots, load.slots)

    def report(self) -> WorkerReport:
        """What each heartbeat writes to this worker's row, from one look at the load:
        its headroom (the admission's less the offers being claimed; 0 while admission
        refuses), always, and the rest of its admission's load (the measured slots,
        what a call costs and where that figure comes from, the models' recent
        real-time factors, the p95, why it refuses); a field of those that fails its
        check (a NaN p95, a negative cost) is left out, said once, and the rest
        written."""
        load = self.host.load()
        report, dropped = WorkerReport.leniently({
            "headroom": self._headroom_of(load), "measured_slots": load.slots,
            "call_cost": load.call_cost, "prior_call_cost": load.prior_call_cost,
            "cost_source": load.cost_source, "model_rtf": load.model_rtf,
            "p95_ms": load.p95_ms, "refusal": load.reason})
        if dropped != self._dropped:
            self._dropped = dropped
            if dropped:
                logger.warning("the load's %s not valid: left out of the heartbeat (the "
                               "headroom is written)", ", ".join(dropped),
                               extra={"worker_id": self.worker_id})
        return report

    def _headroom_of(self, load: Load) -> float:
        return float(max(0, load.headroom - self._claiming)) if load.accepting else 0.0

    async def _claim_available(self) -> None:
        while self.can_take():
            if self.held and self.spread:
                share = min(1.0, self.held / max(1, self.host.load().slots))
                await asyncio.sleep(self.spread * share)
                if not self.can_take():
                    return
            async with self._slot_op():
                self._claiming += 1
                try:
                    offer = await self.store.claim(self.worker_id)
                except BaseException:
                    self._claiming -= 1
                    raise
                if offer is None:
                    self._claiming -= 1
            if offer is None:
                return
            self._spawn(self._answer(offer))

    async def _answer(self, offer: ClaimedOffer) -> None:
        # the claim's slot passes to the host in one step (no await in between)
        self._claiming -= 1
        try:
            resume = (None if offer.resume is None
                      else ResumeRequest.model_validate_json(offer.resume))
            parent = telemetry.extract_context({"traceparent": offer.traceparent}
                                               if offer.traceparent else None)
            answer = await self.host.answer_offer(offer.sdp, resume, trace_context=parent)
        except CallRefused as exc:
            self.host.note_refusal(exc.key)  # (its metrics: no HTTP path counted it)
            await self._refuse(offer, exc.status, exc.reason)
            return
        except Exception as exc:
            logger.exception("answering a dispatched offer failed")
            await self._refuse(offer, 500, f"the call could not start ({type(exc).__name__})")
            return
        try:
            delivered = await self.store.answer(offer.offer_id, self.worker_id,
                                                sdp=answer.sdp, call_id=answer.call_id)
        except DispatchUnavailableError as exc:
            logger.warning("the answer could not be written: %s", exc)
            delivered = False
        if not delivered:  # the front door stopped waiting: nobody will connect
            self.host.end_call(answer.call_id, "the front door stopped waiting for the answer")

    async def _refuse(self, offer: ClaimedOffer, status: int, reason: str) -> None:
        self._owed_releases += 1  # (at once: the slot left the host's count)
        with contextlib.suppress(DispatchUnavailableError):
            await self.store.refuse(offer.offer_id, self.worker_id, status=status, error=reason)
        await self._pay_releases()

    def _on_call_ended(self, call_id: str) -> None:
        self._owed_releases += 1
        self._spawn(self._pay_releases())

    async def _pay_releases(self) -> None:
        """Give back the slots owed to the database (kept owed, and retried by the claim
        loop, while it is unreachable)."""
        paid = 0
        async with self._slot_op():
            while self._owed_releases > 0:
                try:
                    await self.store.release(self.worker_id)
                except DispatchUnavailableError as exc:
                    logger.warning("a slot could not be given back yet: %s", exc)
                    break
                self._owed_releases -= 1
                paid += 1
        if paid:
            self._wake.set()  # a slot is free: look for offers now

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(_log_failure)

    def __repr__(self) -> str:
        return (f"CallWorker({self.worker_id!r}, held={self.held}/{self.slots}, "
                f"draining={self.draining})")


def _log_failure(task: asyncio.Task[Any]) -> None:
    """A spawned task's own failure, logged when it ends (drain only waits for them)."""
    if not task.cancelled() and (failure := task.exception()) is not None:
        logger.error("%s failed", task.get_name(), exc_info=failure)

