"""Failover across processes: a serve process dies (kill -9) or is paused (SIGSTOP) in the
middle of a reply; another one, on the same database, takes the call over when the
caller reconnects with its resume token. Real aiortc caller, real models, real SQLite.
On PostgreSQL the same two scenarios run through a front door and call workers in
``test_call_dispatch_processes.py`` (kill -9 mid-reply: the reply cut at what was heard,
each turn stored once, the lease taken over once; SIGSTOP: the woken owner's write
refused, nothing of it stored), so they run here on SQLite only."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from voxflow_adapters.hosting.resume import DROPPED_MARK
from voxflow_adapters.testkit import flows
from voxflow_adapters.testkit.flows import free_port
from voxflow_adapters.webrtc import store_server
from voxflow_adapters.webrtc.client import LoopbackCaller
from voxflow_voice.audio import AudioChunk
from voxflow_voice.engines import VoiceEngines

pytestmark = [pytest.mark.models,
              pytest.mark.parametrize("make_store", ["sqlite"], indirect=True)]

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "failover-test-token"

def where_of(store: Any) -> str:
    return f"{store.url}#{store.schema}" if hasattr(store, "schema") else str(store.path)


@contextmanager
def two_servers(
    tmp_path: Path, where: str
) -> Iterator[list[tuple[str, subprocess.Popen[str], Path]]]:
    """Two serve processes on ``where``, "a" and "b", started at once: each as (its base
    URL, the process, its stderr log)."""
    ports = {"a": free_port(), "b": free_port()}
    logs = {name: tmp_path / f"{name}.log" for name in ports}
    with flows.serve_processes(*(
        flows.ServeCommand(store_server.command(port, TOKEN, where), cwd=ROOT,
                           log=logs[name], name=name) for name, port in ports.items()
    )) as procs:
        yield [(f"http://127.0.0.1:{port}", proc, logs[name])
               for (name, port), proc in zip(ports.items(), procs, strict=True)]


def say(engines: VoiceEngines, text: str) -> AudioChunk:
    samples = np.concatenate([np.asarray(s.samples, np.float32)
                              for s in engines.tts.synthesize(text)])
    return AudioChunk.from_float(samples, engines.tts.sample_rate)


async def story_playing(caller: LoopbackCaller, engines: VoiceEngines) -> None:
    """Ask a question (answered whole), then for a story, and hear ~2 s of it."""
    caller.say(say(engines, "What are your opening hours?"))
    await caller.wait_message("reply_done", within=90)
    caller.say(say(engines, "Tell me a story."))
    await caller.wait_for(lambda: len([m for m in caller.of_type("state")
                                       if m["state"] == "speaking"]) == 2,
                          within=90, what="the story")
    began = caller.of_type("state")[-1]["_at"]
    await caller.wait_for(lambda: caller.audible_frames(after=began) > 100, within=30,
                          what="two seconds of the story")


async def heard_saved(caller: LoopbackCaller, store: Any, session_id: str,
                      within: float = 30) -> str:
    """Wait until some words of the story (the reply playing) were saved as heard;
    returns them. (The marks wait for the state lock, which the turn holds while its
    answer is still being generated.)"""
    story = caller.of_type("reply_text")[-1]["delivery_id"]
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        stored = await asyncio.to_thread(store.load_state, session_id)
        heard = ((stored or {}).get("replies", {}).get(story) or {}).get("heard_text")
        if heard:  # its reply record's mark, updated while it plays
            return str(heard)
        await asyncio.sleep(0.2)
    raise AssertionError("no heard words of the story were saved")


async def resumed_on(caller: LoopbackCaller, within: float = 60) -> dict[str, Any]:
    await caller.wait_for(lambda: any(m.get("resumed") for m in caller.of_type("hello")),
                          within=within, what="the resumed hello")
    return next(m for m in caller.of_type("hello") if m.get("resumed"))


def user_turns(state: dict[str, Any]) -> list[str]:
    return [m["content"] for m in state["messages"] if m["role"] == "user"]


def check_story_cut_at_heard(state: dict[str, Any]) -> str:
    """The story (the second answer) is cut to words heard, marked; returns them."""
    story = [m for m in state["messages"] if m["role"] == "assistant"][1]
    assert story["content"].endswith(DROPPED_MARK) and story["metadata"]["dropped"]
    heard, full = story["metadata"]["heard_text"], story["metadata"]["generated_text"]
    words, generated = heard.split(), full.split()
    marks = [e for e in state["events"] if e["type"] == "reply_settled"]
    # never an unheard word: the heard words are a strict prefix of the generated ones
    assert words and generated[: len(words)] == words and len(words) < len(generated), marks
    return str(heard)


async def story_heard_on(url: str, engines: VoiceEngines, store: Any
                         ) -> tuple[LoopbackCaller, str, str]:
    """A call to the server at ``url`` that reconnects by itself, ~2 s into the story
    with some of its words saved as heard: (the caller, the session id, those words)."""
    caller = LoopbackCaller(url, TOKEN)
    await caller.connect()
    session_id = str((await caller.wait_message("hello"))["session_id"])
    caller.keep_connected(peer_timeout=4.0)
    await story_playing(caller, engines)
    return caller, session_id, await heard_saved(caller, store, session_id)


def test_a_call_resumes_on_another_process_after_a_kill_9_mid_reply(
    engines: VoiceEngines, make_store: Any, tmp_path: Path
) -> None:
    store = make_store("failover")
    store.check_writable()
    where = where_of(store)
    with two_servers(tmp_path, where) as [(url_a, proc_a, _), (url_b, _, _)]:

        async def call() -> str:
            caller, session_id, saved = await story_heard_on(url_a, engines, store)
            caller.base_url = url_b  # (a front door would route the new offer there)
            proc_a.kill()  # kill -9 mid-reply
            hello = await resumed_on(caller)
            assert hello["session_id"] == session_id
            stored = store.load_state(session_id)
            assert stored is not None
            heard = check_story_cut_at_heard(stored)  # settled before the call went on
            assert heard.split()[: len(saved.split())] == saved.split()  # >= what was saved
            caller.say(say(engines, "What are your opening hours?"))
            await caller.wait_for(
                lambda: any(m["_conn"] == 2 for m in caller.of_type("reply_done")),
                within=90, what="the answer on the new worker")
            caller.send({"v": 1, "type": "hangup"})
            await caller.wait_message("bye", _conn=2)
            await caller.aclose()
            assert len(caller.reconnects) == 1
            return str(session_id)

        session_id = asyncio.run(call())
        time.sleep(1.0)  # the call's last save and its lease's release
    stored = store.load_state(session_id)
    assert stored is not None
    assert user_turns(stored) == ["What are your opening hours?", "Tell me a story.",
                                  "What are your opening hours?"]
    assert len(stored["turns"]) == 3  # turns 1..3, each exactly once
    assert [t["status"] for t in stored["turns"].values()] == ["completed"] * 3
    check_story_cut_at_heard(stored)
    lease = store.lease_of(session_id)
    assert lease is not None and lease.owner == "" and lease.epoch == 2  # taken over once


def test_a_paused_owner_resumed_after_the_takeover_writes_nothing(
    engines: VoiceEngines, make_store: Any, tmp_path: Path
) -> None:
    store = make_store("zombie")
    store.check_writable()
    where = where_of(store)
    with two_servers(tmp_path, where) as [(url_a, proc_a, log_a), (url_b, _, _)]:

        async def call() -> None:
            caller, session_id, _ = await story_heard_on(url_a, engines, store)
            caller.base_url = url_b
            os.kill(proc_a.pid, signal.SIGSTOP)  # a zombie: paused, its lease runs out
            await resumed_on(caller)  # b waited the lease out, then took the call over
            await asyncio.sleep(1.0)
            before = store.load_state_revision(session_id)
            os.kill(proc_a.pid, signal.SIGCONT)  # a wakes up mid-reply and tries to go on
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                if "lost its session" in log_a.read_text():
                    break
                await asyncio.sleep(0.2)
            assert "lost its session" in log_a.read_text(), log_a.read_text()
            await asyncio.sleep(1.0)
            assert store.load_state_revision(session_id) == before  # a wrote nothing
            stored = store.load_state(session_id)
            assert stored is not None and len(stored["turns"]) == 2
            check_story_cut_at_heard(stored)
            caller.send({"v": 1, "type": "hangup"})
            await caller.wait_message("bye", _conn=2)
            await caller.aclose()

        asyncio.run(call())
