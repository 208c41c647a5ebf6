"""Calls per worker over the phone path beside the simulated (browser-side) path: N
concurrent dense calls on one process's shared models, both ways, in one run.

Run: ``flock /tmp/voxflow-bench.lock uv run python benchmarks/phone_capacity.py
[--calls 1,4,6] [--turns 3]``

The dense script of ``capacity.py``: every caller asks "Can you tell me what is on my
calendar this afternoon?" (the bundled voice, trimmed of its trailing silence), hears the
flow's fixed reply of about 9 s to the end, waits 0.8 s and asks again, ``--turns``
times; the callers' first questions are spread over one cycle (12 s). The flow is the
test kit's Teller answering every turn at once, on the real models (tiny.en, Piper,
Silero; the model scheduler on, replies synthesized up to 3 s ahead), so the figures are
the voice pipeline's. For each N, in turn:

* **simulated**: ``_capacity_calls.run_calls`` (each call a ``SimulatedClient`` on its own
  session, real time): the transport browsers' calls are measured on in ``capacity.py``;
* **phone**: a :class:`~voxflow_adapters.phone.server.PhoneServer` (the media path of
  ``voxflow phone`` and of a phone call worker; no dispatch, no persistence) on
  loopback and N simulated Twilio carriers (paced 8 kHz μ-law both ways, marks echoed
  after their audio played): voice to voice at the caller, from the last frame of the
  question sent to the first reply audio received (played within the carrier's next
  20 ms tick).

Printed per N and path: questions answered / asked, voice to voice p50 / p95, turns
lost (a question no reply began for within 8 s: the caller asks again; every question
of a phone call the server rejected busy, which its admission does when it measures no
headroom, as under another job's load: the simulated path has no admission), and the
headline: the largest N, below the first that misses, whose p95 is <= 1 s with no turn
lost, for each path. The 2 cores are shared with other engineers' jobs: the load
average is printed; compare the two paths within one run only.

Measured Dec 4, ``--calls 4,6,8,10`` (one run, Piper without its speech cache as in
``capacity.py``: every reply synthesized anew; load 5.0 -> 5.8 from other engineers'
jobs; v2v p50 / p95 in ms, every question answered, 0 lost in every row):

=====  ===============  ===============
calls  simulated        phone
=====  ===============  ===============
4      520 / 659        531 / 882
6      511 / 676        452 / 650
8      568 / 705        462 / 732
10     1,287 / 4,278    1,956 / 2,990
=====  ===============  ===============

So the phone path holds as many dense calls per worker as the simulated one: 8 each
within p95 <= 1 s, and both miss at 10 (the models' CPU: ``scale_out.py``'s knee for
the simulated path, searched upward with 2 questions a call, is 11 on a calmer machine).
The phone path's own work per call (μ-law both ways through lookup tables, a ``media``
and a ``mark`` message every 20 ms on loopback, the marks as receipts) costs no call at
these sizes.
"""


from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from _capacity_calls import (
    AFTER,
    CYCLE,
    GAP,
    P95_TARGET_MS,
    REPLY,
    load_engines,
    question_audio,
    run_calls,
)
from _figures import figure
from aiohttp import web
from voice_latency import SPEECH_LEVEL
from voxflow_adapters.hosting.calls import flow_call_factory
from voxflow_adapters.phone.server import PhoneServer, PhoneSettings
from voxflow_adapters.testkit.flows import Teller
from voxflow_adapters.testkit.phone_carrier import SimulatedCarrier
from voxflow_voice.audio import AudioChunk, write_wav
from voxflow_voice.engines import VoiceEngines

MAX_WAIT = 8.0  # s: a caller who hears nothing this long after asking asks again
REFUSED: list[str] = []  # the calls the server rejected busy, this row
CALL_LIMIT = 300.0


