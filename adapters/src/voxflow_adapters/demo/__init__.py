"""``voxflow demo``: a complete voice call, offline, on the bundled models.

The example assistant (``examples/assistant.py``) answers a scripted caller through the
real pipeline: Silero VAD, Whisper tiny.en, the flow, Piper, fenced playback (or the
engines the settings name: ``--stt``, ``--tts``, ``--vad``, ``--end-of-turn``). The call
is printed live, summarized in a latency table, and written to an output folder as
``call.wav`` (user left, assistant right), ``events.jsonl`` and ``timeline.png``.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from voxflow_voice.engines import ChosenEngine, VoiceEngines
from voxflow_voice.session import VoiceSettings
from voxflow_voice.settings import VoiceSection

from voxflow.engine_spec import ENGINE_LABELS, EngineKind
from voxflow.settings import Settings

from .call import DEMO_LINES, DemoCall, default_clock, demo_script, run_demo_call
from .console import CallPrinter, latency_table, percentile
from .outputs import write_call_wav, write_events, write_timeline

__all__ = ["DEMO_LINES", "demo_figures", "engines_used", "load_engines", "run_voice_demo"]

_TIME_FIELDS = ("at", "onset_at", "end_at", "speech_end_at", "speech_end", "transcript_final",
                "first_text", "first_audio", "playback_end")


def load_engines(
    console: Console, *, deterministic: bool, settings: Settings | None = None
) -> VoiceEngines:
    """Load the engines ``settings`` name (STT, TTS, VAD and any end-of-turn model) with a
    progress bar (once per process)."""
    settings = settings if settings is not None else Settings.from_env()
    columns = (TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=False) as progress:
        judged = settings.section(VoiceSection).judges_end_of_turn
        task = progress.add_task("loading models", total=4 if judged else 3)
        begun: list[EngineKind] = []

        def loading(kind: EngineKind, chosen: ChosenEngine[Any]) -> None:
            if begun:
                progress.advance(task)
            begun.append(kind)
            progress.update(task, description=f"loading {chosen} ({ENGINE_LABELS[kind]})")

        engines = VoiceEngines.from_settings(settings, deterministic=deterministic,
                                             loading=loading)
        progress.update(task, completed=len(begun), description="models loaded")
    return engines


def engines_used(settings: Settings, engines: VoiceEngines) -> dict[str, dict[str, str]]:
    """Each engine the call ran on: the spec that chose it and the class it built
    (``{"stt": {"spec": "whisper:tiny.en", "engine": "voxflow_voice...WhisperStt"}}``)."""
    built: dict[EngineKind, object] = {"stt": engines.stt, "tts": engines.tts,
                                       "vad": engines.make_vad()}
    if engines.end_of_turn is not None:
        built["end_of_turn"] = engines.end_of_turn
    voice = settings.section(VoiceSection)
    return {kind: {"spec": str(voice.engine(kind)),
                   "engine": f"{type(engine).__module__}.{type(engine).__qualname__}"}
            for kind, engine in built.items()}


def _normalized(event: Any, origin: float) -> dict[str, Any]:
    data: dict[str, Any] = event.model_dump(mode="json")
    for name in _TIME_FIELDS:
        if isinstance(data.get(name), int | float):
            data[name] = round(data[name] - origin, 4)
    data["t"] = data["at"]
    return data


def _ms(end: float | None, start: float | None) -> float | None:
    """``end - start`` in ms to 0.1 ms (times are in s: their difference carries float
    noise, ``592.0000000000001``); None when either is unknown."""
    return None if end is None or start is None else round((end - start) * 1000, 1)


def demo_figures(call: DemoCall, events: list[dict[str, Any]]) -> tuple[list[dict[str, Any]],
                                                                         dict[str, Any]]:
    """Per-turn rows and the call's headline figures from the normalized events."""
    first_audio = {e["delivery_id"]: e["t"] for e in events if e["kind"] == "audio_started"}
    first_text: dict[str, float] = {}
    for e in events:
        if e["kind"] == "reply_text":
            first_text.setdefault(e["delivery_id"], e["t"])
    texts = {e["turn_id"]: e["text"] for e in events if e["kind"] == "turn_committed"}
    rows = []
    for e in events:
        if e["kind"] != "turn_metrics":
            continue
        d = e.get("delivery_id")
        audio = first_audio.get(d) if d else None
        # when the flow's text came (a speculative reply's text events are emitted later,
        # at the end of the turn, so the turn's own mark comes first)
        text_at = e.get("first_text")
        if text_at is None:
            text_at = first_text.get(d) if d else None
        rows.append({
            "turn_id": e["turn_id"], "text": texts.get(e["turn_id"], ""),
            "voice_to_voice_ms": _ms(audio, e["speech_end"]),
            "stt_ms": _ms(e["transcript_final"], e["speech_end"]),
            "reply_ms": _ms(text_at, e["transcript_final"]),
            "tts_ms": _ms(audio, text_at),
            "outcome": "interrupted" if e["interrupted"] else "played whole",
            "speculative": bool(e.get("speculative")),
        })
    v2v = [r["voice_to_voice_ms"] for r in rows if r["voice_to_voice_ms"] is not None]
    stops = [round(e["stop_latency_ms"], 1) for e in events
             if e["kind"] == "reply_interrupted" and e.get("stop_latency_ms") is not None]
    figures = {
        "turns": len(texts),  # (a turn the user went on with is one, answered twice)
        "voice_to_voice_median_ms": percentile(v2v, 0.5),
        "voice_to_voice_p90_ms": percentile(v2v, 0.9),
        "barge_in_stop_ms": percentile(stops, 0.5),
        "interruptions": len(stops),
        "announcements": sum(1 for e in events if e["kind"] == "delivery_settled"),
        "stale_samples": call.result.stale_samples(),
        "fenced_chunks": call.result.session.playback.statistics().chunks_dropped,
    }
    return rows, figures


