"""Calls that survive their dependencies: an ICE server that never answers, is down or
answers late, resets of the
session store's database connections, and the store unreachable for longer than the
lease. Real aiortc caller, the example assistant on the real models, real SQLite and
PostgreSQL (the PostgreSQL tests skip with their reason when no server answers; each
has a database of its own: every connection it resets is its own). The slow faults (10
resets in a row, a PostgreSQL restart) and their figures are ``benchmarks/faults.py``'s."""

from __future__ import annotations

import asyncio
import contextlib
import runpy
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from voxflow_adapters.hosting.dispatch import DispatchStore
from voxflow_adapters.hosting.worker import CallWorker
from voxflow_adapters.webrtc import (
    Call,
    IceServer,
    PeerSettings,
    ServerSettings,
    WebRtcPeer,
    WebRtcServer,
    assistant_call_factory,
)
from voxflow_adapters.webrtc.client import LoopbackCaller
from voxflow_adapters.webrtc.front_door import FrontDoor
from voxflow_voice.audio import AudioChunk
from voxflow_voice.engines import VoiceEngines

from voxflow.flow.postgres import PostgresFlowPersistence

pytestmark = pytest.mark.models

LOOPBACK = PeerSettings(ice_host_addresses=("127.0.0.1",))
# STUN servers that are silent, down or late: benchmarks/_stun_faults.py, one helper for
# the benchmark and the tests
stun_server = runpy.run_path(
    str(Path(__file__).parents[2] / "benchmarks" / "_stun_faults.py"))["stun_server"]
QUESTION = "Hello there!"  # answered in two seconds: "Hello! How can I help you today?"


@contextlib.asynccontextmanager
async def serving(
    engines: VoiceEngines, store: Any, **settings: Any
) -> AsyncIterator[tuple[WebRtcServer, list[tuple[WebRtcPeer, Call]]]]:
    calls: list[tuple[WebRtcPeer, Call]] = []
    options: dict[str, Any] = {"port": 0, "peer": LOOPBACK, **settings}
    server = WebRtcServer(assistant_call_factory(), engines, settings=ServerSettings(**options),
                          on_call=lambda peer, call: calls.append((peer, call)), store=store)
    async with server:
        yield server, calls


def say(engines: VoiceEngines, text: str) -> AudioChunk:
    samples = np.concatenate([np.asarray(s.samples, np.float32)
                              for s in engines.tts.synthesize(text)])
    return AudioChunk.from_float(samples, engines.tts.sample_rate)


def user_turns(state: dict[str, Any]) -> list[str]:
    """The user's messages, as Whisper wrote them (lower case, no punctuation)."""
    return ["".join(c for c in m["content"].lower() if c.isalpha() or c == " ")
            for m in state["messages"] if m["role"] == "user"]


async def ask(caller: LoopbackCaller, engines: VoiceEngines, answered: int) -> None:
    """Ask the question and wait for the ``answered``-th reply to end."""
    caller.say(say(engines, QUESTION))
    await caller.wait_for(lambda: len(caller.of_type("reply_done")) >= answered, within=60,
                          what=f"answer {answered}")


async def hang_up(caller: LoopbackCaller, server: WebRtcServer) -> None:
    caller.send({"v": 1, "type": "hangup"})
    await caller.wait_message("bye")
    await caller.aclose()
    async with asyncio.timeout(20):
        await server.wait_idle()


