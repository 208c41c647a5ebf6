"""Call dispatch through PostgreSQL, in one process: a front door and call workers share
one real database schema; real aiortc callers dial the front door and talk to the worker
that answered (the example assistant on the real models)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from voxflow_adapters.hosting.dispatch import DispatchStore
from voxflow_adapters.hosting.dispatch_tables import DispatchUnavailableError
from voxflow_adapters.hosting.worker import CallWorker
from voxflow_adapters.webrtc import (
    PeerSettings,
    ServerSettings,
    WebRtcServer,
    assistant_call_factory,
)
from voxflow_adapters.webrtc.client import LoopbackCaller, OfferRejected
from voxflow_adapters.webrtc.front_door import FrontDoor
from voxflow_voice.engines import VoiceEngines

LOOPBACK = PeerSettings(ice_host_addresses=("127.0.0.1",))
TOKEN = "dispatch-test-token"


@contextlib.asynccontextmanager
async def worker(engines: VoiceEngines, url: str, slots: int, **options: Any
                 ) -> AsyncIterator[CallWorker]:
    host = WebRtcServer(assistant_call_factory(), engines,
                        settings=ServerSettings(max_calls=slots, peer=LOOPBACK))
    worker = CallWorker(host, DispatchStore(url, stale_after=options.pop("stale_after", 2.0)),
                        **options)
    await worker.start()
    try:
        yield worker
    finally:
        await worker.aclose()


@contextlib.asynccontextmanager
async def front_door(url: str, **options: Any) -> AsyncIterator[FrontDoor]:
    door = FrontDoor(DispatchStore(url, stale_after=options.pop("stale_after", 2.0)),
                     settings=ServerSettings(port=0, token=TOKEN), **options)
    async with door:
        yield door


def dial(door: FrontDoor) -> LoopbackCaller:
    return LoopbackCaller(f"http://127.0.0.1:{door.port}", TOKEN)


@pytest.mark.models
async def test_concurrent_offers_fill_every_slot_and_no_more(
    engines: VoiceEngines, pg_schema_url: str
) -> None:
    async with worker(engines, pg_schema_url, 2) as one, \
            worker(engines, pg_schema_url, 1) as two, \
            front_door(pg_schema_url, offer_timeout=4.0) as door:
        most = {one.worker_id: 0, two.worker_id: 0}

        def watch(w: CallWorker) -> None:
            most[w.worker_id] = max(most[w.worker_id], w.host.calls_held)

        callers = [dial(door) for _ in range(6)]
        outcomes = await asyncio.gather(*(c.connect() for c in callers), return_exceptions=True)
        watch(one)
        watch(two)
        connected = [c for c, o in zip(callers, outcomes, strict=True) if o is None]
        refused = [o for o in outcomes if isinstance(o, OfferRejected)]
        try:
            assert len(connected) == 3, outcomes
            assert len(refused) == 3 and all(r.status == 503 for r in refused)
            assert all("no call worker" in r.reason for r in refused)
            assert most == {one.worker_id: 2, two.worker_id: 1}
            # the call ids name the worker holding them, and the data channel (media path)
            # is open between the caller and that worker: its hello came through
            by_worker = sorted(c.call_id.rsplit("-", 1)[0] for c in connected if c.call_id)
            assert by_worker == sorted([one.worker_id] * 2 + [two.worker_id])
            for caller in connected:
                await caller.wait_message("hello", within=10)
            rows = {r.worker_id: r for r in await door.store.workers()}
            assert rows[one.worker_id].used == 2 and rows[two.worker_id].used == 1
        finally:
            await asyncio.gather(*(c.aclose() for c in connected))
        async with asyncio.timeout(30):
            await one.host.wait_idle()
            await two.host.wait_idle()
            while any(r.used for r in await door.store.workers()):  # noqa: ASYNC110  # a table
                await asyncio.sleep(0.1)  # each ended call gave its slot back
        async with dial(door) as again:  # and the slots are offered again
            await again.wait_message("hello", within=10)


@pytest.mark.models
async def test_a_worker_with_a_stale_heartbeat_gets_no_call(
    engines: VoiceEngines, pg_schema_url: str
) -> None:
    async with worker(engines, pg_schema_url, 2, stale_after=1.0) as stale, \
            front_door(pg_schema_url, offer_timeout=3.0, stale_after=1.0) as door:
        stale.heartbeat.stop()  # as if its heartbeat could not reach the database
        await asyncio.sleep(1.5)
        [row] = await door.store.workers()
        assert row.heartbeat_age > 1.0
        with pytest.raises(OfferRejected) as refused:
            await dial(door).connect()
        assert refused.value.status == 503
        assert "0 live worker(s)" in refused.value.reason
        # even an offer already in the table is not claimed by it
        store = DispatchStore(pg_schema_url, stale_after=1.0)
        try:
            offer_id = await store.post_offer("v=0", expires_in=5)
            assert await store.claim(stale.worker_id) is None
            assert (await store.take_result(offer_id, give_up=True)).state == "pending"
        finally:
            await store.aclose()
        async with worker(engines, pg_schema_url, 1) as fresh, dial(door) as caller:
            await caller.wait_message("hello", within=10)
            assert caller.call_id is not None
            assert caller.call_id.startswith(fresh.worker_id)


@pytest.mark.models
async def test_a_draining_worker_takes_no_call_and_finishes_its_own(
    engines: VoiceEngines, pg_schema_url: str
) -> None:
    async with worker(engines, pg_schema_url, 2, drain_seconds=30.0) as w, \
            front_door(pg_schema_url, offer_timeout=3.0) as door:
        async with dial(door) as caller:
            await caller.wait_message("hello", within=10)
            draining = asyncio.get_running_loop().create_task(w.drain())
            async with asyncio.timeout(10):
                while not (await door.store.workers())[0].draining:  # noqa: ASYNC110
                    await asyncio.sleep(0.05)
            with pytest.raises(OfferRejected) as refused:
                await dial(door).connect()
            assert refused.value.status == 503
            await asyncio.sleep(0.5)
            assert not draining.done()  # the running call goes on
            assert caller.connection_state == "connected"
        async with asyncio.timeout(30):
            await draining  # it returns once the caller hung up
        assert await door.store.workers() == []  # and the worker's row is gone


@pytest.mark.models
async def test_the_drain_deadline_ends_the_calls_left_with_a_bye(
    engines: VoiceEngines, pg_schema_url: str
) -> None:
    async with worker(engines, pg_schema_url, 1, drain_seconds=0.5) as w, \
            front_door(pg_schema_url, offer_timeout=3.0) as door, dial(door) as caller:
        await caller.wait_message("hello", within=10)
        async with asyncio.timeout(30):
            await w.drain()
        bye = await caller.wait_message("bye", within=10)
        assert bye["reason"] == "the worker is shutting down"


async def test_an_unreachable_database_is_a_typed_error_without_the_password() -> None:
    store = DispatchStore("postgresql://voxflow:s3cret@127.0.0.1:9/nowhere", connect_timeout=1)
    with pytest.raises(DispatchUnavailableError) as failure:
        await store.open()
    assert "s3cret" not in str(failure.value)
    assert "VOXFLOW_DATABASE_URL" in str(failure.value)


def test_dispatch_seconds_must_be_finite() -> None:
    from voxflow_adapters.hosting.heartbeat import Heartbeat

    url = "postgresql://u@127.0.0.1:1/db"
    for bad in (0.0, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="stale_after must be a positive, finite"):
            DispatchStore(url, stale_after=bad)
        with pytest.raises(ValueError, match="interval must be a positive, finite"):
            Heartbeat(DispatchStore(url), "w", interval=bad)


def test_front_door_and_worker_need_the_database_url_and_say_so(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from voxflow.cli import main

    monkeypatch.delenv("VOXFLOW_DATABASE_URL", raising=False)
    for role in ("--front-door", "--worker"):
        assert main(["serve", role]) == 2
        err = capsys.readouterr().err
        assert "VOXFLOW_DATABASE_URL=postgresql://" in err and "drop the option" in err
    with pytest.raises(SystemExit) as usage:  # one role per process
        main(["serve", "--front-door", "--worker"])
    assert usage.value.code == 2
    assert "not allowed with" in capsys.readouterr().err
    monkeypatch.setenv("VOXFLOW_DATABASE_URL", "postgresql://u@127.0.0.1:5432/db")
    assert main(["serve", "--worker", "--drain-seconds", "-1"]) == 2
    assert "--drain-seconds -1: give seconds" in capsys.readouterr().err


class _SlowReplies(DispatchStore):
    """The real store whose claims reach the worker late (a slow network): the claim is
    committed, its reply not yet back."""

    def __init__(self, url: str) -> None:
        super().__init__(url, stale_after=2.0)
        self.committed = asyncio.Event()
        self.reply = asyncio.Event()

    async def claim(self, worker_id: str) -> Any:
        claimed = await super().claim(worker_id)
        if claimed is not None:
            self.committed.set()
            await self.reply.wait()
        return claimed


@pytest.mark.models
async def test_a_drain_during_a_claim_answers_or_refuses_the_claimed_offer(
    engines: VoiceEngines, pg_schema_url: str
) -> None:
    """An offer claimed (slot taken, row 'claimed') when the drain starts is still
    answered or refused: cancelling the claim's reply left it claimed, its front door
    waiting for nothing until its timeout."""
    host = WebRtcServer(assistant_call_factory(), engines,
                        settings=ServerSettings(max_calls=1, peer=LOOPBACK))
    slow = _SlowReplies(pg_schema_url)
    w = CallWorker(host, slow, drain_seconds=5.0)
    poster = DispatchStore(pg_schema_url)
    try:
        await w.start()
        offer_id = await poster.post_offer("v=0 (not an SDP)", expires_in=30)
        async with asyncio.timeout(30):
            await slow.committed.wait()
        draining = asyncio.get_running_loop().create_task(w.drain())
        async with asyncio.timeout(30):  # the drain has begun: the worker's row says so
            while not (await poster.workers())[0].draining:  # noqa: ASYNC110  # a table
                await asyncio.sleep(0.05)
        slow.reply.set()
        async with asyncio.timeout(30):
            await draining
        result = await poster.take_result(offer_id)
        assert result is not None and result.state == "failed", result
        assert result.status == 400  # the worker's own refusal reached the front door
        assert host.refusals() == {"sdp": 1}  # and is counted (its refused-calls metric)
    finally:
        slow.reply.set()
        await w.aclose()
        await poster.aclose()


async def test_a_running_front_door_purges_expired_offers_without_a_restart(
    pg_schema_url: str
) -> None:
    async def offers(store: DispatchStore) -> list[str]:
        async def run(conn: Any) -> list[str]:
            rows = await (await conn.execute("SELECT offer_id FROM voxflow_call_offers")
                          ).fetchall()
            return [r[0] for r in rows]
        result: list[str] = await store._run(run)
        return result

    async with front_door(pg_schema_url, purge_interval=0.2):
        store = DispatchStore(pg_schema_url)
        try:
            # left by a front door that died while waiting: expired two minutes ago
            expired = await store.post_offer("v=0", expires_in=-120, resume='{"token": "x"}')
            live = await store.post_offer("v=0", expires_in=60)
            assert sorted(await offers(store)) == sorted([expired, live])
            for _ in range(100):
                if expired not in await offers(store):
                    break
                await asyncio.sleep(0.1)
            assert await offers(store) == [live]  # the expired row gone, the live one kept
        finally:
            await store.aclose()


async def test_the_dispatch_tables_go_to_the_urls_schema_beside_the_sessions_and_jobs(
) -> None:
    """The first schema of the URL's search_path (created if missing), with the URL's
    other options kept on every connection: the pool's, a listener's, the heartbeat's."""
    import os
    import urllib.parse
    import uuid

    from voxflow_adapters.hosting.heartbeat import Heartbeat

    from voxflow.flow.postgres import PostgresFlowPersistence
    from voxflow.jobs import PostgresJobQueue

    from .conftest import PG_URL, skip_without_postgres

    skip_without_postgres()
    schema = f"vxd_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    options = urllib.parse.quote(f"-c statement_timeout=4321 -c search_path={schema}")
    url = f"{PG_URL}{'&' if '?' in PG_URL else '?'}options={options}"
    store = DispatchStore(url)
    assert store.schema == PostgresFlowPersistence(url).schema == PostgresJobQueue(url).schema
    assert store.schema == schema
    beat = Heartbeat(store, "w-1", interval=0.05)
    try:
        await store.register("w-1", slots=1, host="h", pid=1)
        shown = await store._run(lambda c: _fetch(c, "SELECT current_schema(), "
                                                  "current_setting('statement_timeout')"))
        assert shown == (schema, "4321ms")
        tables = await store._run(lambda c: _fetch(
            c, "SELECT to_regclass(%s), to_regclass(%s)",
            (f"{schema}.voxflow_call_workers", f"{schema}.voxflow_call_offers")))
        assert None not in tables
        at = "SELECT heartbeat_at FROM voxflow_call_workers WHERE worker_id = 'w-1'"
        (registered,) = await store._run(lambda c: _fetch(c, at))
        beat.start()
        async with asyncio.timeout(30):
            while beat.beats < 2:  # noqa: ASYNC110  # a thread's counter
                await asyncio.sleep(0.05)
        assert beat.failures == 0
        (renewed,) = await store._run(lambda c: _fetch(c, at))
        assert renewed > registered  # the heartbeat's own connection found the row
    finally:
        beat.stop()
        await store.aclose()
        import psycopg

        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