def run_voice_demo(
    *,
    fast: bool = False,
    model: str | None = None,
    json_output: bool = False,
    out: str | Path = "voxflow-demo",
    script: str | Path | None = None,
    settings: Settings | None = None,
) -> int:
    """Run the demo call; returns the process exit code.

    ``settings`` supplies the STT model, the voice and the turn-taking times
    (``VOXFLOW_*`` variables, see :mod:`voxflow.settings`).
    """
    settings = settings if settings is not None else Settings.from_env()
    console = Console(stderr=json_output)
    out_dir = Path(out)
    wavs = None
    if script is not None:
        folder = Path(script)
        if not folder.is_dir():
            raise ValueError(f"--script must be a folder of WAV files, got {folder}")
        wavs = sorted(folder.glob("*.wav"))
        demo_script(wavs)  # checks the count before any model loads
    began = time.perf_counter()
    console.rule("[bold]voxflow demo[/]: a voice call on bundled models, offline")
    engines = load_engines(console, deterministic=fast, settings=settings)
    voice_settings = VoiceSettings.from_settings(settings)
    mode = "virtual audio time (--fast)" if fast else "real time"
    used = engines_used(settings, engines)
    console.print(f"[dim]caller script: {len(DEMO_LINES)} lines · clock: {mode} · "
                  f"replies: {'litellm ' + model if model else 'rule-based'} · engines: "
                  f"{escape(', '.join(e['spec'] for e in used.values()))}[/]")
    clock = default_clock(fast)
    printer = CallPrinter(console, origin=clock.now(), simulated=fast)

    async def main() -> DemoCall:
        printer.origin = clock.now()
        return await run_demo_call(engines, clock=clock, model=model, wavs=wavs,
                                   settings=voice_settings, on_event=printer,
                                   on_job=printer.job)

    call = asyncio.run(main())
    origin = call.result.tape.start
    events = [_normalized(e, origin) for e in call.result.events]
    for at, kind, status in call.job_log:
        events.append({"kind": "job", "job_kind": kind, "status": status,
                       "at": round(at - origin, 4), "t": round(at - origin, 4)})
    events.sort(key=lambda e: e["t"])
    rows, figures = demo_figures(call, events)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_call_wav(out_dir / "call.wav", call.result.tape)
    write_events(out_dir / "events.jsonl", events)
    write_timeline(out_dir / "timeline.png", call.result.tape, events)
    figures["wall_seconds"] = round(time.perf_counter() - began, 2)
    figures["outputs"] = {name: str(out_dir / name)
                          for name in ("call.wav", "events.jsonl", "timeline.png")}
    if json_output:
        print(json.dumps({"mode": "fast" if fast else "real-time",
                          "latencies": "simulated" if fast else "measured",
                          "engines": used, "turns": rows, "figures": figures}, indent=2))
    else:
        console.print(latency_table(rows, figures, simulated=fast))
        console.print(f"wrote [bold]{out_dir}/call.wav[/] (user left, assistant right), "
                      f"[bold]events.jsonl[/], [bold]timeline.png[/] "
                      f"in {figures['wall_seconds']:.1f} s")
    return 0