# (the STUN server's fault has nothing to do with the store: a late or refusing one is
# called on SQLite alone, which keeps the suite's time down)
@pytest.mark.parametrize(("make_store", "fault"), [
    ("sqlite", "silent"), ("postgres", "silent"), ("sqlite", "refusing"), ("sqlite", "slow"),
], indirect=["make_store"])
async def test_a_call_whose_ice_server_fails_keeps_its_session(
    engines: VoiceEngines, make_store: Any, fault: str
) -> None:
    """The lease is renewed from the moment it is taken: gathering candidates while the
    STUN server stays silent, refuses or answers late (bounded by
    ``ice_gather_timeout``) outlasts a short lease, and the call still connects on its
    host candidates, keeps its session and answers."""
    store = make_store("calls")
    async with stun_server(fault) as (port, slow):
        stun = PeerSettings(ice_host_addresses=("127.0.0.1",),
                            ice_servers=(IceServer(urls=(f"stun:127.0.0.1:{port}",)),))
        async with serving(engines, store, peer=stun, lease_seconds=1.5) as (server, calls):
            caller = LoopbackCaller(f"http://127.0.0.1:{server.port}", server.token)
            await caller.connect()
            assert caller.answer_sdp is not None
            assert "typ host" in caller.answer_sdp and "typ srflx" not in caller.answer_sdp
            session_id = (await caller.wait_message("hello"))["session_id"]
            await ask(caller, engines, 1)
            if slow is not None:
                assert slow.answered >= 1  # it did answer, after the answer had gone
            await asyncio.sleep(1.0)  # two more renewals of the 1.5 s lease
            assert not caller.of_type("bye"), caller.of_type("bye")
            lease = store.lease_of(session_id)
            assert lease is not None and lease.owner.startswith(server.worker_id)
            peer, _ = calls[0]
            assert peer.close_reason is None
            await hang_up(caller, server)
    stored = store.load_state(session_id)
    assert stored is not None and user_turns(stored) == ["hello there"]
    assert [t["status"] for t in stored["turns"].values()] == ["completed"]


async def stored_turns(store: Any, session_id: str, count: int) -> dict[str, Any]:
    """The stored session once it holds ``count`` user turns (saves are off the loop)."""
    for _ in range(200):
        stored = await asyncio.to_thread(store.load_state, session_id)
        if stored is not None and len(user_turns(stored)) >= count:
            return stored
        await asyncio.sleep(0.1)
    raise AssertionError(f"the session never stored {count} turns")


async def until(predicate: Any, what: str, within: float = 30.0) -> None:
    """Poll ``predicate`` (what the store or the call recorded) until it holds."""
    for _ in range(int(within / 0.05)):
        if predicate():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"never: {what}")


async def test_a_call_answers_through_resets_of_its_store_connections(
    engines: VoiceEngines, pg_faults: Any
) -> None:
    """Every connection the store holds is reset before each question: no turn fails, the
    lease (1.5 s, renewed through the resets) holds, nothing even waits for the store."""
    store = PostgresFlowPersistence(pg_faults.url, connect_timeout=5)
    try:
        async with serving(engines, store, lease_seconds=1.5) as (server, calls):
            caller = LoopbackCaller(f"http://127.0.0.1:{server.port}", server.token)
            await caller.connect()
            session_id = (await caller.wait_message("hello"))["session_id"]
            epoch = store.lease_of(session_id).epoch  # type: ignore[union-attr]
            pool = store._open()
            held = [pool.getconn() for _ in range(4)]  # a busy process's pool
            for conn in held:
                pool.putconn(conn)
            for turn in (1, 2, 3):
                assert pg_faults.reset() >= 1
                await ask(caller, engines, turn)
            await asyncio.sleep(1.0)  # renewals after the last reset
            assert not caller.of_type("bye"), caller.of_type("bye")
            lease = store.lease_of(session_id)
            assert lease is not None and lease.epoch == epoch
            assert lease.owner.startswith(server.worker_id)
            _, call = calls[0]
            assert call.deferred is not None and call.deferred.deferred == 0
            await hang_up(caller, server)
        stored = store.load_state(session_id)
        assert stored is not None and user_turns(stored) == ["hello there"] * 3
        assert [t["status"] for t in stored["turns"].values()] == ["completed"] * 3
    finally:
        store.close()


