"""The audio boundary's cost: InputGuard versus the bare conversion it wraps.

Run: ``uv run python benchmarks/input_guard.py [--runs 5]``

Per 20 ms microphone frame, for three real layouts (48 kHz float32 mono from a sound
card, 48 kHz s16 stereo from a WebRTC decoder, 16 kHz float32 from the simulated
client): the median wall time of ``InputGuard.convert`` (validation, NaN check, mixing,
resampling) beside the unguarded ``InputConverter`` path the transports took before.
Each run converts 10 s of audio; the figure is the median over ``--runs`` runs. Also
printed: the cost of a NaN frame (zeroed) and of a dropped one. A 20 ms frame is
20,000 us, so either path is well under 1 % of real time.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from _figures import figure
from voxflow_voice.audio import InputConverter
from voxflow_voice.listen.input_guard import InputGuard

SECONDS = 10.0


def _frames(rate: int, channels: int, dtype: Any) -> list[Any]:
    rng = np.random.default_rng(0)
    size = round(rate * 0.02)
    frames: list[Any] = []
    for _ in range(round(SECONDS / 0.02)):
        x = (rng.standard_normal((size, channels)) * 0.1).astype(np.float32)
        if dtype == np.int16:
            frames.append(np.round(x * 32767).astype(np.int16).reshape(-1))
        else:
            frames.append(x.reshape(-1) if channels == 1 else x)
    return frames


def _per_frame(run: Callable[[], int], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        count = run()
        times.append((time.perf_counter() - start) / count)
    return statistics.median(times) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    runs = parser.parse_args().runs
    layouts = [
        ("sound card, 48 kHz float32 mono", 48_000, 1, np.float32),
        ("WebRTC decoder, 48 kHz s16 stereo", 48_000, 2, np.int16),
        ("simulated, 16 kHz float32 mono", 16_000, 1, np.float32),
    ]
    print(f"per 20 ms frame, median of {runs} runs of {SECONDS:.0f} s")
    print(f"{'layout':36} {'InputGuard':>12} {'bare convert':>13}")
    for name, rate, channels, dtype in layouts:
        frames = _frames(rate, channels, dtype)
        def guarded(frames: list[Any] = frames, rate: int = rate, channels: int = channels) -> int:
            guard = InputGuard()
            for f in frames:
                guard.convert(f, rate, channels)
            return len(frames)

        def bare(frames: list[Any] = frames, rate: int = rate, channels: int = channels) -> int:
            converter = InputConverter()  # what the transports did before the guard
            for f in frames:
                if f.dtype == np.int16:
                    converter.convert(f.tobytes(), rate, channels)
                else:
                    converter.convert_float(f.reshape(-1), rate)
            return len(frames)

        g, b = _per_frame(guarded, runs), _per_frame(bare, runs)
        print(f"{name:36} {g:9.1f} us {b:10.1f} us")
        if rate == 48_000 and channels == 1:
            figure("InputGuard per 20 ms frame (48 kHz mono)", round(g, 1), "us")
    logging.getLogger("voxflow_voice.listen.input_guard").setLevel(logging.ERROR)  # bad on purpose
    nan = np.full(960, np.nan, np.float32)
    bad = np.zeros((2, 480), np.float32)

    def repeat(frame: Any, channels: int) -> Callable[[], int]:
        def run() -> int:
            guard = InputGuard()
            for _ in range(500):
                guard.convert(frame, 48_000, channels)
            return 500

        return run

    print(f"NaN frame (zeroed): {_per_frame(repeat(nan, 1), runs):.1f} us; "
          f"dropped frame: {_per_frame(repeat(bad, 2), runs):.1f} us")


if __name__ == "__main__":
    main()
