"""The README's "Deploying" section, run: the shell block of its second shape ("many
workers on one machine") as written, every process started from its own line through
``bash`` (so ``"$VOXFLOW_PAGE_TOKEN"`` is the shell's), and a real aiortc caller
completing a call through them: the front door hands it to a call worker, a turn is
answered, an order lookup runs in the ``voxflow jobs worker`` and its result is
announced, the call hangs up. The test owns only what it must: the database (its
``export VOXFLOW_DATABASE_URL=`` takes a fresh schema of the test server), the page
token's value and the front door's port (8080 may be taken). The other shapes' lines
name machines and files a test cannot own (``--host 0.0.0.0``, certificates, a
documentation address for ``--ice-host``): ``test_readme_deploying.py`` parses them."""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import signal
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path

import numpy as np
import pytest
from voxflow_adapters.testkit import flows
from voxflow_adapters.testkit.flows import free_port
from voxflow_adapters.webrtc.client import LoopbackCaller
from voxflow_voice.audio import AudioChunk
from voxflow_voice.engines import VoiceEngines

pytestmark = pytest.mark.models

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
TOKEN = "deploying-readme-token"
SHIPPED = "has shipped"
READY = {"--front-door": "front door is listening", "--worker": "is ready"}


def many_workers_block() -> list[str]:
    """The lines of the Deploying section's shell block that starts the front door."""
    text = README.read_text()
    section = text[text.index("\n## Deploying\n"):]
    section = section[: section.index("\n## ", 1)]
    blocks = re.findall(r"^```bash\n(.*?)^```$", section, flags=re.M | re.S)
    [block] = [b for b in blocks if "export VOXFLOW_DATABASE_URL=" in b and "--front-door" in b]
    return [line for line in block.splitlines() if line.strip()]


def test_the_block_starts_a_front_door_call_workers_and_a_job_worker() -> None:
    lines = many_workers_block()
    assert lines[0].startswith("export VOXFLOW_DATABASE_URL=postgresql://")
    commands = [shlex.split(line) for line in lines[1:]]
    assert all(argv[0] == "voxflow" for argv in commands)
    assert sum("--front-door" in argv for argv in commands) == 1
    assert sum("--worker" in argv for argv in commands) >= 2
    assert ["voxflow", "jobs", "worker"] in commands


def own_port(line: str, port: int) -> str:
    """``line`` with its ``--port N`` given the test's ``port`` (nothing else changed)."""
    changed, count = re.subn(r"(--port )\d+\b", rf"\g<1>{port}", line)
    assert count <= 1, line
    return changed


def say(engines: VoiceEngines, text: str) -> AudioChunk:
    samples = np.concatenate([np.asarray(s.samples, np.float32)
                              for s in engines.tts.synthesize(text)])
    return AudioChunk.from_float(samples, engines.tts.sample_rate)


def test_the_many_workers_block_serves_a_call_as_written(
    voice_engines: VoiceEngines, pg_schema_url: str, tmp_path: Path
) -> None:
    engines = voice_engines  # the caller's voice (voxflow's pytest plugin)
    export, *lines = many_workers_block()
    variable = export.removeprefix("export ").split("=", 1)[0]
    port = free_port()
    bin_dir = str(Path(sys.executable).parent)  # this checkout's `voxflow`
    env = {**os.environ, variable: pg_schema_url, "VOXFLOW_PAGE_TOKEN": TOKEN,
           "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    door = next(line for line in lines if "--front-door" in line)
    assert f"--port {port}" in own_port(door, port)
    with ExitStack() as stack:
        started: dict[int, subprocess.Popen[str]] = {}
        servers: dict[int, flows.ServeCommand] = {}
        for n, line in enumerate(lines):
            argv = ["bash", "-c", f"exec {own_port(line, port)}"]  # the line, as the shell runs it
            role = next((r for r in READY if r in line), None)
            if role is None:  # voxflow jobs worker: it says nothing when ready
                log = stack.enter_context((tmp_path / f"{n}.log").open("w"))
                started[n] = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=log,
                                              stderr=log, text=True)
                stack.callback(stop, started[n])
            else:
                servers[n] = flows.ServeCommand(
                    argv, cwd=tmp_path, env=env, log=tmp_path / f"{n}.log",
                    ready=READY[role], stop=signal.SIGTERM, name=line)
        # the servers started at once, as the block's lines run side by side
        procs = stack.enter_context(flows.serve_processes(*servers.values()))
        started |= dict(zip(servers, procs, strict=True))
        running = [started[n] for n in range(len(lines))]

        async def call() -> None:
            async with LoopbackCaller(f"http://127.0.0.1:{port}", TOKEN) as caller:
                hello = await caller.wait_message("hello", within=60)
                assert hello["session_id"]
                worker = int(str(caller.call_id).split(":")[1])  # host:pid:…
                assert worker in {p.pid for p, line in zip(running, lines, strict=True)
                                  if "--worker" in line}  # exec: the pid is voxflow's
                caller.say(say(engines, "Where is my order?"))
                await caller.wait_message("reply_done", within=120)
                await caller.wait_for(
                    lambda: any(SHIPPED in m.get("text", "")
                                for m in caller.of_type("reply_text")),
                    within=120, what="the job worker's result, announced")
                announcement = next(m["delivery_id"] for m in caller.of_type("reply_text")
                                    if SHIPPED in m["text"])
                await caller.wait_message("reply_done", within=120, delivery_id=announcement)
                # run by the job worker: the queue's own table holds it, done
                assert await asyncio.to_thread(queue_statuses, pg_schema_url) == ["succeeded"]
                caller.send({"v": 1, "type": "hangup"})
                await caller.wait_message("bye", within=30)

        asyncio.run(call())
        for proc, line in zip(running, lines, strict=True):
            assert proc.poll() is None, f"{line!r} exited {proc.returncode}"


def queue_statuses(url: str) -> list[str]:
    """The status of every job in the queue's table (Procrastinate's)."""
    import psycopg

    with psycopg.connect(url) as conn:
        return [str(r[0]) for r in conn.execute("SELECT status FROM procrastinate_jobs")]


def stop(proc: subprocess.Popen[str]) -> None:
    """SIGTERM (a job worker lets its running jobs finish), then kill if it lingers."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=30)
