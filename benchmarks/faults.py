"""Faults a call survives: resets of the database connections, a restarted PostgreSQL, an
ICE server that never answers, is down or answers late; offers made during a reset; and
a job worker through a database outage.

Run: ``flock /tmp/voxflow-bench.lock uv run python benchmarks/faults.py [--runs 3]
[--only pg llm disk clock jobs ice commit]``
(real time: it starts a PostgreSQL of its own, never touching the shared one).

Everything runs in this process on the real models: ``WebRtcServer`` (the example
assistant, its sessions in a PostgreSQL this script starts in a temporary directory with
the machine's ``initdb``/``pg_ctl``) and an aiortc caller (``LoopbackCaller``) that asks
"Hello there!" (answered in two seconds) and waits for each answer. Scenarios:

* **resets**: 10 times in a row, every connection to the database is reset
  (``pg_terminate_backend``, the server up) right before a question and again 0.8 s
  after it, while the answer is being saved and played;
* **restart**: PostgreSQL is stopped (``pg_ctl stop -m fast``), a question is asked
  while it is down, and it is started again ``--downtime`` (5) s after it stopped;
* **silent ICE**: the server's ``--ice-server`` is a STUN server that takes every packet
  and never answers; three questions;
* **offers**: a front door and a call worker (in this process, on the same database);
  every connection is reset and three offers are made at once, ``--offer-rounds`` times;
* **LLM hang / reset / garbage**: a chat flow whose LLM is an OpenAI-compatible server
  on loopback (``_llm_faults.py``, reached by litellm through an endpoint the code names;
  2 s timeout, 1 retry) that answers, then hangs (or resets the connection, or answers
  events that are not JSON) for one question, then answers again; the caller's wait for
  the faulted question to settle and what it heard meanwhile;
* **disk full**: the SQLite session store on a small tmpfs (``mount -t tmpfs``, root
  only; said and skipped otherwise), filled to the last byte before a question and
  freed 3 s later;
* **clock jump**: the store's lease clock jumps an hour forward before a question, then
  two hours back before the next;
* the LLM and clock faults run twice: the sessions on SQLite, then on a PostgreSQL of
  the script's own (its lease clock: the server's, moved by the jump); the full disk is
  SQLite's alone;
* **ICE servers** (``--only ice``, sessions on SQLite): the server's ``--ice-server``
  is a STUN server that is silent, down (its port refusing: ICMP port unreachable) or
  late (it answers 4 s after each request, past the 2 s the gathering waits); three
  questions each, the offer's answer time against a call without it;
* **COMMIT cut** (``--only commit``, sessions on a PostgreSQL of the script's own): a
  proxy on loopback (``_pg_cut.py``) cuts the store's next COMMIT before each of six
  questions, in turn after the server made it (its answer dropped) and before it reached
  the server; turns lost, and user messages stored twice;
* **job outage** (``--only jobs``, no call): a job worker (``run_worker``, in this
  process) runs a job on a PostgreSQL of the script's own; the server is stopped while
  the job runs, the job returns, and the server is started again ``--job-outage`` (40) s
  later: past the ~30 s a job's report used to be tried for. The job's settled status,
  how long after the server came back its result was stored, and whether the worker
  still runs a job queued afterwards. With ``--report-patience`` shorter than the outage
  the worker stops, as told, and is started again at once (as a supervisor does): the
  job runs again as its next attempt once the server is back.

For each call: **turns lost** (questions asked less the answers both heard by the caller
and stored completed; must be 0), **answers after** (a question after the fault is
answered), and how long it was **degraded**: for the store faults, the time its state was
held back unsaved (``Call.deferred.outages``) and the answer time (``first_audio_ms``, the
server's end of speech → first reply audio) during the fault against before it; for
the silent ICE server, the offer's answer time against a call without it. For the
offers, how many were refused. Medians over ``--runs``; nothing is asserted (the machine
is shared: note the load average it prints).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
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
from _figures import figure

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


# -- the scenarios -----------------------------------------------------------------------


async def resets(engines: Any, pg: OwnPostgres, count: int = 10) -> CallResult:
    from voxflow.flow.postgres import PostgresFlowPersistence

    store = PostgresFlowPersistence(pg.url)
    result = CallResult()
    try:
        async with serving(engines, store) as (server, calls):
            caller = Caller(engines, f"http://127.0.0.1:{server.port}", server.token)
            await caller.connect()
            for _ in range(2):
                caller.ask()
                if (ms := await caller.answered()) is not None:
                    result.before_ms.append(ms)
            for _ in range(count):
                pg.reset()  # before the question: the turn's saves meet dead connections
                caller.ask()
                await asyncio.sleep(0.8)
                pg.reset()  # while it is answered, saved and played
                if (ms := await caller.answered()) is not None:
                    result.during_ms.append(ms)
            return await finish(result, caller, server, store, calls[0])
    finally:
        store.close()


async def restart(engines: Any, pg: OwnPostgres, downtime: float) -> CallResult:
    from voxflow.flow.postgres import PostgresFlowPersistence

    store = PostgresFlowPersistence(pg.url)
    result = CallResult()
    try:
        async with serving(engines, store) as (server, calls):
            caller = Caller(engines, f"http://127.0.0.1:{server.port}", server.token)
            await caller.connect()
            for _ in range(2):
                caller.ask()
                if (ms := await caller.answered()) is not None:
                    result.before_ms.append(ms)
            stopped = time.monotonic()
            await asyncio.to_thread(pg.stop)
            caller.ask()  # answered while the database is down
            if (ms := await caller.answered()) is not None:
                result.during_ms.append(ms)
            await asyncio.sleep(max(0.0, downtime - (time.monotonic() - stopped)))
            await asyncio.to_thread(pg.start)
            caller.ask()  # right after it is back
            if (ms := await caller.answered()) is not None:
                result.during_ms.append(ms)
            return await finish(result, caller, server, store, calls[0])
    finally:
        store.close()


async def ice_fault(engines: Any, store: Any, fault: str = "silent"
                    ) -> tuple[CallResult, float]:
    """The call through a STUN server that is ``silent``, ``refusing`` or ``slow``
    (``_stun_faults.py``), and the offer's answer time without it."""
    from _stun_faults import stun_server
    from voxflow_adapters.webrtc import IceServer

    result = CallResult()
    async with serving(engines, store) as (server, _):
        plain = Caller(engines, f"http://127.0.0.1:{server.port}", server.token)
        baseline = await plain.connect()
        await plain.hang_up()
    async with stun_server(fault) as (port, _slow):
        stun = (IceServer(urls=(f"stun:127.0.0.1:{port}",)),)
        async with serving(engines, store, ice_servers=stun) as (server, calls):
            caller = Caller(engines, f"http://127.0.0.1:{server.port}", server.token)
            result.offer_s = await caller.connect()
            for _ in range(3):
                caller.ask()
                if (ms := await caller.answered()) is not None:
                    result.during_ms.append(ms)
            return await finish(result, caller, server, store, calls[0]), baseline


