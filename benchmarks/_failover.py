"""Failover timing, shared by ``scale_out.py`` (a front door and two call workers on
PostgreSQL: the deployed shape) and ``failover.py`` (two one-process ``voxflow serve`` on
one database, the caller pointed at the other by hand).

Every process is started with the real command line (``python -m voxflow.cli serve``,
the bundled models, the example assistant, JSON logs at INFO to a file). An aiortc
caller (:class:`~voxflow_adapters.webrtc.client.LoopbackCaller` with ``keep_connected``,
as the page does) asks a question, hears it answered, asks for a story; about 2 s into
the story, once some of its heard words were saved, the process holding the call is
SIGKILLed. The caller reconnects by itself; once the resumed ``hello`` arrives it asks a
question again. The marks (``time.monotonic()`` at the caller unless said):

* **detection**: the kill → the caller decides the connection is gone (nothing for
  ``peer_timeout`` s; the page waits 2 s);
* **reconnect**: that decision → the resume offer answered and the data channel open.
  Of it, **lease wait** (the new worker waiting out the dead owner's lease, which ends
  ``lease_seconds``, 6 s, after its last renewal; from the new worker's ``call resumed``
  log line) and **state load** (loading the session, cutting the story to its saved
  heard words and saving that; same line); the rest is the offer's way, ICE and DTLS;
* **hello**: the data channel open → the resumed ``hello``;
* **first reply audio**: the resumed call's next turn *committed* (its ``transcript``
  message reaching the caller) → the first audible frame of its answer at the caller;
* **kill → first reply audio**: the sum detection + reconnect + hello + first reply audio,
  that is the failover's cost without the caller's own time: the question the caller
  speaks after the resume and its end of turn (last speech sample sent → the commit,
  printed apart as **end of turn**: the 0.6 s silence wait and the STT) are left out.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import signal
import statistics
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from _figures import figure
from voice_latency import SPEECH_LEVEL

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "failover-benchmark-token"
PEER_TIMEOUT = 2.0
"""s: the caller's silence before it reconnects (the page's)."""
QUESTION = "What are your opening hours?"

__all__ = ["Deployment", "FailoverTiming", "RollingRestart", "Shape", "Worker",
           "deployment", "front_door_shape", "measure_failover", "measure_rolling_restart",
           "print_failover", "print_rolling_restart", "print_run", "serve_shape"]


@dataclass(frozen=True, slots=True)
class FailoverTiming:
    """One failover, in seconds (see the module for each mark)."""

    detection: float
    reconnect: float
    lease_wait: float  # of reconnect
    state_load: float  # of reconnect
    hello: float
    end_of_turn: float  # not counted in total: the caller's end of turn after the resume
    first_audio: float  # the resumed call's next commit → its first reply audio
    heard_words: int  # words of the story kept as heard

    @property
    def total(self) -> float:
        """Kill → the first reply audio, the caller's question and its end of turn left out."""
        return self.detection + self.reconnect + self.hello + self.first_audio


class Worker:
    """A ``voxflow serve`` process started with ``args``, its log (JSON lines) in a file."""

    def __init__(self, stack: contextlib.ExitStack, args: Sequence[str], env: dict[str, str],
                 log: Path, ready: str, url: str | None = None) -> None:
        from voxflow_adapters.testkit.flows import serve_process

        self.log, self.url = log, url
        argv = [sys.executable, "-m", "voxflow.cli", "serve", *args,
                "--log-level", "INFO", "--log-format", "json"]
        self.proc = stack.enter_context(serve_process(
            argv, cwd=ROOT, env=env, log=log, ready=ready, within=300, name=log.stem))

    def records(self) -> list[dict[str, Any]]:
        """The JSON log lines it wrote so far."""
        out = []
        for line in self.log.read_text(encoding="utf-8", errors="replace").splitlines():
            with contextlib.suppress(ValueError):
                if line.startswith("{"):
                    out.append(json.loads(line))
        return out


