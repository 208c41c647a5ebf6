"""What reply speech costs per second of audio, and what each way to spend less saves.

Run: ``uv run python benchmarks/tts_cost.py [--rounds 3]``; with the int8 model too:
``uv run --with onnx python benchmarks/tts_cost.py`` (onnxruntime's quantizer needs the
``onnx`` package, which voxflow does not depend on).

Issue 36, item 2. Everything is measured in this one process, so the ratios are honest:

* **Piper's onnxruntime session** (the bundled en_US-joe-medium, its alignment output
  added as voxflow loads it, the speech cache off, noise-free so every arm says the same
  samples): the shipped session (:func:`voxflow_voice.engines.models.load_piper_voice`:
  one intra-op and one inter-op thread) against onnxruntime's defaults (a thread per
  core), two intra-op threads without spinning, the basic graph optimizations only, no
  CPU memory arena, the parallel executor, and (with ``onnx`` importable) the voice
  quantized to int8 weights by ``onnxruntime.quantization.quantize_dynamic`` from the
  installed file, here, in a temporary directory. The arms take turns within each round
  on the same sentences (capacity's reply, the example assistant's story and lines).
  Printed per arm: CPU (``time.process_time``: all threads) per second of reply audio and
  the real-time factor (wall), medians over the rounds; Whisper base's WER on the arm's
  audio (each sentence transcribed alone, the STT benchmarks' normalizer); and how close
  its audio is to the shipped session's (the same voice: SNR of the difference, sample by
  sample, when the lengths agree).
* **Synthesis ahead of playout**: the story cut by a barge-in (``Teller``'s three
  sentences, four for Piper: the segmenter's short first clause is one; "Stop, please."
  at ``--cut`` seconds) on a deterministic virtual-time call,
  with ``VoiceSettings.synthesis_ahead`` 0 (the default: each sentence once the one
  before was handed to the transport), 3 s, and 60 s (no bound: the whole reply at
  once). Printed: the story's sentences synthesized, its seconds synthesized against
  those heard, and the process's CPU for the call.
* **The echo gate's reference**: the CPU it spends per second of reply keeping what was
  played (each 0.1 s chunk sent, receipted in 20 ms pieces, resampled to 16 kHz once per
  chunk; it was once per piece: 4.14 against 1.36 ms, measured side by side on Dec 4).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import logging
import os
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from _capacity_calls import REPLY
from _figures import figure
from _wer import normalize, word_errors
from voxflow_adapters.testkit.flows import ACKNOWLEDGEMENT, STORY, Teller
from voxflow_adapters.testkit.scenario import run_call
from voxflow_adapters.testkit.script import CallScript
from voxflow_voice.audio import STT_SAMPLE_RATE, ReplyChunk, resample
from voxflow_voice.engines import VoiceEngines
from voxflow_voice.engines._onnx_alignment import add_alignment_output
from voxflow_voice.engines.errors import ModelNotFoundError
from voxflow_voice.engines.models import find_piper_voice, load_piper_voice
from voxflow_voice.engines.stt import SttSettings, WhisperStt
from voxflow_voice.engines.tts import PiperTts, TtsSettings
from voxflow_voice.listen.echo import EchoGate
from voxflow_voice.session import VoiceSettings
from voxflow_voice.transport import PlaybackReceipt

from voxflow.examples.assistant import STORY as ASSISTANT_STORY
from voxflow.ids import DeliveryId
from voxflow.turns import TurnRunner

LINES = (
    *REPLY.split(". "),
    *ASSISTANT_STORY.split(". ")[:4],
    "Hello! How can I help you today?",
    "I can check an order, or tell you a story.",
    "Good news: order 417 has shipped. It arrives on Thursday.",
)
"""The replies each arm says: capacity's, the example story's first sentences, the
assistant's lines (about 37 s of audio)."""
QUIET = TtsSettings(cache_mb=0, noise_scale=0.0, noise_w_scale=0.0)
"""Noise-free and uncached: every arm synthesizes every sentence, the same samples."""
CUTS = (0.0, 3.0, 60.0)  # synthesis_ahead of the lookahead arms (s)


