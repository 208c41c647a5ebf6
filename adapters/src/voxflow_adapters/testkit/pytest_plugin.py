"""voxflow's pytest plugin: fixtures for testing a voice assistant with scripted calls.

Installed with ``voxflow[voice]`` and registered through the ``pytest11`` entry point,
so plain ``pytest`` finds it (no conftest). Fixtures:

* ``voice_engines`` (session): Whisper tiny.en, the bundled Piper voice (without
  sampling noise, so a call's audio never varies) and Silero VAD, loaded once for the
  whole test session, on first use;
* ``voice_call``: a :class:`~voxflow_adapters.testkit.call_runner.CallRunner`:
  ``call = voice_call(MyAssistant(), script)`` plays a
  :class:`~voxflow_adapters.testkit.script.CallScript` and returns the
  :class:`~voxflow_adapters.testkit.scenario.CallResult` (``await voice_call.arun(...)`` in an
  async test);
* ``phone_call``: dials a ``voxflow phone`` server like Twilio:
  ``async with phone_call("http://127.0.0.1:8080/voice") as carrier:`` gives a
  :class:`~voxflow_adapters.testkit.phone_carrier.SimulatedCarrier` (``auth_token=`` signs
  the webhook); the block's end hangs up;
* ``virtual_clock``: a fresh :class:`~voxflow.clock.VirtualClock` that jumps when the
  loop is idle (for your own timed code);
* ``voxflow_realtime``: whether this test's calls run on the wall clock.

Assertions on a finished call are in :mod:`voxflow_adapters.testkit.assertions`; the scripted
LLM for flows and agents is :class:`voxflow.testing.ScriptedLLM`.

Calls run on virtual audio time unless ``pytest --voxflow-realtime`` is given or the
test is marked ``@pytest.mark.voxflow_realtime``. When a test that ran calls fails on a
plain ``assert``, the report gets a "voxflow call N timeline" section per call.

Importing this module is cheap: models and the voice pipeline load when a fixture is
first used, so a test session that never asks for one never pays for them.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Generator
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any

import pytest

from voxflow.clock import VirtualClock

# A test run reaches no network: litellm fetches its model cost map from the internet
# when it is first imported unless told otherwise, and a test module may import it
# before voxflow does (voxflow.llm sets the same default). Plugins load before any test
# module is collected.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

if TYPE_CHECKING:
    from voxflow_voice.engines import VoiceEngines

    from voxflow_adapters.testkit.call_runner import CallRunner
    from voxflow_adapters.testkit.phone_carrier import SimulatedCarrier

__all__ = [
    "phone_call",
    "pytest_addoption",
    "pytest_configure",
    "pytest_report_header",
    "pytest_runtest_makereport",
    "virtual_clock",
    "voice_call",
    "voice_engines",
    "voxflow_realtime",
]

_RUNNER_KEY = pytest.StashKey["CallRunner"]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("voxflow", "voxflow scripted calls")
    group.addoption(
        "--voxflow-realtime", action="store_true", default=False,
        help="run voxflow scripted calls on the wall clock (real time) instead of "
             "virtual audio time",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "voxflow_realtime: run this test's voxflow scripted calls on the wall clock "
        "(as --voxflow-realtime does for every test)",
    )


def pytest_report_header(config: pytest.Config) -> str:
    mode = "real time" if config.getoption("voxflow_realtime") else "virtual audio time"
    return f"voxflow: scripted calls on {mode}"


@pytest.fixture(scope="session")
def voice_engines() -> VoiceEngines:
    """The engines the ``VOXFLOW_*`` variables name (the defaults: the bundled models),
    loaded once per test session, synthesis deterministic."""
    # the plugin loads in every pytest run of a project that installs it: the models
    # only when the fixture is used
    from voxflow_voice.engines import VoiceEngines

    return VoiceEngines.from_environment(deterministic=True)


@pytest.fixture
def voxflow_realtime(request: pytest.FixtureRequest) -> bool:
    """Whether this test's calls run in real time (option or marker)."""
    return bool(request.config.getoption("voxflow_realtime")) or (
        request.node.get_closest_marker("voxflow_realtime") is not None
    )


@pytest.fixture
def voice_call(
    request: pytest.FixtureRequest, voice_engines: VoiceEngines, voxflow_realtime: bool
) -> CallRunner:
    """Runs scripted calls: ``call = voice_call(flow, script)`` (see ``CallRunner``)."""
    # the voice pipeline (numpy, the session) only when the fixture is used
    from voxflow_adapters.testkit.call_runner import CallRunner

    runner = CallRunner(voice_engines, realtime=voxflow_realtime)
    request.node.stash[_RUNNER_KEY] = runner
    return runner


@pytest.fixture
def phone_call() -> Callable[..., AbstractAsyncContextManager[SimulatedCarrier]]:
    """Dials a phone server like the carrier: ``async with phone_call(webhook_url,
    auth_token=None) as carrier`` (a :class:`~voxflow_adapters.testkit.phone_carrier.
    SimulatedCarrier`: ``carrier.say(wav)``, ``carrier.press("1")``, what it played)."""
    # aiohttp and numpy only when the fixture is used
    from voxflow_adapters.testkit.phone_carrier import phone_call as dial

    return dial


@pytest.fixture
def virtual_clock() -> VirtualClock:
    """A fresh virtual clock that jumps to the next sleeper when the loop is idle
    (enter it with ``async with`` to start jumping)."""
    return VirtualClock(autojump=True)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, Any, Any]:
    """Add each scripted call's timeline to the report of a failed test (unless the
    failure is a call assertion's, whose message shows it already)."""
    report = yield
    runner = item.stash.get(_RUNNER_KEY, None)
    if report.failed and runner is not None and runner.calls:
        # only for a failed test with scripted calls
        from voxflow_adapters.testkit.assertions import CallAssertionError
        from voxflow_adapters.testkit.timeline import call_timeline

        if call.excinfo is not None and call.excinfo.errisinstance(CallAssertionError):
            return report
        for number, result in enumerate(runner.calls, 1):
            report.sections.append((f"voxflow call {number} timeline", call_timeline(result)))
    return report