@dataclass
class CommitCuts:
    """A call whose store writes had their COMMIT cut (see the module)."""

    call: CallResult
    cuts: int = 0  # COMMITs cut
    doubled: int = 0  # user messages stored more than once


async def commit_cuts(engines: Any, pg: OwnPostgres, count: int = 6) -> CommitCuts:
    """The call through ``count`` questions, the next COMMIT of the store cut before each:
    after the server made it (its answer dropped) and before it reached the server, in
    turn (``_pg_cut.py``)."""
    from _pg_cut import CommitCut

    from voxflow.flow.postgres import PostgresFlowPersistence

    result = CallResult()
    with CommitCut(pg.url) as cut:
        store = PostgresFlowPersistence(cut.url)
        try:
            async with serving(engines, store) as (server, calls):
                caller = Caller(engines, f"http://127.0.0.1:{server.port}", server.token)
                await caller.connect()
                caller.ask()
                if (ms := await caller.answered()) is not None:
                    result.before_ms.append(ms)
                for n in range(count):
                    cut.arm("after" if n % 2 == 0 else "before")
                    caller.ask()
                    if (ms := await caller.answered()) is not None:
                        result.during_ms.append(ms)
                    await asyncio.to_thread(cut.wait_cut, 20.0)  # (its save may come later)
                session_id = str(caller.caller.session_id)
                result = await finish(result, caller, server, store, calls[0])
            state = await asyncio.to_thread(store.load_state, session_id) or {}
            said = [m["content"] for m in state.get("messages", []) if m["role"] == "user"]
            return CommitCuts(result, cut.cuts, max(0, len(said) - result.asked))
        finally:
            store.close()


async def silent_ice(engines: Any, pg: OwnPostgres) -> tuple[CallResult, float]:
    """The call through a silent STUN server, its sessions in PostgreSQL."""
    from voxflow.flow.postgres import PostgresFlowPersistence

    store = PostgresFlowPersistence(pg.url)
    try:
        return await ice_fault(engines, store, "silent")
    finally:
        store.close()


