"""A small scenario API for voice tests: run a scripted call, then ask what happened.

Example::

    script = CallScript().user_says(0.5, "Tell me a story.").user_says(4.0, "Stop.")
    call = await run_call(turns, script, engines)
    reply = call.replies()[0]
    assert call.settled(reply) == "interrupted"
    assert call.stale_samples() == 0
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from voxflow_voice.engines import VoiceEngines
from voxflow_voice.events import (
    ReplyFinished,
    ReplyInterrupted,
    ReplyStarted,
    SessionEvent,
    TurnCommitted,
    TurnMetrics,
)
from voxflow_voice.session import Announcer, VoiceSession, VoiceSettings, default_announcer
from voxflow_voice.session.metrics import LatencySummary
from voxflow_voice.session.wiring import assistant_session

from voxflow.clock import Clock, VirtualClock
from voxflow.ids import DeliveryId
from voxflow.jobs import JobRunner
from voxflow.replies import ReplyQueue
from voxflow.turns import TurnRunner
from voxflow.wiring import AssistantWiring

from .script import CallScript
from .simulated import SimulatedClient, Tape

__all__ = ["CallResult", "run_call"]


@dataclass(slots=True)
class CallResult:
    """Everything a scripted call produced."""

    session: VoiceSession
    client: SimulatedClient

    @property
    def events(self) -> list[SessionEvent]:
        """Every session event, in order."""
        return self.session.events

    @property
    def tape(self) -> Tape:
        """The client's recording."""
        return self.client.tape

    def of_kind(self, kind: str) -> list[Any]:
        """The events of one ``kind`` (e.g. ``"turn_committed"``)."""
        return [e for e in self.events if e.kind == kind]

    def transcripts(self) -> list[str]:
        """The committed turns' text, in order."""
        return [e.text for e in self.events if isinstance(e, TurnCommitted)]

    def replies(self) -> list[DeliveryId]:
        """Every reply's delivery id, in order of start."""
        return [e.delivery_id for e in self.events if isinstance(e, ReplyStarted)]

    def settled(self, delivery_id: DeliveryId) -> str | None:
        """``completed`` (played whole), ``interrupted``, or None if neither happened."""
        for e in self.events:
            if isinstance(e, ReplyFinished) and e.delivery_id == delivery_id:
                return "completed"
            if isinstance(e, ReplyInterrupted) and e.delivery_id == delivery_id:
                return "interrupted"
        return None

    def heard_seconds(self, delivery_id: DeliveryId) -> float:
        """Seconds of the reply the user heard (client receipts)."""
        return self.tape.heard_seconds(delivery_id)

    def stale_samples(self) -> int:
        """Samples of any reply played after its fence (must be 0)."""
        return self.tape.stale_samples()

    def metrics(self) -> list[TurnMetrics]:
        """Per-turn latency marks."""
        return self.session.metrics

    def summary(self) -> LatencySummary:
        """Medians and p90s of the latency marks and barge-in stops (see ``metrics``)."""
        return self.session.summary()


async def run_call(
    turns: TurnRunner | AssistantWiring | Any,
    script: CallScript,
    engines: VoiceEngines,
    *,
    clock: Clock | None = None,
    settings: VoiceSettings | None = None,
    replies: ReplyQueue | None = None,
    jobs: JobRunner | None = None,
    announcer: Announcer = default_announcer,
    on_event: Callable[[SessionEvent], None] | None = None,
    on_session: Callable[[VoiceSession], None] | None = None,
    tail: float = 3.0,
) -> CallResult:
    """Play ``script`` against a voice session and return the result.

    ``turns`` is what answers: a conversational flow instance (wired like every entry
    point: :class:`~voxflow.wiring.AssistantWiring`, background jobs and announcements
    included; closed after the call), an ``AssistantWiring`` of your own (its clock is the
    call's; you close it), or a bare ``TurnRunner`` (with ``replies``/``jobs`` if any).
    Runs on a deterministic :class:`~voxflow.clock.VirtualClock` unless ``clock`` is given.
    ``on_session`` is called with the session before the call starts.
    """
    wiring: AssistantWiring | None = None
    owned = False
    if isinstance(turns, AssistantWiring):
        wiring = turns
        clock = wiring.clock
    elif not isinstance(turns, TurnRunner):
        clock = clock if clock is not None else VirtualClock(autojump=True)
        wiring, owned = AssistantWiring(turns, clock=clock), True
    clock = clock if clock is not None else VirtualClock(autojump=True)
    client = SimulatedClient(script, clock=clock, tail=tail)
    try:
        await client.render(engines.tts)
        if wiring is not None:
            session = assistant_session(wiring, client, engines, settings=settings,
                                        on_event=on_event)
        else:
            assert isinstance(turns, TurnRunner)
            session = VoiceSession(
                turns, client, engines, settings=settings, clock=clock, replies=replies,
                jobs=jobs, announcer=announcer, on_event=on_event,
            )
        if on_session is not None:
            on_session(session)
        entered = clock if isinstance(clock, VirtualClock) else None
        if entered is not None:
            await entered.__aenter__()
        try:
            async with client:
                await session.run()
        finally:
            if entered is not None:
                await entered.__aexit__(None, None, None)
    finally:
        if owned and wiring is not None:
            await wiring.aclose()
    await asyncio.sleep(0)
    return CallResult(session=session, client=client)
