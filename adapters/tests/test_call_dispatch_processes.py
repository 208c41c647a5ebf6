"""Dispatch across processes: a front door and two call workers started with the real
command line (``voxflow serve --front-door`` / ``--worker``) on one PostgreSQL schema;
real aiortc callers dial the front door and talk to the workers directly (loopback ICE).
Skips with its reason when no PostgreSQL answers."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest
from voxflow_adapters.webrtc.client import LoopbackCaller, OfferRejected
from voxflow_adapters.webrtc.dispatch import DispatchStore

pytestmark = pytest.mark.models

ROOT = Path(__file__).resolve().parents[2]
VOXFLOW = str(Path(sys.executable).with_name("voxflow"))
TOKEN = "dispatch-processes-token"
STALE = 2.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def process(args: list[str], ready: str, env: dict[str, str], log: Path
            ) -> Iterator[subprocess.Popen[str]]:
    """``voxflow serve ARGS`` until it prints ``ready``; killed afterwards if still running."""
    with log.open("w") as err:
        proc = subprocess.Popen([VOXFLOW, "serve", *args], cwd=ROOT, env=env,
                                stdout=subprocess.PIPE, stderr=err, text=True)
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if ready in line:
                break
            if not line and proc.poll() is not None:
                raise AssertionError(f"{args} exited {proc.returncode}: {log.read_text()}")
        else:
            raise AssertionError(f"{args} did not start: {log.read_text()}")
        yield proc
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGCONT)
            proc.kill()
        proc.wait(timeout=30)


def worker_pid(call_id: str | None) -> int:
    """The pid in a dispatched call's id (``host:pid:hex-n``: the worker's lease name)."""
    assert call_id is not None
    return int(call_id.split(":")[1])


async def test_a_front_door_dispatches_to_two_worker_processes(
    pg_schema_url: str, tmp_path: Path
) -> None:
    env = {**os.environ, "VOXFLOW_DATABASE_URL": pg_schema_url, "VOXFLOW_LOG_LEVEL": "INFO"}
    port = free_port()
    worker_args = ["--worker", "--max-calls", "2", "--ice-host", "127.0.0.1",
                   "--stale-after", str(STALE), "--drain-seconds", "60"]
    store = DispatchStore(pg_schema_url, stale_after=STALE)
    with ExitStack() as stack:
        a = stack.enter_context(process(worker_args, "is ready", env, tmp_path / "a.log"))
        b = stack.enter_context(process(worker_args, "is ready", env, tmp_path / "b.log"))
        stack.enter_context(process(
            ["--front-door", "--port", str(port), "--token", TOKEN, "--offer-timeout", "5",
             "--stale-after", str(STALE)], "front door is listening", env,
            tmp_path / "door.log"))
        base = f"http://127.0.0.1:{port}"
        try:
            # 1. five concurrent offers, four slots: four calls, two per worker, one 503
            callers = [LoopbackCaller(base, TOKEN) for _ in range(5)]
            outcomes = await asyncio.gather(*(c.connect() for c in callers),
                                            return_exceptions=True)
            connected = [c for c, o in zip(callers, outcomes, strict=True) if o is None]
            refused = [o for o in outcomes if isinstance(o, OfferRejected)]
            assert len(connected) == 4 and len(refused) == 1, outcomes
            assert refused[0].status == 503 and "no call worker" in refused[0].reason
            pids = sorted(worker_pid(c.call_id) for c in connected)
            assert pids == sorted([a.pid, a.pid, b.pid, b.pid])
            for caller in connected:  # the data channel runs to the worker itself
                await caller.wait_message("hello", within=30)
            assert sorted(r.used for r in await store.workers()) == [2, 2]
            await asyncio.gather(*(c.aclose() for c in connected))
            async with asyncio.timeout(60):
                while any(r.used for r in await store.workers()):  # noqa: ASYNC110
                    await asyncio.sleep(0.2)  # every slot given back when its call ended

            # 2. a paused worker (stale heartbeat) gets no call; the other takes them
            os.kill(a.pid, signal.SIGSTOP)
            await asyncio.sleep(STALE + 1.0)
            rows = {r.pid: r for r in await store.workers()}
            assert rows[a.pid].heartbeat_age > STALE and rows[b.pid].heartbeat_age < STALE
            on_b = [LoopbackCaller(base, TOKEN) for _ in range(2)]
            for caller in on_b:
                await caller.connect()
                assert worker_pid(caller.call_id) == b.pid
            with pytest.raises(OfferRejected) as busy:  # b is full, a is not counted
                await LoopbackCaller(base, TOKEN).connect()
            assert busy.value.status == 503 and "1 live worker(s)" in busy.value.reason
            await asyncio.gather(*(c.aclose() for c in on_b))
            os.kill(a.pid, signal.SIGCONT)

            # 3. SIGTERM drains: a's running call goes on, new calls go to b, a exits 0
            async with asyncio.timeout(60):
                while any(r.used for r in await store.workers()):  # noqa: ASYNC110
                    await asyncio.sleep(0.2)
            os.kill(b.pid, signal.SIGSTOP)  # so that the next call lands on a
            await asyncio.sleep(STALE + 1.0)
            on_a = LoopbackCaller(base, TOKEN)
            await on_a.connect()
            assert worker_pid(on_a.call_id) == a.pid
            os.kill(b.pid, signal.SIGCONT)
            await on_a.wait_message("hello", within=30)
            os.kill(a.pid, signal.SIGTERM)
            async with asyncio.timeout(30):
                while not {r.pid: r for r in await store.workers()}[a.pid].draining:  # noqa: ASYNC110
                    await asyncio.sleep(0.1)
            async with asyncio.timeout(30):
                while {r.pid: r for r in await store.workers()}[b.pid].heartbeat_age > 1.0:  # noqa: ASYNC110
                    await asyncio.sleep(0.1)
            late = LoopbackCaller(base, TOKEN)
            await late.connect()
            assert worker_pid(late.call_id) == b.pid
            await asyncio.sleep(1.0)
            assert a.poll() is None and on_a.connection_state == "connected"
            await on_a.aclose()
            await late.aclose()
            assert await asyncio.to_thread(a.wait, 60) == 0
            assert a.pid not in {r.pid for r in await store.workers()}
        finally:
            await store.aclose()
