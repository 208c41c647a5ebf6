"""The test kit: scripted callers on a simulated line, and assertions that read like a spec.

A :class:`~.script.CallScript` says what a simulated user says and when; the simulated
line (:mod:`.simulated`) plays it to a real voice session; :func:`~.scenario.run_call`
runs the call and returns a :class:`~.result.CallResult` (or raises a
:class:`~.assertions.ScriptStepError` naming a step that could not happen when it said);
:mod:`.assertions` check it and
:mod:`.timeline` prints it. :mod:`.pytest_plugin` offers all of it as fixtures, and
:mod:`.flows` the flows voxflow's own tests answer with. :class:`~.phone_carrier.
SimulatedCarrier` dials a ``voxflow phone`` server like Twilio (the ``phone_call``
fixture).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .assertions import ScriptStepError
    from .call_runner import CallRunner
    from .phone_carrier import SimulatedCarrier
    from .result import CallReply, CallResult
    from .scenario import run_call
    from .script import CallScript

__all__ = ["CallReply", "CallResult", "CallRunner", "CallScript", "ScriptStepError",
           "SimulatedCarrier", "run_call"]

# Imported on first use: the pytest plugin (a module of this package) is loaded by every
# pytest run, and must not load the voice pipeline or numpy until a test asks for a call.
_HOMES = {"CallReply": "result", "CallResult": "result", "CallRunner": "call_runner",
          "CallScript": "script",
          "ScriptStepError": "assertions", "SimulatedCarrier": "phone_carrier",
          "run_call": "scenario"}


def __getattr__(name: str) -> object:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_HOMES[name]}", __name__), name)
    globals()[name] = value
    return value