async def ice_faults(engines: Any, runs: int) -> None:
    """A call through each failing STUN server (SQLite: the fault is the STUN server's),
    ``runs`` times, and the medians."""
    from voxflow.flow.persistence import SQLiteFlowPersistence

    results: dict[str, list[tuple[CallResult, float]]] = {f: [] for f in
                                                          ("silent", "refusing", "slow")}
    for run in range(1, runs + 1):
        print(f"run {run} (ICE servers):", flush=True)
        for fault, rs in results.items():
            with tempfile.TemporaryDirectory(prefix="voxflow-faults-") as tmp:
                store = SQLiteFlowPersistence(Path(tmp) / "calls.db")
                try:
                    r, base = await ice_fault(engines, store, fault)
                finally:
                    store.close()
            rs.append((r, base))
            print_call(f"{fault} STUN", r, f"; offer answered in {r.offer_s:.2f} s "
                       f"({base:.2f} s without the STUN server)")
    print(f"\nmedians of {runs} run(s), load average {os.getloadavg()[0]:.1f}:")
    for fault, rs in results.items():
        lost = max(r.lost for r, _ in rs)
        offer = statistics.median(r.offer_s for r, _ in rs)
        base = statistics.median(b for _, b in rs)
        ended = [r.ended for r, _ in rs if r.ended]
        print(f"  a {fault} STUN server: turns lost {lost} (worst run); answers after "
              f"{sum(r.answers_after for r, _ in rs)}/{len(rs)}; calls ended "
              f"{len(ended)}; the offer answered in {offer:.2f} s ({base:.2f} s without "
              "it; the gathering waits 2 s)")
        figure(f"{fault} STUN server: offer answered", round(offer, 2), "s")
        figure(f"turns lost: a {fault} STUN server", lost, "turns", target="0")


async def offers_during_resets(engines: Any, pg: OwnPostgres, rounds: int
                               ) -> tuple[int, int]:
    """``(refused, offered)`` over ``rounds`` resets, three offers right after each."""
    from voxflow_adapters.hosting.dispatch import DispatchStore
    from voxflow_adapters.hosting.worker import CallWorker
    from voxflow_adapters.webrtc import (
        PeerSettings,
        ServerSettings,
        WebRtcServer,
        assistant_call_factory,
    )
    from voxflow_adapters.webrtc.client import LoopbackCaller, OfferRejected
    from voxflow_adapters.webrtc.front_door import FrontDoor

    host = WebRtcServer(assistant_call_factory(), engines, settings=ServerSettings(
        max_calls=3, peer=PeerSettings(ice_host_addresses=("127.0.0.1",))))
    worker = CallWorker(host, DispatchStore(pg.url))
    await worker.start()
    door = FrontDoor(DispatchStore(pg.url), settings=ServerSettings(port=0))
    refused = offered = 0
    try:
        async with door:
            for _ in range(rounds):
                pg.reset()
                callers = [LoopbackCaller(f"http://127.0.0.1:{door.port}", door.token)
                           for _ in range(3)]
                outcomes = await asyncio.gather(*(c.connect() for c in callers),
                                                return_exceptions=True)
                offered += len(callers)
                refused += sum(isinstance(o, OfferRejected) for o in outcomes)
                for caller, outcome in zip(callers, outcomes, strict=True):
                    if outcome is None:
                        with contextlib.suppress(Exception):
                            caller.send({"v": 1, "type": "hangup"})
                            await caller.wait_message("bye", within=10)
                    await caller.aclose()
                async with asyncio.timeout(30):
                    await host.wait_idle()
                await asyncio.sleep(0.5)  # the slots given back
    finally:
        await worker.aclose()
    return refused, offered


# -- the LLM provider, the disk and the clock --------------------------------------------


@dataclass
class LlmFault:
    """A call through one LLM provider fault (see the module)."""

    fault: str
    lost: int = 0  # answered questions missing from the stored history
    settled_s: float | None = None  # the faulted question → its turn settled (failed)
    heard_during: int = 0  # replies the caller heard for the faulted question
    turn_status: str = "-"
    cause: str = "-"  # the error's first words
    answers_after: bool = False
    ended: str | None = None