@dataclass(frozen=True, slots=True)
class Shape:
    """Where the caller dials and the call workers that may hold its call."""

    workers: tuple[Worker, Worker]
    front_door: str | None  # the front door's URL; None: the caller dials workers[0]

    @property
    def entry(self) -> str:
        url = self.front_door or self.workers[0].url
        assert url is not None
        return url

    def holding(self, caller: Any) -> Worker:
        """The worker holding ``caller``'s call: a dispatched call's id is
        ``host:pid:hex-n``; a direct one is the server the caller dialed."""
        if self.front_door is None:
            return next(w for w in self.workers if w.url == caller.base_url)
        pid = int(str(caller.call_id).split(":")[1])
        return next(w for w in self.workers if w.proc.pid == pid)


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("VOXFLOW_DATABASE_URL", "VOXFLOW_LOG_LEVEL", "VOXFLOW_LOG_FORMAT")}
    return {**env, **extra}


class Deployment:
    """A front door and call workers (``voxflow serve --front-door`` / ``--worker``
    processes, the defaults otherwise) on PostgreSQL, every table (dispatch, sessions,
    jobs) in one fresh schema; workers can be added while it runs (a rolling restart)."""

    def __init__(self, stack: contextlib.ExitStack, url: str, folder: Path,
                 worker_args: Sequence[str] = ()) -> None:
        from voxflow_adapters.testkit.flows import free_port

        from voxflow.flow.postgres import PostgresFlowPersistence

        self.stack, self.folder = stack, folder
        self.env = _env(VOXFLOW_DATABASE_URL=url)
        self.worker_args = ["--worker", "--ice-host", "127.0.0.1", *worker_args]
        self.sessions = PostgresFlowPersistence(url)
        stack.callback(self.sessions.close)
        self.workers: list[Worker] = []
        port = free_port()
        self.front_door = Worker(stack, ["--front-door", "--port", str(port), "--token",
                                         TOKEN], self.env, folder / "front-door.log",
                                 "front door is listening")
        self.url = f"http://127.0.0.1:{port}"

    def start_worker(self) -> Worker:
        """One more call worker, once it says it is ready."""
        worker = Worker(self.stack, self.worker_args, self.env,
                        self.folder / f"worker-{len(self.workers) + 1}.log", "is ready")
        self.workers.append(worker)
        return worker


@contextlib.contextmanager
def deployment(pg_url: str, folder: Path, workers: int = 2,
               worker_args: Sequence[str] = ()) -> Iterator[Deployment]:
    """A :class:`Deployment` with ``workers`` call workers, in a fresh schema (dropped
    after)."""
    from persistence import fresh_schema

    with fresh_schema("vx_failover_", pg_url) as url, contextlib.ExitStack() as stack:
        shape = Deployment(stack, url, folder, worker_args)
        for _ in range(workers):
            shape.start_worker()
        yield shape


@contextlib.contextmanager
def front_door_shape(pg_url: str, folder: Path) -> Iterator[tuple[Shape, Any]]:
    """A front door and two call workers (``voxflow serve --front-door`` / ``--worker``,
    the defaults otherwise) on PostgreSQL, every table (dispatch, sessions, jobs) in a
    fresh schema, dropped after; yields the shape and the session store."""
    with deployment(pg_url, folder) as shape:
        a, b = shape.workers
        yield Shape((a, b), shape.url), shape.sessions


