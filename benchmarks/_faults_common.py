"""The harness of ``faults.py``'s call scenarios: a PostgreSQL of the script's own, a
call on the real models (``WebRtcServer``) and its aiortc caller, what one faulted call
came to (:class:`CallResult`), and how a call's result is printed.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import statistics
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["PG_BIN", "QUESTION", "CallResult", "Caller", "OwnPostgres", "asked_before", "finish",
           "median_of", "own_postgres", "print_call", "serving", "stored_completed"]

PG_BIN = Path("/usr/lib/postgresql/15/bin")
QUESTION = "Hello there!"


# -- a PostgreSQL of our own -------------------------------------------------------------


class OwnPostgres:
    """A PostgreSQL server in a temporary directory (``initdb``; run as ``postgres`` when
    this process is root, as initdb refuses root)."""

    def __init__(self, folder: Path, bin_dir: Path = PG_BIN) -> None:
        self.folder = folder
        self.bin = bin_dir
        self.data = folder / "data"
        self.port = _free_port()
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        self._as: list[str] = []
        if os.geteuid() == 0:
            self._as = ["runuser", "-u", "postgres", "--"]
            shutil.chown(folder, "postgres")

    def _run(self, *argv: str) -> None:
        subprocess.run([*self._as, *argv], check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE)

    def init(self) -> None:
        self._run(str(self.bin / "initdb"), "-D", str(self.data), "-A", "trust", "-U",
                  "postgres", "--no-sync")
        self.start()

    def start(self) -> None:
        options = (f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 "
                   "-c fsync=off -c max_connections=100")
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-o", options, "-l",
                  str(self.folder / "log"), "-w", "start")

    def stop(self) -> None:
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop")

    def reset(self) -> int:
        """``pg_terminate_backend`` every connection but this one (all of them ours)."""
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn:
            row = conn.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                               "WHERE backend_type = 'client backend' AND "
                               "pid <> pg_backend_pid()").fetchone()
        return int(row[0]) if row else 0

    def close(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):
            self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w",
                      "stop")


@contextlib.contextmanager
def own_postgres(bin_dir: Path) -> Iterator[OwnPostgres]:
    with tempfile.TemporaryDirectory(prefix="voxflow-faults-") as tmp:
        server = OwnPostgres(Path(tmp), bin_dir)
        server.init()
        try:
            yield server
        finally:
            server.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- a call ------------------------------------------------------------------------------


@dataclass
class CallResult:
    """What one faulted call came to (see the module)."""

    asked: int = 0
    heard: int = 0
    stored: int = 0
    answers_after: bool = False
    held_back: float = 0.0  # s the state was held back unsaved (sum of outages)
    before_ms: list[float] = field(default_factory=list)  # first_audio_ms before the fault
    during_ms: list[float] = field(default_factory=list)  # ... during it
    offer_s: float = 0.0  # the offer's answer time
    ended: str | None = None  # the bye's reason, if the call was ended
    server_log: str = ""  # what a PostgreSQL of the fault's own logged of it

    @property
    def lost(self) -> int:
        return self.asked - min(self.heard, self.stored)


class Caller:
    """The aiortc caller and its questions."""

    def __init__(self, engines: Any, url: str, token: str) -> None:
        from voxflow_adapters.webrtc.client import LoopbackCaller
        from voxflow_voice.audio import AudioChunk

        self.caller = LoopbackCaller(url, token)
        samples = np.concatenate([np.asarray(s.samples, np.float32)
                                  for s in engines.tts.synthesize(QUESTION)])
        self.question = AudioChunk.from_float(samples, engines.tts.sample_rate)
        self.asked = 0

    async def connect(self) -> float:
        began = time.monotonic()
        await self.caller.connect()
        await self.caller.wait_message("hello")
        return time.monotonic() - began

    def ask(self) -> None:
        self.asked += 1
        self.caller.say(self.question)

    async def answered(self, within: float = 60.0) -> float | None:
        """Wait for the last question's answer; its first_audio_ms (None: unanswered)."""
        try:
            await self.caller.wait_for(
                lambda: len(self.caller.of_type("latency")) >= self.asked, within=within,
                what="the answer")
        except TimeoutError:
            return None
        value = self.caller.of_type("latency")[-1].get("first_audio_ms")
        return None if value is None else float(value)

    def heard(self) -> int:
        return len(self.caller.of_type("reply_done"))

    def bye(self) -> str | None:
        byes = self.caller.of_type("bye")
        return str(byes[-1]["reason"]) if byes else None

    async def hang_up(self) -> None:
        with contextlib.suppress(Exception):
            self.caller.send({"v": 1, "type": "hangup"})
            await self.caller.wait_message("bye", within=10)
        await self.caller.aclose()


@contextlib.asynccontextmanager
async def serving(engines: Any, store: Any, factory: Any = None, lease_seconds: float = 6.0,
                  **peer: Any) -> AsyncIterator[tuple[Any, list[Any]]]:
    from voxflow_adapters.webrtc import (
        PeerSettings,
        ServerSettings,
        WebRtcServer,
        assistant_call_factory,
    )

    calls: list[Any] = []
    settings = ServerSettings(port=0, lease_seconds=lease_seconds,
                              peer=PeerSettings(ice_host_addresses=("127.0.0.1",), **peer))
    server = WebRtcServer(factory or assistant_call_factory(), engines, settings=settings,
                          store=store, on_call=lambda _peer, call: calls.append(call))
    async with server:
        yield server, calls


async def asked_before(engines: Any, server: Any, result: CallResult, questions: int = 2
                       ) -> Caller:
    """A caller connected to ``server`` that asked ``questions`` before the fault, their
    answer times (first_audio_ms) in ``result.before_ms``."""
    caller = Caller(engines, f"http://127.0.0.1:{server.port}", server.token)
    await caller.connect()
    for _ in range(questions):
        caller.ask()
        if (ms := await caller.answered()) is not None:
            result.before_ms.append(ms)
    return caller


def stored_completed(store: Any, session_id: str) -> int:
    state = store.load_state(session_id) or {}
    return sum(1 for t in state.get("turns", {}).values() if t.get("status") == "completed")


async def finish(result: CallResult, caller: Caller, server: Any, store: Any, call: Any
                 ) -> CallResult:
    """The question after the fault, the hang-up, and the stored turns."""
    caller.ask()
    result.answers_after = await caller.answered() is not None
    result.asked, result.heard, result.ended = caller.asked, caller.heard(), caller.bye()
    session_id = str(caller.caller.session_id)
    await caller.hang_up()
    async with asyncio.timeout(30):
        await server.wait_idle()
    result.stored = await asyncio.to_thread(stored_completed, store, session_id)
    if call.deferred is not None:
        result.held_back = sum(call.deferred.outages)
    return result


# -- the report --------------------------------------------------------------------------


def _ms(values: list[float]) -> str:
    return f"{statistics.median(values):.0f}" if values else "-"


def print_call(name: str, r: CallResult, extra: str = "") -> None:
    print(f"  {name:<11} turns lost {r.lost} of {r.asked} (heard {r.heard}, stored "
          f"{r.stored}); answers after: {'yes' if r.answers_after else 'NO'}; state held "
          f"back {r.held_back:.1f} s; first audio {_ms(r.before_ms)} ms before, "
          f"{_ms(r.during_ms)} ms during{extra}"
          + (f"; ENDED: {r.ended}" if r.ended else ""), flush=True)


def median_of(runs: Any) -> str:
    """The median over runs of each run's median (ms), or '-'."""
    medians = [statistics.median(values) for values in runs if values]
    return f"{statistics.median(medians):.0f}" if medians else "-"
