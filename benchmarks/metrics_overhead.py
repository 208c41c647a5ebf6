"""What ``--metrics-port`` costs a call, and whether the exported voice-to-voice
histogram agrees with the calls' own latency figures.

Run: ``uv run python benchmarks/metrics_overhead.py [--rounds 3] [--calls 3]``

Each round starts a real ``voxflow serve`` (the real models: tiny.en, Piper, Silero; its
sessions in a fresh SQLite home) twice, once without and once with ``--metrics-port``
(the order alternating between rounds, so a drift of the machine's load favours
neither), and makes ``--calls`` calls in a row to it with an aiortc caller in this
process: "Hello there!", the reply played whole, "What can you do?", its reply, hang up.
With the metrics on, a scraper in this process reads ``/metrics`` every second (a
Prometheus at a 1 s interval: five times the README's), so the scrapes' cost is counted.

Printed, medians over the rounds (nothing asserted: the machine is shared):

* **voice to voice**: the median over every turn of a run, as the page's latency
  messages said (the server's marks: last speech sample → first reply sample played),
  off and on, and on minus off (the issue's figure: +2 ms at most);
* **CPU per call**: the server process's CPU seconds (``/proc``, user + system) from
  listening to the last call's end, per call and per second of call (% of one core),
  off and on, and on minus off (the issue's figure: +1 % at most);
* **histogram agrees**: with the metrics on, the exported
  ``voxflow_voice_to_voice_seconds`` histogram (scraped after the last call) against the
  same turns' latencies as the calls reported them: its count in every bucket equal to
  theirs, and its median as Prometheus estimates it (``histogram_quantile(0.5, ...)``,
  interpolated within the bucket) in the bucket of their median or the next one, in
  every round.

On a shared machine the rounds' own spread (hundreds of ms of voice to voice, several %
of CPU) hides a cost of microseconds, so the cost itself is measured too, in this
process and without noise: **the observer**'s time per session event (a turn reports
about ten), and **a scrape**'s (``/metrics`` of a call worker's registry: the process,
the loop lag, every call histogram and the host's load), with what it comes to at
Prometheus's 5 s interval as a share of a core.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import os
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
from _figures import figure

TOKEN = "metrics-overhead-benchmark"
LINES = ("Hello there!", "What can you do?")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (``/proc/<pid>/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def scraped_buckets(url: str) -> dict[float, float]:
    """The cumulative counts of ``voxflow_voice_to_voice_seconds`` by ``le``."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return {float(s.labels["le"]): s.value for family in text_string_to_metric_families(text)
            for s in family.samples if s.name == "voxflow_voice_to_voice_seconds_bucket"}


def own_buckets(seconds: list[float], edges: list[float]) -> dict[float, float]:
    """The cumulative counts a histogram with ``edges`` gives ``seconds``."""
    return {edge: float(sum(v <= edge for v in seconds)) for edge in [*edges, float("inf")]}


class Scraper:
    """Reads ``/metrics`` every ``interval`` seconds from a thread, as Prometheus would."""

    def __init__(self, url: str, interval: float = 1.0) -> None:
        self.url = url
        self.interval = interval
        self.scrapes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Scraper:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            with urllib.request.urlopen(self.url, timeout=10) as response:
                response.read()
            self.scrapes += 1


async def one_call(engines: Any, base: str, audio: list[Any]) -> tuple[list[float], float]:
    """A call of the two lines; the voice to voice of its turns (ms) and its seconds."""
    from voxflow_adapters.webrtc.client import LoopbackCaller

    began = time.monotonic()
    async with LoopbackCaller(base, TOKEN) as caller:
        await caller.wait_message("hello", within=60)
        for n, chunk in enumerate(audio, 1):
            caller.say(chunk)
            await caller.wait_for(lambda n=n: len(caller.of_type("latency")) >= n,
                                  within=60, what="the reply's latency")
        caller.send({"v": 1, "type": "hangup"})
        await caller.wait_message("bye", within=30)
        latencies = [m["first_audio_ms"] for m in caller.of_type("latency")
                     if m["first_audio_ms"] is not None]
    return latencies, time.monotonic() - began