class CapacityTeller(Teller):
    """The Teller answering every turn with ``capacity.py``'s 9 s reply."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(story=REPLY, trigger=None, **kwargs)


def trimmed_question(engines: VoiceEngines, folder: Path) -> Path:
    """``capacity.py``'s question as a WAV, its trailing silence cut (so the last frame
    the carrier sends is speech, as the simulated path times from the last loud one)."""
    audio = question_audio(engines)
    samples = audio.samples()
    loud = np.flatnonzero(np.abs(samples) >= SPEECH_LEVEL)
    cut = samples[: int(loud[-1]) + 1] if loud.size else samples
    path = folder / "question.wav"
    write_wav(path, AudioChunk.from_float(cut, audio.sample_rate))
    return path


async def phone_caller(url: str, question: Path, turns: int, start: float
                       ) -> tuple[list[float], int]:
    """One dense caller over the phone: (voice to voice per answered question in ms,
    questions lost; all of them when the call was rejected busy)."""
    await asyncio.sleep(start)
    try:
        return await _call(url, question, turns)
    except ConnectionRefusedError:  # rejected busy: the admission measured no headroom
        REFUSED.append(url)
        return [], turns


async def _call(url: str, question: Path, turns: int) -> tuple[list[float], int]:
    v2v: list[float] = []
    lost = 0
    async with SimulatedCarrier(url) as carrier:
        for _ in range(turns):
            carrier.say(question)
            await carrier.said()
            await asyncio.sleep(0.05)  # (the last frame's time is recorded after it went)
            spoke = carrier.speech_ends[-1]
            deadline = time.monotonic() + MAX_WAIT
            while not [t for t in carrier.first_audio if t > spoke]:
                if time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.02)
            began = [t for t in carrier.first_audio if t > spoke]
            if not began:
                lost += 1
                continue
            v2v.append((began[0] - spoke) * 1000.0)
            heard, still = carrier.received_samples, time.monotonic()
            while time.monotonic() - still < GAP:  # the reply plays out, then a pause
                await asyncio.sleep(0.05)
                if carrier.received_samples != heard:
                    heard, still = carrier.received_samples, time.monotonic()
    return v2v, lost


async def phone_row(engines: VoiceEngines, calls: int, turns: int, question: Path
                    ) -> tuple[list[float], int]:
    server = PhoneServer(flow_call_factory(CapacityTeller, settings=AFTER), engines,
                         settings=PhoneSettings(max_calls=max(calls, 1)))
    runner = web.AppRunner(server.app(), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}/voice"
    try:
        results = await asyncio.wait_for(asyncio.gather(*(
            phone_caller(url, question, turns, 0.5 + i * CYCLE / calls)
            for i in range(calls))), CALL_LIMIT)
    finally:
        await runner.cleanup()
    return [ms for v2v, _ in results for ms in v2v], sum(lost for _, lost in results)


def _pct(values: list[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.0f} ms"


def _meets(p95: float | None, lost: int) -> bool:
    return p95 is not None and p95 <= P95_TARGET_MS and lost == 0


async def main(calls: list[int], turns: int) -> None:
    engines, _ = await load_engines()
    print(f"phone capacity: {turns} dense turns per caller, one process, shared models; "
          f"load average {os.getloadavg()[0]:.1f}", flush=True)
    print(f"{'calls':>5} {'path':>9} {'answered':>9} {'v2v p50':>9} {'v2v p95':>9} "
          f"{'lost':>5}", flush=True)
    best = {"simulated": 0, "phone": 0}
    missed: set[str] = set()
    with tempfile.TemporaryDirectory() as folder:
        question = trimmed_question(engines, Path(folder))
        for n in calls:
            row, _ = await asyncio.wait_for(run_calls(engines, n, turns, settings=AFTER),
                                            CALL_LIMIT)
            simulated = (row.v2v_p50_ms, row.v2v_p95_ms, row.turns_lost,
                         n * turns - row.turns_lost)
            REFUSED.clear()
            v2v, lost = await phone_row(engines, n, turns, question)
            phone = (_pct(v2v, 50), _pct(v2v, 95), lost, len(v2v))
            for path, (p50, p95, gone, answered) in (("simulated", simulated),
                                                     ("phone", phone)):
                refused = f"  ({len(REFUSED)} call(s) rejected busy)" if (
                    path == "phone" and REFUSED) else ""
                print(f"{n:>5} {path:>9} {f'{answered}/{n * turns}':>9} {_ms(p50):>9} "
                      f"{_ms(p95):>9} {gone:>5}{refused}", flush=True)
                if path not in missed and _meets(p95, gone):
                    best[path] = n
                else:
                    missed.add(path)
    print(f"calls per worker within p95 <= {P95_TARGET_MS:.0f} ms, none lost: phone "
          f"{best['phone']}, simulated {best['simulated']} (of {calls}); load average now "
          f"{os.getloadavg()[0]:.1f}", flush=True)
    figure("phone calls per worker", best["phone"], "calls",
           target=f"simulated: {best['simulated']}")
    figure("simulated calls per worker", best["simulated"], "calls")


def _calls(text: str) -> list[int]:
    values = sorted({int(x) for x in text.split(",") if x.strip()})
    if not values or values[0] < 1:
        raise argparse.ArgumentTypeError(f"--calls needs numbers >= 1, got {text!r}")
    return values


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=_calls, default=[1, 4, 6],
                        help="numbers of concurrent calls, comma-separated (default: 1,4,6)")
    parser.add_argument("--turns", type=int, default=3,
                        help="questions each caller asks (default: %(default)s)")
    args = parser.parse_args()
    asyncio.run(main(args.calls, args.turns))
