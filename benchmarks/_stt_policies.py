"""Encoder-window policies compared: a fixed window against one fitted to the utterance.

:func:`compare_policies` transcribes every clip with every :class:`Policy`, clip by clip,
the policies in a rotating order, so load from other work on the machine falls on all of
them alike; a policy's latency is given as the median over clips of its time over the
first policy's (fixed 10 s) on the same clip, beside its own median and p90. A windowed
decode that runs away and is done again in a longer window (:class:`Redone` counts
them, and those cut to their first time) is timed with its second decode.
``stt_accuracy.py`` runs it; see its docstring for the figures.
"""

from __future__ import annotations

import logging
import os
import statistics
import time
import wave
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from _figures import figure
from _stt_clips import PRE_ROLL, Clip
from _wer import normalize, repeats, word_errors
from voxflow_voice import STT_SAMPLE_RATE, SttSettings, WhisperStt

__all__ = ["POLICIES", "QUICK_POLICIES", "Policy", "Redone", "compare_policies", "listening"]


class Redone(logging.Handler):
    """Counts the windowed decodes that ran away and were done again in a longer window
    (``count``), and those that said the turn again and were cut to its first time
    (``kept``, logged at debug level: :func:`listening` lets them through)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.count = 0
        self.kept = 0

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if message.startswith("windowed decode ran away"):
            self.count += 1
        elif message.startswith("windowed decode repeated itself"):
            self.kept += 1


@contextmanager
def listening(handler: logging.Handler) -> Iterator[None]:
    """``handler`` on the STT logger, its debug records included, for the block."""
    logger = logging.getLogger("voxflow_voice.engines.stt")
    level = logger.level
    logger.setLevel(logging.DEBUG)
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


@dataclass(frozen=True, slots=True)
class Policy:
    """How the encoder window is chosen: fixed, or fitted to the utterance."""

    floor: float | None  # None: always `window` (for an utterance up to `window`)
    margin: float = 0.0
    window: float = 10.0

    @property
    def label(self) -> str:
        if self.floor is None:
            return f"fixed {self.window:g} s"
        return f"fit +{self.margin:g} s, floor {self.floor:g}"

    def settings(self, model: str) -> SttSettings:
        if self.floor is None:
            return SttSettings(model=model, encoder_window=self.window, encoder_window_floor=None)
        return SttSettings(
            model=model,
            encoder_window=self.window,
            encoder_window_floor=self.floor,
            encoder_window_margin=self.margin,
        )


POLICIES = (
    Policy(None),
    Policy(4.0, 1.0),
    Policy(4.0, 3.0),
    Policy(5.0, 2.0),
    Policy(5.0, 3.0),
    Policy(6.0, 2.0),
    Policy(6.0, 3.0),  # the default
)
"""The first is the reference the others' latency ratios are taken against."""
QUICK_POLICIES = (Policy(None), Policy(6.0, 3.0))
SHORT_TURN = 4.0  # s of audio (pre-roll and end pad included): "most voice turns"
ANCHOR_WAV = Path("/work/shared/anchors/pipecat/audio/user_q.wav")
ANCHOR_END_PAD = 0.1


@dataclass(frozen=True, slots=True)
class PolicyResult:
    """One policy over every clip, timed interleaved with the other policies."""

    policy: Policy
    heard: tuple[str, ...]
    times: tuple[float, ...]
    redone: tuple[int, ...]  # decodes done again in a longer window, per clip
    kept: tuple[bool, ...]  # said the turn again, cut to its first time