def run(engines: Any, audio: list[Any], calls: int, metrics: bool) -> dict[str, Any]:
    """One ``voxflow serve`` (metrics on or off) and ``calls`` calls in a row to it."""
    from voxflow_adapters.testkit.flows import free_port, serve_process

    port, metrics_port = free_port(), free_port()
    argv = [sys.executable, "-m", "voxflow.cli", "serve", "--port", str(port), "--token",
            TOKEN, "--log-level", "WARNING"]
    if metrics:
        argv += ["--metrics-port", str(metrics_port)]
    with tempfile.TemporaryDirectory() as home:
        env = {k: v for k, v in os.environ.items() if k != "VOXFLOW_DATABASE_URL"}
        env["VOXFLOW_HOME"] = home
        with serve_process(argv, env=env, ready="listening", stop=2) as proc:
            start = cpu_seconds(proc.pid)
            latencies: list[float] = []
            seconds = 0.0
            scrapes = 0
            url = f"http://127.0.0.1:{metrics_port}/metrics"

            async def calls_in_a_row() -> None:
                nonlocal seconds
                for _ in range(calls):
                    got, took = await one_call(engines, f"http://127.0.0.1:{port}", audio)
                    latencies.extend(got)
                    seconds += took

            if metrics:
                with Scraper(url) as scraper:
                    asyncio.run(calls_in_a_row())
                    time.sleep(0.5)  # the last call's end reaches the metrics
                    buckets = scraped_buckets(url)
                scrapes = scraper.scrapes
            else:
                asyncio.run(calls_in_a_row())
                buckets = {}
            cpu = cpu_seconds(proc.pid) - start
    return {"latencies": latencies, "cpu": cpu, "call_seconds": seconds, "calls": calls,
            "buckets": buckets, "scrapes": scrapes}


