"""Dispatch across processes: a front door and two call workers started with the real
command line (``voxflow serve --front-door`` / ``--worker``) on one PostgreSQL schema
(a fresh one per test, the first of their URL's search_path: dispatch, sessions, job
queue and inbox all in it, dropped after the test);
real aiortc callers dial the front door and talk to the workers directly (loopback ICE).
Then the issue's kill test, its first part: with a job worker (``voxflow jobs worker``)
too, a call worker killed mid-reply while the call's job runs (the call resumes on the
other worker, its story cut at what was heard, the job's result announced once, and a
turn after the failover); its second part: a paused (SIGSTOP) call worker, woken
mid-story after its call moved on, whose late write is refused (a job worker killed
mid-job is tested in ``tests/jobs/test_job_queue_pg.py``). Skips with its reason when
no PostgreSQL answers."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from voxflow_adapters.hosting.dispatch import DispatchStore
from voxflow_adapters.hosting.resume import DROPPED_MARK
from voxflow_adapters.testkit.flows import ServeCommand, serve_processes
from voxflow_adapters.webrtc.client import LoopbackCaller, OfferRejected
from voxflow_voice.audio import AudioChunk
from voxflow_voice.engines import VoiceEngines

pytestmark = pytest.mark.models

ROOT = Path(__file__).resolve().parents[2]
VOXFLOW = str(Path(sys.executable).with_name("voxflow"))
PINNED = Path(__file__).with_name("_pinned_cost.py")
TOKEN = "dispatch-processes-token"
STALE = 2.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def process(args: list[str], ready: str, env: dict[str, str], log: Path, *,
            pinned: bool = False) -> ServeCommand:
    """``voxflow serve ARGS`` until it prints ``ready`` (:func:`serve_processes` starts
    them all at once; killed afterwards if still running). ``pinned``: its admission
    pinned (``_pinned_cost.py``: ``--max-calls`` calls whatever the machine's load)."""
    command = [sys.executable, str(PINNED)] if pinned else [VOXFLOW]
    return ServeCommand([*command, "serve", *args], cwd=ROOT, env=env, log=log, ready=ready,
                        within=240, name=" ".join(args))


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
        # (pinned: the dispatch is tested, not the machine's load; a loaded machine's
        # measured slots, its cores less what the other processes use, were 1, not 2)
        a, b, _ = stack.enter_context(serve_processes(
            process(worker_args, "is ready", env, tmp_path / "a.log", pinned=True),
            process(worker_args, "is ready", env, tmp_path / "b.log", pinned=True),
            process(["--front-door", "--port", str(port), "--token", TOKEN, "--offer-timeout",
                     "5", "--stale-after", str(STALE)], "front door is listening", env,
                    tmp_path / "door.log")))
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

            # 3. SIGTERM drains: a's running call moves to b (a handover, no bye), new
            # calls go to b, a exits 0
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
            on_a.keep_connected(peer_timeout=10.0)  # (moved by the handover, not a silence)
            os.kill(a.pid, signal.SIGTERM)
            handover = await on_a.wait_message("handover", within=60)
            assert handover["reason"] == "the worker is shutting down"
            await on_a.wait_for(lambda: any(m.get("resumed") for m in on_a.of_type("hello")),
                                within=60, what="the resumed hello")
            assert worker_pid(on_a.call_id) == b.pid and on_a.reconnects[0].handover
            assert await asyncio.to_thread(a.wait, 60) == 0  # without waiting for the call
            assert a.pid not in {r.pid for r in await store.workers()}
            late = LoopbackCaller(base, TOKEN)
            await late.connect()
            assert worker_pid(late.call_id) == b.pid
            await asyncio.sleep(1.0)
            assert on_a.connection_state == "connected" and not on_a.of_type("bye")
            await on_a.aclose()
            await late.aclose()
        finally:
            await store.aclose()


SHIPPED = "has shipped"


def say(engines: VoiceEngines, text: str) -> AudioChunk:
    samples = np.concatenate([np.asarray(s.samples, np.float32)
                              for s in engines.tts.synthesize(text)])
    return AudioChunk.from_float(samples, engines.tts.sample_rate)


def only_job(state: dict[str, Any]) -> dict[str, Any] | None:
    """The session's one job record (None before the lookup queued it)."""
    records = list(state["jobs"].values())
    assert len(records) <= 1, records
    return records[0] if records else None


def queue_status(url: str, job_id: str) -> str:
    """The job's status in the queue's own table (Procrastinate's: ``doing`` while a job
    worker runs it), read on a connection of its own."""
    import psycopg

    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT status FROM procrastinate_jobs WHERE args->>'job_id' = %s",
                           (job_id,)).fetchone()
    assert row is not None, f"job {job_id} is not in the queue"
    return str(row[0])


