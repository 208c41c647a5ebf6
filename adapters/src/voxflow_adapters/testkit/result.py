"""What a scripted call produced: :class:`CallResult`, the session and the simulated
client after :func:`~voxflow_adapters.testkit.scenario.run_call`, with the questions a test
asks of them (the replies, how each settled, what was heard)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from voxflow_voice.events import (
    ReplyFinished,
    ReplyInterrupted,
    ReplyStarted,
    SessionEvent,
    TurnCommitted,
    TurnMetrics,
)
from voxflow_voice.session import VoiceSession
from voxflow_voice.session.metrics import LatencySummary

from voxflow.ids import DeliveryId

from .simulated import SimulatedClient, Tape

__all__ = ["CallResult"]


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