@dataclass(slots=True)
class Arm:
    """One way of running the voice, and what it measured."""

    name: str
    tts: PiperTts
    cpu: list[float] = field(default_factory=list)  # CPU s per s of audio, per round
    rtf: list[float] = field(default_factory=list)  # wall s per s of audio, per round
    audio: list[np.ndarray] = field(default_factory=list)  # per line, from the last round


def _session_arm(name: str, source: str | bytes, **options: object) -> Arm:
    """An arm whose voice runs on its own onnxruntime session (``options`` set on its
    ``SessionOptions``; ``intra``/``inter`` threads 1 unless given, ``spinning``)."""
    import onnxruntime
    from piper import PiperVoice
    from piper.config import PiperConfig

    _, config = find_piper_voice()
    opts = onnxruntime.SessionOptions()
    opts.log_severity_level = 3
    opts.intra_op_num_threads = int(options.pop("intra", 1))  # type: ignore[call-overload]
    opts.inter_op_num_threads = int(options.pop("inter", 1))  # type: ignore[call-overload]
    spinning = options.pop("spinning", None)
    if spinning is not None:
        opts.add_session_config_entry("session.intra_op.allow_spinning", str(spinning))
    for key, value in options.items():
        setattr(opts, key, value)
    session = onnxruntime.InferenceSession(source, sess_options=opts,
                                           providers=["CPUExecutionProvider"])
    with open(config, encoding="utf-8") as file:
        voice = PiperVoice(session=session, config=PiperConfig.from_dict(json.load(file)))
    tts = PiperTts(settings=QUIET)
    tts._voice = voice  # the same PiperTts (phonemes, chunks, timings) on another session
    return Arm(name, tts)


def arms(workdir: Path) -> list[Arm]:
    """The shipped session first, then each candidate."""
    import onnxruntime

    model, config = find_piper_voice()
    patched, _ = add_alignment_output(model.read_bytes())
    level = onnxruntime.GraphOptimizationLevel
    shipped = PiperTts(settings=QUIET)
    assert shipped._voice is load_piper_voice(model, config)  # the session voxflow loads
    out = [
        Arm("shipped: 1 intra-op, 1 inter-op thread", shipped),
        _session_arm("onnxruntime's default threads", patched, intra=0, inter=0),
        _session_arm("2 intra-op threads, no spinning", patched, intra=2, spinning=0),
        _session_arm("basic graph optimizations only", patched,
                     graph_optimization_level=level.ORT_ENABLE_BASIC),
        _session_arm("no CPU memory arena", patched, enable_cpu_mem_arena=False),
        _session_arm("parallel executor, 2 inter-op threads", patched, inter=2,
                     execution_mode=onnxruntime.ExecutionMode.ORT_PARALLEL),
    ]
    try:
        from onnxruntime.quantization import QuantType, quantize_dynamic
    except ImportError:  # the quantizer imports onnx
        print("int8 arm skipped: onnx is not installed (uv run --with onnx ...)")
        return out
    quantized = workdir / "int8.onnx"
    quiet = logging.getLogger().level
    logging.getLogger().setLevel(logging.ERROR)  # its shape-inference notes, per tensor
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            quantize_dynamic(str(model), str(quantized), weight_type=QuantType.QInt8)
    finally:
        logging.getLogger().setLevel(quiet)
    size = quantized.stat().st_size / model.stat().st_size
    out.append(_session_arm(f"int8 weights, dynamic ({size:.0%} of the file)",
                            add_alignment_output(quantized.read_bytes())[0]))
    return out