async def test_a_call_keeps_talking_while_its_store_is_down_and_saves_when_it_is_back(
    engines: VoiceEngines, pg_faults: Any
) -> None:
    """The store refuses every connection for longer than the call's lease (1.5 s): the
    question asked meanwhile is answered, the call goes on, and once the store is back
    the lease (nobody took the session) is reclaimed and the turn saved; the next
    question is answered and saved too."""
    store = PostgresFlowPersistence(pg_faults.url, connect_timeout=5)
    try:
        async with serving(engines, store, lease_seconds=1.5) as (server, calls):
            caller = LoopbackCaller(f"http://127.0.0.1:{server.port}", server.token)
            await caller.connect()
            session_id = (await caller.wait_message("hello"))["session_id"]
            await ask(caller, engines, 1)
            await stored_turns(store, session_id, 1)
            epoch = store.lease_of(session_id).epoch  # type: ignore[union-attr]
            _, call = calls[0]
            assert call.deferred is not None
            with pg_faults.down():
                await ask(caller, engines, 2)  # answered while the store is down
                await asyncio.sleep(1.5)  # the lease runs out meanwhile
                assert call.deferred.pending and call.deferred.deferred >= 1
            stored = await stored_turns(store, session_id, 2)
            assert [t["status"] for t in stored["turns"].values()] == ["completed"] * 2
            await ask(caller, engines, 3)
            await stored_turns(store, session_id, 3)
            assert not caller.of_type("bye"), caller.of_type("bye")
            lease = store.lease_of(session_id)
            assert lease is not None and lease.epoch == epoch  # reclaimed, not taken
            assert len(call.deferred.outages) == 1 and not call.deferred.pending
            await hang_up(caller, server)
        stored = store.load_state(session_id)
        assert stored is not None and user_turns(stored) == ["hello there"] * 3
        assert [t["status"] for t in stored["turns"].values()] == ["completed"] * 3
    finally:
        store.close()


async def test_offers_right_after_a_reset_of_every_dispatch_connection_are_all_answered(
    engines: VoiceEngines, pg_faults: Any
) -> None:
    """A front door and a call worker on one database; every connection of both (pools,
    LISTEN connections, the heartbeat's) is reset: the next offers are all answered, none
    refused. Nobody polls (60 s): the answers come through the listeners made again."""
    host = WebRtcServer(assistant_call_factory(), engines,
                        settings=ServerSettings(max_calls=4, peer=LOOPBACK))
    worker = CallWorker(host, DispatchStore(pg_faults.url, stale_after=3.0),
                        poll_interval=60.0)
    await worker.start()
    door = FrontDoor(DispatchStore(pg_faults.url, stale_after=3.0),
                     settings=ServerSettings(port=0), offer_timeout=15.0, poll_interval=60.0)
    callers: list[LoopbackCaller] = []
    try:
        async with door:
            for _ in range(3):
                callers.append(LoopbackCaller(f"http://127.0.0.1:{door.port}", door.token))
                await callers[-1].connect()  # (an OfferRejected fails the test)
                await callers[-1].wait_message("hello")
                if len(callers) == 1:
                    assert pg_faults.reset() >= 5  # 2 pools, 2 listeners, the heartbeat
            assert door.dispatched == 3
            for caller in callers:
                caller.send({"v": 1, "type": "hangup"})
                await caller.wait_message("bye")
    finally:
        for caller in callers:
            await caller.aclose()
        await worker.aclose()


@contextlib.contextmanager
def small_disk(folder: Any, size: str = "4m") -> Iterator[Any]:
    """A tmpfs of ``size`` mounted at ``folder`` (root only: the test skips, saying so,
    where mounting is not permitted)."""
    import subprocess

    folder.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs",
                              str(folder)], capture_output=True, text=True, check=False)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs for the full disk: "
                    f"{(mounted.stderr or mounted.stdout).strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def fill(folder: Any) -> Any:
    """Fill the file system of ``folder`` to the last byte; the filler file's path."""
    filler = folder / "filler"
    with open(filler, "wb", buffering=0) as out:
        for block in (b"\0" * 65536, b"\0" * 512, b"\0"):
            try:
                while True:
                    out.write(block)
            except OSError:
                pass
    return filler