@contextlib.contextmanager
def serve_shape(database: str, pg_url: str, folder: Path) -> Iterator[tuple[Shape, Any]]:
    """Two one-process ``voxflow serve`` on one store: a SQLite file under a fresh
    ``VOXFLOW_HOME`` (``database="sqlite"``), or PostgreSQL (``VOXFLOW_DATABASE_URL``
    with a fresh schema, dropped after); yields the shape and that session store."""
    from persistence import fresh_schema
    from voxflow_adapters.testkit.flows import free_port

    from voxflow.flow.persistence import SQLiteFlowPersistence
    from voxflow.flow.postgres import PostgresFlowPersistence

    with contextlib.ExitStack() as stack:
        sessions: Any
        if database == "postgres":
            url = stack.enter_context(fresh_schema("vx_failover_", pg_url))
            env, sessions = _env(VOXFLOW_DATABASE_URL=url), PostgresFlowPersistence(url)
        else:
            (folder / "home").mkdir(exist_ok=True)
            env = _env(VOXFLOW_HOME=str(folder / "home"))
            sessions = SQLiteFlowPersistence(folder / "home" / "flow_states.db")
        stack.callback(sessions.close)
        workers = []
        for name in "ab":
            port = free_port()
            workers.append(Worker(
                stack, ["--port", str(port), "--token", TOKEN, "--ice-host", "127.0.0.1"],
                env, folder / f"serve-{name}.log", "listening", f"http://127.0.0.1:{port}"))
        yield Shape((workers[0], workers[1]), None), sessions


def _speech(engines: Any, text: str) -> Any:
    from voxflow_voice.audio import AudioChunk

    samples = np.concatenate([np.asarray(s.samples, np.float32)
                              for s in engines.tts.synthesize(text)])
    return AudioChunk.from_float(samples, engines.tts.sample_rate)


