"""The call workers' rows stay true, on a real PostgreSQL: a ``used`` count that drifted
from what the worker holds is corrected by its next heartbeat (never while a claim or a
release is under way); a killed worker's row is removed once its heartbeat has been
silent ``forget_after`` seconds, its death logged once whoever looks; a live worker
whose row was removed meanwhile writes it again. (The probe: a ``kill -9``'d worker's row
stayed with ``used=1`` and a heartbeat 400-500 s old for good, and nothing said a worker
had died.)"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from voxflow_adapters.hosting.dispatch import DispatchStore
from voxflow_adapters.hosting.dispatch_tables import WorkerRow
from voxflow_adapters.hosting.heartbeat import Heartbeat
from voxflow_adapters.hosting.worker import CallWorker
from voxflow_adapters.webrtc import (
    PeerSettings,
    ServerSettings,
    WebRtcServer,
    assistant_call_factory,
)
from voxflow_adapters.webrtc.client import LoopbackCaller
from voxflow_adapters.webrtc.front_door import FrontDoor
from voxflow_voice.engines import VoiceEngines

LOOPBACK = PeerSettings(ice_host_addresses=("127.0.0.1",))
TOKEN = "dispatch-rows-token"


async def set_used(store: DispatchStore, worker_id: str, used: int) -> None:
    """What a lost reply or a bug leaves: the row's count changed behind the worker."""
    await store._run(lambda conn: conn.execute(
        "UPDATE voxflow_call_workers SET used = %s WHERE worker_id = %s", (used, worker_id)))


async def row_of(store: DispatchStore, worker_id: str) -> WorkerRow | None:
    return next((r for r in await store.workers() if r.worker_id == worker_id), None)


async def until(condition: Any, within: float = 15.0) -> None:
    async with asyncio.timeout(within):
        while not await condition():  # noqa: ASYNC110  # the database's rows
            await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def worker(engines: VoiceEngines, url: str, **options: Any) -> AsyncIterator[CallWorker]:
    host = WebRtcServer(assistant_call_factory(), engines,
                        settings=ServerSettings(max_calls=2, peer=LOOPBACK))
    w = CallWorker(host, DispatchStore(url, stale_after=0.4, forget_after=1.0), **options)
    await w.start()
    try:
        yield w
    finally:
        await w.aclose()


