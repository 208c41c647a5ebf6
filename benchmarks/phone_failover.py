"""Phone failover: what the caller hears when the phone call worker holding the call dies.

Run: ``flock /tmp/voxflow-bench.lock uv run python benchmarks/phone_failover.py
[--runs 3] [--stale-after 2]``

A ``voxflow phone --front-door`` and two ``voxflow phone --worker`` processes on
PostgreSQL (a fresh schema per run, dropped after; ``VOXFLOW_BENCH_DATABASE_URL``, else
``postgresql://postgres@127.0.0.1:5432/test``), the example assistant on the real
models, and the simulated Twilio carrier (signed webhooks; it follows the ``<Connect>``
action URL as Twilio does). Each run: the caller asks "What are your opening hours?"
and hears the answer (its voice to voice, at the caller: the last frame of the question
sent → the first reply audio received, is the **before** figure); the worker holding the
call is killed (-9); the carrier's stream ends, it asks the action URL and the front
door connects the call to the other worker; the caller asks the same question the
moment the new stream opens. Printed per run, in seconds:

* **new stream**: the old stream's end → the new stream open (the action request, a
  claim by the live worker, its answer);
* **after**: the question asked on the new stream → its answer's first audio (the
  worker first takes the dead worker's lease over, which waits for two missed
  heartbeats, ``--stale-after`` * 2 / 5, and loads the session);
* **silence**: the old stream's end → that first audio, less the question's own length:
  the silence the caller hears apart from their own words (the assistant's usual voice
  to voice included).

Medians over ``--runs``; nothing is asserted (the machine is shared: the load average is
printed).

Measured Dec 4, ``--runs 3`` (load 3.4 -> 3.8): before 0.51 s (1.14 / 0.51 / 0.41), new
stream 0.06 s (0.06 / 0.04 / 0.06), after 0.66 s (1.03 / 0.46 / 0.66), silence 0.73 s
(1.08 / 0.50 / 0.73). The lease takeover (0.8 s at ``--stale-after 2``) and the session's
load run while the caller is still saying the question, so the answer after the kill
comes ~0.15 s later than before it (median): the caller hears one slow answer, not a gap.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np
from _figures import figure
from persistence import PG_URL, fresh_schema, postgres_unreachable
from voxflow_adapters.testkit import flows
from voxflow_adapters.testkit.flows import free_port
from voxflow_adapters.testkit.phone_carrier import SimulatedCarrier
from voxflow_voice.audio import AudioChunk, read_wav, write_wav
from voxflow_voice.engines import VoiceEngines

ROOT = Path(__file__).resolve().parents[1]
VOXFLOW = str(Path(sys.executable).with_name("voxflow"))
AUTH = "phone-failover-benchmark-token"
QUESTION = "What are your opening hours?"


async def answer_after(carrier: SimulatedCarrier, spoke_at: float, within: float = 60.0
                       ) -> float:
    """The first reply audio received after ``spoke_at`` (monotonic seconds)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        found = [t for t in carrier.first_audio if t > spoke_at]
        if found:
            return found[0]
        await asyncio.sleep(0.01)
    raise TimeoutError("no answer")


async def one_run(door_port: int, ports: dict[str, int], procs: dict[str, object],
                  question: Path, seconds: float) -> tuple[float, float, float, float]:
    async with SimulatedCarrier(f"http://127.0.0.1:{door_port}/voice",
                                auth_token=AUTH) as carrier:
        carrier.say(question)
        await carrier.said()
        before = await answer_after(carrier, carrier.speech_ends[-1]) - carrier.speech_ends[-1]
        heard = carrier.received_samples
        await asyncio.sleep(1.0)
        while carrier.received_samples != heard:  # the answer plays out
            heard = carrier.received_samples
            await asyncio.sleep(1.0)
        holder = next(n for n, p in ports.items() if p == urlsplit(carrier.stream_url).port)
        procs[holder].kill()  # type: ignore[attr-defined]
        while not carrier.reconnects:  # noqa: ASYNC110 (the carrier's own record)
            await asyncio.sleep(0.005)
        carrier.say(question)  # at once, on the new stream
        asked = carrier.reconnects[0]
        await carrier.said()
        spoke = carrier.speech_ends[-1]
        first = await answer_after(carrier, spoke)
        ended = carrier.stream_ends[0]
        return before, asked - ended, first - spoke, first - ended - seconds


def run(runs: int, stale_after: float) -> None:
    if (why := postgres_unreachable()) is not None:
        print(f"phone failover: skipped, {why}")
        return
    engines = VoiceEngines.load()
    rows: list[tuple[float, float, float, float]] = []
    print(f"phone failover: {runs} run(s), --stale-after {stale_after:g} (a dead worker's "
          f"lease taken over after {stale_after * 2 / 5:g} s); load average "
          f"{os.getloadavg()[0]:.1f}", flush=True)
    print(f"{'run':>3} {'before':>7} {'new stream':>10} {'after':>7} {'silence':>8}")
    with tempfile.TemporaryDirectory() as folder:
        samples = np.concatenate([np.asarray(s.samples, np.float32)
                                  for s in engines.tts.synthesize(QUESTION)])
        question = Path(folder) / "question.wav"
        write_wav(question, AudioChunk.from_float(samples, engines.tts.sample_rate))
        seconds = read_wav(question, sample_rate=8000).num_samples / 8000
        for n in range(1, runs + 1):
            with fresh_schema("vx_phone_failover_", PG_URL) as url, \
                    contextlib.ExitStack() as stack:
                env = {**os.environ, "VOXFLOW_DATABASE_URL": url,
                       "VOXFLOW_TWILIO_AUTH_TOKEN": AUTH, "VOXFLOW_LOG_LEVEL": "WARNING"}
                ports = {"a": free_port(), "b": free_port()}
                door_port = free_port()
                common = ["--host", "127.0.0.1", "--stale-after", str(stale_after)]
                procs = {name: stack.enter_context(flows.serve_process(
                    [VOXFLOW, "phone", "--worker", "--port", str(port), *common], cwd=ROOT,
                    env=env, ready="is ready", within=240,
                    log=Path(folder) / f"{name}.log")) for name, port in ports.items()}
                stack.enter_context(flows.serve_process(
                    [VOXFLOW, "phone", "--front-door", "--port", str(door_port), *common],
                    cwd=ROOT, env=env, ready="front door is listening", within=120,
                    log=Path(folder) / "door.log"))
                row = asyncio.run(one_run(door_port, ports, procs, question, seconds))
            rows.append(row)
            print(f"{n:>3} {row[0]:>6.2f}s {row[1]:>9.2f}s {row[2]:>6.2f}s "
                  f"{row[3]:>7.2f}s", flush=True)
    med = [statistics.median(r[i] for r in rows) for i in range(4)]
    print(f"median: before {med[0]:.2f} s, new stream {med[1]:.2f} s, after {med[2]:.2f} s, "
          f"silence {med[3]:.2f} s; load average now {os.getloadavg()[0]:.1f}")
    figure("phone failover: the caller's silence", med[3], "s")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--stale-after", type=float, default=2.0)
    args = parser.parse_args()
    run(args.runs, args.stale_after)