def measure(arm: Arm) -> None:
    """One round: every line, CPU and wall per second of audio."""
    cpu, wall = time.process_time(), time.perf_counter()
    audio = [np.concatenate([s.samples for s in arm.tts.synthesize(line)]) for line in LINES]
    seconds = sum(a.size for a in audio) / arm.tts.sample_rate
    arm.cpu.append((time.process_time() - cpu) / seconds)
    arm.rtf.append((time.perf_counter() - wall) / seconds)
    arm.audio = audio


def wer(stt: WhisperStt, arm: Arm) -> tuple[float, int, int]:
    """Whisper base's WER on the arm's audio, its errors and the reference words."""
    errors = words = 0
    for line, audio in zip(LINES, arm.audio, strict=True):
        heard = stt.transcribe_sync(resample(audio, arm.tts.sample_rate, STT_SAMPLE_RATE))
        reference = line.replace("harbour", "harbor")  # the voice is American
        errors += word_errors(reference, heard.text if heard is not None else "")
        words += len(normalize(reference))
    return errors / words, errors, words


def snr_db(reference: list[np.ndarray], audio: list[np.ndarray]) -> str:
    """The arm's audio against the shipped one's: SNR of the difference (dB; inf when
    identical), over the lines whose lengths agree."""
    same = [(r, a) for r, a in zip(reference, audio, strict=True) if r.size == a.size]
    if not same:
        return "lengths differ"
    signal = sum(float(np.sum(r.astype(np.float64) ** 2)) for r, _ in same)
    noise = sum(float(np.sum((r.astype(np.float64) - a) ** 2)) for r, a in same)
    snr = "identical" if noise == 0 else f"{10 * np.log10(signal / noise):.0f} dB"
    return snr + ("" if len(same) == len(reference) else f", {len(same)}/{len(reference)} lines")


@dataclass(frozen=True, slots=True)
class Cut:
    """The story cut by a barge-in, at one ``synthesis_ahead``."""

    ahead: float
    sentences: int  # the story's sentences synthesized
    synthesized: float  # seconds of story audio synthesized
    heard: float  # seconds of it heard
    cpu: float  # the process's CPU for the whole call


async def cut_story(engines: VoiceEngines, tts: PiperTts, ahead: float, at: float) -> Cut:
    """The story, "Stop, please." at ``at`` s; what the story's synthesis cost."""
    others = ("Tell me a story.", "Stop, please.", ACKNOWLEDGEMENT)  # the user's, the answer
    before = tts.statistics()
    cpu = time.process_time()
    script = CallScript().user_says(0.3, "Tell me a story.").user_says(at, "Stop, please.")
    call = await run_call(TurnRunner(Teller()), script, engines,
                          settings=VoiceSettings(synthesis_ahead=ahead))
    cpu = time.process_time() - cpu
    after = tts.statistics()
    (cut,) = call.of_kind("reply_interrupted")
    # The same voice also said the caller's two lines and the answer to the second,
    # whole: what is left is the story's.
    sentences = sum(len(tts.sentences(t)) for t in others)
    samples = sum(s.samples.size for t in others for s in tts.synthesize(t))
    return Cut(ahead, after.sentences - before.sentences - sentences,
               (after.samples - before.samples - samples) / tts.sample_rate,
               cut.heard_seconds, cpu)


def lookahead(cut_at: float) -> list[Cut]:
    tts = PiperTts(settings=QUIET)
    loaded = VoiceEngines.load(deterministic=True)
    engines = VoiceEngines(stt=loaded.stt, tts=tts, make_vad=loaded.make_vad)
    asyncio.run(cut_story(engines, tts, 0.0, cut_at))  # warm up the call path
    return [asyncio.run(cut_story(engines, tts, ahead, cut_at)) for ahead in CUTS]