async def heard_saved(sessions: Any, session_id: str, delivery_id: str) -> str:
    """Wait until some words of ``delivery_id`` were saved as heard; returns them."""
    async with asyncio.timeout(60):
        while True:
            state = await asyncio.to_thread(sessions.load_state, session_id)
            # (the reply record's mark, updated while it plays)
            heard = ((state or {}).get("replies", {}).get(delivery_id) or {}).get("heard_text")
            if heard:
                return str(heard)
            await asyncio.sleep(0.2)


async def logged(log: Path, text: str, within: float = 60) -> str:
    """The first line of ``log`` holding ``text``, waiting for it."""
    deadline = time.monotonic() + within
    while True:
        lines = (await asyncio.to_thread(log.read_text)).splitlines()
        found = next((line for line in lines if text in line), None)
        if found is not None:
            return found
        if time.monotonic() > deadline:
            tail = "\n".join(lines[-20:])
            raise AssertionError(f"{log.name} never logged {text!r}; it ends:\n{tail}")
        await asyncio.sleep(0.2)


def story_cut_at_heard(state: dict[str, Any], delivery_id: str) -> str:
    """The answer ``delivery_id`` (the story, cut by the worker's death) holds only words
    heard, marked as cut, its reply interrupted; returns those words."""
    [story] = [m for m in state["messages"] if m["metadata"].get("delivery_id") == delivery_id]
    assert story["content"].endswith(DROPPED_MARK) and story["metadata"]["dropped"], story
    heard, full = story["metadata"]["heard_text"], story["metadata"]["generated_text"]
    words, generated = heard.split(), full.split()
    # never an unheard word: the heard words are a strict prefix of the generated ones
    assert words and generated[: len(words)] == words and len(words) < len(generated), story
    assert state["replies"][delivery_id]["interrupted"] is True
    return str(heard)


