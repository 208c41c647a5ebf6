"""How fast can Whisper's last decode be on this CPU? The floor under issue 33's 50 ms.

Run: ``uv run python benchmarks/stt_tail_decode.py [--models tiny.en base]
[--threads 1 2] [--windows 1 2 3 4 6 10] [--clips N] [--repeat R]``

The final transcript can only be ready once the last decode after the end of speech is
done, so the fastest possible decode of the audio after the committed words bounds the
"after end" column of ``stt_streaming.py`` from below. On the other-voices clips of
``stt_accuracy.py`` (``_stt_clips.build_other_voices``, the first ``--clips``), for each
model and CTranslate2 thread count, medians over clips x ``--repeat`` runs, in this one
process (one decode at a time):

* **mel**: faster-whisper's log-mel features of the window (its own feature extractor);
* **encoder**: the encoder pass alone over a window of W s (silence-padded audio), for
  each ``--windows`` W: the part of a decode that grows with the window;
* **tail**: :meth:`StreamingWhisperStt.decode_tail` (what ``IncrementalStt.final``
  runs) on the clip's last 1.0 s (the end pad included), prompted with the clip's words
  before its last two, in windows of W s (``partial_window_floor``; the fitted window of
  a 1 s tail is 2 s, so W >= 2);
* **whole, words / no words**: the decode of the whole clip in its fitted short window
  with word times (what the closing decode at the first silent frame runs,
  :meth:`decode_words`) and without them: what word times cost.

The load average is printed with each model: the machine is shared, compare within a
run.

Dec 4, 23:07 UTC (2 cores, load 1.3 to 2.1, ``--threads 2 --clips 8 --repeat 2``), ms,
medians:

    tiny.en  window   1 s    2 s    3 s    4 s    6 s    10 s
             mel      0.5    0.8    1.1    1.4    2.0    3.7
             encoder  12.8   23.5   31.2   34.3   45.8   76.8
             tail     -      65.5   117.0  116.0  129.7  165.1   (4, 4, 2, 2 of 16 ran away)
    base     encoder  29.4   34.2   59.6   59.2   91.2   168.3
             tail     -      206.7  193.3  177.7  196.1  284.8   (8, 4, 4 of 16 ran away)
    whole clip (1.2 s), one pass: tiny.en 172 ms with word times, 157 without;
    base 259 and 231

So the fastest final decode here is tiny.en on a 1 s tail in a 2 s window, 65 ms (the
encoder 24 of it, the decoder's few tokens the rest; a 1 s window runs away on base every
time), and it can start no earlier than the VAD's first silent frame, 32 ms (one Silero
frame) after the end of speech: about 100 ms, twice issue 33's 50 ms, on an idle decoder.
Starting it on a falling VAD probability gains at most that one frame: on the 34
utterances of ``stt_streaming.py``, the frames between the first one under ``threshold``
and the VAD's end of speech were 0 for 17, 1 for 16 and 2 for 1. With two threads
CTranslate2 is faster than with one (an earlier run, load 1.6 to 5.8: tiny.en's 2 s tail
96 vs 212 ms); greedy decoding without timestamps is already the default.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from voxflow_voice.engines.stt_streaming import RunawayDecode

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

TAIL = 1.0  # s of audio after the cut, the end pad included


def _median_ms(runs: list[float]) -> str:
    return f"{1000 * statistics.median(runs):6.1f}"


RUNAWAY: list[int] = [0]  # decodes that ran away (timed all the same)


def _timed(fn: Callable[[], object], repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        began = time.perf_counter()
        try:
            fn()
        except RunawayDecode:
            RUNAWAY[0] += 1
        out.append(time.perf_counter() - began)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["tiny.en", "base"])
    parser.add_argument("--threads", nargs="+", type=int, default=[2, 1])
    parser.add_argument("--windows", nargs="+", type=float, default=[1, 2, 3, 4, 6, 10])
    parser.add_argument("--clips", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    from _stt_clips import build_other_voices
    from stt_accuracy import UTTERANCES
    from voxflow_voice import STT_SAMPLE_RATE
    from voxflow_voice.engines.stt_streaming import StreamingSttSettings, StreamingWhisperStt


    clips = build_other_voices(UTTERANCES[::2])[: args.clips]
    tail_size = round(TAIL * STT_SAMPLE_RATE)
    for model in args.models:
        for threads in args.threads:
            engines = {
                w: StreamingWhisperStt(StreamingSttSettings(
                    model=model, cpu_threads=threads, partial_window_floor=w))
                for w in args.windows if w >= 2
            }
            stt = next(iter(engines.values()))
            whisper = stt._model
            stt.transcribe_sync(np.zeros(STT_SAMPLE_RATE, np.float32))  # warm up
            print(f"{model}, {threads} CTranslate2 thread(s); load average "
                  f"{os.getloadavg()[0]:.1f}; {len(clips)} clips x {args.repeat}")
            print(f"  {'window':>6} {'mel ms':>7} {'encoder ms':>10} {'tail ms':>8}")
            for window in args.windows:
                audio = np.zeros(round(window * STT_SAMPLE_RATE), np.float32)
                audio[: tail_size] = clips[0].audio[-tail_size:]
                frames = round(window * 100)
                features = whisper.feature_extractor(audio)[..., :frames]
                mel = _timed(functools.partial(whisper.feature_extractor, audio), 3 * args.repeat)
                encoder = _timed(functools.partial(whisper.encode, features), 3 * args.repeat)
                tail: list[float] = []
                engine = engines.get(window)
                for clip in clips if engine is not None else ():
                    prompt = " ".join(clip.text.split()[:-2]) or None
                    piece = clip.audio[-tail_size:]
                    tail += _timed(functools.partial(engine.decode_tail, piece, prompt),
                                   args.repeat)
                print(f"  {window:>5g}s {_median_ms(mel)} {_median_ms(encoder):>10} "
                      f"{_median_ms(tail) if tail else '     -':>8}"
                      f"{f'  ({RUNAWAY[0]} ran away)' if RUNAWAY[0] else ''}", flush=True)
                RUNAWAY[0] = 0
            words: list[float] = []
            plain: list[float] = []
            for clip in clips:
                words += _timed(functools.partial(stt.decode_words, clip.audio, 0, None),
                                args.repeat)
                plain += _timed(functools.partial(stt.decode_tail, clip.audio, None), args.repeat)
            seconds = statistics.median(c.audio.size / STT_SAMPLE_RATE for c in clips)
            print(f"  whole clip ({seconds:.1f} s median, fitted window): with word times "
                  f"{_median_ms(words)} ms, without {_median_ms(plain)} ms; load "
                  f"{os.getloadavg()[0]:.1f}", flush=True)


if __name__ == "__main__":
    main()
