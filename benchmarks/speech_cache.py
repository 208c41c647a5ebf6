"""What the speech cache saves: the demo call answered again and again by one process.

Run: ``uv run python benchmarks/speech_cache.py [--calls 4] [--rounds 3]``

A worker answers the same assistant call after call: its greeting, its confirmations
and the announcement's fixed words come back in every call. One process loads the real
models once (tiny.en, Silero, Piper) and runs ``--calls`` demo calls
(:func:`voxflow_adapters.demo.call.run_demo_call`, virtual time: as fast as the CPU
goes) with Piper's speech cache off (``piper:cache_mb=0``) and on (``piper``, the default
16 MB), alternating the arms within each round so the machine's load falls on both.

Printed per arm, medians over the rounds: sentences synthesized and served from the
cache per call (first call, and each later call), the hit rate from the second call on,
and the process's CPU seconds per call (all threads). The ratio is measured in one run.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time

from voxflow_adapters.demo.call import run_demo_call
from voxflow_voice.engines import VoiceEngines

from voxflow.clock import VirtualClock


def one_call(engines: VoiceEngines) -> tuple[int, int, float]:
    """(sentences synthesized, sentences from the cache, CPU seconds) of one demo call."""
    before = engines.tts.statistics()  # type: ignore[attr-defined]
    cpu = time.process_time()
    result = asyncio.run(run_demo_call(engines, clock=VirtualClock(autojump=True))).result
    spent = time.process_time() - cpu
    after = engines.tts.statistics()  # type: ignore[attr-defined]
    assert result.stale_samples() == 0, "a stale sample played"
    return after.sentences - before.sentences, after.cached - before.cached, spent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    arms = {"off": "piper:cache_mb=0", "on": "piper"}
    rows: dict[str, list[list[tuple[int, int, float]]]] = {a: [] for a in arms}
    for _ in range(args.rounds):
        for arm, spec in arms.items():  # fresh engines: each round starts cold
            engines = VoiceEngines.load(tts=spec, deterministic=False)
            rows[arm].append([one_call(engines) for _ in range(args.calls)])
    print(f"{args.calls} demo calls per round, {args.rounds} rounds, load "
          f"{os.getloadavg()[0]:.1f}")
    cpu: dict[str, float] = {}
    for arm, rounds in rows.items():
        first = [r[0] for r in rounds]
        later = [c for r in rounds for c in r[1:]]
        synth = statistics.median(c[0] for c in later)
        cached = statistics.median(c[1] for c in later)
        hit = [sum(c[1] for c in r[1:]) / max(1, sum(c[0] + c[1] for c in r[1:]))
               for r in rounds]
        cpu[arm] = statistics.median(c[2] for c in later)
        print(f"cache {arm:3}: first call {statistics.median(c[0] for c in first):.0f} "
              f"synthesized / {statistics.median(c[1] for c in first):.0f} cached; "
              f"later calls {synth:.0f} synthesized / {cached:.0f} cached "
              f"(hit rate {statistics.median(hit):.0%}); CPU per later call "
              f"{cpu[arm]:.2f} s")
    print(f"CPU per later call, cache on / off: {cpu['on'] / cpu['off']:.2f}")


if __name__ == "__main__":
    main()