def direct_costs() -> tuple[float, float]:
    """(µs per session event through the observer, ms of CPU per scrape), medians."""
    from prometheus_client import CollectorRegistry, generate_latest
    from voxflow_adapters.hosting.admission import AdmissionController
    from voxflow_adapters.hosting.metrics import CallMetrics, HostCounts
    from voxflow_voice.events import (
        AudioStarted,
        ReplyFinished,
        ReplyStarted,
        ReplyTextStreamed,
        SpeechEnded,
        SpeechStarted,
        TurnCommitted,
        TurnMetrics,
    )

    from voxflow.ids import DeliveryId, SessionId, TurnId
    from voxflow.monitoring import Monitor

    s, t, d = SessionId("s"), TurnId("t"), DeliveryId("d")
    turn = [SpeechStarted(session_id=s, at=0.0, onset_at=0.0),
            SpeechEnded(session_id=s, at=1.6, end_at=1.0),
            TurnCommitted(session_id=s, at=1.7, turn_id=t, text="Hi.", speech_end_at=1.0),
            ReplyStarted(session_id=s, at=1.7, turn_id=t, delivery_id=d, reply_kind="answer"),
            *[ReplyTextStreamed(session_id=s, at=1.7, delivery_id=d, segment_id=n, text="Hi.")
              for n in (1, 2, 3)],
            AudioStarted(session_id=s, at=1.9, delivery_id=d),
            ReplyFinished(session_id=s, at=3.0, turn_id=t, delivery_id=d, text="Hi."),
            TurnMetrics(session_id=s, at=3.0, turn_id=t, delivery_id=d, speech_end=1.0,
                        transcript_final=1.7, first_text=1.75, first_audio=1.9,
                        playback_end=3.0, interrupted=False, fenced_chunks=0)]
    monitor = Monitor("call-worker")  # (its registry: never started, nothing listens)
    metrics = CallMetrics(monitor.registry)
    metrics.watch(AdmissionController().load, lambda: HostCounts(admitted=3, refused={}))
    observe = metrics.call()
    per_event = []
    for _ in range(7):
        began = time.perf_counter()
        for _ in range(2000):
            for event in turn:
                observe(event)
        per_event.append((time.perf_counter() - began) / (2000 * len(turn)) * 1e6)
    registry: CollectorRegistry = monitor.registry
    per_scrape = []
    for _ in range(50):
        began = time.process_time()
        generate_latest(registry)
        per_scrape.append((time.process_time() - began) * 1000.0)
    return statistics.median(per_event), statistics.median(per_scrape)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="rounds of off and on")
    parser.add_argument("--calls", type=int, default=3, help="calls per run")
    args = parser.parse_args()
    if args.rounds < 1 or args.calls < 1:
        parser.error("--rounds and --calls must be >= 1")
    from voxflow_adapters.hosting.metrics import LATENCY_BUCKETS
    from voxflow_voice.audio import AudioChunk
    from voxflow_voice.engines import VoiceEngines

    from voxflow.status_page import quantile  # histogram_quantile, as Prometheus does it

    engines = VoiceEngines.load()  # the caller's voice
    audio = [AudioChunk.from_float(np.concatenate([np.asarray(s.samples, np.float32)
                                                   for s in engines.tts.synthesize(line)]),
                                   engines.tts.sample_rate) for line in LINES]
    rows: dict[bool, list[dict[str, Any]]] = {False: [], True: []}
    agree: list[tuple[int, int]] = []
    for n in range(args.rounds):
        for metrics in ((False, True) if n % 2 == 0 else (True, False)):
            result = run(engines, audio, args.calls, metrics)
            rows[metrics].append(result)
            v2v = statistics.median(result["latencies"])
            line = (f"round {n + 1} metrics {'on ' if metrics else 'off'}: "
                    f"{len(result['latencies'])} turns, v2v median {v2v:.0f} ms, "
                    f"CPU {result['cpu'] / result['calls']:.2f} s/call")
            if metrics:
                edges = list(LATENCY_BUCKETS)
                seconds = [ms / 1000.0 for ms in result["latencies"]]
                same = own_buckets(seconds, edges) == result["buckets"]
                estimate = quantile(0.5, result["buckets"]) or 0.0
                apart = abs(bisect.bisect_left(edges, estimate)
                            - bisect.bisect_left(edges, v2v / 1000.0))
                agree.append((same, apart))
                line += (f", {result['scrapes']} scrapes; histogram "
                         f"{result['buckets'][float('inf')]:.0f} turns, every bucket the "
                         f"calls' own: {'yes' if same else 'NO'}, its median "
                         f"{estimate * 1000:.0f} ms ({apart} bucket(s) from the calls')")
            print(line, flush=True)

    def v2v(metrics: bool) -> float:
        return statistics.median(statistics.median(r["latencies"]) for r in rows[metrics])

    def cpu_per_call(metrics: bool) -> float:
        return statistics.median(r["cpu"] / r["calls"] for r in rows[metrics])

    def cpu_share(metrics: bool) -> float:  # % of one core per second of call
        return statistics.median(100.0 * r["cpu"] / r["call_seconds"] for r in rows[metrics])

    agrees = all(same and apart <= 1 for same, apart in agree)
    event_us, scrape_ms = direct_costs()
    print()
    print(f"{'':28}{'off':>10}{'on':>10}{'on - off':>12}")
    print(f"{'voice to voice median (ms)':28}{v2v(False):10.0f}{v2v(True):10.0f}"
          f"{v2v(True) - v2v(False):+12.0f}")
    print(f"{'CPU per call (s)':28}{cpu_per_call(False):10.2f}{cpu_per_call(True):10.2f}"
          f"{cpu_per_call(True) - cpu_per_call(False):+12.2f}")
    print(f"{'CPU (% of a core, in call)':28}{cpu_share(False):10.1f}{cpu_share(True):10.1f}"
          f"{cpu_share(True) - cpu_share(False):+12.1f}")
    print(f"histogram agrees with the calls' own figures (every bucket equal, median "
          f"within one bucket): {'yes' if agrees else 'NO'} "
          f"(buckets apart by round: {[apart for _, apart in agree]})")
    print(f"(medians of {args.rounds} rounds of {args.calls} calls of {len(LINES)} turns; "
          "a real voxflow serve each run, scraped every second when on)")
    print()
    print(f"the cost itself: {event_us:.1f} µs per session event through the observer "
          f"(~{10 * event_us:.0f} µs per turn of ten events, on the event's path); a scrape "
          f"{scrape_ms:.2f} ms of CPU on the endpoints' thread, {scrape_ms / 50:.3f} % of a "
          "core at Prometheus's 5 s interval")
    figure("metrics on: voice to voice median, on - off", v2v(True) - v2v(False), "ms",
           target="<= 2")
    figure("metrics on: CPU per call, on - off", cpu_share(True) - cpu_share(False),
           "% of a core", target="<= 1")
    figure("exported v2v histogram agrees (within one bucket)", 1.0 if agrees else 0.0,
           "yes=1", target="1")
    figure("observer per session event", event_us, "µs")
    figure("a scrape of /metrics", scrape_ms, "ms CPU")


if __name__ == "__main__":
    main()