def test_a_call_worker_killed_mid_reply_while_a_job_runs(
    engines: VoiceEngines, pg_schema_url: str, tmp_path: Path
) -> None:

    from voxflow.flow.postgres import PostgresFlowPersistence

    env = {**os.environ, "VOXFLOW_DATABASE_URL": pg_schema_url, "VOXFLOW_LOG_LEVEL": "INFO"}
    port = free_port()
    worker_args = ["--worker", "--max-calls", "2", "--ice-host", "127.0.0.1",
                   "--stale-after", "2"]
    # the workers' session store (default_persistence: the URL's schema, as every table)
    sessions = PostgresFlowPersistence(pg_schema_url)
    flow = tmp_path / "slow_lookup.py"  # the example assistant, its lookup running 30 s
    flow.write_text("from voxflow.examples.assistant import assistant_class\n\n"
                    "SlowLookup = assistant_class(None, lookup_seconds=30.0)\n")
    flow_arg = f"{flow}:SlowLookup"
    with ExitStack() as stack:
        a, b, _ = stack.enter_context(serve_processes(
            process([flow_arg, *worker_args], "is ready", env, tmp_path / "a.log"),
            process([flow_arg, *worker_args], "is ready", env, tmp_path / "b.log"),
            process(["--front-door", "--port", str(port), "--token", TOKEN, "--offer-timeout",
                     "15"], "front door is listening", env, tmp_path / "door.log")))

        jobs_log = stack.enter_context((tmp_path / "jobs.log").open("w"))
        job_worker = subprocess.Popen([VOXFLOW, "jobs", "worker", flow_arg], env=env,
                                      stdout=jobs_log, stderr=jobs_log, text=True)

        async def stored(session_id: str) -> dict[str, Any]:
            state = await asyncio.to_thread(sessions.load_state, session_id)
            assert state is not None
            return state

        async def call() -> tuple[str, list[str]]:
            try:
                caller = LoopbackCaller(f"http://127.0.0.1:{port}", TOKEN)
                await caller.connect()
                session_id = str((await caller.wait_message("hello"))["session_id"])
                first = worker_pid(caller.call_id)
                killed, other = (a, b) if first == a.pid else (b, a)
                caller.keep_connected(peer_timeout=4.0)
                caller.say(say(engines, "Where is my order?"))
                await caller.wait_message("reply_done", within=90)
                async with asyncio.timeout(60):  # the lookup started in the job worker
                    while (record := only_job(await stored(session_id))) is None \
                            or record["status"] != "running":  # noqa: ASYNC110
                        await asyncio.sleep(0.2)
                caller.say(say(engines, "Tell me a story."))
                await caller.wait_for(lambda: len([m for m in caller.of_type("state")
                                                   if m["state"] == "speaking"]) >= 2,
                                      within=90, what="the story")
                began = caller.of_type("state")[-1]["_at"]
                story = caller.of_type("reply_text")[-1]["delivery_id"]
                await caller.wait_for(lambda: caller.audible_frames(after=began) > 50,
                                      within=30, what="a second of the story")
                saved = await heard_saved(sessions, session_id, story)
                # "while a job runs", checked just before the kill: the session's record
                # of the lookup and the queue's own row both say it is running
                record = only_job(await stored(session_id))
                assert record is not None and record["status"] == "running", record
                job_id = str(record["job_id"])
                assert await asyncio.to_thread(queue_status, pg_schema_url, job_id) == "doing"
                killed.kill()  # kill -9 mid-reply, the lookup still running
                transcripts = [m["text"] for m in caller.of_type("transcript")]
                await caller.wait_for(
                    lambda: any(m.get("resumed") for m in caller.of_type("hello")),
                    within=90, what="the resumed hello")
                assert worker_pid(caller.call_id) == other.pid
                state = await stored(session_id)
                users = [m["content"] for m in state["messages"] if m["role"] == "user"]
                assert users == transcripts and len(users) == 2, (users, transcripts)
                assert len(state["turns"]) == 2  # turns 1..2, each exactly once
                # the reply that was playing: cut at what was heard (at least what was
                # saved as heard before the kill), settled before the call went on
                heard = story_cut_at_heard(state, story)
                assert heard.split()[: len(saved.split())] == saved.split(), (heard, saved)
                await caller.wait_for(  # the job's result, spoken by the resumed call
                    lambda: any(SHIPPED in m.get("text", "") for m in caller.of_type(
                        "reply_text")), within=90, what="the job's announcement")
                announcement = next(m["delivery_id"] for m in caller.of_type("reply_text")
                                    if SHIPPED in m["text"])
                await caller.wait_message("reply_done", within=120, delivery_id=announcement)
                record = only_job(await stored(session_id))
                assert record is not None
                assert (record["status"], record["attempt"]) == ("completed", 1)
                # a turn after the failover: numbered on, answered, stored once
                caller.say(say(engines, "What are your opening hours?"))
                await caller.wait_for(lambda: len(caller.of_type("transcript")) == 3,
                                      within=90, what="the third turn's transcript")
                third = caller.messages.index(caller.of_type("transcript")[2])

                def answered() -> bool:
                    after = caller.messages[third:]
                    replies = {m["delivery_id"] for m in after if m.get("type") == "reply_text"}
                    return any(m.get("type") == "reply_done" and m["delivery_id"] in replies
                               for m in after)

                await caller.wait_for(answered, within=90, what="the third turn's answer")
                transcripts = [m["text"] for m in caller.of_type("transcript")]
                state = await stored(session_id)
                assert [m["content"] for m in state["messages"] if m["role"] == "user"] \
                    == transcripts
                assert len(state["turns"]) == 3  # turns 1..3, each exactly once
                assert [t["status"] for t in state["turns"].values()] == ["completed"] * 3
                await asyncio.sleep(3.0)  # (an announcement made twice would come now)
                caller.send({"v": 1, "type": "hangup"})
                await asyncio.sleep(1.0)
                await caller.aclose()
                shipped = [m for m in caller.of_type("reply_text") if SHIPPED in m["text"]]
                assert len(shipped) == 1, shipped
                return session_id, transcripts
            finally:
                job_worker.send_signal(signal.SIGTERM)

        session_id, transcripts = asyncio.run(call())
        job_worker.wait(timeout=60)
        time.sleep(1.0)
    final = sessions.load_state(session_id)
    assert final is not None
    assert [m["content"] for m in final["messages"] if m["role"] == "user"] == transcripts
    assert len(transcripts) == 3 and len(final["turns"]) == 3
    announced = [m for m in final["messages"]
                 if m["role"] == "assistant" and SHIPPED in m["content"]]
    assert len(announced) == 1, announced
    lease = sessions.lease_of(session_id)  # taken over once, released at the hang-up
    assert lease is not None and (lease.owner, lease.epoch) == ("", 2), lease
    sessions.close()


