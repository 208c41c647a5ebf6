"""Does batching pay on this CPU? Whisper's encoder and decoder, and Piper, batched vs one by one.

Run: ``uv run python benchmarks/model_batching.py [--batch 4] [--repeats 5]``

Issue 21 asked for several calls' utterances in one Whisper encoder batch when they
finish together, and Piper synthesis of queued clauses in one run. This measures, with
the bundled models and the settings the pipeline uses (tiny.en int8 in the window fitted
to the longest utterance of the batch, 6 to 10 s, one Piper voice on one onnxruntime
thread), the time of ``--batch`` inputs done one by
one against the same inputs in one batch, median of ``--repeats`` rounds, interleaved
(so both see the same machine load). Nothing is asserted; the ratio decides whether a
batching path is worth keeping in :mod:`voxflow_voice.scheduler`.

* **Whisper encoder**: ``ctranslate2.models.Whisper.encode`` on log-mel features of
  ``--batch`` utterances (one fitted window), one call each vs one call with all;
* **Whisper decode**: ``generate`` (greedy, no timestamps) from the encoder output,
  one utterance per call vs all at once;
* **Piper**: ``--batch`` sentences through the voice's onnxruntime session, one run
  each vs one run with the phoneme ids padded to the longest.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

import numpy as np
from voxflow_voice.audio import STT_SAMPLE_RATE, resample
from voxflow_voice.engines.stt import WhisperStt
from voxflow_voice.engines.tts import DETERMINISTIC_TTS_SETTINGS, PiperTts

SENTENCES = (
    "Can you tell me what is on my calendar this afternoon?",
    "Please move my dentist appointment to Friday morning.",
    "What is the weather going to be like in Lisbon tomorrow?",
    "Send a message to Ada saying I will be ten minutes late.",
    "Set a timer for twelve minutes and remind me to stretch.",
    "How long does it take to drive to the harbour from here?",
    "Turn the living room lights down to forty percent, please.",
    "Read me the last three emails from the bank about the loan.",
)


def _median_seconds(fn: Callable[[], object], repeats: int) -> list[float]:
    out = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=4, help="inputs per batch (default: 4)")
    parser.add_argument("--repeats", type=int, default=5, help="rounds (default: 5)")
    args = parser.parse_args()
    if not 1 <= args.batch <= len(SENTENCES):
        parser.error(f"--batch must be 1 to {len(SENTENCES)}, such as --batch 4")
    if args.repeats < 1:
        parser.error("--repeats must be >= 1, such as --repeats 5")
    import ctranslate2

    tts = PiperTts(settings=DETERMINISTIC_TTS_SETTINGS)
    stt = WhisperStt()
    texts = SENTENCES[: args.batch]
    audio = []
    for text in texts:
        samples = np.concatenate([s.samples for s in tts.synthesize(text)])
        audio.append(resample(samples, tts.sample_rate, STT_SAMPLE_RATE))
    model = stt._model  # the shared faster-whisper model the pipeline uses
    # the pipeline's window for the longest of them: one batch has one width
    seconds = max(stt.settings.window_for(a.size / STT_SAMPLE_RATE) for a in audio)
    window = int(seconds * STT_SAMPLE_RATE)
    features = [model.feature_extractor(np.pad(a, (0, max(0, window - a.size)))[:window])
                for a in audio]
    feats = np.stack([f[:, : window // 160] for f in features]).astype(np.float32)
    whisper = model.model
    from faster_whisper.tokenizer import Tokenizer

    tokenizer = Tokenizer(model.hf_tokenizer, False, task="transcribe", language="en")
    tokens = [[*tokenizer.sot_sequence, tokenizer.no_timestamps]] * args.batch

    def encode_single() -> None:
        for i in range(args.batch):
            whisper.encode(ctranslate2.StorageView.from_array(feats[i : i + 1]), to_cpu=True)

    def encode_batch() -> None:
        whisper.encode(ctranslate2.StorageView.from_array(feats), to_cpu=True)

    encoded = whisper.encode(ctranslate2.StorageView.from_array(feats), to_cpu=True)
    singles = [whisper.encode(ctranslate2.StorageView.from_array(feats[i : i + 1]), to_cpu=True)
               for i in range(args.batch)]

    def decode_single() -> None:
        for i in range(args.batch):
            whisper.generate(singles[i], [tokens[i]], beam_size=1, max_length=64)

    def decode_batch() -> None:
        whisper.generate(encoded, tokens, beam_size=1, max_length=64)

    voice = tts._voice
    ids = [voice.phonemes_to_ids(ph) for text in texts for ph in tts.sentences(text)]
    session = voice.session
    scales = np.array([voice.config.length_scale, 0.0, 0.0], dtype=np.float32)
    names = {i.name for i in session.get_inputs()}
    outputs = [session.get_outputs()[0].name]

    def piper_run(batch: list[list[int]]) -> None:
        width = max(len(x) for x in batch)
        inputs = np.zeros((len(batch), width), dtype=np.int64)
        for row, x in enumerate(batch):
            inputs[row, : len(x)] = x
        feed = {"input": inputs, "input_lengths": np.array([len(x) for x in batch], np.int64),
                "scales": scales}
        if "sid" in names:
            feed["sid"] = np.zeros(len(batch), np.int64)
        session.run(outputs, feed)

    def piper_single() -> None:
        for x in ids:
            piper_run([x])

    def piper_batch() -> None:
        piper_run(ids)

    cases = {
        "whisper encoder": (encode_single, encode_batch),
        "whisper decode": (decode_single, decode_batch),
        "piper": (piper_single, piper_batch),
    }
    for single, batch in cases.values():  # warm up (first runs allocate)
        single()
        batch()
    times: dict[str, tuple[list[float], list[float]]] = {k: ([], []) for k in cases}
    for _ in range(args.repeats):
        for name, (single, batch) in cases.items():
            times[name][0].extend(_median_seconds(single, 1))
            times[name][1].extend(_median_seconds(batch, 1))
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"batching {args.batch} inputs, median of {args.repeats} rounds "
          f"(load average {load:.1f} on {os.cpu_count()} CPUs)")
    print(f"{'model':<16} {'one by one':>11} {'one batch':>10} {'batch / singles':>16}")
    for name, (single_t, batch_t) in times.items():
        one, together = statistics.median(single_t), statistics.median(batch_t)
        print(f"{name:<16} {one * 1000:>8.0f} ms {together * 1000:>7.0f} ms "
              f"{together / one:>15.2f}")


if __name__ == "__main__":
    main()