async def _heard_saved(store: Any, session_id: str, delivery_id: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        stored = await asyncio.to_thread(store.load_state, session_id)
        if ((stored or {}).get("replies", {}).get(delivery_id) or {}).get("heard_text"):
            return  # its reply record's mark, updated while it plays
        await asyncio.sleep(0.1)
    raise RuntimeError("no heard words of the story were saved within 30 s")


async def _ask_timed(caller: Any, question: Any) -> tuple[float, float, float]:
    """Say ``question``; (its last speech sample sent, its commit heard, the first audible
    frame after it), ``time.monotonic()`` at the caller."""
    from voxflow_adapters.webrtc.outbound import FRAME_SAMPLES, OPUS_SAMPLE_RATE
    from voxflow_voice.audio import resample

    samples = resample(question.samples(), question.sample_rate, OPUS_SAMPLE_RATE)
    last = int(np.flatnonzero(np.abs(samples) >= SPEECH_LEVEL)[-1])
    transcripts = len(caller.of_type("transcript"))
    first = caller.say(question)
    mic, frame = caller.mic, first + last // FRAME_SAMPLES
    await caller.wait_for(lambda: len(mic.sent_at) > frame, within=60, what="the question")
    spoken = mic.sent_at[frame] + (last % FRAME_SAMPLES) / OPUS_SAMPLE_RATE
    await caller.wait_for(lambda: len(caller.of_type("transcript")) > transcripts,
                          within=90, what="the resumed call's commit")
    committed = caller.of_type("transcript")[transcripts]["_at"]
    await caller.wait_for(lambda: any(f.audible and f.at > committed for f in caller.frames),
                          within=90, what="the resumed call's reply audio")
    return spoken, committed, next(f.at for f in caller.frames
                                   if f.audible and f.at > committed)


async def measure_failover(engines: Any, shape: Shape, sessions: Any, *,
                           peer_timeout: float = PEER_TIMEOUT) -> FailoverTiming:
    """Kill (-9) the process holding a call mid-reply and time the call's resumption on
    the other (see the module)."""
    from voxflow_adapters.webrtc.client import LoopbackCaller

    caller = LoopbackCaller(shape.entry, TOKEN)
    try:
        await caller.connect()
        session_id = (await caller.wait_message("hello", within=60))["session_id"]
        caller.keep_connected(peer_timeout=peer_timeout)
        caller.say(_speech(engines, QUESTION))
        await caller.wait_message("reply_done", within=90)
        caller.say(_speech(engines, "Tell me a story."))
        await caller.wait_for(lambda: len([m for m in caller.of_type("state")
                                           if m["state"] == "speaking"]) == 2, within=90,
                              what="the story")
        began = caller.of_type("state")[-1]["_at"]
        await caller.wait_for(lambda: caller.audible_frames(after=began) > 100, within=30,
                              what="two seconds of the story")
        await _heard_saved(sessions, session_id, caller.of_type("reply_text")[-1]["delivery_id"])
        dying = shape.holding(caller)
        if shape.front_door is None:  # no front door: the caller is told where to go
            caller.base_url = next(str(w.url) for w in shape.workers if w is not dying)
        killed = time.monotonic()
        os.kill(dying.proc.pid, signal.SIGKILL)
        await caller.wait_for(lambda: any(m.get("resumed") for m in caller.of_type("hello")),
                              within=90, what="the resumed hello")
        hello = next(m for m in caller.of_type("hello") if m.get("resumed"))["_at"]
        await caller.wait_for(lambda: bool(caller.reconnects), what="the reconnection")
        reconnection = caller.reconnects[0]
        spoken, committed, heard = await _ask_timed(caller, _speech(engines, QUESTION))
        caller.send({"v": 1, "type": "hangup"})
        await asyncio.sleep(0.5)
    finally:
        await caller.aclose()
    taker = shape.holding(caller)
    resumed = next(r for r in taker.records() if r.get("message") == "call resumed")
    stored = await asyncio.to_thread(sessions.load_state, session_id)
    story = next(m for m in (stored or {}).get("messages", [])
                 if m.get("metadata", {}).get("dropped"))
    return FailoverTiming(
        detection=reconnection.detected - killed,
        reconnect=reconnection.connected - reconnection.detected,
        lease_wait=float(resumed["lease_ms"]) / 1000.0,
        state_load=float(resumed["state_load_ms"]) / 1000.0,
        hello=hello - reconnection.connected,
        end_of_turn=committed - spoken,
        first_audio=heard - committed,
        heard_words=len(story["metadata"].get("heard_text", "").split()),
    )


def print_run(run: int, t: FailoverTiming) -> None:
    """One failover's line."""
    print(f"  run {run}: kill → first reply audio {t.total:.2f} s = detection "
          f"{t.detection:.2f} + reconnect {t.reconnect:.2f} (lease wait {t.lease_wait:.2f}, "
          f"state load {t.state_load * 1000:.0f} ms) + hello {t.hello:.3f} + commit → first "
          f"reply audio {t.first_audio:.2f} s; not counted: end of turn {t.end_of_turn:.2f} s "
          f"({t.heard_words} heard words of the story kept)", flush=True)


def print_failover(timings: list[FailoverTiming], label: str) -> None:
    """The medians (min to max) of ``timings``, and their figures for ``voxflow bench``."""
    def values(name: str) -> list[float]:
        return [float(getattr(t, name)) for t in timings]

    print(f"  {'':26s} {'median':>8} {'min':>8} {'max':>8}")
    for name, what in (("total", "kill → first reply audio"), ("detection", "detection"),
                       ("reconnect", "reconnect"), ("lease_wait", "  of it lease wait"),
                       ("state_load", "  of it state load"), ("hello", "hello"),
                       ("first_audio", "commit → first reply audio"),
                       ("end_of_turn", "(end of turn, not counted)")):
        v = values(name)
        print(f"  {what:26s} {statistics.median(v):8.3f} {min(v):8.3f} {max(v):8.3f}  s")
    for name in ("total", "detection", "reconnect", "lease_wait", "first_audio"):
        figure(f"failover {name.replace('_', ' ')} ({label})",
               round(statistics.median(values(name)), 2), "s")
    figure(f"failover state load ({label})",
           round(statistics.median(values("state_load")) * 1000), "ms")


# -- a rolling restart ------------------------------------------------------------------

QUESTIONS = ("What can you do?", "Hello there!", "What are your opening hours?",
             "Tell me a story.")
"""What the callers of a rolling restart ask, in turn (a story now and then: a long answer
a draining worker waits for before it hands the call over)."""


@dataclass(slots=True)
class RollingRestart:
    """What a rolling restart did to the calls running through it.

    Attributes:
        calls, workers: the calls running, the call workers restarted one at a time.
        hung_up: calls that ended (a ``bye``) or could not be resumed.
        asked: questions the callers said; answered: those whose answer played whole.
        lost: questions without a played answer, plus committed turns the store does not
            hold exactly once in order (a turn lost or doubled by a move).
        cut: answers stored cut (``[cut off: the call dropped]``): handed over mid-reply.
        handovers: moves the server asked for (``handover``); silences: reconnections
            after the caller heard nothing (a move that was not handed over).
        gaps: per handover, the ``handover`` message → the resumed ``hello`` (s).
        drains: per worker, SIGTERM → its exit (s).
        spoken_in_gap: questions whose first sample was sent while a move was under way
            (this caller holds them and sends them on the new connection; a browser's
            microphone would lose what was said in the gap).
    """

    calls: int
    workers: int
    hung_up: int = 0
    asked: int = 0
    answered: int = 0
    lost: int = 0
    cut: int = 0
    handovers: int = 0
    silences: int = 0
    gaps: list[float] = dataclasses.field(default_factory=list)
    drains: list[float] = dataclasses.field(default_factory=list)
    spoken_in_gap: int = 0


async def _converse(caller: Any, speech: dict[str, Any], stop: asyncio.Event,
                    result: RollingRestart, offset: int) -> None:
    """Ask ``QUESTIONS`` in turn (a 0.5-2 s pause after each answer) until ``stop``."""
    import random

    rng = random.Random(offset)
    turn = offset
    while not stop.is_set():
        text = QUESTIONS[turn % len(QUESTIONS)]
        turn += 1
        transcripts = len(caller.of_type("transcript"))
        begun = time.monotonic()
        caller.say(speech[text])
        result.asked += 1
        if any(r.detected <= begun <= r.connected for r in caller.reconnects) or \
                caller.connection_state != "connected":
            result.spoken_in_gap += 1
        try:
            await caller.wait_for(lambda n=transcripts: len(caller.of_type("transcript")) > n,
                                  within=60, what="the transcript")
            after = caller.messages.index(caller.of_type("transcript")[transcripts])

            def done(after: int = after) -> bool:
                later = caller.messages[after:]
                replies = {m["delivery_id"] for m in later if m.get("type") == "reply_text"}
                return any(m.get("type") == "reply_done" and m["delivery_id"] in replies
                           for m in later)

            await caller.wait_for(done, within=90, what="the answer")
            result.answered += 1
        except TimeoutError:
            result.lost += 1
            print(f"    a question was not answered: {text!r}", flush=True)
        await asyncio.sleep(rng.uniform(0.5, 2.0))


async def measure_rolling_restart(engines: Any, pg_url: str, folder: Path, *, calls: int = 3,
                                  workers: int = 2, settle: float = 8.0,
                                  peer_timeout: float = PEER_TIMEOUT) -> RollingRestart:
    """Restart every call worker of a deployment, one at a time (SIGTERM, wait for its
    exit, start it again, wait until it is ready), while ``calls`` aiortc callers talk
    through the front door (``keep_connected``, as the page), then check what each call
    heard and what its session holds (see :class:`RollingRestart`)."""
    from voxflow_adapters.hosting.resume import DROPPED_MARK
    from voxflow_adapters.webrtc.client import LoopbackCaller

    result = RollingRestart(calls=calls, workers=workers)
    speech = {text: _speech(engines, text) for text in QUESTIONS}
    with deployment(pg_url, folder, workers, ["--max-calls", str(calls)]) as shape:
        callers = [LoopbackCaller(shape.url, TOKEN) for _ in range(calls)]
        stop = asyncio.Event()
        talks: list[asyncio.Task[None]] = []
        try:
            for caller in callers:
                await caller.connect()
                await caller.wait_message("hello", within=60)
                caller.keep_connected(peer_timeout=peer_timeout)
            talks = [asyncio.get_running_loop().create_task(_converse(c, speech, stop, result, i))
                     for i, c in enumerate(callers)]
            await asyncio.sleep(settle)
            for old in list(shape.workers[:workers]):
                began = time.monotonic()
                old.proc.send_signal(signal.SIGTERM)
                code = await asyncio.to_thread(old.proc.wait, 180)
                result.drains.append(time.monotonic() - began)
                print(f"    {old.log.stem} drained in {result.drains[-1]:.1f} s (exit {code}); "
                      "starting it again", flush=True)
                await asyncio.to_thread(shape.start_worker)
                await asyncio.sleep(settle)
            stop.set()
            await asyncio.gather(*talks)
            await asyncio.sleep(1.0)
        finally:
            stop.set()
            for task in talks:
                task.cancel()
            for caller in callers:  # (before the hang-up, whose bye is the page's own)
                watch = caller._watch
                if caller.of_type("bye") or (watch is not None and watch.done()
                                             and not watch.cancelled()
                                             and watch.exception() is not None):
                    result.hung_up += 1
                    print(f"    a call was hung up: {caller.of_type('bye')}", flush=True)
                with contextlib.suppress(Exception):
                    caller.send({"v": 1, "type": "hangup"})
            await asyncio.sleep(0.5)
            for caller in callers:
                await caller.aclose()
        for caller in callers:
            result.handovers += sum(1 for r in caller.reconnects if r.handover)
            result.silences += sum(1 for r in caller.reconnects if not r.handover)
            hellos = [m for m in caller.of_type("hello") if m.get("resumed")]
            for moved in caller.of_type("handover"):
                after = next((m["_at"] for m in hellos if m["_at"] > moved["_at"]), None)
                if after is not None:
                    result.gaps.append(after - moved["_at"])
            stored = await asyncio.to_thread(shape.sessions.load_state, str(caller.session_id))
            heard = [m["text"] for m in caller.of_type("transcript")]
            users = [m["content"] for m in (stored or {}).get("messages", [])
                     if m["role"] == "user"]
            if users != heard or len((stored or {}).get("turns", {})) != len(heard):
                missing = max(len(heard) - len(users), 1)
                result.lost += missing
                print(f"    stored turns differ from the call's: {users} vs {heard}",
                      flush=True)
            result.cut += sum(1 for m in (stored or {}).get("messages", [])
                              if m["role"] == "assistant" and DROPPED_MARK in str(m["content"]))
    return result


def print_rolling_restart(r: RollingRestart) -> None:
    """The rolling restart's lines, and its figures for ``voxflow bench``."""
    gaps = sorted(r.gaps)
    gap = f"{statistics.median(gaps):.2f} s median ({gaps[0]:.2f}-{gaps[-1]:.2f})" \
        if gaps else "none"
    print(f"  {r.calls} call(s) through {r.workers} worker(s) restarted one at a time: "
          f"{r.hung_up} hung up, {r.lost} turn(s) lost of {r.asked} asked ({r.answered} "
          f"answered), {r.cut} answer(s) cut; {r.handovers} handover(s), {r.silences} "
          f"reconnection(s) after a silence; handover → resumed hello {gap}; drains "
          f"{', '.join(f'{d:.1f}' for d in r.drains)} s; {r.spoken_in_gap} question(s) "
          "begun during a move (held by this caller, lost by a browser's microphone)",
          flush=True)
    figure("rolling restart: calls hung up", r.hung_up, "calls", target="0")
    figure("rolling restart: turns lost", r.lost, "turns", target="0")
    if gaps:
        figure("rolling restart: handover → resumed hello", round(statistics.median(gaps), 2),
               "s")
