"""A caller who is not the bundled voice: espeak-ng voices at other rates (Debian's
espeak-ng, installed by ``.ci/run``) ask for a story and cut it short. The models are
tuned on the bundled Piper voice; a user's voice is not it, so the call must behave the
same: the turn committed with its words, the reply cut where the caller spoke, not one
stale sample, the history what was heard."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from voxflow_adapters.testkit.assertions import (
    assert_completed,
    assert_history_is_heard,
    assert_interrupted,
    assert_no_stale_audio,
    assert_turn_committed,
)
from voxflow_adapters.testkit.call_runner import CallRunner
from voxflow_adapters.testkit.scenario import CallResult
from voxflow_adapters.testkit.script import CallScript
from voxflow_voice.engines import VoiceEngines

from voxflow.examples.assistant import STORY, Assistant

pytestmark = [
    pytest.mark.models,
    pytest.mark.skipif(shutil.which("espeak-ng") is None,
                       reason="espeak-ng is missing: apt-get install espeak-ng (.ci/run does)"),
]

VOICES = [("en-us+f3", 140), ("en-gb+m3", 175), ("en-us+m7", 120)]


def espeak(tmp_path: Path, voice: str, rate: int, text: str) -> Path:
    out = tmp_path / f"{voice}-{rate}-{abs(hash(text))}.wav"
    subprocess.run(["espeak-ng", "-v", voice, "-s", str(rate), "-w", str(out), text],
                   check=True, capture_output=True, timeout=60)
    return out


@pytest.fixture(scope="module")
def story_call(request: pytest.FixtureRequest, voice_engines: VoiceEngines,
               tmp_path_factory: pytest.TempPathFactory) -> CallResult:
    """The call of one voice (``request.param``: voice, rate), made once for the module:
    both tests below check the same call (the same script on the same deterministic
    models and virtual clock gives the same call), each its own part of it."""
    voice, rate = request.param
    folder = tmp_path_factory.mktemp(f"{voice}-{rate}")
    ask = espeak(folder, voice, rate, "Tell me a story.")
    stop = espeak(folder, voice, rate, "Stop, please.")
    script = (CallScript().user_says(0.5, "Tell me a story.", audio=ask)
              .then_says("Stop, please.", audio=stop, after="reply_start", gap=2.0))
    runner = CallRunner(voice_engines,
                        realtime=bool(request.config.getoption("voxflow_realtime")))
    return runner(Assistant(), script)


@pytest.mark.parametrize("story_call", VOICES, ids=[f"{v}-{r}" for v, r in VOICES],
                         indirect=True)
def test_another_voice_cuts_the_reply_short(story_call: CallResult) -> None:
    """Whatever Whisper made of the question, the barge-in in this voice cuts the reply
    by identity: heard words only in the history, not one stale sample, "Okay." whole."""
    call = story_call
    first, okay = call.replies()
    assert_interrupted(call, first)
    assert_no_stale_audio(call)
    assert_completed(call, okay)
    assert_turn_committed(call, "Stop, please.", max_wer=0.25)
    assert_history_is_heard(call)


# tiny.en (the default STT) hears en-gb+m3 at 175 wpm as "Tell me I saw it.": a measured
# limit of the smallest model on a fast synthetic British voice, kept visible here (strict:
# the test fails loudly once it is heard right). VOXFLOW_STT=whisper:base is the remedy.
TRANSCRIBED = [
    pytest.param((v, r), id=f"{v}-{r}", marks=[pytest.mark.xfail(
        strict=True, reason="tiny.en hears en-gb+m3 at 175 wpm as 'Tell me I saw it.'")]
    ) if (v, r) == ("en-gb+m3", 175) else pytest.param((v, r), id=f"{v}-{r}")
    for v, r in VOICES
]


@pytest.mark.parametrize("story_call", TRANSCRIBED, indirect=True)
def test_another_voice_is_heard_and_answered(story_call: CallResult) -> None:
    call = story_call
    assert_turn_committed(call, "Tell me a story.", max_wer=0.25)
    story = call.replies()[0]
    assert_interrupted(call, story, heard_at_least="Once upon a time", heard_at_most=STORY)