def echo_reference(reply: np.ndarray, rate: int, rounds: int) -> float:
    """CPU seconds per second of reply the echo gate spends keeping its reference: each
    0.1 s chunk sent, then receipted in 20 ms pieces (the simulated transport's tick)."""
    chunk, piece, delivery = round(0.1 * rate), round(0.02 * rate), DeliveryId("reply")
    spent = []
    for _ in range(rounds):
        gate = EchoGate()
        cpu = time.process_time()
        for begin in range(0, reply.size, chunk):
            gate.sent(ReplyChunk.from_float(reply[begin:begin + chunk], rate, start_sample=begin,
                                            delivery_id=delivery, segment_id=1))
            for start in range(begin, min(begin + chunk, reply.size), piece):
                n = min(piece, begin + chunk - start, reply.size - start)
                gate.played(PlaybackReceipt(delivery, 1, start, n, rate, at=start / rate))
        spent.append((time.process_time() - cpu) / (reply.size / rate))
    return statistics.median(spent)


def median(values: list[float], scale: float = 1.0) -> float:
    return statistics.median(values) * scale


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cut", type=float, default=5.0,
                        help="when the caller says 'Stop, please.' over the story (s)")
    args = parser.parse_args()
    print(f"load before {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory() as tmp:
        candidates = arms(Path(tmp))
        for arm in candidates:  # warm up: first runs allocate
            arm.tts.synthesize(LINES[0]).__next__()
        for _ in range(args.rounds):
            for arm in candidates:
                measure(arm)
    try:
        stt: WhisperStt | None = WhisperStt(SttSettings(model="base"))
    except ModelNotFoundError as error:
        print(f"WER skipped: {error}")
        stt = None
    shipped = candidates[0]
    seconds = sum(a.size for a in shipped.audio) / shipped.tts.sample_rate
    print(f"Piper, {len(LINES)} lines ({seconds:.1f} s of audio), medians of {args.rounds} "
          f"rounds, arms alternating; load {os.getloadavg()[0]:.1f}")
    print(f"  {'session':<44} {'CPU ms/s':>8} {'vs':>6} {'RTF':>6} {'WER base':>15}  same voice")
    base_cpu = median(shipped.cpu)
    for arm in candidates:
        score = "n/a"
        if stt is not None:
            rate, errors, words = wer(stt, arm)
            score = f"{rate:.1%} ({errors}/{words})"
            figure(f"whisper base WER: {arm.name}", rate * 100, "%")
        cpu = median(arm.cpu, 1000.0)
        print(f"  {arm.name:<44} {cpu:8.1f} {median(arm.cpu) / base_cpu:5.2f}x "
              f"{median(arm.rtf):6.3f} {score:>15}  {snr_db(shipped.audio, arm.audio)}")
        figure(f"Piper CPU per s of reply: {arm.name}", cpu, "ms")
    reply = np.concatenate(shipped.audio)
    echo = echo_reference(reply, shipped.tts.sample_rate, args.rounds) * 1000.0
    print(f"Echo gate's reference of the {reply.size / shipped.tts.sample_rate:.1f} s of replies "
          f"(each chunk resampled to 16 kHz once): {echo:.2f} ms CPU per s of reply")
    figure("echo gate reference CPU per s of reply", echo, "ms")
    cuts = lookahead(args.cut)
    print(f"Story cut by 'Stop, please.' at {args.cut:.1f} s (story {len(STORY.split())} words, "
          f"4 sentences to Piper; virtual time); load {os.getloadavg()[0]:.1f}")
    print(f"  {'synthesis_ahead':<16} {'sentences':>9} {'synthesized':>11} {'heard':>7} "
          f"{'unheard':>8} {'call CPU':>9}")
    for cut in cuts:
        label = f"{cut.ahead:g} s" + (" (default)" if cut.ahead == 0 else "")
        print(f"  {label:<16} {cut.sentences:>9} {cut.synthesized:>9.1f} s {cut.heard:>5.1f} s "
              f"{cut.synthesized - cut.heard:>6.1f} s {cut.cpu:>7.2f} s")
        figure(f"story cut at {args.cut:g} s, synthesis_ahead {cut.ahead:g}: seconds "
               "synthesized unheard", cut.synthesized - cut.heard, "s")


if __name__ == "__main__":
    main()