def _p90(values: Sequence[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]


def compare_policies(
    sets: dict[str, list[Clip]], model: str, policies: Sequence[Policy], anchor_runs: int
) -> None:
    """Every policy on every clip, interleaved: clip by clip, each policy in turn (the
    order rotating), so load from other work on the machine falls on all of them alike;
    latency ratios are per clip against the first policy, then their median."""
    clips = [clip for group in sets.values() for clip in group]
    stts = [WhisperStt(p.settings(model)) for p in policies]
    redone = Redone()
    heard: list[list[str]] = [[] for _ in policies]
    times: list[list[float]] = [[] for _ in policies]
    again: list[list[int]] = [[] for _ in policies]
    kept: list[list[bool]] = [[] for _ in policies]
    loadavg = [os.getloadavg()[0]]
    with listening(redone):
        for stt in stts:
            stt.transcribe_sync(clips[0].audio)  # warm-up (each window size once)
        for index, clip in enumerate(clips):
            for k in [(index + j) % len(policies) for j in range(len(policies))]:
                count, cut = redone.count, redone.kept
                start = time.perf_counter()
                transcript = stts[k].transcribe_sync(clip.audio)
                times[k].append(time.perf_counter() - start)
                heard[k].append(transcript.text if transcript else "")
                again[k].append(redone.count - count)
                kept[k].append(redone.kept > cut)
            if index % 10 == 9:
                loadavg.append(os.getloadavg()[0])
        anchor = _anchor_times(stts, anchor_runs)
    results = [
        PolicyResult(p, tuple(h), tuple(t), tuple(r), tuple(c))
        for p, h, t, r, c in zip(policies, heard, times, again, kept, strict=True)
    ]
    _show_policies(sets, model, results, anchor, statistics.median(loadavg))


def _anchor_times(stts: Sequence[WhisperStt], runs: int) -> list[tuple[float, str]] | None:
    """The leading framework's question with pre-roll and end pad: median of ``runs``."""
    if runs < 1 or not ANCHOR_WAV.is_file():
        return None
    with wave.open(str(ANCHOR_WAV), "rb") as w:
        if w.getframerate() != STT_SAMPLE_RATE or w.getnchannels() != 1:
            return None
        pcm = np.frombuffer(w.readframes(w.getnframes()), np.int16)
    audio = np.concatenate([
        np.zeros(round(PRE_ROLL * STT_SAMPLE_RATE), np.float32),
        pcm.astype(np.float32) / 32768.0,
        np.zeros(round(ANCHOR_END_PAD * STT_SAMPLE_RATE), np.float32),
    ])
    timings: list[list[float]] = [[] for _ in stts]
    texts = [""] * len(stts)
    for run in range(runs):
        for k in [(run + j) % len(stts) for j in range(len(stts))]:
            start = time.perf_counter()
            transcript = stts[k].transcribe_sync(audio)
            timings[k].append(time.perf_counter() - start)
            texts[k] = transcript.text if transcript else ""
    return [(statistics.median(t), text) for t, text in zip(timings, texts, strict=True)]


def _show_policies(
    sets: dict[str, list[Clip]],
    model: str,
    results: Sequence[PolicyResult],
    anchor: list[tuple[float, str]] | None,
    load: float,
) -> None:
    clips = [clip for group in sets.values() for clip in group]
    seconds = [c.audio.size / STT_SAMPLE_RATE for c in clips]
    short = [i for i, s in enumerate(seconds) if s <= SHORT_TURN]
    spans = {}
    start = 0
    for name, group in sets.items():
        spans[name] = range(start, start + len(group))
        start += len(group)
    reference = results[0]
    print(
        f"\n{model}: window policies, {len(clips)} clips interleaved, one timing each "
        f"({len(short)} clips <= {SHORT_TURN:g} s); load average {load:.1f} (median)"
    )
    header = f"  {'policy':<34}  windows s         "
    header += "".join(f"{name + ' WER':<20}" for name in sets)
    print(header + "median  p90 ms  short  x ref  loops  kept  redone  empty")
    for result in results:
        windows = [result.policy.settings(model).window_for(s) for s in seconds]
        wers = ""
        for span in spans.values():
            errors = sum(word_errors(clips[i].text, result.heard[i]) for i in span)
            words = sum(len(normalize(clips[i].text)) for i in span)
            wers += f"{100 * errors / words:5.1f}% ({errors:3d}/{words})  "
        ratio = statistics.median(
            t / r for t, r in zip(result.times, reference.times, strict=True)
        )
        looping = sum(
            repeats(c.text, h) for c, h in zip(clips, result.heard, strict=True) if h
        )
        print(
            f"  {result.policy.label:<34}  {min(windows):4.0f}-{max(windows):<4.0f} "
            f"(med {statistics.median(windows):4.1f})  {wers}"
            f"{1000 * statistics.median(result.times):5.0f}  {1000 * _p90(result.times):6.0f}  "
            f"{1000 * statistics.median(result.times[i] for i in short):5.0f}  "
            f"{ratio:5.2f}  {looping:5d}  {sum(result.kept):4d}  {sum(result.redone):6d}  "
            f"{sum(1 for h in result.heard if not h):5d}",
            flush=True,
        )
        name = f"{model} {result.policy.label}"
        figure(f"{name}: median latency vs fixed 10 s", round(ratio, 3), "x")
    for result in results[1:]:
        for i, clip in enumerate(clips):
            ours = word_errors(clip.text, result.heard[i])
            theirs = word_errors(clip.text, reference.heard[i])
            if ours != theirs:
                mark = " (cut to its first time)" if result.kept[i] else ""
                mark += f" (redone {result.redone[i]}x)" if result.redone[i] else ""
                print(
                    f"    {result.policy.label}: {ours - theirs:+d} {clip.condition} "
                    f"{clip.text!r}: {reference.heard[i]!r} -> {result.heard[i]!r}{mark}"
                )
    if anchor is not None:
        print(f"  anchor question ({ANCHOR_WAV.name}, {PRE_ROLL:g} s pre-roll, "
              f"{ANCHOR_END_PAD:g} s end pad), median of its runs:")
        for result, (seconds_taken, text) in zip(results, anchor, strict=True):
            print(f"    {result.policy.label:<34}  {1000 * seconds_taken:5.0f} ms  {text!r}")
