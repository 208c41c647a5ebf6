"""N concurrent WebRTC calls in one ``voxflow serve`` process: frame loss, pacing, CPU.

Run: ``uv run python benchmarks/webrtc_load.py [--calls 1 10 50] [--runs 3]
[--models instant|real] [--turns 1]``

The server runs in a child process (so its CPU time is its own) with an *instant
reply*: an STT that returns "Hello there!" at once, the Piper reply audio cached after
the first synthesis, the energy VAD, and the example assistant's rule-based answer, so
the figures are the transport's (aiortc, Opus, the 20 ms outbound pacing), not the
models'. N aiortc callers (in this process) connect over loopback at once, each says one
synthesized utterance, waits for the whole reply ("Hello! How can I help you today?",
about 2 s of audio) and hangs up. The callers share the machine with the server: on a
2-core box their Opus decoding and encoding competes with it (in production they are
browsers elsewhere), so the large-N rows are a floor on what the server alone manages.

Printed per N (medians over ``--runs``; nothing is asserted, the machine is shared):

* **frames lost**: RTP packets (one 20 ms Opus frame each) the callers' receivers
  counted as lost (sequence gaps), out of those received;
* **pacing**: how late each outbound 20 ms frame was produced after its deadline
  (p50/p99, ms), and frames more than one period late;
* **CPU per call**: the server process's CPU seconds per second of call, as % of one core;
* **setup**: offer posted → data channel open (median, ms);
* **v2v p50 / p95**: at the callers, over all turns of all calls, the mic frame that held
  the user's last speech sample (above -40 dBFS) handed to the encoder → the first
  audible reply frame received.

``--models real`` is the capacity table of the WebRTC transport (issue 21): the server
loads the real models (``VoiceEngines.load()``: tiny.en, Piper, Silero) instead of the
instant ones, and each caller asks ``--turns`` times, 0.8 s after each reply ends (the
reply is the example assistant's, ~2 s, shorter than ``capacity.py``'s 9 s one).
Each row then also prints the server's per-turn stages, its loop lag and the callers'
own CPU. ``--spread S`` spreads the callers' first questions over S s (as capacity.py
does; 0: every turn of every call ends together), ``--admit-all`` admits every call
(admission's prior and the other processes' CPU would refuse some on a shared box). The
server warms its engines up as every entry point does (``VoiceEngines.warm_up()``); each
row prints the prior admission derives from that warm-up (the WebRTC caller,
:func:`~voxflow_adapters.hosting.call_cost.derived_call_cost`) beside the server's CPU per
call measured (the calls here are not the profile's dense caller: ~2 s replies).

Issue 36, ``--models real --turns 3 --admit-all``, one run each (load 5-6, shared):
before 0b2883d (litellm imported beside the first calls) 2/4/5/6 calls v2v p95
1,548/2,360/3,451/3,445 ms, 12-47 % of frames late; after it 766/964/1,416/1,275 ms,
0.4-5 % late; with ``--spread 4`` (load 3-4) 561/922/639/699 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
from _figures import figure

from voxflow.ids import DeliveryId

if TYPE_CHECKING:  # (the callers' process imports no voice engine)
    from voxflow_voice.engines import SpokenSentence, TextToSpeech

CALL_LIMIT = 30.0  # default seconds a caller waits for its reply before giving up
TEXT = "Hello there!"
WARM_UP = DeliveryId("warm-up")  # the identity of audio synthesized ahead, never played


# -- the server (child process) ---------------------------------------------------------


class _InstantStt:
    async def transcribe(self, audio: Any) -> Any:
        from voxflow_voice.engines.stt import Transcript

        return Transcript(text=TEXT, duration=audio.duration, no_speech_prob=0.0,
                          avg_logprob=0.0)


class _CachedTts:
    """The real Piper voice, each text synthesized once, then replayed at once."""

    def __init__(self, tts: TextToSpeech) -> None:
        self._tts = tts
        self._cache: dict[str, list[Any]] = {}

    @property
    def sample_rate(self) -> int:
        return int(self._tts.sample_rate)

    async def stream(self, text: str, *, delivery_id: DeliveryId,
                     segment_id: int) -> AsyncIterator[Any]:
        from dataclasses import replace

        if text not in self._cache:
            self._cache[text] = [c async for c in self._tts.stream(
                text, delivery_id=WARM_UP, segment_id=1)]
        for chunk in self._cache[text]:
            yield replace(chunk, delivery_id=delivery_id, segment_id=segment_id)

    def synthesize(self, text: str) -> Iterator[SpokenSentence]:
        return self._tts.synthesize(text)


async def _serve_child(real: bool, scheduling: bool = False,
                       admit_all: bool = False) -> None:
    import logging

    from voxflow_adapters.hosting.calls import assistant_call_factory
    from voxflow_adapters.webrtc import PeerSettings, ServerSettings, WebRtcServer
    from voxflow_adapters.webrtc.server import ignore_closed_transport_errors
    from voxflow_voice.engines import VoiceEngines
    from voxflow_voice.engines.tts import DETERMINISTIC_TTS_SETTINGS, PiperTts
    from voxflow_voice.engines.vad import EnergyVad

    logging.basicConfig(level=logging.ERROR)
    ignore_closed_transport_errors(asyncio.get_running_loop())
    tts = _CachedTts(PiperTts(settings=DETERMINISTIC_TTS_SETTINGS))
    # warm the cache: the reply is instant
    async for _ in tts.stream("Hello!", delivery_id=WARM_UP, segment_id=1):
        pass
    async for _ in tts.stream("How can I help you today?", delivery_id=WARM_UP, segment_id=1):
        pass
    engines = VoiceEngines(stt=_InstantStt(), tts=tts, make_vad=EnergyVad)
    if real:
        engines = await asyncio.to_thread(VoiceEngines.load, scheduling=scheduling)
    # as every entry point: the models' first runs, and their real-time factors measured,
    # from which admission derives its prior (call_cost.derived_call_cost, WEBRTC_CALLER)
    warm = await engines.warm_up()
    settings = ServerSettings(port=0, max_calls=200,
                              peer=PeerSettings(ice_host_addresses=("127.0.0.1",)))
    admission = None
    if admit_all:  # what the server holds, not what admission lets in on a shared machine
        from voxflow_adapters.hosting.admission import AdmissionController, AdmissionSettings
        from voxflow_adapters.hosting.call_cost import CallCostMeter, CostSettings

        cost = CostSettings(prior_call_cost=0.01)
        admission = AdmissionController(
            AdmissionSettings(max_calls=settings.max_calls, cost=cost),
            scheduler=engines.scheduler, meter=CallCostMeter(cost, machine_time=lambda: None))
    # (the server loads litellm before it listens: no call's turn pays for its import)
    server = WebRtcServer(assistant_call_factory(), engines, settings=settings,
                          admission=admission)
    offsets: list[float] = []
    server_calls: list[Any] = []
    server_calls_sessions: list[Any] = []

    def on_call(peer: Any, call: Any) -> None:
        server_calls.append(peer)
        server_calls_sessions.append(call.session)

    server._on_call = on_call
    async with server:
        from voxflow_adapters.hosting.call_cost import WEBRTC_CALLER, derived_call_cost

        print(json.dumps({"port": server.port, "token": server.token,
                          "prior": derived_call_cost(warm, WEBRTC_CALLER)}), flush=True)
        loop = asyncio.get_running_loop()
        line = await loop.run_in_executor(None, sys.stdin.readline)  # "start"
        cpu0, wall0 = time.process_time(), time.monotonic()
        lags: list[float] = []
        probe = asyncio.ensure_future(_loop_lag(lags))
        line = await loop.run_in_executor(None, sys.stdin.readline)  # "report"
        cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
        probe.cancel()
        await server.wait_idle()
        for peer in server_calls:
            offsets.extend(peer.track.pacing_offsets())
        ended = server.statistics().ended
        pace = np.asarray(offsets, dtype=np.float64)
        stages = _stages([e for c in server_calls_sessions for e in c.events])
        print(json.dumps({
            "cpu": cpu, "wall": wall,
            "pacing_p50_ms": float(np.percentile(pace, 50)) if pace.size else float("nan"),
            "pacing_p99_ms": float(np.percentile(pace, 99)) if pace.size else float("nan"),
            "reply_frames": [s.outbound.reply_frames for s in ended],
            "late_frames": sum(s.outbound.late_frames for s in ended),
            "frames_sent": sum(s.outbound.frames_sent for s in ended),
            "stale": sum(s.outbound.stale_samples for s in ended),
            "frames_in": sum(s.frames_in for s in ended),
            "turns": sum(1 for c in server_calls_sessions for e in c.events
                         if e.kind == "turn_committed"),
            "stages": stages,
            "loop_lag_p50_ms": float(np.percentile(lags, 50)) if lags else float("nan"),
            "loop_lag_p99_ms": float(np.percentile(lags, 99)) if lags else float("nan"),
            "loop_lag_max_ms": max(lags, default=float("nan")),
        }), flush=True)
        del line


LAG_PROBE = 0.01  # seconds the loop-lag probe sleeps between wake-ups


async def _loop_lag(lags: list[float]) -> None:
    """How late the server's loop wakes a 10 ms sleep (ms), for as long as it runs."""
    while True:
        due = time.monotonic() + LAG_PROBE
        await asyncio.sleep(LAG_PROBE)
        lags.append((time.monotonic() - due) * 1000.0)


