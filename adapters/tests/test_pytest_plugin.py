"""voxflow's pytest plugin (entry point ``pytest11``): fixtures, real-time switch, reports."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest_plugins = ["pytester"]
pytestmark = pytest.mark.models

INI = "[pytest]\nasyncio_default_fixture_loop_scope = function\n"

CHEAP = """
import sys

def test_realtime_is_off_by_default(voxflow_realtime):
    assert voxflow_realtime is False

@pytest.mark.voxflow_realtime
def test_the_marker_turns_it_on(voxflow_realtime):
    assert voxflow_realtime is True

def test_no_model_was_loaded(virtual_clock):
    assert virtual_clock.now() == 0.0
    assert "faster_whisper" not in sys.modules and "piper" not in sys.modules
"""


def test_importing_the_plugin_loads_no_model_and_no_voice_pipeline() -> None:
    code = (
        "import sys, voxflow_adapters.testkit.pytest_plugin\n"
        "heavy = [m for m in ('numpy', 'voxflow_voice', 'faster_whisper', 'piper', "
        "'onnxruntime', 'litellm') if m in sys.modules]\n"
        "print(heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60)
    assert out.stdout.strip() == "[]"


def test_the_realtime_switch_and_the_virtual_clock(pytester: pytest.Pytester) -> None:
    pytester.makeini(INI)
    pytester.makepyfile("import pytest\n" + CHEAP)
    # In a process of its own, so "no model was loaded" is not about this one.
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["voxflow: scripted calls on virtual audio time"])
    # Every inner run in a process of its own: an in-process run drops the modules it
    # imported from sys.modules afterwards and leaves their parents' attributes pointing
    # at them (voxflow.testing, a stale module, failed tests/test_import.py after this).
    everywhere = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--voxflow-realtime",
                                               "-k", "default")
    everywhere.assert_outcomes(failed=1)  # the option turns it on for every test
    everywhere.stdout.fnmatch_lines(["voxflow: scripted calls on real time"])


def test_a_plain_assert_failure_gets_the_call_timeline(pytester: pytest.Pytester) -> None:
    pytester.makeini(INI)
    pytester.makepyfile("""
        from voxflow_adapters.testkit.script import CallScript
        from voxflow.testing import Acknowledger

        def test_wrong_expectation(voice_call):
            call = voice_call(Acknowledger(), CallScript().user_says(0.3, "Hello there."))
            assert voice_call.realtime is False and voice_call.calls == [call]
            assert call.transcripts() == ["Goodbye."]
    """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "*- voxflow call 1 timeline -*",
        "call timeline (s since the call started):",
        '*user       turn 1 committed: "Hello there."',
        '*assistant  reply 1 says: "Request received."',
        "*assistant  reply 1 played whole",
    ])


def test_a_kit_assertion_failure_shows_the_test_not_the_kit(pytester: pytest.Pytester) -> None:
    # As pytest's own helpers do (__tracebackhide__): the failing line is the test's, the
    # message says what happened; the kit's source lines would only hide it.
    pytester.makeini(INI)
    pytester.makepyfile("""
        import pytest
        from voxflow_adapters.testkit.assertions import assert_interrupted, assert_turn_committed
        from voxflow_adapters.testkit.script import CallScript
        from voxflow.testing import Acknowledger

        def test_expects_a_barge_in(voice_call):
            call = voice_call(Acknowledger(), CallScript().user_says(0.3, "Hello there."))
            assert_turn_committed(call, "Hello there.")
            assert_interrupted(call)

        def test_misuses_the_kit(voice_call):
            call = voice_call(Acknowledger(), CallScript().user_says(0.3, "Hello there."))
            assert_interrupted(call, reply="no-such-reply")
    """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--tb=long")
    result.assert_outcomes(failed=2)
    out = result.stdout.str()
    result.stdout.fnmatch_lines([
        ">       assert_interrupted(call)",
        "E       *CallAssertionError: expected a reply interrupted by the user, but:*",
        '>       assert_interrupted(call, reply="no-such-reply")',
        "E       ValueError: reply 'no-such-reply' is not a reply of this call*",
    ])
    assert "testkit/assertions.py" not in out, out


NO_NETWORK = """
import socket

looked_up = []
_getaddrinfo = socket.getaddrinfo

def _record(host, *args, **kwargs):
    looked_up.append(host)
    return _getaddrinfo(host, *args, **kwargs)

socket.getaddrinfo = _record
import litellm  # noqa: E402  (a user's test module importing litellm before voxflow does)

def test_importing_litellm_looked_nothing_up():
    assert looked_up == []
"""


def test_a_test_run_never_fetches_litellms_cost_map(pytester: pytest.Pytester,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """litellm fetches its model cost map from the internet on import unless told not to:
    the plugin tells it, before any test module is imported."""
    monkeypatch.delenv("LITELLM_LOCAL_MODEL_COST_MAP", raising=False)
    pytester.makeini(INI)
    pytester.makepyfile(NO_NETWORK)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)


def test_the_fixtures_and_run_call_take_the_environments_end_of_turn(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """VOXFLOW_END_OF_TURN chooses the kit's end of turn as it chooses the CLI's: the
    ``voice_engines`` fixture loads the model and ``run_call`` (``settings=None``) takes the
    voice settings the variables ask for (issue 32: the CLI honoured it, the kit did not)."""
    monkeypatch.setenv("VOXFLOW_END_OF_TURN", "smart-turn")
    monkeypatch.setenv("VOXFLOW_MAX_END_OF_TURN_SILENCE", "1.4")
    pytester.makeini(INI)
    pytester.makepyfile("""
        from voxflow_adapters.testkit.scenario import run_call
        from voxflow_adapters.testkit.script import CallScript
        from voxflow_voice.engines.end_of_turn import SmartTurn
        from voxflow_voice.session import VoiceSettings
        from voxflow.settings import Settings
        from voxflow.testing import Acknowledger
        from voxflow.turns import TurnRunner

        WANTED = VoiceSettings.from_settings(
            Settings().with_options(end_of_turn="smart-turn", max_end_of_turn_silence=1.4))

        def test_the_fixture_loads_the_model(voice_engines):
            assert isinstance(voice_engines.end_of_turn, SmartTurn)

        import pytest

        @pytest.mark.asyncio
        async def test_run_call_takes_the_environments_settings(voice_engines):
            seen = []
            call = await run_call(TurnRunner(Acknowledger()),
                                  CallScript().user_says(0.3, "Hello there."), voice_engines,
                                  on_session=seen.append)
            assert seen[0].settings == WANTED
            assert call.transcripts() == ["Hello there."]

        def test_the_call_runner_too(voice_call):
            seen = []
            voice_call(Acknowledger(), CallScript().user_says(0.3, "Hello there."),
                       on_session=seen.append)
            assert seen[0].settings == WANTED
    """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=3)