class _Causes(logging.Handler):
    """The messages of the exceptions logged with ERROR records."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.errors: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info and record.exc_info[1] is not None:
            self.errors.append(str(record.exc_info[1]))


async def llm_fault(engines: Any, fault: str, pg: OwnPostgres | None = None) -> LlmFault:
    """The call through one LLM provider ``fault``, its sessions on SQLite, or on ``pg``."""
    from _llm_faults import ANSWER, faulty_provider
    from voxflow_adapters.hosting.calls import flow_call_factory, webrtc_voice_settings

    from voxflow import ConversationConfig, Flow
    from voxflow.flow.persistence import SQLiteFlowPersistence
    from voxflow.flow.postgres import PostgresFlowPersistence
    from voxflow.llm import LLM, preload
    from voxflow.wiring import AssistantState

    # litellm loaded before the call, as every entry point loads it at start-up (this
    # builds its server itself): the first call's turn does not wait for it
    await preload()
    result = LlmFault(fault)
    causes = _Causes()  # the failed reply's error, as the session logs it
    session_log = logging.getLogger("voxflow_voice.session.voice_session")
    session_log.addHandler(causes)
    with tempfile.TemporaryDirectory(prefix="voxflow-faults-") as tmp, \
            faulty_provider() as provider, contextlib.ExitStack() as cleanup:
        cleanup.callback(session_log.removeHandler, causes)
        @ConversationConfig(llm=LLM(provider.llm_config(timeout=2.0, retries=1)))
        class Chat(Flow[AssistantState]):
            pass

        store = (SQLiteFlowPersistence(Path(tmp) / "calls.db") if pg is None
                 else PostgresFlowPersistence(pg.url))
        # no answer in the user's pause: each question's request follows its commit
        voice = webrtc_voice_settings().model_copy(update={"speculative_replies": False})
        factory = flow_call_factory(Chat, settings=voice)
        try:
            async with serving(engines, store, factory) as (server, calls):
                caller = Caller(engines, f"http://127.0.0.1:{server.port}", server.token)
                await caller.connect()
                caller.ask()
                await caller.answered()
                heard = caller.heard()
                provider.mode = fault
                asked = time.monotonic()
                caller.ask()  # (its turn fails: its latency message has no first audio)
                state = calls[0].flow.state
                while time.monotonic() - asked < 60:
                    turns = list(state.turns.values())
                    if len(turns) >= 2 and turns[-1].status in ("failed", "completed"):
                        result.settled_s = time.monotonic() - asked
                        result.turn_status = turns[-1].status
                        break
                    await asyncio.sleep(0.05)
                if causes.errors:
                    result.cause = " ".join(causes.errors[-1].split()[:9])
                result.heard_during = caller.heard() - heard
                provider.mode = "ok"
                await caller.answered()  # its latency message: the turn is over
                caller.ask()
                result.answers_after = await caller.answered() is not None
                if os.environ.get("FAULTS_DEBUG"):
                    print([(m.get("type"), m.get("text", m.get("reason", "")))
                           for m in caller.caller.messages
                           if m.get("type") not in ("receipt", "level")], flush=True)
                result.ended = caller.bye()
                session_id = str(caller.caller.session_id)
                await caller.hang_up()
                async with asyncio.timeout(30):
                    await server.wait_idle()
            stored = await asyncio.to_thread(store.load_state, session_id) or {}
            said = [m for m in stored.get("messages", []) if m["role"] == "assistant"
                    and str(m["content"]).strip() == ANSWER]
            result.lost = 2 - len(said)
        finally:
            store.close()
    return result


# -- a job worker through a database outage ----------------------------------------------


_JOB_KIND = "faults.finishes_when_told"
_job_started = asyncio.Event()
_job_finish = asyncio.Event()


@dataclass
class JobOutage:
    """A job through a database outage (see the module)."""

    status: str = "-"  # the job's settled status, as its session sees it
    attempt: int = 0  # the attempt that settled it (1: never run again)
    announcement: str = ""
    stored_after_s: float | None = None  # the server back → the result in the inbox
    worker_alive: bool = False  # the worker still running after the outage
    next_job: str = "-"  # a job queued after the outage: its settled status
    restarts: int = 0  # the worker stopped (past its report patience) and started again


_declared: list[Any] = []  # the job function (the registry holds it weakly)


def _declare_job() -> None:
    from voxflow.jobs import JobContext, background_job

    if _declared:
        return

    @background_job(kind=_JOB_KIND)
    async def finishes_when_told(job: JobContext, wait: bool = True) -> str:
        if wait:
            _job_started.set()
            await _job_finish.wait()
        return "Your table for two is booked."

    _declared.append(finishes_when_told)


async def job_outage(pg: OwnPostgres, outage: float, patience: float | None = None
                     ) -> JobOutage:
    """The job through an ``outage`` (s); with ``patience``, the worker's report patience
    (shorter than the outage: the worker stops, as told, and is started again at once,
    as a supervisor does, until the database answers)."""
    from voxflow.errors import PersistenceUnavailableError
    from voxflow.jobs import BackgroundJob, PostgresJobQueue, add_job, apply_inbox
    from voxflow.wiring import AssistantState

    _declare_job()
    _job_started.clear()
    _job_finish.clear()
    result = JobOutage()
    queue = PostgresJobQueue(pg.url)
    await queue.migrate()

    async def settled(state: AssistantState, job: BackgroundJob, seconds: float) -> str:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            with contextlib.suppress(Exception):  # (nothing acknowledges: all its rows)
                apply_inbox(state, await queue.inbox.pending(state.id))
                if state.jobs[job.job_id].status in ("completed", "failed"):
                    return state.jobs[job.job_id].status
            await asyncio.sleep(0.1)
        return state.jobs[job.job_id].status

    state = AssistantState()
    job = BackgroundJob(session_id=state.id, kind=_JOB_KIND)
    add_job(state, job)
    await queue.enqueue_async(job)
    options: dict[str, Any] = {} if patience is None else {"report_patience": patience}

    async def supervised() -> None:
        while True:
            try:
                await queue.run_worker(heartbeat=1.0, stalled_after=10.0, **options)
            except PersistenceUnavailableError:
                if patience is None:
                    raise
                result.restarts += 1
                await asyncio.sleep(1.0)

    run = asyncio.create_task(supervised())
    try:
        started = asyncio.ensure_future(_job_started.wait())
        await asyncio.wait([started, run], timeout=60, return_when=asyncio.FIRST_COMPLETED)
        if run.done():
            run.result()  # (the worker's own failure, raised)
        if not started.done():
            started.cancel()
            raise TimeoutError("the job did not start within 60 s")
        await asyncio.to_thread(pg.stop)
        _job_finish.set()  # the job returns while the database is away
        await asyncio.sleep(outage)
        await asyncio.to_thread(pg.start)
        back = time.monotonic()
        result.status = await settled(state, job, 120)
        if result.status == "completed":
            result.stored_after_s = time.monotonic() - back
        result.announcement = state.jobs[job.job_id].announcement
        result.attempt = state.jobs[job.job_id].attempt
        result.worker_alive = not run.done()
        after = BackgroundJob(session_id=state.id, kind=_JOB_KIND, inputs={"wait": False})
        add_job(state, after)
        await queue.enqueue_async(after)
        result.next_job = await settled(state, after, 30)
    finally:
        run.cancel()
        with contextlib.suppress(BaseException):
            await run
        queue.close()
        await queue.inbox.close()
    return result


def _fill(folder: Path) -> Path:
    filler = folder / "filler"
    with open(filler, "wb", buffering=0) as out:
        for block in (b"\0" * 65536, b"\0" * 512, b"\0"):
            try:
                while True:
                    out.write(block)
            except OSError:
                pass
    return filler


async def disk_full(engines: Any, full_for: float = 3.0) -> CallResult | str:
    """The call through a full disk; or why no small disk could be mounted."""
    from voxflow.flow.persistence import SQLiteFlowPersistence

    with tempfile.TemporaryDirectory(prefix="voxflow-faults-") as tmp:
        disk = Path(tmp) / "disk"
        disk.mkdir()
        mounted = await asyncio.to_thread(
            subprocess.run, ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(disk)],
            capture_output=True, text=True, check=False)
        if mounted.returncode != 0:
            why = (mounted.stderr or mounted.stdout).strip()
            return f"not run: mount -t tmpfs failed: {why}"
        store = SQLiteFlowPersistence(disk / "calls.db")
        result = CallResult()
        try:
            async with serving(engines, store, lease_seconds=1.5) as (server, calls):
                caller = Caller(engines, f"http://127.0.0.1:{server.port}", server.token)
                await caller.connect()
                for _ in range(2):
                    caller.ask()
                    if (ms := await caller.answered()) is not None:
                        result.before_ms.append(ms)
                filler = await asyncio.to_thread(_fill, disk)
                full_at = time.monotonic()
                caller.ask()  # answered on the full disk
                if (ms := await caller.answered()) is not None:
                    result.during_ms.append(ms)
                await asyncio.sleep(max(0.0, full_for - (time.monotonic() - full_at)))
                await asyncio.to_thread(filler.unlink)
                return await finish(result, caller, server, store, calls[0])
        finally:
            store.close()
            await asyncio.to_thread(subprocess.run, ["umount", "-l", str(disk)], check=False)


def _jumping_sqlite(path: Path) -> Any:
    import sqlite3

    from voxflow.flow.persistence import SQLiteFlowPersistence

    class Jumping(SQLiteFlowPersistence):
        jump = 0.0

        def _connect(self, create: bool) -> sqlite3.Connection | None:
            fresh = self._conn is None
            conn = super()._connect(create)
            if conn is not None and fresh:
                conn.create_function("julianday", -1, lambda *_: (
                    time.time() + self.jump) / 86400.0 + 2440587.5)
            return conn

    return Jumping(path)


def _jumping_postgres(url: str) -> Any:
    from voxflow.flow.postgres import PostgresFlowPersistence

    class Jumping(PostgresFlowPersistence):
        _jump = 0.0

        @property
        def jump(self) -> float:
            return self._jump

        @jump.setter
        def jump(self, seconds: float) -> None:  # the leases' clock: the server's, moved
            self._jump = seconds
            self._now_sql = f"(extract(epoch FROM clock_timestamp())::float8 + {seconds!r})"

    return Jumping(url)


async def clock_jump(engines: Any, pg: OwnPostgres | None = None) -> CallResult:
    """The call through lease-clock jumps, its sessions on SQLite, or on ``pg``."""
    result = CallResult()
    with tempfile.TemporaryDirectory(prefix="voxflow-faults-") as tmp:
        store = (_jumping_sqlite(Path(tmp) / "calls.db") if pg is None
                 else _jumping_postgres(pg.url))
        try:
            async with serving(engines, store, lease_seconds=1.5) as (server, calls):
                caller = Caller(engines, f"http://127.0.0.1:{server.port}", server.token)
                await caller.connect()
                for _ in range(2):
                    caller.ask()
                    if (ms := await caller.answered()) is not None:
                        result.before_ms.append(ms)
                for jump in (3600.0, -3600.0):
                    store.jump = jump
                    caller.ask()
                    if (ms := await caller.answered()) is not None:
                        result.during_ms.append(ms)
                    await asyncio.sleep(1.0)
                return await finish(result, caller, server, store, calls[0])
        finally:
            store.close()


# -- the report --------------------------------------------------------------------------


def _ms(values: list[float]) -> str:
    return f"{statistics.median(values):.0f}" if values else "-"


def print_call(name: str, r: CallResult, extra: str = "") -> None:
    print(f"  {name:<11} turns lost {r.lost} of {r.asked} (heard {r.heard}, stored "
          f"{r.stored}); answers after: {'yes' if r.answers_after else 'NO'}; state held "
          f"back {r.held_back:.1f} s; first audio {_ms(r.before_ms)} ms before, "
          f"{_ms(r.during_ms)} ms during{extra}"
          + (f"; ENDED: {r.ended}" if r.ended else ""), flush=True)


async def main(runs: int, downtime: float, offer_rounds: int, bin_dir: Path,
               only: list[str], job_outage_s: float,
               report_patience: float | None = None) -> None:
    from voxflow_adapters.webrtc.server import ignore_closed_transport_errors
    from voxflow_voice.engines import VoiceEngines

    ignore_closed_transport_errors(asyncio.get_running_loop())
    # what the faults make voxflow and psycopg log (warnings, by design) is not the report
    for name in ("", "psycopg"):
        logging.getLogger(name).setLevel(logging.ERROR)
    if "jobs" in only:
        print(f"faults: a job worker through a PostgreSQL outage; load average "
              f"{os.getloadavg()[0]:.1f} at the start", flush=True)
        await job_outages(runs, job_outage_s, bin_dir, report_patience)
    if not set(only) - {"jobs"}:
        return
    engines = await asyncio.to_thread(VoiceEngines.load, deterministic=True)
    print(f"faults: a call on the real models, its sessions in a PostgreSQL of its own; "
          f"load average {os.getloadavg()[0]:.1f} at the start", flush=True)
    if "ice" in only:
        await ice_faults(engines, runs)
    table: dict[str, list[Any]] = {"resets": [], "restart": [], "ice": [], "ice_base": [],
                                   "offers": []}
    if set(only) & {"llm", "disk", "clock"}:
        await other_faults(engines, runs, only, bin_dir)
    if "commit" in only:
        await commit_faults(engines, runs, bin_dir)
    if "pg" not in only:
        return
    for run in range(1, runs + 1):
        print(f"run {run}:", flush=True)
        with own_postgres(bin_dir) as pg:
            r = await resets(engines, pg)
            table["resets"].append(r)
            print_call("resets", r, " (20 resets: 10 before a question, 10 during it)")
            r = await restart(engines, pg, downtime)
            table["restart"].append(r)
            print_call("restart", r, f" (down {downtime:g} s)")
            r, base = await silent_ice(engines, pg)
            table["ice"].append(r)
            table["ice_base"].append(base)
            print_call("silent ICE", r, f"; offer answered in {r.offer_s:.2f} s "
                       f"({base:.2f} s without the STUN server)")
            refused, offered = await offers_during_resets(engines, pg, offer_rounds)
            table["offers"].append((refused, offered))
            print(f"  offers      refused {refused} of {offered} made right after a "
                  "reset of every connection", flush=True)
    print(f"\nmedians of {runs} run(s), load average {os.getloadavg()[0]:.1f} at the end:")
    for key, label in (("resets", "10 connection resets in a row"),
                       ("restart", f"PostgreSQL restart, {downtime:g} s down"),
                       ("ice", "an ICE server that never answers")):
        rs: list[CallResult] = table[key]
        lost = max(r.lost for r in rs)
        before = _median_of(r.before_ms for r in rs)
        during = _median_of(r.during_ms for r in rs)
        print(f"  {label:<33} turns lost {lost} (worst run); answers after "
              f"{sum(r.answers_after for r in rs)}/{len(rs)}; state held back "
              f"{statistics.median(r.held_back for r in rs):.1f} s; first audio {during} ms "
              f"during the fault ({before} before)")
        figure(f"turns lost: {label}", lost, "turns", target="0")
    ice = statistics.median(r.offer_s for r in table["ice"])
    base = statistics.median(table["ice_base"])
    print(f"  an ICE server that never answers: the offer answered in {ice:.2f} s "
          f"({base:.2f} s without it)")
    refused = sum(r for r, _ in table["offers"])
    offered = sum(o for _, o in table["offers"])
    print(f"  offers refused right after a reset: {refused} of {offered}")
    figure("restart: state held back", round(statistics.median(
        r.held_back for r in table["restart"]), 1), "s")
    figure("silent ICE server: offer answered", round(ice, 2), "s")
    figure("offers refused during a reset", refused, "offers", target="0")


async def commit_faults(engines: Any, runs: int, bin_dir: Path) -> None:
    """A call whose store's COMMITs are cut, ``runs`` times, and the medians."""
    results: list[CommitCuts] = []
    for run in range(1, runs + 1):
        with own_postgres(bin_dir) as pg:
            r = await commit_cuts(engines, pg)
        results.append(r)
        print_call(f"run {run} commit cuts", r.call,
                   f" ({r.cuts} COMMITs cut; user messages doubled {r.doubled})")
    lost = max(r.call.lost for r in results)
    doubled = max(r.doubled for r in results)
    print(f"  COMMIT cut (made and unanswered, or never made), each question: turns lost "
          f"{lost}, doubled {doubled} (worst run); answers after "
          f"{sum(r.call.answers_after for r in results)}/{len(results)}; state held back "
          f"{statistics.median(r.call.held_back for r in results):.1f} s; first audio "
          f"{_median_of(r.call.during_ms for r in results)} ms during "
          f"({_median_of(r.call.before_ms for r in results)} before)", flush=True)
    figure("turns lost: COMMITs cut", lost, "turns", target="0")
    figure("turns doubled: COMMITs cut", doubled, "turns", target="0")