def _stages(events: list[Any]) -> dict[str, list[float]]:
    """Per turn, on the server: speech end → transcript, → first reply text, → first reply
    sample taken for the wire (ms, from each turn's ``TurnMetrics``)."""
    metrics = [e for e in events if e.kind == "turn_metrics"]
    return {
        "stt": [m.transcript_ms for m in metrics],
        "text": [v for m in metrics if (v := m.first_text_ms) is not None],
        "audio": [v for m in metrics if (v := m.first_audio_ms) is not None],
    }


# -- the callers (this process) ---------------------------------------------------------


async def _one_call(base: str, token: str, speech: Any, limit: float,
                    turns: int = 1, offset: float = 0.0) -> dict[str, Any]:
    from voxflow_adapters.webrtc.client import LoopbackCaller
    from voxflow_voice.audio import resample

    caller = LoopbackCaller(base, token)
    began = time.monotonic()
    loud = np.flatnonzero(np.abs(resample(speech.samples(), speech.sample_rate, 48_000))
                          >= 10 ** (-40 / 20))
    last_loud_frame = int(loud[-1]) // 960 if loud.size else 0
    v2v: list[float] = []
    try:
        await caller.connect()
        setup = time.monotonic() - began
        await asyncio.sleep(offset)  # --spread: this caller's first question comes later
        for turn in range(turns):
            if turn:
                await asyncio.sleep(0.8)
            start = caller.say(speech)
            def answered(t: int = turn) -> bool:
                return len(caller.of_type("reply_done")) > t

            await caller.wait_for(answered, within=limit, what="reply_done")
            frame = start + last_loud_frame
            if frame < len(caller.mic.sent_at):
                spoke = caller.mic.sent_at[frame]
                heard = [f.at for f in caller.frames if f.audible and f.at > spoke]
                if heard:
                    v2v.append((min(heard) - spoke) * 1000.0)
        await asyncio.sleep(0.2)  # the last frames in flight
        lost = received = 0
        for report in (await caller._pc.getStats()).values():
            if getattr(report, "type", "") == "inbound-rtp":
                lost += report.packetsLost
                received += report.packetsReceived
        return {"ok": True, "setup": setup, "lost": lost, "received": received,
                "audible": caller.audible_frames(), "seconds": time.monotonic() - began,
                "v2v": v2v}
    except (TimeoutError, Exception) as exc:
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}",
                "seconds": time.monotonic() - began}
    finally:
        await caller.aclose()