async def _fetch(conn: Any, sql: str, params: tuple[Any, ...] = ()) -> tuple[Any, ...]:
    row = await (await conn.execute(sql, params)).fetchone()
    return tuple(row)


async def test_a_failing_report_never_stops_the_heartbeat(
    pg_schema_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The report callback raising (anything, not only a database error), a headroom
    the report refuses (NaN, not a number) or a return that is no report: the beat is
    written without it and the thread beats on; the log names the error's type, never
    its message."""
    from voxflow_adapters.hosting.dispatch_tables import WorkerReport
    from voxflow_adapters.hosting.heartbeat import Heartbeat

    answers: list[Any] = [RuntimeError("password=hunter2"), float("nan"), "lots",
                          ("not a report",), 0.5]

    def report() -> WorkerReport:
        answer = answers.pop(0) if len(answers) > 1 else answers[0]
        if isinstance(answer, Exception):
            raise answer
        if isinstance(answer, tuple):
            return answer  # type: ignore[return-value]
        return WorkerReport(headroom=answer)  # (a worker measuring its headroom alone)

    store = DispatchStore(pg_schema_url)
    beat = Heartbeat(store, "w-1", interval=0.05, report=report)
    at = "SELECT heartbeat_at, headroom FROM voxflow_call_workers WHERE worker_id = 'w-1'"
    try:
        await store.register("w-1", slots=1, host="h", pid=1)
        (registered, _) = await store._run(lambda c: _fetch(c, at))
        beat.start()
        async with asyncio.timeout(30):
            while beat.beats < 6:  # noqa: ASYNC110  # a thread's counter
                await asyncio.sleep(0.05)
        assert beat.failures == 0 and beat.report_failures == 4
        renewed, reported = await store._run(lambda c: _fetch(c, at))
        assert renewed > registered and reported == 0.5
    finally:
        beat.stop()
        await store.aclose()
    logged = caplog.text
    assert "RuntimeError" in logged and "hunter2" not in logged


async def test_a_front_door_counts_a_worker_free_slots_as_at_most_its_headroom(
    pg_schema_url: str,
) -> None:
    """A worker with no cap registers the admission's ceiling as its slots; the headroom
    its measured cost leaves, reported by each heartbeat, is what a front door counts
    (a capped worker's free slots are min(cap, the measured slots its last heartbeat
    reported) less its calls)."""
    from voxflow_adapters.hosting.admission import UNBOUNDED_CALLS
    from voxflow_adapters.hosting.dispatch_tables import WorkerReport
    from voxflow_adapters.hosting.heartbeat import Heartbeat

    reported: list[float | None] = [None]
    store = DispatchStore(pg_schema_url)
    beat = Heartbeat(store, "w-1", interval=0.05,
                     report=lambda: WorkerReport(headroom=reported[0]))
    try:
        await store.register("w-1", slots=UNBOUNDED_CALLS, host="h", pid=1)
        await store.register("w-2", slots=3, host="h", pid=2)
        await store._run(lambda c: c.execute(
            "UPDATE voxflow_call_workers SET headroom = 0 WHERE worker_id = 'w-2'"))
        assert await store.free_slots() == (UNBOUNDED_CALLS + 3, 2)  # not measured yet
        beat.start()
        for headroom, free in ((4.0, 4 + 3), (0.0, 0 + 3), (2.5, 3 + 3)):
            reported[0] = headroom
            seen = beat.beats
            async with asyncio.timeout(30):
                while beat.beats < seen + 2:  # noqa: ASYNC110  # a thread's counter
                    await asyncio.sleep(0.05)
            assert await store.free_slots() == (free, 2)
    finally:
        beat.stop()
        await store.aclose()


async def _beat_once(store: DispatchStore, worker_id: str, **report: Any) -> None:
    """One heartbeat of ``worker_id`` reporting ``report`` (what a CallWorker's writes)."""
    from voxflow_adapters.hosting.dispatch_tables import WorkerReport

    await store._run(lambda c: c.execute(store.heartbeat_sql(), {
        **WorkerReport(**report).params(), "used": None, "worker_id": worker_id}))


async def test_a_capped_worker_with_fewer_measured_slots_is_offered_what_it_takes(
    pg_schema_url: str,
) -> None:
    """A ``--max-calls 4`` worker whose measured cost allows 2 slots, holding 2 calls,
    and a free one: the front door counts the capped one's free slots as min(4, 2) - 2
    = 0, as ``voxflow status`` does (one function), and the next call goes to the other
    (before: 2 counted, and the capped worker's claim took the offer its admission
    refuses beyond its measured slots)."""
    import psycopg
    from voxflow_adapters.hosting.fleet import read_fleet

    store = DispatchStore(pg_schema_url)
    try:
        await store.register("capped", slots=4, host="h", pid=1, used=2)
        await store.register("other", slots=2, host="h", pid=2)
        await _beat_once(store, "capped", headroom=0.0, measured_slots=2)
        await _beat_once(store, "other", headroom=2.0, measured_slots=2)
        assert await store.free_slots() == (0 + 2, 2)
        fleet = await asyncio.to_thread(read_fleet, pg_schema_url)
        assert {w.worker_id: w.free for w in fleet.workers} == {"capped": 0, "other": 2}
        offer_id = await store.post_offer("v=0", expires_in=30.0)
        assert await store.claim("capped") is None
        claimed = await store.claim("other")
        assert claimed is not None and claimed.offer_id == offer_id
        # measured slots not reported (an older worker, before its first beat): its cap
        await store._run(lambda c: c.execute(
            "UPDATE voxflow_call_workers SET measured_slots = NULL "
            "WHERE worker_id = 'capped'"))
        assert await store.free_slots() == (2 + 1, 2)
        await store.post_offer("v=0", expires_in=30.0)
        assert await store.claim("capped") is not None
    finally:
        await store.aclose()
    with psycopg.connect(pg_schema_url, autocommit=True) as conn:
        used = dict(conn.execute("SELECT worker_id, used FROM voxflow_call_workers"
                                 ).fetchall())
    assert used == {"capped": 3, "other": 1}


def test_a_claim_and_the_free_slots_agree_on_every_worker(pg_schema_url: str) -> None:
    """The claim's condition (SQL) is free_slots' (Python) but for an uncapped worker's
    headroom (which counts its own claims under way): on a grid of slots, calls and
    measured slots (a negative one too: not reported), a row may take a call exactly when
    it has a free slot."""
    import itertools

    import psycopg
    from voxflow_adapters.hosting.dispatch_tables import (
        CLAIMABLE_SQL,
        UNCAPPED_SLOTS,
        free_slots,
    )

    grid = [(slots, used, measured) for slots, used, measured in itertools.product(
        (1, 2, 4, UNCAPPED_SLOTS), range(5), (None, -3, -1, 0, 1, 2, 3, 4, 8))
        if used <= slots]
    with psycopg.connect(pg_schema_url, autocommit=True) as conn:
        rows = conn.execute(
            f"SELECT slots, used, measured_slots, {CLAIMABLE_SQL} FROM unnest("
            "%s::int[], %s::int[], %s::int[]) AS w(slots, used, measured_slots)",
            ([g[0] for g in grid], [g[1] for g in grid], [g[2] for g in grid])).fetchall()
    assert len(rows) == len(grid)
    for slots, used, measured, claimable in rows:
        assert claimable == (free_slots(slots, used, None, measured) > 0), (slots, used,
                                                                            measured)


async def test_a_negative_measured_slots_reads_as_not_reported_in_status_count_and_claim(
    pg_schema_url: str,
) -> None:
    """measured_slots below 0 (no count: another version's value or one written by hand)
    is read as not reported by ``voxflow status`` (worker_row drops it), by the front
    door's count and by the claim alike: the cap less the calls (before: status showed
    the cap's free slots, the count and the claim 0)."""
    from voxflow_adapters.hosting.fleet import read_fleet

    store = DispatchStore(pg_schema_url)
    try:
        await store.register("odd", slots=3, host="h", pid=1, used=1)
        await store._run(lambda c: c.execute(
            "UPDATE voxflow_call_workers SET measured_slots = -1 WHERE worker_id = 'odd'"))
        assert await store.free_slots() == (2, 1)
        fleet = await asyncio.to_thread(read_fleet, pg_schema_url)
        assert [(w.measured_slots, w.free) for w in fleet.workers] == [(None, 2)]
        await store.post_offer("v=0", expires_in=30.0)
        assert await store.claim("odd") is not None
    finally:
        await store.aclose()


async def test_a_front_door_refuses_at_once_when_only_unmeasured_cap_slots_are_left(
    pg_schema_url: str,
) -> None:
    """Every live worker full by its measured slots, one of them under a larger
    ``--max-calls``: an immediate 503 saying every worker is busy (before: the offer was
    posted, no worker claimed it, and the caller waited ``offer_timeout`` for a 503
    saying none answered)."""
    from voxflow_adapters.hosting.dispatcher import Dispatcher
    from voxflow_adapters.hosting.host import CallRefused

    store = DispatchStore(pg_schema_url)
    dispatcher = Dispatcher(store, offer_timeout=1.0)
    try:
        await dispatcher.start()
        await store.register("capped", slots=4, host="h", pid=1, used=2)
        await store.register("full", slots=2, host="h", pid=2, used=2)
        await _beat_once(store, "capped", headroom=0.0, measured_slots=2)
        with pytest.raises(CallRefused) as refused:
            await dispatcher.request("v=0")
        assert (refused.value.status, refused.value.key) == (503, "busy")
        assert "2 live worker(s), all busy" in refused.value.reason
    finally:
        await dispatcher.aclose()


@pytest.mark.parametrize("sdp", ["v=0\\u0000\\r\\n", "v=0\\ud800"])
async def test_an_offer_whose_sdp_no_store_keeps_is_a_400_naming_the_sdp(
    pg_schema_url: str, sdp: str
) -> None:
    """A NUL in the SDP (issue 29, item 4) was a 500 Internal Server Error: the front
    door's insert of the offer row failed in PostgreSQL (a lone surrogate: the UTF-8
    encoding). Refused like any malformed body, naming the field, before any write."""
    import aiohttp

    async with front_door(pg_schema_url) as door:
        body = '{"type": "offer", "sdp": "' + sdp + '"}'
        async with aiohttp.ClientSession() as http, http.post(
                f"http://127.0.0.1:{door.port}/offer", data=body.encode(),
                headers={"Authorization": f"Bearer {TOKEN}",
                         "Content-Type": "application/json"}) as response:
            status, answer = response.status, await response.json()
    import psycopg

    async with await psycopg.AsyncConnection.connect(pg_schema_url) as conn:
        offers = await (await conn.execute("SELECT count(*) FROM voxflow_call_offers")
                        ).fetchone()
    assert status == 400, answer
    assert "sdp:" in answer["error"], answer
    assert ("NUL character (U+0000)" in answer["error"]
            or "lone surrogate (U+D800)" in answer["error"]), answer
    assert offers == (0,)  # nothing was written
