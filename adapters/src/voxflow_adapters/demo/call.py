"""The demo call: the example assistant, its jobs, and a scripted caller.

:func:`demo_script` is the call a newcomer watches: two ordinary turns, an order
question that starts a background job, a muted stretch while the job finishes (nothing
is announced over a muted microphone), the announcement once the floor is free, a long
story cut by a barge-in, and a goodbye. Every line after the first waits for the
assistant (reactive steps), so the call reads the same in real time and in virtual time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from voxflow_voice.engines import VoiceEngines
from voxflow_voice.events import SessionEvent
from voxflow_voice.session import VoiceSettings

from voxflow.clock import Clock, MonotonicClock, VirtualClock
from voxflow.demo import load_example_module
from voxflow.wiring import AssistantWiring

from ..testkit.scenario import CallResult, run_call
from ..testkit.script import CallScript

__all__ = ["DEMO_LINES", "DemoCall", "demo_script", "run_demo_call"]

DEMO_LINES = (
    "Hello there!",
    "What can you do?",
    "Where is my order?",
    "Tell me a story.",
    "Stop, thanks.",
    "Goodbye.",
)
"""What the caller says, in order (``--script DIR`` replaces them with WAV files)."""

WAIT = 8.0
"""Seconds the demo's caller waits for an answer before saying the next line."""


def demo_script(wavs: list[Path] | None = None) -> CallScript:
    """The scripted caller; ``wavs`` (one per line of :data:`DEMO_LINES`) replace the
    synthesized voice."""
    if wavs is not None and len(wavs) != len(DEMO_LINES):
        raise ValueError(
            f"--script needs {len(DEMO_LINES)} WAV files (one per line: "
            f"{', '.join(DEMO_LINES)}), found {len(wavs)}"
        )
    audio: list[Path | None] = list(wavs) if wavs is not None else [None] * len(DEMO_LINES)
    hello, can, order, story, stop, bye = zip(DEMO_LINES, audio, strict=True)
    # A caller who hears no answer for WAIT s goes on with the next line (a recording of
    # --script the assistant did not understand does not end the demo).
    return (
        CallScript()
        .user_says(0.5, hello[0], audio=hello[1])
        .then_says(can[0], audio=can[1], gap=0.6, max_wait=WAIT)
        .then_says(order[0], audio=order[1], gap=0.6, max_wait=WAIT)
        # The caller mutes once the "checking" answer was heard; the job finishes during
        # the mute, so its announcement waits for the unmute.
        .then_mutes(4.0, after="reply_end", gap=0.3, max_wait=WAIT)
        .then_says(story[0], audio=story[1], after="reply_end", gap=0.8, max_wait=WAIT)
        .then_says(stop[0], audio=stop[1], after="reply_start", gap=3.0,  # barge-in
                   max_wait=WAIT)
        .then_says(bye[0], audio=bye[1], gap=0.6, max_wait=WAIT)
    )


@dataclass(slots=True)
class DemoCall:
    """What the demo ran and produced."""

    result: CallResult
    flow: Any
    job_log: list[tuple[float, str, str]]


async def run_demo_call(
    engines: VoiceEngines,
    *,
    clock: Clock,
    model: str | None = None,
    wavs: list[Path] | None = None,
    on_event: Callable[[SessionEvent], None] | None = None,
    on_job: Callable[[float, str, str], None] | None = None,
    settings: VoiceSettings | None = None,
) -> DemoCall:
    """Run the demo call against the example assistant and return what happened."""
    # The lookup outlasts the caller's pause before the mute: its result comes in muted.
    flow = load_example_module("assistant").assistant_class(model, lookup_seconds=4.0)()
    job_log: list[tuple[float, str, str]] = []
    seen: dict[str, str] = {}

    async def log_jobs(snapshot: dict[str, Any]) -> None:
        for job in snapshot["jobs"]:
            status = str(job["status"])
            if seen.get(job["job_id"]) != status:
                seen[job["job_id"]] = status
                entry = (clock.now(), str(job["kind"]), status)
                job_log.append(entry)
                if on_job is not None:
                    on_job(*entry)

    async with AssistantWiring(flow, clock=clock) as wiring:
        wiring.subscribe(log_jobs)
        result = await run_call(wiring, demo_script(wavs), engines, settings=settings,
                                on_event=on_event, tail=1.5)
    return DemoCall(result=result, flow=flow, job_log=job_log)


def default_clock(fast: bool) -> Clock:
    """Virtual audio time for ``--fast``, the monotonic clock otherwise."""
    return VirtualClock(autojump=True) if fast else MonotonicClock()