async def job_outages(runs: int, outage: float, bin_dir: Path,
                      patience: float | None = None) -> None:
    """A job through a database outage of ``outage`` s, ``runs`` times (``patience``:
    the worker's report patience, default its own)."""
    results: list[JobOutage] = []
    for run in range(1, runs + 1):
        with own_postgres(bin_dir) as pg:
            r = await job_outage(pg, outage, patience)
        results.append(r)
        took = "-" if r.stored_after_s is None else f"{r.stored_after_s:.1f} s"
        print(f"  run {run} job outage {outage:g} s"
              + ("" if patience is None else f", report patience {patience:g} s")
              + f": the job settled {r.status} "
              f"({r.announcement!r}) as attempt {r.attempt}, its result stored {took} "
              f"after the server was back; worker restarts {r.restarts}; "
              f"worker {'running' if r.worker_alive else 'STOPPED'}, a job queued after: "
              f"{r.next_job}", flush=True)
    lost = sum(r.status != "completed" for r in results)
    stored = [r.stored_after_s for r in results if r.stored_after_s is not None]
    print(f"  job outage {outage:g} s: results lost {lost} of {len(results)}; stored "
          + (f"{statistics.median(stored):.1f} s (median)" if stored else "never")
          + f" after the server was back; run again {sum(r.attempt > 1 for r in results)}; "
          f"worker running after it "
          f"{sum(r.worker_alive for r in results)}/{len(results)}; the next job completed "
          f"{sum(r.next_job == 'completed' for r in results)}/{len(results)}", flush=True)
    name = f"job outage {outage:g} s" + ("" if patience is None
                                          else f", report patience {patience:g} s")
    figure(f"{name}: results lost", lost, "jobs", target="0")
    if stored:
        figure(f"{name}: result stored after the server was back",
               round(statistics.median(stored), 1), "s")


