"""A scripted call's reactive steps happen when they say, or the call says which could
not: ``until(t)`` keeps the call going and never delays a step, and a step whose reply
never came is not played at some other time (the test would pass a wrong call) but
raised as a :class:`ScriptStepError` naming it."""

from __future__ import annotations

import pytest
from voxflow_adapters.testkit.assertions import CallAssertionError, ScriptStepError
from voxflow_adapters.testkit.call_runner import CallRunner
from voxflow_adapters.testkit.flows import Teller
from voxflow_adapters.testkit.scenario import CallResult, run_call
from voxflow_adapters.testkit.script import CallScript
from voxflow_voice.engines import VoiceEngines

pytestmark = pytest.mark.models

GAP = 0.8


def second_line(until: str | None) -> CallScript:
    """Hello, then a second line 0.8 s after the answer ended; ``until(12)`` written
    before the step, after it, or not at all."""
    script = CallScript().user_says(0.5, "Hello there.")
    if until == "before":
        script.until(12.0)
    script.then_says("What time is it?", gap=GAP)
    if until == "after":
        script.until(12.0)
    return script


def since_start(call: CallResult, at: float) -> float:
    return at - call.tape.start


@pytest.mark.parametrize("until", ["before", "after"])
async def test_until_never_delays_a_step(engines: VoiceEngines, until: str) -> None:
    plain = await run_call(Teller(), second_line(None), engines)
    kept = await run_call(Teller(), second_line(until), engines)
    for call in (plain, kept):
        [step] = call.client.steps()
        # (its audio's end: the reply settles later, once its turn is final)
        played_to = call.metrics()[0].playback_end
        assert played_to is not None
        first_reply_end = since_start(call, played_to)
        assert step.fired_at == pytest.approx(first_reply_end + GAP, abs=0.03), step
        assert step.missed is None and step.trigger_at == pytest.approx(first_reply_end,
                                                                          abs=0.03)
    # the second turn came when it did without until(), not after 12 s (it was at 21.5)
    committed = [since_start(c, c.of_kind("turn_committed")[1].at) for c in (plain, kept)]
    assert committed[0] < 6.0 and committed[1] == pytest.approx(committed[0], abs=0.05)
    assert [e.kind for e in plain.events] == [e.kind for e in kept.events][: len(plain.events)]
    # until() still kept the call going
    assert since_start(kept, kept.of_kind("session_closed")[0].at) >= 12.0


async def test_a_step_whose_reply_never_came_is_refused_by_name(engines: VoiceEngines) -> None:
    # Nobody asked anything: no reply will start, so "after the reply" cannot happen.
    script = CallScript().then_says("Hello there.", gap=0.5).then_says("And goodbye.")
    with pytest.raises(ScriptStepError) as refused:
        await run_call(Teller(), script, engines)
    error = refused.value
    assert isinstance(error, CallAssertionError)  # a test fails on it, with the call
    assert error.reason.startswith(
        "script step 1, then_says(\"Hello there.\", after=\"reply_end\", gap=0.5), could not "
        "happen when it said: no reply started within 10.0 s after it was armed at 0.00 s"
    ), error.reason
    assert 'script step 2, then_says("And goodbye."' in error.reason  # never armed
    first, second = error.call.client.steps()
    assert first.fired_at is None and first.missed is not None
    assert second.armed_at is None and second.missed is not None
    assert error.call.transcripts() == []  # neither line was said at another time
    assert "script     step 1 could not happen (no reply started" in error.timeline
    # the call ended once the step was given up (10 s + the tail), not at its 300 s limit
    assert since_start(error.call, error.call.of_kind("session_closed")[0].at) < 14.0


async def test_a_barge_in_on_a_reply_that_never_started_is_refused(
    engines: VoiceEngines,
) -> None:
    script = CallScript().then_says("Stop, please.", after="reply_start", gap=1.0)
    with pytest.raises(ScriptStepError, match=r"^script step 1, then_says\(\"Stop, please\.\", "
                       r"after=\"reply_start\", gap=1\.0\), could not happen"):
        await run_call(Teller(), script, engines)


async def test_max_wait_is_part_of_what_a_step_says(engines: VoiceEngines) -> None:
    # "after the reply, or after 1.5 s if none started": the step happens as written
    script = CallScript().then_says("Hello there.", max_wait=1.5)
    call = await run_call(Teller(), script, engines)
    [step] = call.client.steps()
    assert step.missed is None and step.trigger_at is None
    assert step.fired_at == pytest.approx(1.5, abs=0.03)
    assert call.transcripts() and call.transcripts()[0].lower().startswith("hello")
    with pytest.raises(ValueError, match="max_wait must be"):
        CallScript().then_says("Hello.", max_wait=0)


def test_the_voice_call_fixture_fails_a_test_on_a_missed_step(
    engines: VoiceEngines,
) -> None:
    runner = CallRunner(engines)
    with pytest.raises(ScriptStepError):
        runner(Teller(), CallScript().user_says(0.5, "Hello.").then_mutes(
            1.0, after="reply_end").then_says("Are you there?"))
    # the call is kept, for the plugin's report
    assert len(runner.calls) == 1
    steps = runner.calls[0].client.steps()
    assert steps[0].missed is None and steps[1].missed is not None
