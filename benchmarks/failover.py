"""Failover time: a serve process killed (-9) mid-reply, its call resumed on another.

Run: ``uv run python benchmarks/failover.py [--runs 3] [--database sqlite|postgres]
[--peer-timeout 3]`` (under ``flock /tmp/voxflow-bench.lock``: it is real time).

Each run starts two serve processes, A and B, on one database (a fresh SQLite file, or a
fresh schema of the PostgreSQL at ``VOXFLOW_TEST_DATABASE_URL`` /
``postgresql://postgres@127.0.0.1:5432/test``), with the example assistant on the real
models. An aiortc caller (:class:`~voxflow_adapters.webrtc.client.LoopbackCaller`, with
``keep_connected``, as the page does) asks a question on A, then for a story; about 2 s
into the story (once some of its heard words were saved), A is SIGKILLed and the caller resumes
on B (a front door would route it there; here the caller is pointed at B). The split:

* **detection**: the kill → the caller decides the connection is gone (nothing received
  for ``--peer-timeout`` s; the page uses 3 s);
* **reconnect**: that decision → B answered the resume offer and the data channel is
  open. Most of it is **lease wait**: B checks the token and waits out A's lease, which
  expires ``lease_seconds`` (6 s) after A's last renewal (a dead owner's lease is never
  stolen); the rest is the offer, ICE and DTLS;
* **state load**: on B, loading the session, cutting the story to the words saved as
  heard and saving that (B's ``state_load_ms``; inside "reconnect", before the answer);
* **total**: the kill → the resumed ``hello``;
* **next answer**: the resumed ``hello`` → the first audio of the answer to the next
  question (the caller speaks it, so this includes ~1.5 s of speech and the end of turn).

:func:`measure_failover` is the function (``benchmarks/scale_out.py`` can call it);
medians over ``--runs``; nothing is asserted (the machine is shared: note the load).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import statistics
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from _figures import figure

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "failover-benchmark"
PG_URL = os.environ.get("VOXFLOW_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")


@dataclass(frozen=True, slots=True)
class FailoverTiming:
    """One failover, in seconds (see the module for each part)."""

    detection: float
    reconnect: float
    lease_wait: float
    state_load: float
    total: float
    next_answer: float
    heard_words: int


class _Process:
    """A worker process and the JSON log records it printed."""

    def __init__(self, where: str) -> None:
        from voxflow_adapters import store_server
        from voxflow_adapters.testing import free_port, serve_process

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.records: list[dict[str, Any]] = []
        self._running = contextlib.ExitStack()
        self.proc = self._running.enter_context(serve_process(
            store_server.command(self.port, TOKEN, where, json_logs=True), cwd=ROOT,
            name=f"the worker on port {self.port}"))
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("{"):
                self.records.append(json.loads(line))

    def stop(self) -> None:
        self._running.close()  # killed (-9) if it still runs


def _speech(engines: Any, text: str) -> Any:
    from voxflow_voice.audio import AudioChunk

    samples = np.concatenate([np.asarray(s.samples, np.float32)
                              for s in engines.tts.synthesize(text)])
    return AudioChunk.from_float(samples, engines.tts.sample_rate)


async def _heard_saved(store: Any, session_id: str, delivery_id: str) -> str:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        stored = await asyncio.to_thread(store.load_state, session_id)
        marks = [e["payload"]["heard_text"] for e in (stored or {}).get("events", [])
                 if e["type"] == "reply_heard" and e["payload"]["delivery_id"] == delivery_id]
        if marks and marks[-1]:
            return str(marks[-1])
        await asyncio.sleep(0.1)
    raise RuntimeError("no heard words were saved")


async def measure_failover(
    engines: Any, store: Any, where: str, *, peer_timeout: float = 3.0
) -> FailoverTiming:
    """Kill a serve process mid-reply and time the call's resumption on another (both
    on ``where``, the database ``store`` opens); see the module."""
    from voxflow_adapters.webrtc.client import LoopbackCaller

    a, b = _Process(where), _Process(where)
    try:
        caller = LoopbackCaller(a.url, TOKEN)
        await caller.connect()
        session_id = (await caller.wait_message("hello"))["session_id"]
        caller.keep_connected(peer_timeout=peer_timeout)
        caller.say(_speech(engines, "What are your opening hours?"))
        await caller.wait_message("reply_done", within=90)
        caller.say(_speech(engines, "Tell me a story."))
        await caller.wait_for(lambda: len([m for m in caller.of_type("state")
                                           if m["state"] == "speaking"]) == 2, within=90)
        began = caller.of_type("state")[-1]["_at"]
        await caller.wait_for(lambda: caller.audible_frames(after=began) > 100, within=30)
        await _heard_saved(store, session_id, caller.of_type("reply_text")[-1]["delivery_id"])
        caller.base_url = b.url
        killed = time.monotonic()
        os.kill(a.proc.pid, signal.SIGKILL)
        await caller.wait_for(lambda: any(m.get("resumed") for m in caller.of_type("hello")),
                              within=90, what="the resumed hello")
        hello = next(m for m in caller.of_type("hello") if m.get("resumed"))
        reconnection = caller.reconnects[0]
        asked = len(caller.frames)
        caller.say(_speech(engines, "What are your opening hours?"))
        await caller.wait_for(lambda: any(f.audible for f in caller.frames[asked:]), within=90,
                              what="the next answer's audio")
        first_audio = next(f.at for f in caller.frames[asked:] if f.audible)
        caller.send({"v": 1, "type": "hangup"})
        await asyncio.sleep(0.5)
        await caller.aclose()
        resumed = next(r for r in b.records if r.get("message") == "call resumed")
        stored = await asyncio.to_thread(store.load_state, session_id)
        story = next(m for m in (stored or {}).get("messages", [])
                     if m.get("metadata", {}).get("dropped"))
        return FailoverTiming(
            detection=reconnection.detected - killed,
            reconnect=reconnection.connected - reconnection.detected,
            lease_wait=float(resumed["lease_ms"]) / 1000.0,
            state_load=float(resumed["state_load_ms"]) / 1000.0,
            total=hello["_at"] - killed,
            next_answer=first_audio - hello["_at"],
            heard_words=len(story["metadata"].get("heard_text", "").split()),
        )
    finally:
        a.stop()
        b.stop()


def _store(database: str, tmp: Path) -> tuple[Any, str]:
    if database == "postgres":
        from voxflow.flow.postgres import PostgresFlowPersistence

        schema = f"vx_failover_{uuid.uuid4().hex[:8]}"
        return PostgresFlowPersistence(PG_URL, schema=schema), f"{PG_URL}#{schema}"
    from voxflow.flow.persistence import SQLiteFlowPersistence

    path = tmp / "sessions.db"
    return SQLiteFlowPersistence(path), str(path)


async def main(runs: int, database: str, peer_timeout: float) -> None:
    from voxflow_voice.engines import VoiceEngines

    engines = await asyncio.to_thread(VoiceEngines.load)
    timings: list[FailoverTiming] = []
    for run in range(1, runs + 1):
        with tempfile.TemporaryDirectory() as tmp:
            store, where = _store(database, Path(tmp))
            store.check_writable()
            try:
                t = await measure_failover(engines, store, where, peer_timeout=peer_timeout)
            finally:
                store.close()
                if database == "postgres":
                    store.drop_schema()
        timings.append(t)
        print(f"run {run}: detection {t.detection:.2f} s, reconnect {t.reconnect:.2f} s "
              f"(lease wait {t.lease_wait:.2f} s, state load {t.state_load * 1000:.0f} ms), "
              f"total {t.total:.2f} s, next answer {t.next_answer:.2f} s "
              f"({t.heard_words} heard words kept)", flush=True)

    def med(name: str) -> float:
        return float(statistics.median(getattr(t, name) for t in timings))

    print(f"\nfailover on {database} (kill -9 mid-reply -> the call resumed on another "
          f"process), medians of {runs} runs, caller peer_timeout {peer_timeout:g} s, "
          f"lease 6 s (load average {os.getloadavg()[0]:.2f}):")
    for name in ("detection", "reconnect", "lease_wait", "state_load", "total", "next_answer"):
        print(f"  {name.replace('_', ' '):<12} {med(name):6.2f} s")
    figure(f"failover total ({database})", round(med("total"), 2), "s")
    figure(f"failover state load ({database})", round(med("state_load") * 1000), "ms")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="kills to time (default: 3)")
    parser.add_argument("--database", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--peer-timeout", type=float, default=3.0,
                        help="the caller's silence before it reconnects (the page: 3 s)")
    args = parser.parse_args()
    asyncio.run(main(args.runs, args.database, args.peer_timeout))
