"""``CallRunner``: run scripted calls from a test, on virtual or real time.

The pytest plugin's ``voice_call`` fixture is a :class:`CallRunner` over the session's
shared engines::

    def test_barge_in(voice_call):
        script = (CallScript().user_says(0.5, "Tell me a story.")
                  .then_says("Stop, please.", after="reply_start", gap=2.0))
        call = voice_call(Assistant(), script)          # a sync test: no asyncio plugin
        assert_interrupted(call)

    async def test_async(voice_call):                   # with pytest-asyncio or anyio
        call = await voice_call.arun(Assistant(), script)

By default a call runs on a deterministic :class:`~voxflow.clock.VirtualClock` (audio
time that moves only when the pipeline is idle: seconds of call in a fraction of that,
the same result on any machine). ``realtime=True`` (``pytest --voxflow-realtime``, or the
``voxflow_realtime`` marker) runs the same call on the wall clock.
"""

from __future__ import annotations

import asyncio
from typing import Any

from voxflow_voice.engines import VoiceEngines
from voxflow_voice.session import VoiceSession

from voxflow.blocking import sync_twin
from voxflow.clock import Clock, MonotonicClock
from voxflow.conversation.flow import Flow
from voxflow.turns import TurnRunner

from .assertions import ScriptStepError
from .scenario import CallResult, run_call
from .script import CallScript
from .simulated import SimulatedClient
from .timeline import call_timeline

__all__ = ["CallRunner"]


class CallRunner:
    """Runs scripted calls against flows on shared engines, and keeps their results.

    Args:
        engines: the voice engines every call uses.
        realtime: run calls on the wall clock instead of virtual audio time.
        timeout: wall-clock seconds a call may take before it is cancelled.

    Attributes:
        calls: every finished call, in order (the plugin prints their timelines under a
            failed test).
    """

    def __init__(
        self, engines: VoiceEngines, *, realtime: bool = False, timeout: float = 300.0
    ) -> None:
        if not isinstance(engines, VoiceEngines):
            raise TypeError(f"engines must be VoiceEngines, not {type(engines).__name__}")
        if not isinstance(timeout, int | float) or isinstance(timeout, bool) or timeout <= 0:
            raise ValueError(f"timeout must be a number of seconds > 0, got {timeout!r}")
        self.engines = engines
        self.realtime = bool(realtime)
        self.timeout = float(timeout)
        self.calls: list[CallResult] = []

    def __repr__(self) -> str:
        return f"CallRunner(realtime={self.realtime}, calls={len(self.calls)})"

    async def arun(
        self, flow: Flow[Any] | TurnRunner, script: CallScript, *, clock: Clock | None = None,
        **options: Any,
    ) -> CallResult:
        """Play ``script`` against ``flow`` (a conversational ``Flow`` or its ``TurnRunner``).

        Args:
            flow: the assistant under test (a fresh instance per call).
            script: what the simulated user says and does.
            clock: the call's clock (default: virtual, or the wall clock when realtime).
            **options: more :func:`~voxflow_adapters.testkit.scenario.run_call` options
                (``settings=``, ``replies=``, ``jobs=``, ``tail=`` ...).

        Raises:
            TypeError: ``flow`` is neither a Flow nor a TurnRunner, or ``script`` is not a
                CallScript.
            TimeoutError: the call took longer than ``timeout`` wall-clock seconds (the
                message shows the call's timeline until then).
            ScriptStepError: a step of ``script`` could not happen when it said.
        """
        __tracebackhide__ = True  # a failure ends at the test's line (as pytest's helpers)
        turns: Flow[Any] | TurnRunner
        if isinstance(flow, Flow):
            # a flow is wired as every entry point wires it (voxflow.wiring: reply queue,
            # background jobs, announcements), unless the test brings its own queue/jobs
            turns = TurnRunner(flow) if {"replies", "jobs"} & set(options) else flow
        elif isinstance(flow, TurnRunner):
            turns = flow
        else:
            raise TypeError(
                f"flow must be a conversational Flow or a TurnRunner, not {type(flow).__name__}"
            )
        if not isinstance(script, CallScript):
            raise TypeError(f"script must be a CallScript, not {type(script).__name__}")
        if clock is None and self.realtime:
            clock = MonotonicClock()
        sessions: list[VoiceSession] = []
        given = options.pop("on_session", None)

        def on_session(session: VoiceSession) -> None:
            sessions.append(session)
            if given is not None:
                given(session)

        try:
            result = await asyncio.wait_for(
                run_call(turns, script, self.engines, clock=clock, on_session=on_session,
                         **options),
                self.timeout,
            )
        except ScriptStepError as refused:  # kept for the report, like any call
            self.calls.append(refused.call)
            raise
        except TimeoutError:
            so_far = ""
            if sessions and isinstance(sessions[0].transport, SimulatedClient):
                partial = CallResult(session=sessions[0], client=sessions[0].transport)
                so_far = "; what happened until then:\n\n" + call_timeline(partial)
            raise TimeoutError(
                f"the scripted call did not end within {self.timeout:.0f} s (wall clock)"
                + so_far
            ) from None
        self.calls.append(result)
        return result

    run = sync_twin(arun)

    __call__ = run
