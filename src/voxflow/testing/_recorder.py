"""``EventRecorder``: records what a :class:`~voxflow.flow.FlowEventBus` delivers."""

from __future__ import annotations

from types import TracebackType
from typing import Any, TypeVar

from pydantic import BaseModel

from voxflow.flow.events import FlowEventBus, Subscription, flow_event_bus

__all__ = ["EventRecorder"]

E = TypeVar("E", bound=BaseModel)


class EventRecorder:
    """Record every event emitted on ``bus`` (inline, so the order is exact).

    Use as a context manager, or call :meth:`start`/:meth:`close`::

        with EventRecorder() as rec:
            flow.kickoff()
        assert rec.kinds() == ["flow_started", ...]

    Args:
        bus: the bus to listen to (default: the process-wide one).
        flow_id: keep only events whose ``flow_id`` is this one.
        event_type: keep only events of this class.
    """

    def __init__(
        self,
        bus: FlowEventBus | None = None,
        *,
        flow_id: str | None = None,
        event_type: type[BaseModel] = BaseModel,
    ) -> None:
        if bus is not None and not isinstance(bus, FlowEventBus):
            raise TypeError("bus must be a FlowEventBus")
        self.bus = bus or flow_event_bus
        self.flow_id = flow_id
        self.event_type = event_type
        self.events: list[Any] = []
        self._sub: Subscription | None = None

    def _record(self, event: Any) -> None:
        if self.flow_id is None or getattr(event, "flow_id", None) == self.flow_id:
            self.events.append(event)

    def start(self) -> EventRecorder:
        """Begin recording (idempotent)."""
        if self._sub is None:
            self._sub = self.bus.subscribe(self._record, event_type=self.event_type, inline=True)
        return self

    def close(self) -> None:
        """Stop recording (idempotent); recorded events stay available."""
        if self._sub is not None:
            self._sub.close()
            self._sub = None

    def kinds(self) -> list[str]:
        """The ``kind`` of every recorded event, in order."""
        return [str(getattr(e, "kind", type(e).__name__)) for e in self.events]

    def of(self, event_type: type[E]) -> list[E]:
        """The recorded events of one class, in order."""
        return [e for e in self.events if isinstance(e, event_type)]

    def of_kind(self, kind: str) -> list[Any]:
        """The recorded events whose ``kind`` is ``kind``, in order."""
        return [e for e in self.events if getattr(e, "kind", None) == kind]

    def methods(self, kind: str) -> list[str]:
        """``method_name`` of every recorded event of ``kind`` (e.g. "method_finished")."""
        return [e.method_name for e in self.events if getattr(e, "kind", None) == kind]

    def __enter__(self) -> EventRecorder:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"EventRecorder(events={len(self.events)}, recording={self._sub is not None})"
