"""Latency summaries of a voice call: medians and p90s of the per-turn marks.

A :class:`~voxflow_voice.session.VoiceSession` records one
:class:`~voxflow_voice.events.TurnMetrics` per foreground turn (speech end, transcript
final, first reply text, first audio played, playback end) and one
:class:`~voxflow_voice.events.ReplyInterrupted` per barge-in (with the time from the
barge-in's speech onset to the last reply sample played). :func:`summarize` turns them
into the figures a voice pipeline is judged by:

* **voice to voice**: the user's last speech sample → the first reply sample played;
* its parts: speech end → transcript final (end-of-turn silence + STT), transcript →
  first reply text (the flow / LLM), first text → first audio (TTS + playout);
* **barge-in stop**: barge-in speech onset → the last sample of the cut reply played;
* **fenced chunks**: reply chunks the fence dropped (offered after their reply was cut;
  dropped, never played).

Turns that never reached a mark (no reply text, no audio) are left out of that figure
only, so a turn cut before its first audio still counts for the STT figure.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from pydantic import BaseModel, ConfigDict, Field

from ..events import ReplyInterrupted, TurnMetrics

__all__ = ["Distribution", "LatencySummary", "percentile", "summarize"]


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100) of ``values``, linearly interpolated.

    Raises:
        ValueError: ``values`` is empty or ``q`` is outside [0, 100].
    """
    if not 0.0 <= q <= 100.0 or math.isnan(q):
        raise ValueError(f"q must be within [0, 100], got {q!r}")
    if not values:
        raise ValueError("values must not be empty")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low = math.floor(rank)
    high = math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


class Distribution(BaseModel):
    """Median and p90 of one latency figure (milliseconds); None without samples."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    count: int = Field(ge=0, description="how many samples the figure is made of")
    median_ms: float | None = None
    p90_ms: float | None = None
    max_ms: float | None = None

    @classmethod
    def of(cls, values: Iterable[float]) -> Distribution:
        """The distribution of ``values`` (ms); NaN values are rejected.

        Raises:
            ValueError: a value is NaN.
        """
        samples = [float(v) for v in values]
        if any(math.isnan(v) for v in samples):
            raise ValueError("values must not contain NaN")
        if not samples:
            return cls(count=0)
        return cls(
            count=len(samples),
            median_ms=percentile(samples, 50.0),
            p90_ms=percentile(samples, 90.0),
            max_ms=max(samples),
        )

    def __str__(self) -> str:
        if self.count == 0:
            return "n/a"
        return f"median {self.median_ms:.0f} ms, p90 {self.p90_ms:.0f} ms (n={self.count})"


class LatencySummary(BaseModel):
    """The latency figures of a call (see the module docstring for each)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    turns: int = Field(ge=0, description="foreground turns measured")
    interrupted: int = Field(ge=0, description="turns whose reply was cut by a barge-in")
    voice_to_voice: Distribution
    speech_end_to_transcript: Distribution
    transcript_to_first_text: Distribution
    first_text_to_first_audio: Distribution
    barge_in_stop: Distribution
    fenced_chunks: int = Field(ge=0, description="reply chunks dropped by the fence")

    def rows(self) -> list[tuple[str, str]]:
        """(label, figure) pairs, for printing."""
        return [
            ("voice to voice (speech end → first audio)", str(self.voice_to_voice)),
            ("  speech end → transcript final", str(self.speech_end_to_transcript)),
            ("  transcript → first reply text", str(self.transcript_to_first_text)),
            ("  first text → first audio", str(self.first_text_to_first_audio)),
            ("barge-in stop (onset → last sample played)", str(self.barge_in_stop)),
            ("fenced chunks (dropped, never played)", str(self.fenced_chunks)),
        ]


def summarize(
    metrics: Sequence[TurnMetrics], interrupts: Sequence[ReplyInterrupted] = ()
) -> LatencySummary:
    """Summarize a call's per-turn marks and barge-ins.

    Args:
        metrics: one :class:`TurnMetrics` per foreground turn.
        interrupts: the call's :class:`ReplyInterrupted` events (announcements included).

    Raises:
        TypeError: an item is not of the expected event type.
    """
    for i, m in enumerate(metrics):
        if not isinstance(m, TurnMetrics):
            raise TypeError(f"metrics[{i}] must be a TurnMetrics, got {type(m).__name__}")
    for i, e in enumerate(interrupts):
        if not isinstance(e, ReplyInterrupted):
            raise TypeError(f"interrupts[{i}] must be a ReplyInterrupted, got {type(e).__name__}")
    v2v = [(m.first_audio - m.speech_end) * 1000.0 for m in metrics if m.first_audio is not None]
    stt = [(m.transcript_final - m.speech_end) * 1000.0 for m in metrics]
    text = [
        (m.first_text - m.transcript_final) * 1000.0 for m in metrics if m.first_text is not None
    ]
    audio = [
        (m.first_audio - m.first_text) * 1000.0
        for m in metrics
        if m.first_text is not None and m.first_audio is not None
    ]
    stops = [e.stop_latency_ms for e in interrupts if e.stop_latency_ms is not None]
    return LatencySummary(
        turns=len(metrics),
        interrupted=sum(1 for m in metrics if m.interrupted),
        voice_to_voice=Distribution.of(v2v),
        speech_end_to_transcript=Distribution.of(stt),
        transcript_to_first_text=Distribution.of(text),
        first_text_to_first_audio=Distribution.of(audio),
        barge_in_stop=Distribution.of(stops),
        fenced_chunks=sum(m.fenced_chunks for m in metrics),
    )