async def test_a_call_keeps_talking_while_its_sqlite_disk_is_full_and_saves_once_freed(
    engines: VoiceEngines, tmp_path: Any
) -> None:
    """The session store's disk fills up mid-call (a 4 MB tmpfs, filled to the last
    byte): the question asked meanwhile is answered, the lease holds (renewals on a full
    disk are retried, then reclaimed), and once space is freed the turn is saved. Before,
    SQLite's 'database or disk is full' reached the call raw instead of as the store
    being unavailable."""
    from voxflow.flow.persistence import SQLiteFlowPersistence

    with small_disk(tmp_path / "disk") as disk:
        store = SQLiteFlowPersistence(disk / "calls.db")
        try:
            async with serving(engines, store, lease_seconds=1.5) as (server, calls):
                caller = LoopbackCaller(f"http://127.0.0.1:{server.port}", server.token)
                await caller.connect()
                session_id = (await caller.wait_message("hello"))["session_id"]
                await ask(caller, engines, 1)
                await stored_turns(store, session_id, 1)
                _, call = calls[0]
                assert call.deferred is not None
                filler = await asyncio.to_thread(fill, disk)
                await ask(caller, engines, 2)  # answered while nothing can be written
                await asyncio.sleep(1.5)  # the lease's renewals meet the full disk
                deferred = call.deferred
                await until(lambda: deferred.pending and deferred.deferred >= 1,
                            "the save deferred on the full disk")
                assert not caller.of_type("bye"), caller.of_type("bye")
                await asyncio.to_thread(filler.unlink)
                stored = await stored_turns(store, session_id, 2)
                assert [t["status"] for t in stored["turns"].values()] == ["completed"] * 2
                await ask(caller, engines, 3)
                await stored_turns(store, session_id, 3)
                assert not caller.of_type("bye"), caller.of_type("bye")
                assert not call.deferred.pending
                await hang_up(caller, server)
            stored = store.load_state(session_id)
            assert stored is not None and user_turns(stored) == ["hello there"] * 3
            assert [t["status"] for t in stored["turns"].values()] == ["completed"] * 3
        finally:
            store.close()


def jumping_sqlite(path: Any) -> Any:
    """An SQLite session store whose clock (``julianday('now')``, what its leases are
    judged by) is the machine's plus ``store.jump`` seconds: a wall clock that an NTP
    step or an operator moves, without moving this machine's."""
    import sqlite3
    import time as _time

    from voxflow.flow.persistence import SQLiteFlowPersistence

    class Jumping(SQLiteFlowPersistence):
        jump = 0.0

        def _connect(self, create: bool) -> sqlite3.Connection | None:
            fresh = self._conn is None
            conn = super()._connect(create)
            if conn is not None and fresh:
                def julianday(*args: Any) -> float:
                    assert args == ("now",), args  # (the only use: the lease clock)
                    return (_time.time() + self.jump) / 86400.0 + 2440587.5

                conn.create_function("julianday", -1, julianday)
            return conn

    return Jumping(path)


async def test_a_call_goes_on_when_the_store_clock_jumps_forward_and_back(
    engines: VoiceEngines, tmp_path: Any
) -> None:
    """The wall clock the leases are judged by jumps an hour forward (every lease looks
    expired at once), then two hours back (they look live for an hour more): the call
    keeps its session and its epoch, every question is answered and stored."""
    store = jumping_sqlite(tmp_path / "calls.db")
    try:
        async with serving(engines, store, lease_seconds=1.5) as (server, _):
            caller = LoopbackCaller(f"http://127.0.0.1:{server.port}", server.token)
            await caller.connect()
            session_id = (await caller.wait_message("hello"))["session_id"]
            await ask(caller, engines, 1)
            await stored_turns(store, session_id, 1)
            epoch = store.lease_of(session_id).epoch
            store.jump = 3600.0
            await ask(caller, engines, 2)
            await stored_turns(store, session_id, 2)
            await until(lambda: store.lease_of(session_id).expires_at > time.time() + 3000,
                        "the lease renewed on the clock jumped forward")
            store.jump = -3600.0
            await ask(caller, engines, 3)
            await stored_turns(store, session_id, 3)
            await until(lambda: store.lease_of(session_id).expires_at < time.time() - 3000,
                        "the lease renewed on the clock jumped back")
            assert not caller.of_type("bye"), caller.of_type("bye")
            lease = store.lease_of(session_id)
            assert lease is not None and lease.epoch == epoch
            assert lease.owner.startswith(server.worker_id)
            await hang_up(caller, server)
        stored = store.load_state(session_id)
        assert stored is not None and user_turns(stored) == ["hello there"] * 3
        assert [t["status"] for t in stored["turns"].values()] == ["completed"] * 3
    finally:
        store.close()
