"""What OpenTelemetry tracing costs a turn and a call, on against off.

Run: ``uv run python benchmarks/tracing_overhead.py [--rounds 5] [--turns 200]``

Tracing on is the SDK's TracerProvider with a BatchSpanProcessor, as
``OTEL_TRACES_EXPORTER=otlp`` sets it up, whose exporter drops the spans (the OTLP
request itself runs on the processor's thread, off the turn's path; what is measured is
what the turn pays). Off is the default: no provider, every helper returns at once.
Rounds alternate off/on, so a drift of the machine's load favours neither. Printed,
medians (nothing asserted: the machine is shared):

* **text turn**: ``handle_turn`` of a flow whose handler runs an Agent with a tool on
  real litellm (``mock_response``): 6 spans a turn (turn, handler, agent, 2 LLM calls,
  tool);
  per round the median of ``--turns`` turns off and as many on, alternating turn by
  turn, then the median over the rounds, off and on, and on minus off;
* **voice call**: a simulated call in real time (``run_call`` on the monotonic clock,
  the real models: tiny.en, Piper, Silero; a litellm ``mock_response`` LLM), 2 turns:
  the voice to voice of its turns as the session measured them (last speech sample →
  first reply sample played), and the process's CPU seconds per call, off and on;
* **spans per call** and **cost per span**: what a call's trace holds, and the time one
  span costs on its own (start, 3 attributes, end, through the processor). Of a voice
  turn's spans, three are opened or closed before its first reply sample is played (the
  turn, the handler, the LLM call); the turn's parts are written once it settles, off
  the voice-to-voice path.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1]))  # the flow test_tracing traces

import opentelemetry.trace as ot
from _figures import figure
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SpanExporter,
    SpanExportResult,
)

from tests.test_tracing import _shop
from voxflow import LLM, ConversationConfig, Flow, telemetry
from voxflow.turns import TurnState


class Dropping(SpanExporter):
    """Counts the spans and drops them."""

    def __init__(self) -> None:
        self.count = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.count += len(spans)
        return SpanExportResult.SUCCESS


_provider: TracerProvider | None = None
_exporter = Dropping()


def tracing(on: bool) -> None:
    global _provider
    if on and _provider is None:
        _provider = TracerProvider()
        _provider.add_span_processor(BatchSpanProcessor(_exporter))
    ot._TRACER_PROVIDER = _provider if on else None  # type: ignore[attr-defined]
    assert telemetry.tracing_enabled() is on


def text_turns(n: int, first: bool) -> dict[bool, float]:
    """The median time (s) of ``n`` text turns off and ``n`` on, each on a fresh flow,
    off and on alternating turn by turn (``first`` first), so the machine's load, which
    changes by the second here, weighs on both alike."""
    times: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(n):
        for on in (first, not first):
            tracing(on)
            flow = _shop()
            began = time.perf_counter()
            flow.handle_turn("Where is order 417?")
            times[on].append(time.perf_counter() - began)
    return {on: statistics.median(t) for on, t in times.items()}


async def voice_call(engines: Any) -> tuple[list[float], float]:
    from voxflow_adapters.testkit.scenario import run_call
    from voxflow_adapters.testkit.script import CallScript

    from voxflow.clock import MonotonicClock

    @ConversationConfig(llm=LLM("openai/gpt-4o-mini",
                                mock_response="Two teas and a cake, coming right up."))
    class Tearoom(Flow[TurnState]):
        pass

    # at fixed times (a reactive step misses its deadline on an overloaded machine)
    script = CallScript().user_says(0.3, "Two teas, please.").user_says(7.0, "And a cake.")
    cpu = time.process_time()
    call = await run_call(Tearoom(), script, engines, clock=MonotonicClock(), tail=6.0)
    cpu = time.process_time() - cpu
    v2v = [m.voice_to_voice_ms for m in call.metrics() if m.voice_to_voice_ms is not None]
    return v2v, cpu


def span_cost(n: int = 20_000) -> float:
    """Seconds per span: start, three attributes, end (tracing on)."""
    began = time.perf_counter()
    for i in range(n):
        span = telemetry.start_span("x", {"a": i, "b": "x", "c": True})
        assert span is not None
        span.end()
    return (time.perf_counter() - began) / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--turns", type=int, default=200, help="text turns per round")
    parser.add_argument("--skip-voice", action="store_true")
    args = parser.parse_args()
    logging.getLogger("LiteLLM").setLevel(logging.ERROR)
    text: dict[bool, list[float]] = {False: [], True: []}
    v2v: dict[bool, list[float]] = {False: [], True: []}
    cpu: dict[bool, list[float]] = {False: [], True: []}
    engines = None
    if not args.skip_voice:
        from voxflow_voice.engines import VoiceEngines

        engines = VoiceEngines.load()
    text_turns(20, False)  # warm: litellm imported, caches filled, the SDK loaded
    for r in range(args.rounds):
        for on, median in text_turns(args.turns, r % 2 == 1).items():
            text[on].append(median)
        for on in ((False, True) if r % 2 == 0 else (True, False)):
            tracing(on)
            if engines is not None:
                turns, seconds = asyncio.run(voice_call(engines))
                v2v[on] += turns
                cpu[on].append(seconds)
        print(f"round {r + 1}: text turn off {text[False][-1] * 1e3:.2f} ms, "
              f"on {text[True][-1] * 1e3:.2f} ms", flush=True)
    tracing(True)
    before = _exporter.count
    if engines is not None:
        asyncio.run(voice_call(engines))
    assert _provider is not None
    _provider.force_flush()
    per_call = _exporter.count - before
    per_span = span_cost()
    tracing(False)

    def med(values: list[float]) -> float:
        return statistics.median(values) if values else float("nan")

    off, on = med(text[False]) * 1e3, med(text[True]) * 1e3
    print(f"\ntext turn (6 spans): off {off:.2f} ms, on {on:.2f} ms, "
          f"on - off {on - off:+.3f} ms (median of {args.rounds} rounds x {args.turns})")
    figure("text turn, tracing on - off", round(on - off, 3), "ms")
    if engines is not None:
        a, b = med(v2v[False]), med(v2v[True])
        print(f"voice to voice (real time, {len(v2v[False])} vs {len(v2v[True])} turns): "
              f"off {a:.0f} ms, on {b:.0f} ms, on - off {b - a:+.0f} ms")
        c, d = med(cpu[False]), med(cpu[True])
        print(f"CPU per call (2 turns): off {c:.2f} s, on {d:.2f} s, "
              f"on - off {(d - c) / c * 100:+.1f} %")
        print(f"spans per call: {per_call} (a call, 2 turns and their parts)")
        figure("voice to voice, tracing on - off", round(b - a, 1), "ms", target="<= 2")
        figure("CPU per call, tracing on - off", round((d - c) / c * 100, 2), "%",
               target="<= 1")
    print(f"one span: {per_span * 1e6:.1f} us")
    figure("one span", round(per_span * 1e6, 1), "us")


if __name__ == "__main__":
    main()
