"""The test kit: scripted callers on a simulated line, and assertions that read like a spec.

A :class:`~.script.CallScript` says what a simulated user says and when; the simulated
line (:mod:`.simulated`) plays it to a real voice session; :func:`~.scenario.run_call`
runs the call and returns a :class:`~.result.CallResult` (or raises a
:class:`~.assertions.ScriptStepError` naming a step that could not happen when it said);
:mod:`.assertions` check it and
:mod:`.timeline` prints it. :mod:`.pytest_plugin` offers all of it as fixtures, and
:mod:`.flows` the flows voxflow's own tests answer with.
"""

from .assertions import ScriptStepError
from .call_runner import CallRunner
from .scenario import CallResult, run_call
from .script import CallScript

__all__ = ["CallResult", "CallRunner", "CallScript", "ScriptStepError", "run_call"]
