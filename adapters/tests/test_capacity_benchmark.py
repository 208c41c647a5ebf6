"""``benchmarks/capacity.py``'s core, for one call of two turns on the virtual clock.

The benchmark's figures (voice to voice, CPU, RSS per call) are real-time measurements
it prints; this test only checks that its load is what it claims: every question asked
is committed and answered, the reply is the long fixed one, and no stale sample plays.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
from voxflow_voice.engines import VoiceEngines

from voxflow.clock import VirtualClock

pytestmark = pytest.mark.models

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def _capacity() -> ModuleType:
    """benchmarks/capacity.py, imported as its own script would be (its folder on the path)."""
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    name = "voxflow_benchmark_capacity"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / "capacity.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # its dataclasses look their module up while being built
    spec.loader.exec_module(module)
    return module


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


async def test_offered_calls_in_real_time_on_the_scheduler_admit_two_refuse_one_lose_nothing(
    engines: VoiceEngines,
) -> None:
    """Three calls offered (one every 4 s) to an admission cap of 2, in real time with the
    real models on the shared ModelScheduler: the third is refused while the two others
    run; each admitted question is committed and answered, no stale sample plays, and the
    replies' later sentences went through the scheduler as work due ahead of playout."""
    from voxflow_voice import PiperTts, WhisperStt
    from voxflow_voice.admission import AdmissionController, AdmissionSettings
    from voxflow_voice.scheduler import ModelScheduler
    from voxflow_voice.tts import DETERMINISTIC_TTS_SETTINGS

    capacity = _capacity()
    scheduler = ModelScheduler()  # the same shared models, their work on the scheduler
    scheduled = VoiceEngines(
        stt=WhisperStt(scheduler=scheduler),
        tts=PiperTts(settings=DETERMINISTIC_TTS_SETTINGS, scheduler=scheduler),
        make_vad=engines.make_vad, scheduler=scheduler)
    before = scheduler.statistics().completed
    admission = AdmissionController(AdmissionSettings(max_calls=2), scheduler=scheduler)
    row, calls = await capacity.run_calls(scheduled, 3, 1, admission=admission,
                                          settings=capacity.AFTER)
    after = scheduler.statistics().completed
    assert (row.offered, row.calls, row.refused, admission.refused) == (3, 2, 1, 1)
    assert (row.asked, row.committed, row.turns_lost, row.stale_samples) == (2, 2, 0, 0)
    assert all("calendar" in t.lower() for call in calls for t in call.transcripts())
    assert all(call.settled(r) == "completed" for call in calls for r in call.replies())
    # The reply is three segments: "Sure." is urgent; "This afternoon…" may still be
    # synthesized while the turn is held in its pause (speculative work: how much depends
    # on the machine's speed); "At four…" cannot start before the 3 s of audio that
    # synthesis_ahead allows has begun to play, so its synthesis is due ahead of playout:
    # at least one such job per reply (2 to 4 per reply measured, fewer under load).
    assert after["ahead"] - before["ahead"] >= 2
    assert admission.load().active_calls == 0  # both slots released