@pytest.mark.models
async def test_a_drifted_used_count_is_corrected_by_the_next_heartbeat(
    engines: VoiceEngines, pg_schema_url: str, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    door = FrontDoor(DispatchStore(pg_schema_url, stale_after=0.4, forget_after=1.0),
                     settings=ServerSettings(port=0, token=TOKEN), offer_timeout=5.0)
    async with worker(engines, pg_schema_url) as w, door:
        wid, store = w.worker_id, door.store

        async def used(n: int) -> bool:
            row = await row_of(store, wid)
            return row is not None and row.used == n

        await set_used(store, wid, 2)  # a release lost: the worker looks full, forever
        await until(lambda: used(0))
        assert await store.free_slots() == (2, 1)
        async with LoopbackCaller(f"http://127.0.0.1:{door.port}", TOKEN) as caller:
            await caller.wait_message("hello", within=10)
            assert await used(1)
            await set_used(store, wid, 0)  # a claim lost: over-admission at the front doors
            await until(lambda: used(1))
            await set_used(store, wid, 2)
            await until(lambda: used(1))
        await until(lambda: used(0), within=30)  # the call's end gives its slot back once
        await asyncio.sleep(0.5)  # a few beats more: nothing to correct
        assert await used(0)
    assert w.heartbeat.corrections == 3
    said = [r.getMessage() for r in caplog.records if "corrected" in r.getMessage()]
    assert said == ["the dispatch row said 2 slot(s) used, the worker holds 0: corrected",
                    "the dispatch row said 0 slot(s) used, the worker holds 1: corrected",
                    "the dispatch row said 2 slot(s) used, the worker holds 1: corrected"]


@pytest.mark.models
async def test_the_heartbeat_carries_the_workers_load_into_its_row(
    engines: VoiceEngines, pg_schema_url: str,
) -> None:
    """What dispatch and an operator need of a worker's :class:`Load` is in its row
    after a beat: its measured slots, what a call costs there and where that figure comes
    from, the prior, the models' recent real-time factors, the p95, why it refuses
    (before: the headroom alone; the cost and the figures behind it were seen only
    through the worker's own ``GET /load``, which a worker does not serve)."""
    await engines.warm_up()  # (a derived prior and the models' real-time factors)
    async with worker(engines, pg_schema_url) as w:
        for _ in range(10):  # slow turns: over its p95 target, it refuses calls
            w.host.admission.record(1500.0)
        load = w.host.load()
        seen = w.heartbeat.beats
        await until(lambda: _beaten(w, seen + 2))
        row = await row_of(w.store, w.worker_id)
    assert row is not None
    assert load.model_rtf and load.cost_source == "models" and load.p95_ms == 1500.0
    assert load.reason is not None and "1,500 ms" in load.reason
    assert (row.measured_slots, row.call_cost, row.prior_call_cost, row.cost_source,
            row.model_rtf, row.p95_ms, row.refusal) == (
        load.slots, load.call_cost, load.prior_call_cost, load.cost_source,
        load.model_rtf, load.p95_ms, load.reason)
    assert row.headroom == float(load.headroom)


async def _beaten(w: CallWorker, beats: int) -> bool:
    return w.heartbeat.beats >= beats


async def test_a_heartbeat_leaves_the_count_alone_while_a_claim_or_release_is_under_way(
    pg_schema_url: str,
) -> None:
    """The count is written under the row's lock, and only if no claim or release began
    or ended between the two reads of the worker's count around that lock."""
    store = DispatchStore(pg_schema_url)
    counts: list[tuple[int, int] | None] = []
    beat = Heartbeat(store, "w-1", interval=60.0, used=lambda: counts.pop(0))
    try:
        await store.register("w-1", slots=3, host="h", pid=1, used=2)
        conn = await asyncio.to_thread(_connect, store)
        try:
            for seen, expected in [
                ([None], 2),              # a claim under way: left alone
                ([(1, 0), None], 2),      # one began while the row was being locked
                ([(1, 0), (2, 1)], 2),    # one ended meanwhile: another version
                ([(3, 1), (3, 1)], 1),    # none: corrected
                ([(4, 9), (4, 9)], 3),    # never past the slots (the CHECK)
            ]:
                counts[:] = seen
                await asyncio.to_thread(beat._beat, conn)
                assert not counts  # read exactly as often as described
                row = await row_of(store, "w-1")
                assert row is not None and row.used == expected, seen
        finally:
            conn.close()
    finally:
        await store.aclose()


def _connect(store: DispatchStore) -> Any:
    import psycopg

    return psycopg.connect(store.url, **store.connect_options)


async def test_a_killed_workers_row_is_removed_and_its_death_logged_once(
    pg_schema_url: str, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    setup = DispatchStore(pg_schema_url)
    beaten = time.time()  # its last heartbeat is no earlier than this
    # what a kill -9 leaves: a row holding a call, its heartbeat stopped
    await setup.register("killed-1", slots=4, host="box-a", pid=4242, used=1)
    doors = [FrontDoor(DispatchStore(pg_schema_url, stale_after=0.2, forget_after=0.6),
                       settings=ServerSettings(port=0, token=TOKEN), purge_interval=0.1)
             for _ in range(3)]  # three front doors looking at once
    try:
        async with contextlib.AsyncExitStack() as stack:
            for door in doors:
                await stack.enter_async_context(door)
            await until(lambda: _gone(setup, "killed-1"), within=10)
            await asyncio.sleep(0.5)  # more rounds of every door: said once
    finally:
        await setup.aclose()
    deaths = [r for r in caplog.records if "is gone" in r.getMessage()]
    assert [r.levelname for r in deaths] == ["WARNING"], [r.getMessage() for r in deaths]
    # not before forget_after (a lower bound: a loaded machine only makes it later)
    assert deaths[0].created - beaten >= 0.6
    message = deaths[0].getMessage()
    assert message.startswith("call worker killed-1 (host box-a, pid 4242) is gone: no "
                              "heartbeat for ")
    assert "held 1 call(s)" in message


async def _gone(store: DispatchStore, worker_id: str) -> bool:
    return await row_of(store, worker_id) is None


@pytest.mark.models
async def test_a_live_worker_whose_row_was_removed_writes_it_again(
    engines: VoiceEngines, pg_schema_url: str, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    async with worker(engines, pg_schema_url) as w:
        store = DispatchStore(pg_schema_url)
        try:
            await store.deregister(w.worker_id)  # removed while it was cut off
            await until(lambda: _back(store, w.worker_id, draining=False))
            await store.set_draining(w.worker_id)
            w.draining = True  # (as drain() sets it) the row comes back draining
            await store.deregister(w.worker_id)
            await until(lambda: _back(store, w.worker_id, draining=True))
            w.draining = False
        finally:
            await store.aclose()
    assert sum("registered again" in r.getMessage() for r in caplog.records) == 2


async def _back(store: DispatchStore, worker_id: str, *, draining: bool) -> bool:
    row = await row_of(store, worker_id)
    return row is not None and row.draining == draining and row.slots == 2


async def test_browser_and_phone_workers_share_the_tables_without_taking_each_others_calls(
    pg_schema_url: str,
) -> None:
    """One schema, a browser worker and a phone worker: each front door counts the free
    slots of its own kind only, and each worker claims the requests of its own kind."""
    browser, phone = DispatchStore(pg_schema_url), DispatchStore(pg_schema_url, kind="phone")
    try:
        await browser.register("browser-w", slots=2, host="h", pid=1)
        await phone.register("phone-w", slots=3, host="h", pid=2)
        assert await browser.free_slots() == (2, 1)
        assert await phone.free_slots() == (3, 1)
        assert [r.worker_id for r in await phone.workers()] == ["phone-w"]
        offer = await browser.post_offer("v=0 sdp", expires_in=10)
        call = await phone.post_offer('{"call_sid": "CA1"}', expires_in=10)
        assert await phone.claim("browser-w") is None  # (a store claims its kind only)
        claimed = await phone.claim("phone-w")
        assert claimed is not None and claimed.offer_id == call
        assert await phone.claim("phone-w") is None  # the browser offer is not its kind
        taken = await browser.claim("browser-w")
        assert taken is not None and taken.offer_id == offer
        assert await phone.free_slots() == (2, 1) and await browser.free_slots() == (1, 1)
    finally:
        await browser.aclose()
        await phone.aclose()


def test_a_store_of_an_unknown_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="kind must be one of webrtc, phone"):
        DispatchStore("postgresql://u@127.0.0.1/test", kind="sip")


@pytest.mark.models
async def test_a_worker_with_no_cap_claims_only_as_far_as_its_measured_slots(
    engines: VoiceEngines, pg_schema_url: str,
) -> None:
    """With no --max-calls the worker registers the admission's ceiling, so the row's
    ``used < slots`` never stops it: offers being claimed count against its measured
    slots (a burst is not claimed only to be refused by the admission afterwards)."""
    from voxflow_adapters.hosting.admission import (
        UNBOUNDED_CALLS,
        AdmissionController,
        AdmissionSettings,
    )
    from voxflow_adapters.hosting.call_cost import CallCostMeter

    # one core at the 28 % prior: 2 slots (the meter's clock stands still: nothing else)
    meter = CallCostMeter(cores=1, clock=lambda: 0.0, machine_time=lambda: None)
    host = WebRtcServer(assistant_call_factory(), engines,
                        settings=ServerSettings(peer=LOOPBACK),
                        admission=AdmissionController(AdmissionSettings(), meter=meter))
    w = CallWorker(host, DispatchStore(pg_schema_url))
    assert (w.slots, host.load().slots) == (UNBOUNDED_CALLS, 2)
    assert w.can_take()
    w._claiming = 1  # an offer claimed, its call not started yet
    assert w.can_take() and w.report().headroom == 1.0
    w._claiming = 2
    assert not w.can_take() and w.report().headroom == 0.0
    assert host.load().accepting  # (the admission itself has admitted nothing yet)


async def test_an_invalid_load_field_leaves_the_headroom_in_the_heartbeat(
    pg_schema_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    """A field of the load that fails its check (a NaN p95) is left out of the row; the
    headroom, which front doors count, and the other fields are written (before: the whole
    report fell back to nothing, an uncapped worker's free slots to its ceiling)."""
    import dataclasses

    import psycopg

    host = WebRtcServer(assistant_call_factory(),
                        VoiceEngines(stt=None, tts=None, make_vad=None),  # type: ignore[arg-type]
                        settings=ServerSettings(peer=LOOPBACK))
    measured = host.load
    monkeypatch.setattr(host, "load",
                        lambda: dataclasses.replace(measured(), p95_ms=float("nan")))
    w = CallWorker(host, DispatchStore(pg_schema_url))
    try:
        await w.store.register(w.worker_id, slots=w.slots, host="box", pid=1)
        with psycopg.connect(w.store.url, **w.store.connect_options) as conn:
            w.heartbeat._beat(conn)
            w.heartbeat._beat(conn)
        row = await row_of(w.store, w.worker_id)
    finally:
        await w.store.aclose()
    load = measured()
    assert row is not None and row.p95_ms is None
    assert (row.headroom, row.measured_slots, row.call_cost) == (
        float(load.headroom), load.slots, load.call_cost)
    assert row.headroom is not None and w.heartbeat.report_failures == 0
    assert [r.getMessage() for r in caplog.records if "p95_ms" in r.getMessage()] == [
        "the load's p95_ms not valid: left out of the heartbeat (the headroom is written)"]
