"""Admission on a machine nothing else loads, for the tests of what is not admission
(dispatch, resume) on a shared, loaded machine: a call costs the unmeasured prior
(``call_cost.UNMEASURED_CALL_COST``, 28 %: 5 slots) on two cores, no other process's CPU
is counted and the event loop's lag is not judged, so ``max_calls`` calls are admitted
whatever the load.
(``test_admission.py``, ``test_call_cost.py`` and ``test_webrtc_safety.py`` test the
measured figures themselves.)

In process: :func:`pinned_admission`. Across a process boundary: ``python _pinned_cost.py
serve ARGS`` is ``voxflow serve ARGS`` with every admission's meter pinned (its own
``max_calls``, ``--max-calls``, still bounds it)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

from voxflow_adapters.hosting import admission
from voxflow_adapters.hosting.admission import AdmissionController, AdmissionSettings
from voxflow_adapters.hosting.call_cost import CallCostMeter, CostSettings


class PinnedMeter(CallCostMeter):
    """A meter whose clock and CPU seconds never move (its windows never close: the cost
    stays the prior), that counts no other process and records no loop lag."""

    def __init__(self, settings: CostSettings | None = None, *,
                 clock: Callable[[], float] = time.monotonic, rates: object = None) -> None:
        # (no rates: the prior is the unmeasured one, whatever the models' speed)
        super().__init__(settings, cores=2, cpu_time=lambda: 0.0, machine_time=lambda: None,
                         clock=lambda: 0.0)

    def record_loop_lag(self, seconds: float) -> None:
        """Not judged: the machine's load is not what the test is about."""


def pinned_admission(max_calls: int) -> AdmissionController:
    """Admits ``max_calls`` calls at once, whatever the machine's load."""
    return AdmissionController(AdmissionSettings(max_calls=max_calls), meter=PinnedMeter())


if __name__ == "__main__":
    from voxflow.cli.app import main

    admission.CallCostMeter = PinnedMeter  # type: ignore[misc]  # every controller's default
    sys.exit(main(sys.argv[1:]))
