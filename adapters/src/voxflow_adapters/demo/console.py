"""What the demo prints while the call runs, and the summary table after it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.table import Table
from voxflow_voice.events import SessionEvent

__all__ = ["CallPrinter", "latency_table", "percentile"]


def _stamp(seconds: float) -> str:
    minutes, rest = divmod(max(0.0, seconds), 60.0)
    return f"[dim]{int(minutes):02d}:{rest:04.1f}[/]"


class CallPrinter:
    """Prints session events as they happen, stamped with call time.

    Args:
        console: where to print.
        origin: the clock reading of call time 0.
        simulated: the call runs on virtual audio time (``--fast``): latencies are
            labelled simulated, since the pipeline's compute takes no call time.
    """

    def __init__(self, console: Console, origin: float = 0.0, *,
                 simulated: bool = False) -> None:
        self.console = console
        self.origin = origin
        self.simulated = simulated
        self._announcements: set[str] = set()

    def job(self, at: float, kind: str, status: str) -> None:
        """A background job changed status."""
        self.console.print(f"{_stamp(at - self.origin)} [magenta]job[/]       "
                           f"{kind}: [bold]{status}[/]")

    def __call__(self, event: SessionEvent) -> None:
        t = _stamp(event.at - self.origin)
        line = self._line(event)
        if line:
            self.console.print(f"{t} {line}")

    def _line(self, e: Any) -> str | None:
        kind = e.kind
        if kind == "speech_started":
            return "[cyan]user[/]      [italic]speaking…[/]"
        if kind == "turn_committed":
            return f"[cyan]user[/]      [bold]{e.text}[/]"
        if kind == "transcript_discarded":
            return "[cyan]user[/]      [dim](noise: no turn)[/]"
        if kind == "reply_started" and e.reply_kind == "progress":
            self._announcements.add(e.delivery_id)
            return "[magenta]announce[/]  [italic]the floor is free: announcing the job result[/]"
        if kind == "reply_text":
            who = "announce " if e.delivery_id in self._announcements else "assistant"
            colour = "magenta" if who.startswith("announce") else "green"
            return f"[{colour}]{who}[/] {e.text}"
        if kind == "barge_in":
            return "[red]barge-in[/]  the user talks over the reply"
        if kind == "reply_interrupted":
            stop = f", stopped {e.stop_latency_ms:.0f} ms after onset" if e.stop_latency_ms else ""
            return (f"[red]cut[/]       after {e.heard_seconds:.1f} s{stop}; history keeps: "
                    f"[italic]“{e.heard_text}”[/]")
        if kind == "mute":
            return "[yellow]mute[/]      microphone muted" if e.muted else \
                "[yellow]mute[/]      microphone unmuted"
        if kind == "delivery_settled":
            return f"[magenta]announce[/]  delivery settled: {e.status}"
        if kind == "turn_metrics" and e.voice_to_voice_ms is not None:
            what = "simulated voice-to-voice" if self.simulated else "voice-to-voice"
            return f"[dim]latency   {what} {e.voice_to_voice_ms:.0f} ms[/]"
        return None


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q`` quantile (0..1) of ``values`` by nearest rank; None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def latency_table(rows: list[dict[str, Any]], figures: dict[str, Any], *,
                  simulated: bool = False) -> Table:
    """Per-turn latencies, then medians and p90s; ``simulated`` (virtual audio time, where
    STT, the flow and TTS take no call time) says so in the title and the caption."""
    kind = ("SIMULATED per-turn latency (ms, virtual audio time: compute takes no call "
            "time; run without --fast to measure)" if simulated else "per-turn latency (ms)")
    table = Table(title=f"{kind}: voice-to-voice = end of user speech → "
                  "first reply audio heard = STT + flow + TTS and what is left of the "
                  "end-of-turn wait (* answered in the pause, audio held until the turn "
                  "ended)", show_lines=False)
    for column in ("#", "user said", "voice-to-voice", "STT", "flow", "TTS+wait", "outcome"):
        table.add_column(column, justify="left" if column == "user said" else "right")

    def ms(value: float | None) -> str:
        return "—" if value is None else f"{value:.0f}"

    for i, row in enumerate(rows, 1):
        table.add_row(str(i), row["text"], ms(row["voice_to_voice_ms"]), ms(row["stt_ms"]),
                      ms(row["reply_ms"]), ms(row["tts_ms"]),
                      row["outcome"] + (" *" if row.get("speculative") else ""))
    table.caption = (
        ("simulated (--fast): " if simulated else "measured in real time: ")
        + f"voice-to-voice median {ms(figures['voice_to_voice_median_ms'])} ms, "
        f"p90 {ms(figures['voice_to_voice_p90_ms'])} ms · barge-in stop "
        f"{ms(figures['barge_in_stop_ms'])} ms · stale audio after a fence: "
        f"{figures['stale_samples']} samples"
    )
    return table