async def other_faults(engines: Any, runs: int, only: list[str], bin_dir: Path) -> None:
    """The LLM provider, disk and clock faults, ``runs`` times each, and their medians:
    the LLM and clock faults with the sessions on SQLite and on a PostgreSQL of the
    script's own (when ``bin_dir`` has ``initdb``), the disk's on SQLite."""
    stores = ("SQLite", "PostgreSQL") if (bin_dir / "initdb").exists() else ("SQLite",)
    if len(stores) == 1:
        print(f"  (no initdb in {bin_dir}: LLM and clock faults on SQLite only)")
    llm: dict[str, list[LlmFault]] = {f"{fault} {where}": [] for where in stores
                                      for fault in ("hang", "reset", "garbage")}
    disks: list[CallResult] = []
    clocks: dict[str, list[CallResult]] = {where: [] for where in stores}
    for run in range(1, runs + 1):
        print(f"run {run} (LLM provider, disk, clock):", flush=True)
        with contextlib.ExitStack() as stack:
            pg = stack.enter_context(own_postgres(bin_dir)) if len(stores) > 1 and set(
                only) & {"llm", "clock"} else None
            if "llm" in only:
                for key in llm:
                    fault, where = key.split()
                    f = await llm_fault(engines, fault, pg if where == "PostgreSQL" else None)
                    llm[key].append(f)
                    took = "never" if f.settled_s is None else f"{f.settled_s:.1f} s"
                    print(f"  LLM {key:<19} answers lost {f.lost} of 2; the faulted "
                          f"question settled {f.turn_status} after {took}, the caller heard "
                          f"{f.heard_during} repl(ies) for it (cause: {f.cause}); answers "
                          f"after: {'yes' if f.answers_after else 'NO'}"
                          + (f"; ENDED: {f.ended}" if f.ended else ""), flush=True)
            if "disk" in only:
                d = await disk_full(engines)
                if isinstance(d, str):
                    print(f"  disk full   {d}", flush=True)
                else:
                    disks.append(d)
                    print_call("disk full", d, " (full 3 s)")
            if "clock" in only:
                for where in stores:
                    c = await clock_jump(engines, pg if where == "PostgreSQL" else None)
                    clocks[where].append(c)
                    print_call("clock jump", c, f" (+1 h, then -2 h; {where})")
    print(f"\nmedians of {runs} run(s), load average {os.getloadavg()[0]:.1f}:")
    for fault, results in llm.items():
        if not results:
            continue
        settled = [f.settled_s for f in results if f.settled_s is not None]
        lost = max(f.lost for f in results)
        median = statistics.median(settled) if settled else float("nan")
        statuses = ", ".join(sorted({f.turn_status for f in results}))
        print(f"  LLM provider {fault:<19}: answers lost {lost} (worst run); the faulted "
              f"question settled in {median:.1f} s ({statuses}), replies heard "
              f"for it {max(f.heard_during for f in results)}; answers after "
              f"{sum(f.answers_after for f in results)}/{len(results)}")
        figure(f"LLM provider {fault}: answers lost", lost, "answers", target="0")
        if settled:
            figure(f"LLM provider {fault}: question settled", round(statistics.median(
                settled), 1), "s")
    for label, rs in (("disk full 3 s", disks),
                      *((f"clock jump +1 h / -2 h {where}", rs)
                        for where, rs in clocks.items())):
        if rs:
            lost = max(r.lost for r in rs)
            print(f"  {label:<33}: turns lost {lost} (worst run); answers after "
                  f"{sum(r.answers_after for r in rs)}/{len(rs)}; state held back "
                  f"{statistics.median(r.held_back for r in rs):.1f} s; first audio "
                  f"{_median_of(r.during_ms for r in rs)} ms during the fault "
                  f"({_median_of(r.before_ms for r in rs)} before)")
            figure(f"turns lost: {label}", lost, "turns", target="0")


