"""Conversation tracing: one trace batch per session, exported once.

A :class:`TraceBatch` collects spans (one ``turn`` span per ``handle_turn``, one ``llm``
span per model call made during a turn). With deferred finalization (the conversational
default) a batch stays open across turns and is exported once, by
``finalize_session_traces()``; otherwise every turn is its own batch, exported when the
turn ends. Nested work (an ``Agent`` called from a handler) adds spans to the open batch
and never closes it.

Exporters are registered process-wide with :func:`add_trace_exporter`:

* :class:`InMemoryTraceRecorder` keeps batches in a list (tests, debugging);
* :class:`JsonlTraceExporter` appends one JSON line per batch to a file;

The same turns are OpenTelemetry spans as they run when tracing is on
(:mod:`voxflow.telemetry`): each turn is a live ``voxflow.handler`` span, current while
the flow's handler runs, so its LLM calls (``chat {model}``), agents and tool calls
(``execute_tool {name}``) are its children, and in a voice call it is a child of the
call's ``voxflow.turn`` span. (``opentelemetry_exporter()``, which replayed finished
batches as spans afterwards, is gone: it made a second, parentless copy of them.)

With no exporter registered and tracing off, tracing costs nothing: no tracer, no spans.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from voxflow import telemetry
from voxflow.clock import Clock, MonotonicClock
from voxflow.ids import SessionId, TurnId
from voxflow.llm import LLMEvent, observe_llm

__all__ = [
    "InMemoryTraceRecorder",
    "JsonlTraceExporter",
    "SessionTracer",
    "TraceBatch",
    "TraceExporter",
    "TraceSpan",
    "add_trace_exporter",
    "remove_trace_exporter",
    "trace_exporters",
]

logger = logging.getLogger(__name__)


class TraceSpan(BaseModel):
    """One timed operation; times are seconds since the Unix epoch."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    span_id: int
    parent_id: int | None = None
    name: str
    kind: str = Field(description="'turn' or 'llm'")
    start: float
    end: float | None = None
    attributes: dict[str, Any] = Field(default_factory=dict)


class TraceBatch(BaseModel):
    """The spans of one session (deferred) or one turn, exported together."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    batch_id: str = Field(default_factory=lambda: str(uuid.uuid4()))
    flow_name: str
    session_id: SessionId = SessionId("")
    started_at: float
    finished_at: float | None = None
    turns: int = 0
    spans: list[TraceSpan] = Field(default_factory=list)


@runtime_checkable
class TraceExporter(Protocol):
    """Receives each finished batch exactly once."""

    def export(self, batch: TraceBatch) -> None:
        """Take a finished batch (must not block for long)."""
        ...


_lock = threading.Lock()
_exporters: tuple[TraceExporter, ...] = ()


def add_trace_exporter(exporter: TraceExporter) -> TraceExporter:
    """Register ``exporter`` for every conversational flow of the process; returns it."""
    global _exporters
    if not isinstance(exporter, TraceExporter):
        raise TypeError("exporter must have an export(batch) method")
    with _lock:
        _exporters = (*_exporters, exporter)
    return exporter


def remove_trace_exporter(exporter: TraceExporter) -> None:
    """Unregister ``exporter`` (no-op if it was not registered)."""
    global _exporters
    with _lock:
        _exporters = tuple(e for e in _exporters if e is not exporter)


def trace_exporters() -> tuple[TraceExporter, ...]:
    """The registered exporters."""
    return _exporters


class InMemoryTraceRecorder:
    """Keeps exported batches in :attr:`batches`."""

    def __init__(self) -> None:
        self.batches: list[TraceBatch] = []

    def export(self, batch: TraceBatch) -> None:
        """Append ``batch``."""
        self.batches.append(batch)


class JsonlTraceExporter:
    """Appends each batch as one JSON line to ``path`` (created on first export)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()

    def export(self, batch: TraceBatch) -> None:
        """Write ``batch`` as one line."""
        line = batch.model_dump_json() + "\n"
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as f:
                f.write(line)

    @staticmethod
    def read(path: str | os.PathLike[str]) -> list[TraceBatch]:
        """The batches stored in ``path``."""
        text = Path(path).read_text(encoding="utf-8")
        return [TraceBatch.model_validate(json.loads(line)) for line in text.splitlines() if line]


