"""Public test doubles for voxflow users and our own tests.

* :class:`FakeClock` — the deterministic :class:`voxflow.clock.VirtualClock`.
* :class:`EventRecorder` — records flow (and conversation) events from an event bus.
* :class:`Acknowledger` — a conversational flow that answers every turn at once.
* :class:`Echo` — a conversational flow that answers ``echo <what the user said>``.
* :class:`ScriptedLLM` — a real :class:`voxflow.llm.LLM` whose (litellm custom) provider
  plays scripted replies at a given pace, fails or hangs: :func:`reply`, :func:`fail`,
  :func:`hang`, :func:`tool_call`; each call is logged as a :class:`ScriptedCall`.

The voice side of the kit (call fixtures, assertions on a call, the pytest plugin) is in
:mod:`voxflow_adapters.testkit.flows` and :mod:`voxflow_adapters.testkit.pytest_plugin`
(``pip install voxflow[voice]``).
"""

from __future__ import annotations

from voxflow.clock import VirtualClock as FakeClock
from voxflow.testing._flows import Acknowledger as Acknowledger
from voxflow.testing._flows import Echo as Echo
from voxflow.testing._recorder import EventRecorder as EventRecorder
from voxflow.testing._scripted_llm import ScriptedCall as ScriptedCall
from voxflow.testing._scripted_llm import ScriptedLLM as ScriptedLLM
from voxflow.testing._scripted_llm import ScriptedReply as ScriptedReply
from voxflow.testing._scripted_llm import fail as fail
from voxflow.testing._scripted_llm import hang as hang
from voxflow.testing._scripted_llm import reply as reply
from voxflow.testing._scripted_llm import tool_call as tool_call

__all__ = [
    "Acknowledger",
    "Echo",
    "EventRecorder",
    "FakeClock",
    "ScriptedCall",
    "ScriptedLLM",
    "ScriptedReply",
    "fail",
    "hang",
    "reply",
    "tool_call",
]
