"""Public test doubles for voxflow users and our own tests.

* :class:`FakeClock` — the deterministic :class:`voxflow.clock.VirtualClock`.
* :class:`EventRecorder` — records flow (and conversation) events from an event bus.
* :class:`Acknowledger` — a conversational flow that answers every turn at once.
"""

from __future__ import annotations

from voxflow.clock import VirtualClock as FakeClock
from voxflow.testing._flows import Acknowledger as Acknowledger
from voxflow.testing._recorder import EventRecorder as EventRecorder

__all__ = ["Acknowledger", "EventRecorder", "FakeClock"]
