"""How long a process's first LLM call stalls its event loop (issue 29).

Each run is a fresh interpreter (litellm not yet imported) whose event loop runs a probe
task that wakes every 5 ms and records how late it woke; the largest lateness while one
first call (``mock_response``, streamed) runs is the stall every other call on that loop
would have suffered. Three ways, ``--runs`` times each, one after the other:

* **on the loop** (voxflow before this change): litellm imported where the first call
  needs it, on the loop, and its first request made there, importing what it imports;
* **off the loop**: ``voxflow.llm.LLM.acall`` with nothing loaded beforehand: it waits
  for litellm, loaded on a thread of its own, without blocking the loop;
* **preloaded**: as every entry point now does, ``await voxflow.llm.preload()`` at
  start-up, then the first call.

Prints, for each, the median over runs of the loop's longest stall and of the first
call's duration. Run: ``uv run python benchmarks/first_llm_turn.py [--runs 5]`` (real
time: note the load average it prints; the machine's other work inflates every row).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

from _figures import figure

PROBE = """
import asyncio, json, sys, time
MODE = sys.argv[1]
MODEL = "openai/gpt-4o-mini"

async def probe(stalls, stop):
    while not stop.is_set():
        asked = time.perf_counter()
        await asyncio.sleep(0.005)
        stalls.append(time.perf_counter() - asked - 0.005)

async def first_call():
    if MODE == "on-the-loop":  # what LLM.acall did before: load_litellm() on the loop
        from voxflow.llm._litellm import load_litellm
        litellm = load_litellm()
        stream = await litellm.acompletion(model=MODEL, messages=[{"role": "user",
                                           "content": "hi"}], mock_response="Hi.",
                                           stream=True)
        async for _ in stream:
            pass
    else:
        from voxflow.llm import LLM
        await LLM(MODEL, mock_response="Hi.").acall("hi", stream=True)

async def main():
    from voxflow.llm import preload
    if MODE == "preloaded":
        await preload()
    stalls, stop = [], asyncio.Event()
    task = asyncio.create_task(probe(stalls, stop))
    await asyncio.sleep(0.05)
    stalls.clear()
    started = time.perf_counter()
    await first_call()
    took = time.perf_counter() - started
    stop.set()
    await task
    print(json.dumps({"stall": max(stalls, default=0.0), "took": took}))

asyncio.run(main())
"""

MODES = ("on-the-loop", "off-the-loop", "preloaded")


def run(mode: str) -> dict[str, float]:
    out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True,
                         check=True, timeout=600)
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main(runs: int) -> None:
    print(f"first LLM call, {runs} fresh process(es) each; load average "
          f"{os.getloadavg()[0]:.1f} at the start", flush=True)
    results: dict[str, list[dict[str, float]]] = {mode: [] for mode in MODES}
    for i in range(1, runs + 1):
        for mode in MODES:
            r = run(mode)
            results[mode].append(r)
            print(f"  run {i} {mode:<13} longest loop stall {r['stall'] * 1000:7.0f} ms; "
                  f"the call took {r['took'] * 1000:6.0f} ms", flush=True)
    print(f"\nmedians of {runs}, load average {os.getloadavg()[0]:.1f} at the end:")
    for mode in MODES:
        stall = statistics.median(r["stall"] for r in results[mode]) * 1000
        took = statistics.median(r["took"] for r in results[mode]) * 1000
        print(f"  {mode:<13} longest event-loop stall {stall:6.0f} ms; first call {took:6.0f} ms")
        figure(f"first LLM call: event-loop stall ({mode})", round(stall), "ms")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="fresh processes per way (5)")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be >= 1")
    main(args.runs)
