"""``benchmarks/capacity.py``'s calls (``_capacity_calls.py``), for one call of two turns on
the virtual clock.

The benchmark's figures (voice to voice, CPU, RSS per call) are real-time measurements
it prints; this test only checks that its load is what it claims: every question asked
is committed and answered, the reply is the long fixed one, and no stale sample plays.
"""

from __future__ import annotations

from types import ModuleType

import pytest
from voxflow_voice.engines import VoiceEngines
from voxflow_voice.engines.tts import DETERMINISTIC_TTS_SETTINGS
from voxflow_voice.session import VoiceSettings
from voxflow_voice.speak.playback import HOLD_LIMIT_SECONDS
from voxflow_voice.speak.segmenter import TextSegmenter

from voxflow.clock import VirtualClock

from .conftest import benchmark_module

pytestmark = pytest.mark.models




def _capacity() -> ModuleType:
    """benchmarks/_capacity_calls.py (capacity.py's calls)."""
    return benchmark_module("_capacity_calls")


async def test_one_call_of_two_turns_commits_both_and_plays_no_stale_sample(
    engines: VoiceEngines,
) -> None:
    capacity = _capacity()
    row, calls = await capacity.run_calls(engines, 1, 2, clock=VirtualClock(autojump=True))
    (call,) = calls
    assert (row.calls, row.asked, row.committed) == (1, 2, 2)
    assert row.turns_lost == 0 and row.stale_samples == 0 == call.stale_samples()
    assert row.barge_ins == 0  # the caller waited for each reply to end
    assert len(call.transcripts()) == 2
    assert all("calendar" in t.lower() for t in call.transcripts())
    replies = call.replies()
    assert len(replies) == 2
    assert all(call.settled(r) == "completed" for r in replies)
    # Each reply is the long fixed one, heard whole (about 9 s of the bundled voice).
    assert all(call.heard_seconds(r) > 6.0 for r in replies)
    assert len(capacity.voice_to_voice(call)) == 2


def test_heard_right_reads_words_across_any_whitespace_and_the_contraction() -> None:
    capacity = _capacity()
    assert capacity.heard_right("can you tell me\nwhat's on my calendar\tthis afternoon")
    assert capacity.heard_right(" 'Can you tell me what is on my calendar this afternoon?' ")
    assert not capacity.heard_right("Can you tell me what is on my calendarthis afternoon?")
    assert not capacity.heard_right("Can you tell me what is on my calendar?")


def _due_ahead(engines: VoiceEngines, reply: str, settings: VoiceSettings) -> int:
    """Model jobs of ``reply`` (per call) that can only be submitted as work due ahead of
    playout, whatever the machine's speed.

    While its turn is unconfirmed a reply is held: playback keeps less than
    HOLD_LIMIT_SECONDS + a chunk of it and the speaker's handing-over task waits with
    one chunk more, and the speaker starts a segment only with at most
    ``synthesis_ahead`` s synthesized and not handed over. A segment that follows more
    audio than all that together cannot start before the verdict: its synthesis
    starts after its turn was confirmed and its first audio exists, as ``ahead`` work
    (its phonemes, then each sentence: one model job each). Earlier segments may
    be synthesized in the pause (speculative work) or not, as fast as the machine is.
    """
    chunk = DETERMINISTIC_TTS_SETTINGS.chunk_duration
    bound = HOLD_LIMIT_SECONDS + chunk + chunk + settings.synthesis_ahead
    segmenter = TextSegmenter(settings.segmenter)
    segments = [s.text for s in (*segmenter.push(reply), *segmenter.flush())]
    before, jobs = 0.0, 0
    for text in segments:
        sentences = list(engines.tts.synthesize(text))
        if before > bound:
            jobs += 1 + len(sentences)
        before += sum(s.samples.size for s in sentences) / engines.tts.sample_rate
    return jobs


