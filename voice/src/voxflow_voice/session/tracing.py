"""A voice call as OpenTelemetry spans (when tracing is on: :mod:`voxflow.telemetry`).

``voxflow.call`` spans the session (a child of the context the host attached: the
front door's dispatch, when it sent one). Each answered turn is a ``voxflow.turn``,
from the user's last speech sample to its reply settled, current while the flow runs,
so the flow's ``voxflow.handler`` span and its LLM and tool calls are its children.
Its other children are read from the session's events, timed as the metrics time them
(:mod:`voxflow_adapters.hosting.metrics`):

* ``voxflow.end_of_turn``: the last speech sample to the end of the turn decided;
* ``voxflow.stt``: that decision to the transcript (the recognition the user waits for);
* ``voxflow.tts``: the first reply text to its first sample played;
* ``voxflow.playout``: the first sample played to the last (or to the cut);
* ``voxflow.barge_in``: a barge-in's speech onset to the reply's cut (or to the reply
  playing on, for an overlap judged not to be one).

A background job's result said is a ``voxflow.announcement`` under the call.

No words (transcripts, reply text) unless content capture is on. With tracing off every
method returns at its first line.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from voxflow import telemetry
from voxflow.clock import Clock
from voxflow.ids import DeliveryId, TurnId

from ..events import (
    BargeIn,
    BargeInPaused,
    BargeInResumed,
    ReplyInterrupted,
    ReplyStarted,
    SessionEvent,
    SpeechEnded,
    TurnCommitted,
    TurnMetrics,
)

__all__ = ["SessionTrace"]


@dataclasses.dataclass(slots=True)
class _Turn:
    span: Any
    speech_end: float
    speech_ended: SpeechEnded | None = None
    committed_at: float | None = None
    delivery_id: DeliveryId | None = None
    barge_in: BargeIn | BargeInPaused | None = None
    ended_at: float | None = None


class SessionTrace:
    """The spans of one voice session (its call, turns and their parts)."""

    def __init__(self, clock: Clock, session_id: Callable[[], str]) -> None:
        self._clock = clock
        self._session_id = session_id
        self._on = False
        self._wall: telemetry.WallClock | None = None
        self._turns: dict[TurnId, _Turn] = {}
        self._by_delivery: dict[DeliveryId, _Turn] = {}
        self._speech_ended: SpeechEnded | None = None

    def _ns(self, reading: float) -> int:
        assert self._wall is not None
        return self._wall.ns(reading)

    @contextlib.contextmanager
    def call(self, ids: Mapping[str, str]) -> Iterator[None]:
        """The call's span around the session's run; ``ids`` (call_id...) as attributes."""
        self._on = telemetry.tracing_enabled()
        if not self._on:
            yield
            return
        self._wall = telemetry.WallClock(self._clock)
        attributes = {f"voxflow.{k}": v for k, v in ids.items()}
        attributes["voxflow.session_id"] = self._session_id()
        # the flow's spans on the session's time too
        with telemetry.use_clock(self._wall), telemetry.trace_span(
                "voxflow.call", attributes, kind="server", start_ns=self._ns(self._clock.now()),
                end_ns=lambda: self._ns(self._clock.now())) as span:
            try:
                yield
            finally:
                if span is not None:
                    span.set_attribute("voxflow.turns", len(self._turns))
                self._turns.clear()
                self._by_delivery.clear()

    @contextlib.contextmanager
    def turn(self, turn_id: TurnId, speech_end: float, *, speculative: bool,
             text: str) -> Iterator[None]:
        """One turn's span, current while it is answered (the flow's spans under it)."""
        if not self._on:
            yield
            return
        attributes: dict[str, Any] = {"voxflow.speculative": speculative}
        if telemetry.capture_content():
            attributes["voxflow.transcript"] = text
        turn = _Turn(span=None, speech_end=speech_end, speech_ended=self._speech_ended)
        with telemetry.turn_span(self._session_id(), str(turn_id), attributes,
                                 start_ns=self._ns(speech_end),
                                 end_ns=lambda: self._ns(turn.ended_at if turn.ended_at
                                                         is not None else self._clock.now())
                                 ) as span:
            turn.span = span
            self._turns[turn_id] = turn
            try:
                yield
            finally:
                if turn.ended_at is None and span is not None:  # never answered
                    span.set_attribute("voxflow.outcome", "discarded")

    @contextlib.contextmanager
    def announcement(self, turn_id: TurnId, delivery_id: DeliveryId) -> Iterator[None]:
        """A background job's result said: its span, from the floor taken to the reply
        settled (``voxflow.turn_id``: the turn that asked for the job)."""
        if not self._on:
            yield
            return
        with telemetry.trace_span("voxflow.announcement", {
                "voxflow.turn_id": str(turn_id), "voxflow.delivery_id": str(delivery_id),
                "voxflow.session_id": self._session_id()}):
            yield

    def observe(self, event: SessionEvent) -> None:
        """Read one session event (the parts of a turn are spans when it settles)."""
        if not self._on:
            return
        if isinstance(event, SpeechEnded):
            self._speech_ended = event
        elif isinstance(event, TurnCommitted):
            turn = self._turns.get(event.turn_id)
            if turn is not None:
                turn.committed_at = event.at
                if turn.speech_ended is None:
                    turn.speech_ended = self._speech_ended
        elif isinstance(event, ReplyStarted):
            turn = self._turns.get(event.turn_id)
            if turn is not None:
                turn.delivery_id = event.delivery_id
                self._by_delivery[event.delivery_id] = turn
        elif isinstance(event, BargeIn | BargeInPaused):
            turn = self._by_delivery.get(event.delivery_id)
            if turn is not None and (turn.barge_in is None or isinstance(event, BargeIn)):
                turn.barge_in = event
        elif isinstance(event, BargeInResumed):
            turn = self._by_delivery.get(event.delivery_id)
            if turn is not None and turn.barge_in is not None:
                self._child(turn, "voxflow.barge_in", turn.barge_in.onset_at, event.at,
                            {"voxflow.outcome": "resumed", "voxflow.reason": event.reason})
                turn.barge_in = None
        elif isinstance(event, ReplyInterrupted):
            turn = self._turns.get(event.turn_id)
            if turn is not None:
                if turn.barge_in is not None:
                    self._child(turn, "voxflow.barge_in", turn.barge_in.onset_at, event.at, {
                        "voxflow.outcome": "interrupted",
                        "voxflow.stop_latency_ms": event.stop_latency_ms})
                    turn.barge_in = None
                if telemetry.capture_content() and turn.span is not None:
                    turn.span.set_attribute("voxflow.heard_text", event.heard_text)
        elif isinstance(event, TurnMetrics):
            self._settled(event)

    def _settled(self, m: TurnMetrics) -> None:
        turn = self._turns.pop(m.turn_id, None)
        if turn is None or turn.span is None:
            return
        if m.delivery_id is not None:
            self._by_delivery.pop(m.delivery_id, None)
        # (the last sample's receipt is timed at its start: it ends a moment after)
        turn.ended_at = max(m.at, m.playback_end if m.playback_end is not None else m.at)
        ended = turn.speech_ended
        if ended is not None and ended.at <= (turn.committed_at or m.transcript_final):
            self._child(turn, "voxflow.end_of_turn", ended.end_at, ended.at, {})
            if turn.committed_at is not None:
                self._child(turn, "voxflow.stt", ended.at, turn.committed_at, {})
        if m.first_text is not None and m.first_audio is not None:
            self._child(turn, "voxflow.tts", m.first_text, m.first_audio, {})
        if m.first_audio is not None:
            self._child(turn, "voxflow.playout", m.first_audio,
                        m.playback_end if m.playback_end is not None else m.at,
                        {"voxflow.interrupted": m.interrupted})
        span = turn.span
        span.set_attribute("voxflow.interrupted", m.interrupted)
        span.set_attribute("voxflow.fenced_chunks", m.fenced_chunks)
        if m.delivery_id is not None:
            span.set_attribute("voxflow.delivery_id", str(m.delivery_id))
        if (v2v := m.voice_to_voice_ms) is not None:
            span.set_attribute("voxflow.voice_to_voice_ms", round(v2v, 1))

    def _child(self, turn: _Turn, name: str, start: float, end: float,
               attributes: dict[str, Any]) -> None:
        start = max(start, turn.speech_end)  # a pause's last sample, a few ms apart
        span = telemetry.start_span(name, attributes, parent=turn.span,
                                    start_ns=self._ns(start))
        if span is not None:
            span.end(end_time=self._ns(max(start, end)))