def _median_of(runs: Any) -> str:
    """The median over runs of each run's median (ms), or '-'."""
    medians = [statistics.median(values) for values in runs if values]
    return f"{statistics.median(medians):.0f}" if medians else "-"


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="rounds of every fault (3)")
    parser.add_argument("--downtime", type=float, default=5.0,
                        help="seconds PostgreSQL is down in the restart (5)")
    parser.add_argument("--offer-rounds", type=int, default=5,
                        help="resets with three offers right after each (5)")
    parser.add_argument("--pg-bin", type=Path, default=PG_BIN,
                        help=f"the directory of initdb and pg_ctl ({PG_BIN})")
    parser.add_argument("--job-outage", type=float, default=40.0,
                        help="seconds the job outage's PostgreSQL is down (40)")
    parser.add_argument("--report-patience", type=float, default=None,
                        help="the job worker's report patience in the job outage (its "
                        "default, 900 s); shorter than the outage, the worker stops and "
                        "is started again, as a supervisor does")
    parser.add_argument("--only", nargs="+",
                        choices=("pg", "llm", "disk", "clock", "jobs", "ice", "commit"),
                        default=["pg", "llm", "disk", "clock", "jobs", "ice", "commit"],
                        help="the faults to run (all): pg is the database's (resets, "
                        "restart, silent ICE, offers)")
    args = parser.parse_args()
    if args.runs < 1 or not 0 < args.downtime <= 60 or args.offer_rounds < 1:
        parser.error("--runs and --offer-rounds must be >= 1, --downtime in (0, 60]")
    if set(args.only) & {"pg", "jobs", "commit"} and not (args.pg_bin / "initdb").exists():
        parser.exit(0, f"faults skipped: no initdb in {args.pg_bin} (give --pg-bin)\n")
    asyncio.run(main(args.runs, args.downtime, args.offer_rounds, args.pg_bin, args.only,
                     args.job_outage, args.report_patience))
