"""What a scripted call produced: :class:`CallResult`, the session and the simulated
client after :func:`~voxflow_adapters.testkit.scenario.run_call`, with the questions a test
asks of them (the replies, how each settled, what was heard)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from voxflow_voice.events import (
    ReplyFinished,
    ReplyInterrupted,
    ReplyStarted,
    ReplyTextStreamed,
    SessionEvent,
    TurnCommitted,
    TurnMetrics,
)
from voxflow_voice.session import VoiceSession
from voxflow_voice.session.metrics import LatencySummary

from voxflow.ids import DeliveryId, TurnId

from .simulated import SimulatedClient, Tape

__all__ = ["CallReply", "CallResult"]


@dataclass(frozen=True, slots=True)
class CallReply:
    """One reply of a call, read from its events (:meth:`CallResult.reply`)."""

    delivery_id: DeliveryId
    turn_id: TurnId
    """the turn it answers (an announcement: the turn that started its job)"""
    kind: str
    """``answer``, ``acknowledgment`` or ``progress`` (a job's announcement)"""
    text: str
    """what it said, or was saying when it was cut (its text so far, more than was
    heard: a reply is synthesized ahead of playback)"""
    heard_text: str
    """what the user heard of it: the whole text if played whole, the words played
    before a cut, "" if neither happened"""
    outcome: Literal["completed", "interrupted"] | None
    """played whole, cut (a barge-in, a mute), or None (neither, e.g. the call ended)"""


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
        """Every reply's delivery id, in order of start (:meth:`reply` reads one)."""
        return [e.delivery_id for e in self.events if isinstance(e, ReplyStarted)]

    def reply(self, delivery_id: DeliveryId) -> CallReply:
        """What reply ``delivery_id`` (one of :meth:`replies`) said, and what was heard.

        Raises:
            ValueError: ``delivery_id`` is not a reply of this call.
        """
        started = next((e for e in self.events
                        if isinstance(e, ReplyStarted) and e.delivery_id == delivery_id), None)
        if started is None:
            raise ValueError(f"{delivery_id!r} is not a reply of this call: {self.replies()}")
        streamed = "".join(e.text for e in self.events
                           if isinstance(e, ReplyTextStreamed) and e.delivery_id == delivery_id)
        text, heard = streamed.strip(), ""
        outcome: Literal["completed", "interrupted"] | None = None
        for e in self.events:
            if isinstance(e, ReplyFinished) and e.delivery_id == delivery_id:
                text, heard, outcome = e.text, e.text, "completed"
            elif isinstance(e, ReplyInterrupted) and e.delivery_id == delivery_id:
                text, heard, outcome = e.full_text, e.heard_text, "interrupted"
        return CallReply(delivery_id=delivery_id, turn_id=started.turn_id,
                         kind=started.reply_kind, text=text, heard_text=heard, outcome=outcome)

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