async def _run(n: int, speech: Any, limit: float, *, real: bool = False,
               turns: int = 1, spread: float = 0.0, scheduling: bool = False,
               admit_all: bool = False) -> dict[str, Any]:
    child = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--serve-child", "--models", "real" if real else "instant",
        "--scheduler", "on" if scheduling else "off",
        *(("--admit-all",) if admit_all else ()),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    assert child.stdin is not None and child.stdout is not None
    try:
        hello = json.loads(await child.stdout.readline())
        base = f"http://127.0.0.1:{hello['port']}"
        child.stdin.write(b"start\n")
        await child.stdin.drain()
        callers_cpu0 = time.process_time()
        results = await asyncio.gather(*(_one_call(base, hello["token"], speech, limit,
                                                   turns, spread * i / n) for i in range(n)))
        callers_cpu = time.process_time() - callers_cpu0
        child.stdin.write(b"report\n")
        await child.stdin.drain()
        report = json.loads(await child.stdout.readline())
    finally:
        child.stdin.close()
        async with asyncio.timeout(30):
            await child.wait()
    ok = [r for r in results if r["ok"]]
    v2v = [ms for r in ok for ms in r["v2v"]]
    call_seconds = sum(r["seconds"] for r in results)
    return {
        "calls": n, "completed": len(ok),
        "errors": sorted({r["error"] for r in results if not r["ok"]}),
        "packets_lost": sum(r["lost"] for r in ok),
        "packets_received": sum(r["received"] for r in ok),
        "pacing_p50_ms": report["pacing_p50_ms"],
        "pacing_p99_ms": report["pacing_p99_ms"],
        "late_frames_pct": 100.0 * report["late_frames"] / max(1, report["frames_sent"]),
        "cpu_per_call_pct": 100.0 * report["cpu"] / max(1e-9, call_seconds),
        "prior_pct": 100.0 * hello["prior"],
        "setup_ms": 1000.0 * statistics.median(r["setup"] for r in ok) if ok else float("nan"),
        "stale_samples": report["stale"],
        "frames_in": report["frames_in"], "turns": report["turns"],
        "v2v_p50_ms": float(np.percentile(v2v, 50)) if v2v else float("nan"),
        "v2v_p95_ms": float(np.percentile(v2v, 95)) if v2v else float("nan"),
        "callers_cpu_per_call_pct": 100.0 * callers_cpu / max(1e-9, call_seconds),
        "loop_lag_p50_ms": report["loop_lag_p50_ms"],
        "loop_lag_p99_ms": report["loop_lag_p99_ms"],
        "loop_lag_max_ms": report["loop_lag_max_ms"],
        **{f"{k}_{q}_ms": float(np.percentile(v, q)) if v else float("nan")
           for k, v in report["stages"].items() for q in (50, 95)},
        "v2v_by_turn": [r["v2v"] for r in ok],
    }


