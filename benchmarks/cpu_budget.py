"""The CPU budget of one voice call, part by part, measured: do N calls fit in the cores?

Run: ``uv run python benchmarks/cpu_budget.py [--calls 20] [--repeat 5] [--json]``

Each part of the pipeline is timed alone in this process with the real models
(``VoiceEngines.load()``: tiny.en, Piper, Silero), CPU time (``time.process_time``:
all of the process's threads, so Whisper's CTranslate2 threads count), the median of
``--repeat`` runs:

* **Silero VAD**: one 32 ms frame at a time, as the turn detector feeds it (per second
  of call: 31.25 frames), on speech and on digital silence;
* **turn detector**: :class:`~voxflow_voice.listen.turn_detector.TurnDetector` pushed 20 ms
  frames of the question and its pause (Silero included; the rest is its Python);
* **Whisper tiny.en**: one transcription of the benchmark's question (about 3 s), with
  the session's settings, and how many transcriptions a turn takes in the real pipeline
  (early STT decodes a pause before it is confirmed);
* **Piper**: per second of reply audio (the capacity benchmark's reply, about 9 s),
  synthesized: capacity's engines keep no speech cache (every reply is said anew);
* **resampling**: per second of reply, Piper's 22,050 Hz to 16 kHz (the simulated
  transport) and to 48 kHz (WebRTC), and 48 kHz input to 16 kHz (the decimator: printed,
  not in WebRTC's sum since its receive path decodes Opus at 16 kHz);
* **Opus** (WebRTC only): per second of 20 ms frames, the reply track's encoder (the
  product's :class:`~voxflow_adapters.webrtc.opus.MonoOpusEncoder`: mono, a tone, so
  every frame is encoded) and the receive path's decoder (its
  :class:`~voxflow_adapters.webrtc.opus.MonoOpusDecoder`: libopus through ctypes,
  straight to 16 kHz mono);
* **a whole call** on the simulated transport (``benchmarks/capacity.py``'s dense
  workload, one call, real time): the process's CPU per second of call, and a **silent
  call** (a caller who says nothing for ``SILENT`` s).

The parts are then summed for the dense workload (a question every ~12.5 s, a 9 s
reply), the rest of the whole call (event loop, session, playout, Python) shown as
"other", and the total at ``--calls`` compared with the cores. Figures are CPU, not wall
time, so a loaded machine stretches them less than latencies, but it still does (cache,
frequency): quote the load average printed with them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np
from _capacity_calls import GAP, REPLY, load_engines, question_audio, run_calls
from _figures import figure
from voxflow_adapters.testkit.flows import Teller
from voxflow_adapters.testkit.scenario import run_call
from voxflow_adapters.testkit.script import CallScript
from voxflow_voice.audio import STT_SAMPLE_RATE, AudioChunk, resample
from voxflow_voice.decimator import Decimator
from voxflow_voice.engines import VoiceEngines
from voxflow_voice.engines.vad import FRAME_SAMPLES, SileroVad
from voxflow_voice.listen.turn_detector import TurnDetector

from voxflow.clock import MonotonicClock

SILENT = 8.0  # s: how long the silent caller is measured
OPUS_RATE = 48_000
FRAMES_PER_SECOND = STT_SAMPLE_RATE / FRAME_SAMPLES  # Silero frames per second of call


@dataclass(frozen=True, slots=True)
class Budget:
    """CPU per part (ms of CPU), measured alone, and the whole call."""

    vad_frame_speech_us: float  # per 32 ms frame of speech
    vad_frame_silence_us: float  # per frame of digital silence
    detector_ms_per_s: float  # TurnDetector per second of input (Silero included)
    stt_ms_per_turn: float  # one transcription of the question
    stt_per_turn: float  # transcriptions per committed turn in the real pipeline
    question_s: float
    piper_ms_per_s: float  # per second of reply audio
    reply_s: float
    resample_16k_ms_per_s: float  # 22,050 -> 16,000 per second of reply
    resample_48k_ms_per_s: float  # 22,050 -> 48,000 per second of reply
    decimate_ms_per_s: float  # 48,000 -> 16,000 per second of input
    opus_encode_ms_per_s: float
    opus_decode_ms_per_s: float
    call_pct: float  # whole call: process CPU / call seconds, % of a core
    call_cycle_s: float  # seconds of call per question (question + wait + reply + gap)
    silent_pct: float  # a silent call: % of a core
    loop_pct: float  # the event loop thread during the whole call, % of a core


def _median_cpu(work: Callable[[], object], repeat: int) -> float:
    """The median CPU seconds of ``work()`` over ``repeat`` runs (process CPU time)."""
    times = []
    for _ in range(repeat):
        start = time.process_time()
        work()
        times.append(time.process_time() - start)
    return statistics.median(times)


def _vad_frame_us(frames: np.ndarray, repeat: int) -> float:
    vad = SileroVad()

    def run() -> None:
        vad.reset()
        for frame in frames:
            vad.process_frames(frame.reshape(1, -1))

    return _median_cpu(run, repeat) / len(frames) * 1e6


def _detector_ms_per_s(audio: np.ndarray, repeat: int) -> float:
    step = STT_SAMPLE_RATE // 50  # 20 ms, as transports deliver

    def run() -> None:
        detector = TurnDetector(SileroVad())
        for i in range(0, audio.size - step + 1, step):
            detector.push(audio[i:i + step])

    return _median_cpu(run, repeat) * 1000.0 / (audio.size / STT_SAMPLE_RATE)


def _opus_ms_per_s(seconds: float, repeat: int) -> tuple[float, float]:
    from aiortc.jitterbuffer import JitterFrame
    from voxflow_adapters.webrtc.opus import MonoOpusDecoder, MonoOpusEncoder

    tone = (0.2 * np.sin(2 * np.pi * 220 * np.arange(int(seconds * OPUS_RATE)) / OPUS_RATE)
            * 32767).astype(np.int16)
    frames = [tone[i:i + 960].tobytes() for i in range(0, tone.size - 960 + 1, 960)]
    payloads: list[bytes] = []

    def encode() -> None:  # as the reply track encodes: mono, one packet per frame
        encoder = MonoOpusEncoder()
        payloads[:] = [encoder.encode(pcm) for pcm in frames]

    enc = _median_cpu(encode, repeat)

    def decode() -> None:  # as the receive path decodes: mono
        decoder = MonoOpusDecoder()
        for i, payload in enumerate(payloads):
            decoder.decode(JitterFrame(data=payload, timestamp=i * 960))

    dec = _median_cpu(decode, repeat)
    return enc * 1000.0 / seconds, dec * 1000.0 / seconds


async def _whole_call(engines: VoiceEngines) -> tuple[float, float, float, float]:
    """One call of 3 turns, real time: (transcriptions per turn, CPU %, s per question,
    the event loop thread's CPU %: ``time.thread_time`` of this thread, which runs it)."""
    from voice_latency import TimedStt, Timings

    timings = Timings()
    counting = VoiceEngines(stt=TimedStt(engines.stt, timings), tts=engines.tts,
                            make_vad=engines.make_vad, end_of_turn=engines.end_of_turn,
                            scheduler=engines.scheduler)
    loop0, wall0 = time.thread_time(), time.perf_counter()
    row, calls = await run_calls(counting, 1, 3)
    loop, wall = time.thread_time() - loop0, time.perf_counter() - wall0
    turns = max(1, row.committed)
    cycle = max(r.at for r in calls[0].tape.receipts) - calls[0].tape.start
    return (len(timings.stt) / turns, row.cpu_per_call_pct, cycle / 3 + GAP / 3,
            100.0 * loop / wall)


async def _silent_pct(engines: VoiceEngines, question: AudioChunk) -> float:
    """A caller who asks once after SILENT + 2 s: the CPU of the seconds before, % of a core."""
    marks: list[float] = []

    async def sample() -> None:
        await asyncio.sleep(1.0)
        marks.append(time.process_time())
        await asyncio.sleep(SILENT)
        marks.append(time.process_time())

    sampler = asyncio.create_task(sample())
    await run_call(Teller(story="Fine.", trigger=None),
                   CallScript().user_says(SILENT + 2.0, audio=question), engines,
                   clock=MonotonicClock(), tail=1.0)
    await sampler
    return 100.0 * (marks[1] - marks[0]) / SILENT


async def measure(repeat: int) -> Budget:
    """Every part, then the whole call (real time)."""
    engines, _ = await load_engines(scheduling=False)  # Piper without its speech cache
    question = question_audio(engines)
    q = question.samples()
    with_pause = np.concatenate([q, np.zeros(STT_SAMPLE_RATE, np.float32)])
    n = q.size // FRAME_SAMPLES
    speech_frames = q[:n * FRAME_SAMPLES].reshape(n, FRAME_SAMPLES)
    silence_frames = np.zeros((100, FRAME_SAMPLES), np.float32)
    vad_speech = _vad_frame_us(speech_frames, repeat)
    vad_silence = _vad_frame_us(silence_frames, repeat)
    detector = _detector_ms_per_s(with_pause, repeat)
    stt = engines.stt

    stt_s = _median_cpu(lambda: stt.transcribe_sync(question),  # type: ignore[attr-defined]
                        repeat)
    tts = engines.tts
    reply = np.concatenate([np.asarray(s.samples, np.float32) for s in tts.synthesize(REPLY)])
    reply_s = reply.size / tts.sample_rate
    piper = _median_cpu(lambda: list(tts.synthesize(REPLY)), max(1, repeat // 2))
    r16 = _median_cpu(lambda: resample(reply, tts.sample_rate, STT_SAMPLE_RATE), repeat)
    r48 = _median_cpu(lambda: resample(reply, tts.sample_rate, OPUS_RATE), repeat)
    mic48 = resample(with_pause, STT_SAMPLE_RATE, OPUS_RATE)

    def decimate() -> None:
        d = Decimator(OPUS_RATE, STT_SAMPLE_RATE)
        for i in range(0, mic48.size - 960 + 1, 960):
            d.process(mic48[i:i + 960])

    dec = _median_cpu(decimate, repeat) * 1000.0 / (mic48.size / OPUS_RATE)
    opus_enc, opus_dec = _opus_ms_per_s(5.0, repeat)
    stt_per_turn, call_pct, cycle, loop_pct = await _whole_call(engines)
    silent = await _silent_pct(engines, question)
    return Budget(
        vad_frame_speech_us=vad_speech, vad_frame_silence_us=vad_silence,
        detector_ms_per_s=detector, stt_ms_per_turn=stt_s * 1000.0,
        stt_per_turn=stt_per_turn, question_s=question.duration,
        piper_ms_per_s=piper * 1000.0 / reply_s, reply_s=reply_s,
        resample_16k_ms_per_s=r16 * 1000.0 / reply_s,
        resample_48k_ms_per_s=r48 * 1000.0 / reply_s, decimate_ms_per_s=dec,
        opus_encode_ms_per_s=opus_enc, opus_decode_ms_per_s=opus_dec,
        call_pct=call_pct, call_cycle_s=cycle, silent_pct=silent, loop_pct=loop_pct,
    )


def parts(b: Budget, *, webrtc: bool) -> list[tuple[str, float]]:
    """% of a core per call on the dense workload, part by part (one question per cycle)."""
    cycle = b.call_cycle_s
    reply_share = b.reply_s / cycle
    out = [
        ("Silero VAD (every frame)", b.vad_frame_speech_us * FRAMES_PER_SECOND / 1e4),
        ("turn detector Python", max(0.0, b.detector_ms_per_s / 10.0
                                     - b.vad_frame_speech_us * FRAMES_PER_SECOND / 1e4)),
        ("Whisper tiny.en", b.stt_ms_per_turn * b.stt_per_turn / cycle / 10.0),
        ("Piper", b.piper_ms_per_s * reply_share / 10.0),
        ("resample reply", (b.resample_48k_ms_per_s if webrtc else b.resample_16k_ms_per_s)
         * reply_share / 10.0),
    ]
    if webrtc:  # (the input is decoded at 16 kHz: no decimator)
        out += [("Opus decode (input)", b.opus_decode_ms_per_s / 10.0),
                ("Opus encode (output)", b.opus_encode_ms_per_s / 10.0)]
    return out


def report(b: Budget, calls: int, load: tuple[float, float]) -> None:
    print(f"CPU budget of one call (process CPU, median of parts measured alone); "
          f"load average {load[0]:.1f} -> {load[1]:.1f} on {os.cpu_count()} CPUs")
    print(f"  Silero: {b.vad_frame_speech_us:.0f} us per 32 ms frame of speech, "
          f"{b.vad_frame_silence_us:.0f} us of digital silence; turn detector "
          f"{b.detector_ms_per_s:.1f} ms per s of input (Silero included)")
    print(f"  Whisper: {b.stt_ms_per_turn:.0f} ms CPU per {b.question_s:.1f} s question, "
          f"{b.stt_per_turn:.2f} transcriptions per turn in the pipeline")
    print(f"  Piper: {b.piper_ms_per_s:.0f} ms per s of reply ({b.reply_s:.1f} s reply); "
          f"resample 22.05->16 kHz {b.resample_16k_ms_per_s:.2f}, ->48 kHz "
          f"{b.resample_48k_ms_per_s:.2f}, decimate 48->16 kHz {b.decimate_ms_per_s:.2f} "
          "ms per s")
    print(f"  Opus: encode {b.opus_encode_ms_per_s:.1f}, decode {b.opus_decode_ms_per_s:.1f} "
          "ms per s of audio")
    print(f"dense workload: a {b.question_s:.1f} s question every {b.call_cycle_s:.1f} s, "
          f"{b.reply_s:.1f} s reply; % of one core per call:")
    sums = {}
    for webrtc in (False, True):
        rows = parts(b, webrtc=webrtc)
        known = sum(v for _, v in rows)
        if not webrtc:
            rows.append(("other (session, event loop, playout): whole call - parts",
                         b.call_pct - known))
            other = b.call_pct - known
        else:
            rows.append(("other (as simulated)", other))
        total = sum(v for _, v in rows)
        sums[webrtc] = total
        print(f"  {'WebRTC' if webrtc else 'simulated'} transport:")
        for name, value in rows:
            print(f"    {name:<58} {value:6.2f} %")
        print(f"    {'total':<58} {total:6.2f} %  -> {calls} calls: {total * calls:.0f} % "
              f"of {100 * (os.cpu_count() or 1)} %")
    print(f"  whole call measured (simulated, 1 call, real time): {b.call_pct:.1f} %, "
          f"of it the event loop thread {b.loop_pct:.1f} % (the caller's simulation "
          f"included); a silent call: {b.silent_pct:.2f} %")
    cores = os.cpu_count() or 1
    models = sum(v for name, v in parts(b, webrtc=False)
                 if name.startswith(("Silero", "Whisper", "Piper")))
    figure("models alone: CPU per dense call", models, "% of a core")
    print(f"  the models alone (Silero, Whisper, Piper): {models:.2f} % per call -> "
          f"{calls} calls: {models * calls:.0f} % of {100 * cores} %")
    for webrtc, total in sums.items():
        name = "WebRTC" if webrtc else "simulated"
        figure(f"{name}: CPU per dense call", total, "% of a core",
               target=f"<= {100 * cores / calls:.1f} for {calls} calls")
        print(f"  {name}: {calls} calls need {total * calls / 100:.2f} cores; "
              f"fits {int(100 * cores // total)} calls at 100 % of {cores} cores; "
              f"a call must cost <= {100 * cores / calls:.1f} % for {calls}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20,
                        help="calls to size the budget for (default: %(default)s)")
    parser.add_argument("--repeat", type=int, default=5,
                        help="runs of each part, median taken (default: %(default)s)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    if args.calls < 1 or args.repeat < 1:
        parser.error("--calls and --repeat must be >= 1, such as --calls 20 --repeat 5")
    load0 = os.getloadavg()[0]
    budget = asyncio.run(measure(args.repeat))
    load1 = os.getloadavg()[0]
    if args.json:
        print(json.dumps({**asdict(budget), "load_average": [load0, load1],
                          "cpus": os.cpu_count()}))
        return
    report(budget, args.calls, (load0, load1))


if __name__ == "__main__":
    main()