def test_a_zombie_call_worker_is_fenced(
    engines: VoiceEngines, pg_schema_url: str, tmp_path: Path
) -> None:
    """The issue's kill test, its second part: a SIGSTOPped call worker's call resumes on
    the other worker through the front door; woken mid-story, the zombie tries to save
    what it played since (its heard journal) and the write is refused: nothing of it is
    stored, and its call ends, taken over.

    (This test also killed the job worker -9 mid-job, on the resumed call. That is now
    tested where it is cheaper: the job re-run as attempt 2 and completed, the dead
    attempt's late update refused, in ``tests/jobs/test_job_queue_pg.py::
    test_a_job_worker_killed_mid_job_is_rerun_as_the_next_attempt_and_finishes``; a job's
    result announced once, played whole, on a call resumed on another worker, in
    ``test_a_call_worker_killed_mid_reply_while_a_job_runs`` above.)"""
    from voxflow.flow.postgres import PostgresFlowPersistence

    env = {**os.environ, "VOXFLOW_DATABASE_URL": pg_schema_url, "VOXFLOW_LOG_LEVEL": "INFO"}
    port = free_port()
    worker_args = ["--worker", "--max-calls", "2", "--ice-host", "127.0.0.1",
                   "--stale-after", "2"]
    sessions = PostgresFlowPersistence(pg_schema_url)
    logs = {"a": tmp_path / "a.log", "b": tmp_path / "b.log"}
    with ExitStack() as stack:
        a, b, _ = stack.enter_context(serve_processes(
            process(worker_args, "is ready", env, logs["a"]),
            process(worker_args, "is ready", env, logs["b"]),
            process(["--front-door", "--port", str(port), "--token", TOKEN, "--offer-timeout",
                     "15"], "front door is listening", env, tmp_path / "door.log")))

        async def stored(session_id: str) -> dict[str, Any]:
            state = await asyncio.to_thread(sessions.load_state, session_id)
            assert state is not None
            return state

        async def call() -> tuple[str, list[str]]:
            caller = LoopbackCaller(f"http://127.0.0.1:{port}", TOKEN)
            await caller.connect()
            session_id = str((await caller.wait_message("hello"))["session_id"])
            zombie, other = (a, b) if worker_pid(caller.call_id) == a.pid else (b, a)
            zombie_log = logs["a" if zombie is a else "b"]
            caller.keep_connected(peer_timeout=4.0)

            # the story playing, some of it saved as heard: SIGSTOP its worker
            caller.say(say(engines, "Tell me a story."))
            await caller.wait_message("reply_text", within=90)
            story = caller.of_type("reply_text")[-1]["delivery_id"]
            async with asyncio.timeout(60):  # (its reply record's mark, while it plays)
                while not ((await stored(session_id))["replies"].get(story)  # noqa: ASYNC110
                           or {}).get("heard_text"):
                    await asyncio.sleep(0.2)
            os.kill(zombie.pid, signal.SIGSTOP)  # paused mid-story: it has more to play
            assert not any(m["delivery_id"] == story for m in caller.of_type("reply_done"))
            await caller.wait_for(
                lambda: any(m.get("resumed") for m in caller.of_type("hello")),
                within=90, what="the resumed hello")
            assert worker_pid(caller.call_id) == other.pid  # through the front door
            await asyncio.sleep(1.0)
            before = await asyncio.to_thread(sessions.load_state_revision, session_id)
            assert before is not None
            os.kill(zombie.pid, signal.SIGCONT)  # wakes mid-story and tries to go on
            # Its late write was tried and refused: the fence's own line (a lease merely
            # found lost at its renewal logs "lost its session" alone), for this session.
            refused = await logged(zombie_log, "refused a write of the session (taken over)")
            assert f"session_id={session_id}" in refused, refused
            await logged(zombie_log, "lost its session (taken over)")
            await asyncio.sleep(1.0)
            after = await asyncio.to_thread(sessions.load_state_revision, session_id)
            assert after == before  # and nothing of it was stored
            transcripts = [m["text"] for m in caller.of_type("transcript")]
            users = [m["content"] for m in before[0]["messages"] if m["role"] == "user"]
            assert users == transcripts and len(users) == 1 and len(before[0]["turns"]) == 1
            story_cut_at_heard(before[0], story)  # settled as heard when the call moved
            caller.send({"v": 1, "type": "hangup"})
            await asyncio.sleep(1.0)
            await caller.aclose()
            return session_id, transcripts

        session_id, transcripts = asyncio.run(call())
        time.sleep(1.0)
    final = sessions.load_state(session_id)
    assert final is not None
    assert [m["content"] for m in final["messages"] if m["role"] == "user"] == transcripts
    assert len(transcripts) == 1
    sessions.close()