def _speech() -> Any:
    from voxflow_voice.audio import AudioChunk
    from voxflow_voice.engines.tts import DETERMINISTIC_TTS_SETTINGS, PiperTts

    tts = PiperTts(settings=DETERMINISTIC_TTS_SETTINGS)
    samples = np.concatenate([np.asarray(s.samples, np.float32) for s in tts.synthesize(TEXT)])
    return AudioChunk.from_float(samples, tts.sample_rate)


def _median(runs: list[dict[str, Any]], key: str) -> float:
    return float(statistics.median(r[key] for r in runs))


async def _main(calls: list[int], runs: int, limit: float, *, real: bool = False,
                turns: int = 1, spread: float = 0.0, scheduling: bool = False,
                admit_all: bool = False) -> None:
    speech = _speech()
    print(f"models: {'real (tiny.en, Piper, Silero)' if real else 'instant'}, {turns} "
          f"turn(s) per caller, first questions spread over {spread:g} s, model scheduler "
          f"{'on' if scheduling else 'off'}, admission "
          f"{'admitting all' if admit_all else 'as configured'}; "
          f"load average {os.getloadavg()[0]:.1f}")
    print(f"{'calls':>5} {'turns':>6} {'done':>6} {'lost':>6} {'received':>9} {'pace p50':>9} "
          f"{'pace p99':>9} {'late %':>7} {'CPU/call':>9} {'setup':>8} {'stale':>6} "
          f"{'v2v p50':>8} {'v2v p95':>8}")
    for n in calls:
        results = [await _run(n, speech, limit, real=real, turns=turns, spread=spread,
                              scheduling=scheduling, admit_all=admit_all)
                   for _ in range(runs)]
        errors = sorted({e for r in results for e in r["errors"]})
        row = {k: _median(results, k) for k in (
            "turns", "completed", "packets_lost", "packets_received", "pacing_p50_ms",
            "pacing_p99_ms", "late_frames_pct", "cpu_per_call_pct", "setup_ms",
            "stale_samples", "v2v_p50_ms", "v2v_p95_ms", "callers_cpu_per_call_pct",
            "loop_lag_p50_ms", "loop_lag_p99_ms", "loop_lag_max_ms", "prior_pct",
            *(f"{k}_{q}_ms" for k in ("stt", "text", "audio") for q in (50, 95)))}
        print(f"{n:>5} {row['turns']:>6.0f} {row['completed']:>4.0f}/{n:<1} "
              f"{row['packets_lost']:>6.0f} "
              f"{row['packets_received']:>9.0f} {row['pacing_p50_ms']:>7.2f}ms "
              f"{row['pacing_p99_ms']:>7.2f}ms {row['late_frames_pct']:>6.2f}% "
              f"{row['cpu_per_call_pct']:>8.1f}% {row['setup_ms']:>6.0f}ms "
              f"{row['stale_samples']:>6.0f} {row['v2v_p50_ms']:>6.0f}ms "
              f"{row['v2v_p95_ms']:>6.0f}ms", flush=True)
        for error in errors:
            print(f"      error: {error}")
        print(f"      server, speech end -> transcript {row['stt_50_ms']:.0f}/"
              f"{row['stt_95_ms']:.0f}, -> first text {row['text_50_ms']:.0f}/"
              f"{row['text_95_ms']:.0f}, -> first reply frame {row['audio_50_ms']:.0f}/"
              f"{row['audio_95_ms']:.0f} ms (p50/p95); loop lag p50/p99/max "
              f"{row['loop_lag_p50_ms']:.1f}/{row['loop_lag_p99_ms']:.1f}/"
              f"{row['loop_lag_max_ms']:.0f} ms; callers' CPU "
              f"{row['callers_cpu_per_call_pct']:.1f}% per call")
        print(f"      admission's prior derived from the server's warm-up "
              f"{row['prior_pct']:.1f}% of a core per call, the server's CPU per call "
              f"measured {row['cpu_per_call_pct']:.1f}%")
        print("      v2v by caller and turn (ms): " + "; ".join(
            " ".join(f"{ms:.0f}" for ms in turns) for turns in results[0]["v2v_by_turn"]))
        figure(f"{n} calls: pacing p99", row["pacing_p99_ms"], "ms", target="<= 20")
        figure(f"{n} calls: CPU per call", row["cpu_per_call_pct"], "% of a core")
        figure(f"{n} calls: packets lost", row["packets_lost"], "packets", target="0")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"(machine load average {load:.1f} on {os.cpu_count()} CPUs at the end)")
    print(f"(medians of {runs} runs; turns: user turns the server committed; done: callers "
          f"that heard the whole reply within {limit:g} s; "
          "lost/received: RTP packets at the callers, all calls; "
          "pace: outbound frame produced after its 20 ms deadline; CPU: the server "
          "process's, per second of call)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, nargs="+", default=[1, 10, 50])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--call-limit", type=float, default=CALL_LIMIT,
                        help="seconds a caller waits for its reply (default: %(default)s)")
    parser.add_argument("--models", choices=("instant", "real"), default="instant",
                        help="instant STT/TTS (the transport alone) or the real models "
                        "(the WebRTC capacity table; default: %(default)s)")
    parser.add_argument("--turns", type=int, default=1,
                        help="questions each caller asks (default: %(default)s)")
    parser.add_argument("--spread", type=float, default=0.0,
                        help="seconds over which the callers' first questions are spread "
                        "evenly (0: all at once, every turn of every call ending together; "
                        "capacity.py spreads them over one cycle; default: %(default)s)")
    parser.add_argument("--scheduler", choices=("on", "off"), default="off",
                        help="the real models on the deadline-aware ModelScheduler "
                        "(VoiceEngines.load(scheduling=True)) or not (default: %(default)s)")
    parser.add_argument("--admit-all", action="store_true",
                        help="admission neither counts other processes' CPU nor starts "
                        "from its prior (default: the prior derived from the server's "
                        "warm-up, call_cost.derived_call_cost with WEBRTC_CALLER, as "
                        "voxflow serve does; every run prints it): every call is admitted "
                        "(what the server holds on a shared machine; capacity.py --offered "
                        "measures admission)")
    parser.add_argument("--serve-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_child:
        asyncio.run(_serve_child(args.models == "real", args.scheduler == "on",
                                 args.admit_all))
        return
    if any(n < 1 for n in args.calls) or args.runs < 1 or args.turns < 1:
        parser.error("--calls, --runs and --turns must be >= 1, such as --calls 4 8 --runs 1")
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    asyncio.run(_main(args.calls, args.runs, args.call_limit, real=args.models == "real",
                      turns=args.turns, spread=args.spread, scheduling=args.scheduler == "on",
                      admit_all=args.admit_all))


if __name__ == "__main__":
    main()