@dataclasses.dataclass(slots=True)
class SessionTracer:
    """The trace batch of one conversational Flow instance (internal to the turn APIs).

    Times are read on the flow's ``clock`` and given as Unix seconds (what OpenTelemetry
    takes): the wall time when the tracer was made, plus the clock's time since. Spans
    therefore last what the clock says (a :class:`~voxflow.clock.VirtualClock`'s time
    in tests), and a wall-clock step never makes a span negative.
    """

    flow_name: str
    clock: Clock = dataclasses.field(default_factory=MonotonicClock)
    deferred: bool = True
    batch: TraceBatch | None = None
    _ids: Iterator[int] = dataclasses.field(default_factory=lambda: itertools.count(1))
    _origin: tuple[float, float] = (0.0, 0.0)
    _live: Any = None  # the running turn's OpenTelemetry span

    def __post_init__(self) -> None:
        self._origin = (time.time(), self.clock.now())

    @classmethod
    def for_flow(cls, flow_name: str, clock: Clock | None = None) -> SessionTracer | None:
        """A tracer when an exporter is registered or OpenTelemetry tracing is on, else
        None (no cost)."""
        if not _exporters and not telemetry.tracing_enabled():
            return None
        return cls(flow_name) if clock is None else cls(flow_name, clock)

    def now(self) -> float:
        """Unix seconds, on the clock."""
        wall, reading = self._origin
        return wall + (self.clock.now() - reading)

    @contextlib.contextmanager
    def turn(self, index: int, session_id: SessionId, turn_id: TurnId, *,
             open_turn: bool = True) -> Iterator[TraceSpan]:
        """Record one turn (and the LLM calls made in it) in the open batch, and run it
        in a live ``voxflow.handler`` span when OpenTelemetry tracing is on, under the
        turn's ``voxflow.turn`` span: opened here (a text turn's) when ``open_turn``,
        else the caller's (a voice session opens it at the user's speech end)."""
        ids = {"voxflow.session_id": str(session_id), "voxflow.turn_id": str(turn_id)}
        with (telemetry.turn_span(session_id, turn_id) if open_turn
              else contextlib.nullcontext()), telemetry.trace_span(
                "voxflow.handler",
                {"voxflow.flow": self.flow_name, **ids, "voxflow.turn_index": index},
        ) as live:
            self._live = live
            try:
                with self._batch_turn(index, session_id) as span:
                    yield span
            finally:
                self._live = None

    @contextlib.contextmanager
    def _batch_turn(self, index: int, session_id: SessionId) -> Iterator[TraceSpan]:
        if not _exporters:  # OpenTelemetry only: no batch to keep
            yield TraceSpan(span_id=0, name=f"turn {index}", kind="turn", start=0.0)
            return
        if self.batch is not None and self.batch.session_id != session_id:
            self.finalize()
        if self.batch is None:
            self.batch = TraceBatch(
                flow_name=self.flow_name, session_id=session_id, started_at=self.now()
            )
        batch = self.batch
        batch.turns += 1
        span = TraceSpan(
            span_id=next(self._ids), name=f"turn {index}", kind="turn", start=self.now()
        )
        batch.spans.append(span)
        calls: dict[str, TraceSpan] = {}

        def on_llm(event: LLMEvent) -> None:
            if event.type == "llm_call_started":
                llm_span = TraceSpan(
                    span_id=next(self._ids),
                    parent_id=span.span_id,
                    name=f"llm {event.model}",
                    kind="llm",
                    start=self.now(),
                    attributes={"model": event.model, "has_tools": event.has_tools},
                )
                if event.agent_name:
                    llm_span.attributes["agent_name"] = event.agent_name
                calls[event.call_id] = llm_span
                batch.spans.append(llm_span)
            elif event.type in ("llm_call_completed", "llm_call_failed"):
                started = calls.pop(event.call_id, None)
                if started is not None:
                    started.end = self.now()
                    started.attributes["status"] = (
                        "ok" if event.type == "llm_call_completed" else "error"
                    )

        try:
            with observe_llm(on_llm):
                yield span
        except BaseException as exc:
            span.attributes["error_type"] = type(exc).__name__
            raise
        finally:
            span.end = self.now()
            if not self.deferred:
                self.finalize()

    def annotate(self, **attributes: Any) -> None:
        """Add attributes to the current (last) turn span."""
        live = self._live
        if live is not None:
            for key, value in attributes.items():
                if isinstance(value, str | bool | int | float):
                    live.set_attribute(f"voxflow.{key}", value)
        if self.batch is not None:
            for span in reversed(self.batch.spans):
                if span.kind == "turn":
                    span.attributes.update(attributes)
                    return

    def finalize(self) -> None:
        """Export the open batch once to every registered exporter (idempotent)."""
        batch, self.batch = self.batch, None
        if batch is None:
            return
        batch.finished_at = self.now()
        for exporter in _exporters:
            try:
                exporter.export(batch)
            except Exception:
                logger.exception("trace exporter %s failed", type(exporter).__name__)
