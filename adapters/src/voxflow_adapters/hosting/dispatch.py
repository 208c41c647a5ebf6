"""Call dispatch through PostgreSQL: the tables, and what front doors and call workers do
with them (psycopg 3, async).

No cluster of our own: the database is the only shared thing.

* ``voxflow_call_workers``: one row per call worker (its slots, the slots it holds, the
  headroom and the load it reports: :class:`~voxflow_adapters.hosting.dispatch_tables.
  WorkerReport`, draining or not, its last heartbeat on the database clock). A
  CHECK keeps ``used <= slots``: no path can over-admit. Each heartbeat writes the
  slots the worker holds over ``used`` (a lost reply cannot leave it wrong for long);
  a row whose heartbeat stopped ``forget_after`` seconds ago is removed by whichever
  front door or worker looks first, which logs that worker's death once.
* ``voxflow_call_offers``: one row per offer a front door is waiting on. A worker claims
  the oldest pending offer with ``SELECT … FOR UPDATE SKIP LOCKED`` and, in the same
  transaction, takes one of its own slots (``used + 1`` only while ``used < slots`` and,
  for a ``--max-calls`` worker, ``used <`` the measured slots its last heartbeat
  reported, it is not draining and its heartbeat is fresh), so an offer is answered by
  exactly one worker and a worker never holds more calls than its slots. A front door
  counts the same free slots (:func:`~voxflow_adapters.hosting.dispatch_tables.
  free_slots`) before it posts an offer. The answer (or the refusal)
  is written to the row; ``NOTIFY`` wakes the front door, which reads the row (the table
  is the truth: a missed notification costs one poll interval) and deletes it (the SDPs
  carry ICE credentials). A front door that gives up deletes the row; a worker whose
  answer then finds no row ends that call.

Each row has a ``kind`` (``webrtc``: a browser's SDP offer; ``phone``: a carrier's
call, :mod:`voxflow_adapters.phone.dispatch`): a store is of one kind, its worker claims
only requests of that kind and its front door counts only that kind's free slots, so
browser and phone workers share one database without taking each other's calls.

The tables' schema, their rows and the error when the database cannot be used are in
:mod:`voxflow_adapters.hosting.dispatch_tables`; the LISTEN connections that wake front
doors and workers in :mod:`voxflow_adapters.hosting.notifications`.

The reserved slot is what LiveKit Agents' workers had to add (``_reserved_slots``) after
over-admission from a CPU load sampled every few seconds: here the reservation is a row
update in the claim's transaction, not a sample.

Needs the ``postgres`` extra (``pip install 'voxflow[postgres]'``).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import secrets
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from voxflow.pg_retry import atransaction
from voxflow.pg_schema import aensure_tables
from voxflow.pg_url import (
    check_database_url,
    check_schema,
    connection_options,
    database_schema,
    redact_url,
)
from voxflow.storable import check_text

from .dispatch_tables import (
    CALL_KINDS,
    CLAIMABLE_SQL,
    REPORT_COLUMNS,
    SCHEMA_SQL,
    ClaimedOffer,
    DispatchUnavailableError,
    OfferResult,
    WorkerRow,
    dispatch_unavailable,
    free_slots,
    worker_row,
)
from .notifications import Listeners, channel_name

if TYPE_CHECKING:
    import psycopg
    from psycopg_pool import AsyncConnectionPool

__all__ = ["DispatchStore"]

logger = logging.getLogger(__name__)

_NOW = "extract(epoch FROM clock_timestamp())::float8"
_CORE = ("worker_id, host, pid, slots, used, headroom, draining, "
         f"{_NOW} - heartbeat_at, kind")
"""The columns of :data:`~voxflow_adapters.hosting.dispatch_tables.CORE_COLUMNS`."""
_ROW = _CORE + ", " + ", ".join(REPORT_COLUMNS)
"""Those and the report's (:func:`~voxflow_adapters.hosting.dispatch_tables.worker_row`
reads both)."""


class DispatchStore:
    """The dispatch tables, in the first schema of the URL's ``search_path`` (``public``
    unless the URL says ``?options=-csearch_path%3D...``), beside the sessions and the job
    queue of that URL (:func:`~voxflow.pg_url.database_schema`).

    Args:
        url: a ``postgresql://`` URL (validated; never shown with its password).
        schema: the schema of the tables (created if missing); None (the default): the
            URL's.
        stale_after: a worker whose last heartbeat is older (s) is not offered calls.
        forget_after: a worker whose last heartbeat is older (s) is gone (killed, its
            machine or network down): :meth:`forget_dead_workers` removes its row.
        dead_after: a worker whose last heartbeat is older (s) is dead: the leases of its
            calls are taken over by their resumes at once (default: ``stale_after * 2 /
            5``, two heartbeats missed: a call worker beats every ``stale_after / 5``).
        max_connections: the pool's size.
        connect_timeout: seconds to wait for the server.
        kind: the calls this store's front doors and workers handle (``webrtc``: browser
            offers, ``phone``: carrier calls): a worker claims the requests of its kind
            only, and a front door counts the free slots of its kind's workers only.

    Raises:
        ValueError: a bad ``url`` or argument.
    """

    def __init__(
        self, url: str, *, schema: str | None = None, stale_after: float = 5.0,
        forget_after: float = 30.0, dead_after: float | None = None, max_connections: int = 4,
        connect_timeout: float = 10.0, kind: str = "webrtc",
    ) -> None:
        check_database_url(url)
        if kind not in CALL_KINDS:
            raise ValueError(f"kind must be one of {', '.join(CALL_KINDS)}, got {kind!r}")
        self.kind = kind
        if not 0 < stale_after < float("inf"):
            raise ValueError("stale_after must be a positive, finite number of seconds")
        if dead_after is not None and not 0 < dead_after < float("inf"):
            raise ValueError("dead_after must be a positive, finite number of seconds")
        if not stale_after < forget_after < float("inf"):
            raise ValueError("forget_after must be a finite number of seconds longer than "
                             "stale_after")
        self.url = url
        self.schema = database_schema(url) if schema is None else check_schema(schema)
        self.stale_after = float(stale_after)
        self.forget_after = float(forget_after)
        self.dead_after = (float(dead_after) if dead_after is not None
                           else stale_after * 2 / 5)
        self.max_connections = max_connections
        self.connect_timeout = float(connect_timeout)
        self._pool: AsyncConnectionPool[Any] | None = None
        self._open_lock = asyncio.Lock()
        self._listeners = Listeners(url, connect_options=self.connect_options,
                                    connect_timeout=self.connect_timeout,
                                    unavailable=self._unavailable)
        self.created_schema = False
        """Whether :meth:`open` created the schema (it did not exist)."""

    # -- connections ------------------------------------------------------------------

    def _unavailable(self, exc: BaseException) -> DispatchUnavailableError:
        return dispatch_unavailable(self.url, exc)

    async def open(self) -> None:
        """Connect and create the tables (idempotent).

        Raises:
            DispatchUnavailableError: psycopg is missing, or the server is unreachable.
        """
        if self._pool is not None:
            return
        async with self._open_lock:  # (reopened after a broken connection: _discard)
            if self._pool is not None:
                return
            try:
                # the optional voxflow[postgres] extra
                import psycopg
                from psycopg_pool import AsyncConnectionPool, PoolTimeout
            except ImportError:
                raise DispatchUnavailableError(
                    "dispatch through PostgreSQL needs psycopg: pip install 'voxflow[postgres]'"
                ) from None
            pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
                self.url, min_size=1, max_size=self.max_connections, open=False,
                kwargs=self.connect_options, timeout=self.connect_timeout,
                name="voxflow-dispatch",
            )
            try:
                # One direct connection first: a refused or unknown server, a wrong
                # password fail at once, saying why (the pool retries for connect_timeout,
                # logging each retry, and then says only "pool initialization incomplete").
                async with await psycopg.AsyncConnection.connect(
                        self.url, connect_timeout=max(1, int(self.connect_timeout)),
                        **self.connect_options) as conn, conn.transaction():
                    existed = await (await conn.execute(
                        "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace "
                        "WHERE nspname = %s)", (self.schema,))).fetchone()
                    await aensure_tables(conn, self.schema, SCHEMA_SQL)
                self.created_schema = self.created_schema or not (existed and existed[0])
                await pool.open(wait=True, timeout=self.connect_timeout)
            except (psycopg.errors.LockNotAvailable, psycopg.errors.DeadlockDetected) as exc:
                await pool.close()
                raise DispatchUnavailableError(
                    f"could not set up the dispatch tables in schema {self.schema!r}: "
                    f"another process held them ({type(exc).__name__}) while this one "
                    "added what this version needs (the first start of a new version "
                    "beside running workers of an older one); start it again") from None
            except (psycopg.Error, PoolTimeout, OSError) as exc:
                await pool.close()
                raise self._unavailable(exc) from None
            self._pool = pool

    @property
    def connect_options(self) -> dict[str, Any]:
        """The psycopg connection options of every connection to the tables (autocommit;
        the URL's own options, with this schema first on the search path)."""
        return {"autocommit": True, "options": connection_options(self.url, self.schema)}

    async def aclose(self) -> None:
        """Close the listeners and the pool."""
        await self._listeners.aclose()
        if self._pool is not None:
            await self._pool.close()
            self._pool = None

    async def _run(self, fn: Callable[[psycopg.AsyncConnection[Any]], Any]) -> Any:
        """``await fn(conn)`` in one transaction; connection failures as
        :class:`DispatchUnavailableError`. A connection that breaks before the commit (a
        reset, a restarted server: nothing was written) is replaced, with its pool, and
        ``fn`` run once more on a fresh one; one that breaks during the commit is not."""
        async def open_pool() -> AsyncConnectionPool[Any]:
            await self.open()
            assert self._pool is not None
            return self._pool

        return await atransaction(open_pool, fn, discard=self._discard,
                                  unavailable=self._unavailable, logger=logger,
                                  what="dispatch")

    async def _discard(self, pool: AsyncConnectionPool[Any]) -> None:
        """Close ``pool`` after one of its connections broke (a reset or a restart breaks
        them all): the next call opens a new one, or says at once that the server is
        still unreachable."""
        async with self._open_lock:
            if self._pool is not pool:
                return
            self._pool = None
        await pool.close(timeout=1.0)

    @property
    def offers_channel(self) -> str:
        """Notified (payload: the offer id) when an offer is posted."""
        return channel_name("offers", self.schema)

    @property
    def answers_channel(self) -> str:
        """Notified (payload: the offer id) when an offer is answered or refused."""
        return channel_name("answers", self.schema)

    async def listen(self, channel: str, on_notify: Callable[[str], None],
                     on_reconnect: Callable[[], None] | None = None) -> Any:
        """A task calling ``on_notify(payload)`` for every notification on ``channel``
        (its own connection, closed by :meth:`aclose`, made again when it breaks: see
        :meth:`~voxflow_adapters.hosting.notifications.Listeners.listen`). Returns the task.

        Raises:
            DispatchUnavailableError: the first connection could not be made.
        """
        return await self._listeners.listen(channel, on_notify, on_reconnect)

    # -- workers ----------------------------------------------------------------------

    async def register(self, worker_id: str, *, slots: int, host: str, pid: int,
                       used: int = 0, draining: bool = False) -> None:
        """Add (or renew) this worker's row, holding ``used`` slots (a worker starts with
        none; one whose row was forgotten while it was cut off comes back with the slots
        it holds)."""
        await self._run(lambda conn: conn.execute(
            "INSERT INTO voxflow_call_workers (worker_id, host, pid, slots, used, "
            f"draining, kind, started_at, heartbeat_at) VALUES (%s, %s, %s, %s, %s, %s, %s, "
            f"{_NOW}, {_NOW}) ON CONFLICT (worker_id) DO UPDATE SET host = excluded.host, "
            "kind = excluded.kind, "
            "pid = excluded.pid, slots = excluded.slots, used = excluded.used, "
            "draining = excluded.draining, started_at = excluded.started_at, "
            "heartbeat_at = excluded.heartbeat_at",
            (worker_id, host, pid, slots, min(max(used, 0), slots), draining, self.kind)))

    async def forget_dead_workers(self) -> list[WorkerRow]:
        """Remove the rows of workers whose heartbeat stopped ``forget_after`` seconds ago
        and return them (each one to a single caller: a death is reported once however
        many front doors and workers look). A worker that was only cut off writes its row
        again with its next heartbeat."""
        async def run(conn: psycopg.AsyncConnection[Any]) -> list[WorkerRow]:
            rows = await (await conn.execute(
                f"DELETE FROM voxflow_call_workers WHERE heartbeat_at < {_NOW} - %s "
                f"RETURNING {_CORE}", (self.forget_after,))).fetchall()
            return [worker_row(r) for r in rows]

        gone: list[WorkerRow] = await self._run(run)
        for row in gone:
            logger.warning(
                "call worker %s (host %s, pid %d) is gone: no heartbeat for %.0f s (killed, "
                "or its machine or network is down); its row is removed. It held %d "
                "call(s): their pages resume them on another worker", row.worker_id,
                row.host, row.pid, row.heartbeat_age, row.used,
                extra={"worker_id": row.worker_id, "calls": row.used})
        return gone

    async def claim(self, worker_id: str) -> ClaimedOffer | None:
        """The oldest unexpired pending offer, claimed by ``worker_id`` together with one
        of its slots; None if there is no offer, or the worker has no free slot (of its
        ``--max-calls`` and of the measured slots its last heartbeat reported:
        :data:`~voxflow_adapters.hosting.dispatch_tables.CLAIMABLE_SQL`), is draining or
        its heartbeat is stale (nothing changes then)."""
        async def run(conn: psycopg.AsyncConnection[Any]) -> ClaimedOffer | None:
            offer = await (await conn.execute(
                "SELECT offer_id, sdp, resume, traceparent FROM voxflow_call_offers "
                "WHERE state = 'pending' AND kind = %s "
                f"AND expires_at > {_NOW} ORDER BY created_at LIMIT 1 "
                "FOR UPDATE SKIP LOCKED", (self.kind,))).fetchone()
            if offer is None:
                return None
            slot = await (await conn.execute(
                "UPDATE voxflow_call_workers SET used = used + 1 WHERE worker_id = %s "
                f"AND kind = %s AND {CLAIMABLE_SQL} AND NOT draining "
                f"AND heartbeat_at > {_NOW} - %s RETURNING used",
                (worker_id, self.kind, self.stale_after))).fetchone()
            if slot is None:
                return None
            await conn.execute(
                "UPDATE voxflow_call_offers SET state = 'claimed', worker_id = %s "
                "WHERE offer_id = %s", (worker_id, offer[0]))
            return ClaimedOffer(offer_id=offer[0], sdp=offer[1], resume=offer[2],
                                traceparent=offer[3])

        result: ClaimedOffer | None = await self._run(run)
        return result

    async def answer(self, offer_id: str, worker_id: str, *, sdp: str, call_id: str) -> bool:
        """Write the answer of a claimed offer and wake its front door; False when the
        front door gave up on it (the call must then be ended)."""
        return await self._settle(offer_id, worker_id, "answered",
                                  "answer_sdp = %s, call_id = %s", (sdp, call_id))

    async def refuse(self, offer_id: str, worker_id: str, *, status: int, error: str) -> bool:
        """Record that a claimed offer could not be answered (``status``, ``error``)."""
        return await self._settle(offer_id, worker_id, "failed", "status = %s, error = %s",
                                  (status, error))

    async def _settle(self, offer_id: str, worker_id: str, state: str, columns: str,
                      values: tuple[Any, ...]) -> bool:
        async def run(conn: psycopg.AsyncConnection[Any]) -> bool:
            row = await (await conn.execute(
                f"UPDATE voxflow_call_offers SET state = %s, {columns} WHERE offer_id = %s "
                "AND worker_id = %s AND state = 'claimed' RETURNING offer_id",
                (state, *values, offer_id, worker_id))).fetchone()
            if row is not None:
                await conn.execute("SELECT pg_notify(%s, %s)", (self.answers_channel, offer_id))
            return row is not None

        settled: bool = await self._run(run)
        return settled

    async def release(self, worker_id: str) -> None:
        """Give back one slot of ``worker_id`` (a call ended, or a claim was not answered)."""
        await self._run(lambda conn: conn.execute(
            "UPDATE voxflow_call_workers SET used = greatest(used - 1, 0) WHERE worker_id = %s",
            (worker_id,)))

    async def set_draining(self, worker_id: str) -> None:
        """Take no more calls: claims by ``worker_id`` are refused from now on."""
        await self._run(lambda conn: conn.execute(
            "UPDATE voxflow_call_workers SET draining = true WHERE worker_id = %s",
            (worker_id,)))

    async def deregister(self, worker_id: str) -> None:
        """Remove the worker's row (it has stopped)."""
        await self._run(lambda conn: conn.execute(
            "DELETE FROM voxflow_call_workers WHERE worker_id = %s", (worker_id,)))

    def heartbeat_sql(self) -> str:
        """The heartbeat statement (run by :class:`~voxflow_adapters.hosting.heartbeat.Heartbeat`
        on its own connection and thread), with the named parameters of
        :meth:`WorkerReport.params <voxflow_adapters.hosting.dispatch_tables.WorkerReport.
        params>` (``headroom`` and the :data:`REPORT_COLUMNS`),
        ``used`` (the slots the worker holds, which corrects the row's count; None:
        left as it is) and ``worker_id``. It updates no row when the worker's row was
        removed."""
        report = ", ".join(f"{c} = %({c})s{'::jsonb' if c == 'model_rtf' else ''}"
                           for c in REPORT_COLUMNS)
        return (f"UPDATE voxflow_call_workers SET heartbeat_at = {_NOW}, "
                f"headroom = %(headroom)s, {report}, "
                "used = CASE WHEN %(used)s::integer IS NULL "
                "THEN used ELSE least(greatest(%(used)s::integer, 0), slots) END "
                "WHERE worker_id = %(worker_id)s")

    def slots_sql(self) -> str:
        """Locks the worker's row (``worker_id``) until the transaction ends and reads
        its ``used``: run before :meth:`heartbeat_sql` when correcting the count, no
        claim or release of the worker can then commit in between."""
        return ("SELECT used FROM voxflow_call_workers WHERE worker_id = %(worker_id)s "
                "FOR UPDATE")

    async def workers(self) -> list[WorkerRow]:
        """Every registered worker of this store's kind, its load and heartbeat age."""
        async def run(conn: psycopg.AsyncConnection[Any]) -> list[WorkerRow]:
            rows = await (await conn.execute(
                f"SELECT {_ROW} FROM voxflow_call_workers WHERE kind = %s "
                "ORDER BY worker_id", (self.kind,))).fetchall()
            return [worker_row(r) for r in rows]

        found: list[WorkerRow] = await self._run(run)
        return found

    async def heartbeat_age(self, worker_id: str) -> float | None:
        """Seconds since ``worker_id``'s last heartbeat (database clock); None when no
        such worker is registered."""
        async def run(conn: psycopg.AsyncConnection[Any]) -> float | None:
            row = await (await conn.execute(
                f"SELECT {_NOW} - heartbeat_at FROM voxflow_call_workers WHERE worker_id = %s",
                (worker_id,))).fetchone()
            return None if row is None else float(row[0])

        age: float | None = await self._run(run)
        return age

    async def live_workers_elsewhere(self, *, most: int = 50) -> dict[str, int]:
        """Live call workers (fresh heartbeat, not draining) registered in *other*
        schemas of the database, by schema (those with none left out; at most ``most``
        schemas looked at, the ones this role cannot read skipped): where workers went
        when their ``search_path`` is not this store's."""
        # the optional voxflow[postgres] extra
        import psycopg
        from psycopg import sql

        async def run(conn: psycopg.AsyncConnection[Any]) -> dict[str, int]:
            schemas = [r[0] for r in await (await conn.execute(
                "SELECT n.nspname FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n "
                "ON n.oid = c.relnamespace WHERE c.relname = 'voxflow_call_workers' "
                "AND c.relkind = 'r' AND n.nspname <> %s "
                "AND has_table_privilege(c.oid, 'SELECT') ORDER BY n.nspname LIMIT %s",
                (self.schema, most))).fetchall()]
            found: dict[str, int] = {}
            for name in schemas:
                try:  # (a savepoint each: a schema dropped meanwhile is skipped)
                    async with conn.transaction():
                        row = await (await conn.execute(sql.SQL(
                            "SELECT count(*) FROM {}.voxflow_call_workers WHERE NOT draining "
                            "AND heartbeat_at > {} - %s").format(
                                sql.Identifier(name), sql.SQL(_NOW)), (self.stale_after,)
                        )).fetchone()
                except psycopg.errors.DatabaseError as exc:
                    if isinstance(exc, psycopg.OperationalError):
                        raise
                    continue
                if row is not None and row[0]:
                    found[name] = int(row[0])
            return found

        found: dict[str, int] = await self._run(run)
        return found

    async def deployment(self) -> str:
        """A hash naming the deployment of these tables (their schema in their database),
        the same for every process that opens them however it reaches the database: of
        the random id the first of them wrote in ``voxflow_deployment``. It shows neither
        the URL nor its credentials, nor the id itself."""
        async def run(conn: psycopg.AsyncConnection[Any]) -> str:
            await conn.execute("INSERT INTO voxflow_deployment (deployment_id) VALUES (%s) "
                               "ON CONFLICT DO NOTHING", (secrets.token_hex(16),))
            row = await (await conn.execute(
                "SELECT deployment_id FROM voxflow_deployment")).fetchone()
            assert row is not None
            return hashlib.sha256(f"voxflow-deployment:{row[0]}".encode()).hexdigest()[:32]

        found: str = await self._run(run)
        return found

    # -- front doors ------------------------------------------------------------------

    async def free_slots(self) -> tuple[int, int]:
        """``(free slots, live workers)`` over workers of this store's kind with a fresh
        heartbeat that are not draining: each worker's
        :func:`~voxflow_adapters.hosting.dispatch_tables.free_slots`, as ``voxflow
        status`` counts them (a ``--max-calls`` worker's cap, or the fewer measured slots
        its last heartbeat reported, less its calls; for a worker with no cap, at most the
        headroom it reported: up to a beat old; a call ended since is counted at the next
        beat)."""
        async def run(conn: psycopg.AsyncConnection[Any]) -> tuple[int, int]:
            rows = await (await conn.execute(
                "SELECT slots, used, headroom, measured_slots FROM voxflow_call_workers "
                f"WHERE NOT draining AND kind = %s AND heartbeat_at > {_NOW} - %s",
                (self.kind, self.stale_after))).fetchall()
            return sum(free_slots(*row) for row in rows), len(rows)

        free: tuple[int, int] = await self._run(run)
        return free

    async def post_offer(self, sdp: str, *, expires_in: float, resume: str | None = None,
                         traceparent: str | None = None) -> str:
        """Queue an offer for ``expires_in`` seconds and wake the workers; its id.
        ``resume``: the offer's resume object (JSON; its token is checked by the worker
        against the session's stored hash, and the row is deleted once answered).
        ``traceparent``: the W3C trace context the worker's call spans continue.

        Raises:
            UnstorableTextError: the SDP or ``resume`` holds a NUL or a lone surrogate
                (:mod:`voxflow.storable`), refused before the write.
        """
        check_text(sdp, "sdp")
        if resume is not None:
            check_text(resume, "resume")
        offer_id = uuid.uuid4().hex

        async def run(conn: psycopg.AsyncConnection[Any]) -> None:
            await conn.execute(
                "INSERT INTO voxflow_call_offers (offer_id, sdp, resume, traceparent, kind, "
                f"created_at, expires_at) VALUES (%s, %s, %s, %s, %s, {_NOW}, {_NOW} + %s)",
                (offer_id, sdp, resume, traceparent, self.kind, expires_in))
            await conn.execute("SELECT pg_notify(%s, %s)", (self.offers_channel, offer_id))

        await self._run(run)
        return offer_id

    async def take_result(self, offer_id: str, *, give_up: bool = False) -> OfferResult | None:
        """The offer's result once answered or refused (its row is then deleted); None
        while pending or claimed. ``give_up``: delete it whatever its state and return
        that state (a worker answering afterwards finds no row)."""
        where = "" if give_up else " AND state IN ('answered', 'failed')"

        async def run(conn: psycopg.AsyncConnection[Any]) -> OfferResult | None:
            row = await (await conn.execute(
                f"DELETE FROM voxflow_call_offers WHERE offer_id = %s{where} RETURNING "
                "state, worker_id, answer_sdp, call_id, status, error", (offer_id,)
            )).fetchone()
            if row is None:
                return None
            return OfferResult(state=row[0], worker_id=row[1], answer_sdp=row[2],
                               call_id=row[3], status=row[4], error=row[5])

        result: OfferResult | None = await self._run(run)
        return result

    async def forget_expired(self) -> int:
        """Delete offers that expired a minute ago (a front door died while waiting); the
        front doors call it at start and every ``purge_interval`` seconds."""
        async def run(conn: psycopg.AsyncConnection[Any]) -> int:
            cursor = await conn.execute(
                f"DELETE FROM voxflow_call_offers WHERE expires_at < {_NOW} - 60")
            return int(cursor.rowcount)

        deleted: int = await self._run(run)
        return deleted

    def __repr__(self) -> str:
        return (f"DispatchStore({redact_url(self.url)!r}, kind={self.kind!r}, "
                f"stale_after={self.stale_after}, "
                f"dead_after={self.dead_after})")

