"""Public test doubles for voxflow users and our own tests.

* :class:`FakeClock` — the deterministic :class:`voxflow.clock.VirtualClock`.
* :class:`EventRecorder` — records flow (and conversation) events from an event bus.
"""

from __future__ import annotations

from voxflow.clock import VirtualClock as FakeClock
from voxflow.testing._recorder import EventRecorder as EventRecorder

__all__ = ["EventRecorder", "FakeClock"]
