"""Voice model figures on this machine: load times, STT latency, TTS speed, VAD cost.

Run: ``uv run python benchmarks/voice_models.py [--runs N] [--quick]``

Prints medians of several runs (no figure is asserted anywhere; the machine is shared):

* model load times (tiny.en, base if the ``[base]`` extra is installed, the Piper voice
  with and without its alignment output, Silero v6);
* STT latency of a 2 s utterance for tiny.en (and base) across the settings that matter
  on CPU: ``cpu_threads`` 1 vs 2, greedy vs beam 5, with and without timestamps;
* TTS time to first chunk of a streamed sentence and its real-time factor;
* VAD cost per 32 ms frame, streamed one frame per call (Silero v6, energy);
* the STT wait after the end of a turn (audio fed in real time, 32 ms frames), direct vs
  speculative (:class:`EarlyTranscriber` starts on the pause, ``end_pad`` into the silence).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import time
from collections.abc import Callable

import numpy as np
from _figures import figure
from voxflow_voice import (
    DEFAULT_TURN_DETECTION,
    FRAME_SAMPLES,
    STT_SAMPLE_RATE,
    EarlyTranscriber,
    EnergyVad,
    PiperTts,
    SileroVad,
    SttSettings,
    TtsSettings,
    TurnDetector,
    UtterancePaused,
    UtteranceReady,
    WhisperStt,
    find_piper_voice,
    find_silero_vad,
    find_whisper_model,
    load_piper_voice,
    load_silero_session,
    load_whisper_model,
    resample,
    unload_models,
)
from voxflow_voice.engines.errors import ModelNotFoundError

from voxflow.ids import DeliveryId

UTTERANCE = "Please turn on the lights in the kitchen."
SENTENCE = "The weather tomorrow will be sunny, with a light breeze in the afternoon."


def median_time(fn: Callable[[], object], runs: int, warmup: int = 1) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def row(label: str, value: str) -> None:
    print(f"  {label:<58} {value}")
    match = re.match(r"\s*([0-9]+(?:\.[0-9]+)?)\s*(ms|µs|s|x)?", value)
    if match:
        figure(label, float(match.group(1)), match.group(2) or "")


def load_times(runs: int, have_base: bool) -> None:
    print("model load (median, cold cache each run)")
    tiny = find_whisper_model("tiny.en")

    def load(fn: Callable[[], object]) -> Callable[[], object]:
        def run() -> object:
            unload_models()
            return fn()

        return run

    row(
        "whisper tiny.en (int8, cpu)",
        f"{median_time(load(lambda: load_whisper_model(tiny)), runs, 0):.3f} s",
    )
    if have_base:
        base = find_whisper_model("base")
        row(
            "whisper base (int8, cpu)",
            f"{median_time(load(lambda: load_whisper_model(base)), runs, 0):.3f} s",
        )
    model, config = find_piper_voice()
    row(
        "piper voice + alignment output",
        f"{median_time(load(lambda: load_piper_voice(model, config)), runs, 0):.3f} s",
    )
    plain = median_time(load(lambda: load_piper_voice(model, config, alignments=False)), runs, 0)
    row("piper voice, plain", f"{plain:.3f} s")
    vad = find_silero_vad()
    row("silero v6 vad", f"{median_time(load(lambda: load_silero_session(vad)), runs, 0):.3f} s")
    unload_models()


def utterance_2s(tts: PiperTts) -> np.ndarray:
    samples = np.concatenate([s.samples for s in tts.synthesize(UTTERANCE)])
    audio = resample(samples, tts.sample_rate, STT_SAMPLE_RATE)[: 2 * STT_SAMPLE_RATE]
    return np.pad(audio, (0, 2 * STT_SAMPLE_RATE - audio.size))


def stt_latency(runs: int, audio: np.ndarray, have_base: bool, quick: bool) -> None:
    print(f"STT latency, {audio.size / STT_SAMPLE_RATE:.1f} s utterance (median of {runs})")
    variants: list[tuple[str, dict[str, object]]] = [
        ("greedy, no timestamps, 2 threads (default)", {}),
        ("greedy, no timestamps, 1 thread", {"cpu_threads": 1}),
    ]
    if not quick:
        variants += [
            ("greedy, with timestamps, 2 threads", {"without_timestamps": False}),
            ("beam 5, no timestamps, 2 threads", {"beam_size": 5}),
        ]
    models = ["tiny.en"] + (["base"] if have_base else [])
    for name in models:
        for label, options in variants:
            stt = WhisperStt(SttSettings(model=name, **options))  # type: ignore[arg-type]
            text = stt.transcribe_sync(audio)
            seconds = median_time(lambda stt=stt: stt.transcribe_sync(audio), runs)
            heard = text.text if text else "<nothing>"
            row(f"{name}: {label}", f"{seconds * 1000:6.0f} ms  {heard!r}")


async def _first_chunk(tts: PiperTts, text: str) -> float:
    start = time.perf_counter()
    async for _ in tts.stream(text, delivery_id=DeliveryId("measured"), segment_id=1):
        return time.perf_counter() - start
    return float("nan")


def tts_speed(runs: int) -> None:
    print(f"TTS, Piper bundled voice, 1 onnxruntime thread (median of {runs})")
    for label, settings in (
        ("with word timings", TtsSettings()),
        ("without word timings", TtsSettings(alignments=False)),
    ):
        tts = PiperTts(settings=settings)
        first_clause = "Sure,"
        asyncio.run(_first_chunk(tts, SENTENCE))
        ttfc_clause = statistics.median(
            asyncio.run(_first_chunk(tts, first_clause)) for _ in range(runs)
        )
        ttfc = statistics.median(asyncio.run(_first_chunk(tts, SENTENCE)) for _ in range(runs))
        samples = sum(s.samples.size for s in tts.synthesize(SENTENCE))
        synth = median_time(lambda tts=tts: list(tts.synthesize(SENTENCE)), runs)
        audio_seconds = samples / tts.sample_rate
        row(f"{label}: first chunk of {first_clause!r}", f"{ttfc_clause * 1000:6.0f} ms")
        row(
            f"{label}: first chunk of a {len(SENTENCE.split())}-word sentence",
            f"{ttfc * 1000:6.0f} ms",
        )
        row(
            f"{label}: real-time factor ({audio_seconds:.2f} s of audio)",
            f"{synth / audio_seconds:6.3f}  ({synth * 1000:.0f} ms)",
        )


def vad_cost(runs: int, audio: np.ndarray) -> None:
    frames = audio[: audio.size - audio.size % FRAME_SAMPLES].reshape(-1, FRAME_SAMPLES)
    print(f"VAD per 32 ms frame, one frame per call (median of {runs}, {len(frames)} frames)")
    for label, vad in (("silero v6", SileroVad()), ("energy", EnergyVad())):

        def run(vad: SileroVad | EnergyVad = vad) -> None:
            vad.reset()
            for frame in frames:
                vad.process_frames(frame.reshape(1, -1))

        per_frame = median_time(run, runs) / len(frames)
        row(label, f"{per_frame * 1e6:7.1f} µs  ({per_frame / 0.032 * 100:.2f}% of real time)")


async def _turn_wait(stt: WhisperStt, audio: np.ndarray, speculative: bool) -> float:
    """Seconds from the turn end (UtteranceReady) to its transcript, audio paced live."""
    detector = TurnDetector(SileroVad(), DEFAULT_TURN_DETECTION)
    early = EarlyTranscriber(stt)
    start = time.perf_counter()
    wait = float("nan")
    for index in range(0, audio.size, FRAME_SAMPLES):
        due = start + index / STT_SAMPLE_RATE
        await asyncio.sleep(max(0.0, due - time.perf_counter()))
        for event in detector.push(audio[index : index + FRAME_SAMPLES]):
            if isinstance(event, UtterancePaused) and speculative:
                early.paused(event)
            elif isinstance(event, UtteranceReady):
                ended = time.perf_counter()
                if speculative:
                    await early.final(event)
                else:
                    await stt.transcribe(event.audio)
                wait = time.perf_counter() - ended
    await early.aclose()
    return wait


def turn_wait(runs: int, audio: np.ndarray) -> None:
    settings = DEFAULT_TURN_DETECTION
    print(
        f"STT wait after the turn ends, tiny.en, live audio (median of {runs}; end of turn "
        f"{settings.end_of_turn_silence} s, pause at {settings.end_pad} s)"
    )
    stt = WhisperStt()
    live = np.concatenate(
        [np.zeros(8000, np.float32), audio, np.zeros(STT_SAMPLE_RATE, np.float32)]
    )
    for label, speculative in (("direct", False), ("speculative (EarlyTranscriber)", True)):
        waits = [asyncio.run(_turn_wait(stt, live, speculative)) for _ in range(runs)]
        row(label, f"{statistics.median(waits) * 1000:6.0f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="runs per figure (median)")
    parser.add_argument("--quick", action="store_true", help="fewer STT variants")
    args = parser.parse_args()
    runs = max(1, args.runs)
    try:
        find_whisper_model("base")
        have_base = True
    except ModelNotFoundError:
        have_base = False
    print(f"voice model benchmark: {os.cpu_count()} CPUs, base installed: {have_base}\n")
    load_times(max(3, runs // 2), have_base)
    tts = PiperTts()
    audio = utterance_2s(tts)
    print()
    stt_latency(runs, audio, have_base, args.quick)
    print()
    tts_speed(runs)
    print()
    vad_cost(runs, audio)
    print()
    turn_wait(max(3, runs // 2), audio)


if __name__ == "__main__":
    main()
