"""The marks of ``webrtc_latency.py``: where a WebRTC call's frames were when (the
caller's microphone, the server's receive path, the VAD, the caller's ear), the lines a
caller says (:class:`Line`) and a configuration's marks per turn (:class:`Breakdown`),
and how they are reported (medians, each mark after the previous).
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from voxflow_adapters.webrtc import WebRtcPeer
from voxflow_adapters.webrtc.client import LoopbackCaller
from voxflow_voice.audio import AudioChunk
from voxflow_voice.events import BargeInPaused, BargeInResumed

__all__ = [
    "BARGE_MARKS",
    "FRAME",
    "FRAME_S",
    "PAGE_STATS",
    "V2V_MARKS",
    "Breakdown",
    "Line",
    "caller_frame_at",
    "fmt",
    "median",
    "ms",
    "packets_lost",
    "pause_counts",
    "receive_path",
    "report",
    "server_arrival",
    "spoken_at",
    "to_vad",
    "wait_for",
    "window_drops",
]

FRAME = 960  # 20 ms at 48 kHz
FRAME_S = 0.02


V2V_MARKS = ("packet at server", "decoded", "to the VAD", "VAD speech end", "commit",
             "first text", "first TTS chunk", "first frame sent", "at the caller")
BARGE_MARKS = ("first packet sent", "packet at server", "VAD onset (audio time)",
               "first pause", "last reply frame sent", "last reply audio at the caller")


@dataclass(frozen=True, slots=True)
class Line:
    """A user line at 16 kHz and the times (s) of its first and last loud sample."""

    audio: AudioChunk
    first: float
    last: float


@dataclass(slots=True)
class Breakdown:
    """Marks (ms) per turn of one configuration, and its counters."""

    v2v: list[dict[str, float | None]] = field(default_factory=list)
    barge: list[dict[str, float | None]] = field(default_factory=list)
    counters: dict[str, int] = field(default_factory=dict)


def ms(later: float | None, earlier: float) -> float | None:
    return None if later is None else (later - earlier) * 1000.0


def spoken_at(caller: LoopbackCaller, start_frame: int, offset: float) -> float:
    """When the microphone sample ``offset`` s into a line said from ``start_frame`` was
    captured: its frame left at ``sent_at``, after its last sample was captured."""
    sample = round(offset * 48_000)
    frame, within = start_frame + sample // FRAME, sample % FRAME
    return caller.mic.sent_at[frame] - (FRAME - within) / 48_000


def caller_frame_at(caller: LoopbackCaller, index: int) -> float | None:
    pts = index * FRAME
    return next((f.at for f in caller.frames if f.pts == pts), None)


def server_arrival(peer: WebRtcPeer, frame: int) -> tuple[float | None, float | None]:
    pts = frame * FRAME
    arrived = peer.receive_timings.arrival_of(pts)
    decoded = next((d for p, _, d in peer.receive_timings.decoded if p == pts), None)
    return arrived, decoded


def to_vad(peer: WebRtcPeer, arrived: float | None) -> float | None:
    if arrived is None:
        return None
    return next((out for a, out in peer.inbound_delays if a >= arrived), None)


async def wait_for(condition: Callable[[], bool], within: float) -> None:
    for _ in range(round(within / 0.02)):
        if condition():
            return
        await asyncio.sleep(0.02)
    raise TimeoutError(f"a call event did not come within {within:g} s")


def pause_counts(events: list[Any]) -> dict[str, int]:
    """Pauses, and pauses undone (the reply played on from the same sample): with only
    requests said over replies, every one undone was a false pause."""
    return {"pauses": sum(isinstance(e, BargeInPaused) for e in events),
            "pauses undone (false)": sum(isinstance(e, BargeInResumed) for e in events)}


async def packets_lost(pc: Any) -> int:
    from aiortc.stats import RTCInboundRtpStreamStats

    report = await pc.getStats()
    return sum(max(0, s.packetsLost) for s in report.values()
               if isinstance(s, RTCInboundRtpStreamStats))


def window_drops(caller: LoopbackCaller) -> int:
    return sum(w.late + w.skipped for w in caller.receive_windows)


PAGE_STATS = """async () => {
  const out = {latency: window.voxflow.latency, lost: 0, concealed: 0, received: 0,
               delay: 0, emitted: 0};
  (await window.voxflow.pc.getStats()).forEach((s) => {
    if (s.type === "inbound-rtp" && s.kind === "audio") {
      out.lost += s.packetsLost || 0; out.concealed += s.concealedSamples || 0;
      out.received += s.totalSamplesReceived || 0;
      out.delay += s.jitterBufferDelay || 0; out.emitted += s.jitterBufferEmittedCount || 0;
    }
  });
  return out;
}"""


def median(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def fmt(value: float | None) -> str:
    return "    n/a" if value is None else f"{value:7.0f}"


def report(name: str, rows: list[dict[str, float | None]], marks: tuple[str, ...]) -> None:
    print(f"   {name} (median ms over {len(rows)}; each mark after the previous: +step)")
    previous: float | None = 0.0
    for mark in marks:
        value = median([r.get(mark) for r in rows])
        step = None if value is None or previous is None else value - previous
        print(f"     {mark:<34} {fmt(value)}   (+{fmt(step).strip()})")
        previous = value if value is not None else previous


@contextlib.contextmanager
def receive_path(hold: int | str | None) -> Iterator[int | None]:
    """The receive path to measure: ``before`` also puts back soxr's streaming filter
    for 48 -> 16 kHz (the Decimator replaced it in InputConverter)."""
    if hold != "before":
        assert not isinstance(hold, str)
        yield hold
        return
    import voxflow_voice.audio as audio

    kept = audio.Decimator
    audio.Decimator = audio.Resampler  # type: ignore[misc, assignment]
    try:
        yield None
    finally:
        audio.Decimator = kept  # type: ignore[misc]