async def test_offered_calls_in_real_time_on_the_scheduler_admit_two_refuse_one_lose_nothing(
    engines: VoiceEngines, capsys: pytest.CaptureFixture[str]
) -> None:
    """Three calls offered (one every 4 s) to an admission cap of 2, in real time with the
    real models on the shared ModelScheduler: the third is refused while the two others
    run; each admitted question is committed and answered, no stale sample plays, and the
    replies' later sentences went through the scheduler as work due ahead of playout."""
    from voxflow_adapters.hosting.admission import AdmissionController, AdmissionSettings
    from voxflow_adapters.hosting.call_cost import CallCostMeter
    from voxflow_voice import PiperTts, WhisperStt
    from voxflow_voice.scheduler import ModelScheduler

    capacity = _capacity()
    # The benchmark's reply is 0.5 + 4.1 + 4.8 s: on a fast machine all three segments
    # are synthesized in the pause, before the verdict (speculative work); a fourth
    # sentence comes after more audio than a held reply may have synthesized.
    reply = capacity.REPLY + " Your evening is free."
    due = _due_ahead(engines, reply, capacity.AFTER)
    assert due == 2  # the fourth sentence: its phonemes, its audio
    scheduler = ModelScheduler()  # the same shared models, their work on the scheduler
    scheduled = VoiceEngines(
        stt=WhisperStt(scheduler=scheduler),
        tts=PiperTts(settings=DETERMINISTIC_TTS_SETTINGS, scheduler=scheduler),
        make_vad=engines.make_vad, scheduler=scheduler)
    before = scheduler.statistics().completed
    # the cap of 2 alone decides: a meter whose clock stands still measures nothing (its
    # prior allows more), however loaded the machine running the tests
    meter = CallCostMeter(cores=4, clock=lambda: 0.0, machine_time=lambda: None)
    admission = AdmissionController(AdmissionSettings(max_calls=2), scheduler=scheduler,
                                    meter=meter)
    row, calls = await capacity.run_calls(scheduled, 3, 1, admission=admission,
                                          settings=capacity.AFTER, reply=reply)
    after = scheduler.statistics().completed
    assert (row.offered, row.calls, row.refused, admission.refused) == (3, 2, 1, 1)
    assert (row.asked, row.committed, row.turns_lost, row.stale_samples) == (2, 2, 0, 0)
    assert all("calendar" in t.lower() for call in calls for t in call.transcripts())
    assert row.transcribed_right == row.committed  # every committed turn heard right
    assert all(call.settled(r) == "completed" for call in calls for r in call.replies())
    # the cost decomposition's figures: each admitted call held at least as long as it
    # was heard (the held time adds its silent tail), and CPU spent
    assert row.held_seconds >= row.heard_seconds > 0 and row.cpu_seconds > 0
    assert row.held_seconds >= row.calls * capacity.TAIL
    # Each reply's fourth sentence ran as work due ahead of playout (statistics count a
    # job by the urgency it started with); the second and third may have too.
    assert after["ahead"] - before["ahead"] >= due * row.calls
    assert admission.load().active_calls == 0  # both slots released
    trace = [(5.0, 2, 0.15, 0.15, None, 9), (10.0, 0, 0.12, 0.08, 0.2, 11)]
    benchmark_module("_capacity_trace").print_cost_decomposition(row, 0.12, 0.01, trace)
    printed = capsys.readouterr().out
    assert f"CPU {row.cpu_seconds:.1f} s" in printed
    assert f"({row.held_seconds:.0f} s, each call's" in printed
    assert f"{100 * row.cpu_seconds / row.held_seconds:.1f} %" in printed
    assert "5: 2, 15.0 %, 9, 10: 0, 12.0 % (8.0), 11 [20.0]" in printed


def test_a_lull_keeps_the_caller_silent_then_asks_again_while_a_second_wave_arrives(
    engines: VoiceEngines,
) -> None:
    """``capacity.py --lull``: the caller asks its turns, stays silent the lull after the
    last reply, asks as many again; the second wave of offers falls in the lull, after
    the last first-wave caller fell silent and before the first talks again, and talks
    on while it does."""
    capacity = _capacity()
    question = capacity.question_audio(engines)
    steps = [s.describe() for s in capacity.caller_script(question, 2, 0.5, 30.0).steps]
    assert [("gap=0.8" in d, "gap=30.0" in d) for d in steps] == [
        (True, False), (False, True), (True, False)]
    assert capacity.caller_script(question, 2, 0.5).steps[0].describe() == steps[0]
    assert len(capacity.caller_script(question, 2, 0.5).steps) == 1
    at, over = capacity.second_wave(12.0, 2, 150.0)
    talk = 2 * (capacity.CYCLE + 1.5)  # a caller's turns
    silent_from = 12.0 + talk  # the last first-wave caller
    first_talks_again = talk + 150.0  # the first one admitted
    assert silent_from < at < at + over < first_talks_again < at + 2 * talk
