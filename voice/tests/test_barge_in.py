"""BargeInArbiter and classify_overlap: the pause → confirm → fence/resume rules, in
input samples (no models: the arbiter is pure bookkeeping driven by the session); and
EarlyTranscriber.transcript_of, which gives the arbiter an overlap's words early."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from pydantic import ValidationError
from voxflow_voice import (
    AudioChunk,
    EarlyTranscriber,
    Transcript,
    UtterancePaused,
    UtteranceReady,
)
from voxflow_voice.listen.barge_in import (
    BargeInArbiter,
    BargeInSettings,
    classify_overlap,
)

from voxflow.ids import DeliveryId

R = 16_000
D = DeliveryId("reply-1")


def s(seconds: float) -> int:
    return round(seconds * R)


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("Uh-huh.", "backchannel"),
        ("Mm-hmm.", "backchannel"),
        ("MMM.", "backchannel"),
        ("M-H-N.", "backchannel"),  # Whisper tiny.en's spelling of "Mhm." in one real run
        ("Mm-hm, uhm.", "backchannel"),
        ("Yeah, okay.", "backchannel"),
        ("Right.", "backchannel"),
        ("I see.", "backchannel"),
        ("Um", "backchannel"),
        ("", "noise"),
        ("(coughing)", "noise"),
        ("[BLANK_AUDIO]", "noise"),
        ("Wait, stop.", "request"),
        ("What about tomorrow?", "request"),
        ("Okay, but what about the price?", "request"),
        ("yeah yeah yeah yeah yeah", "request"),  # longer than backchannel_max_words
    ],
)
def test_classify_overlap(text: str, kind: str) -> None:
    assert classify_overlap(text) == kind


def test_classify_overlap_rejects_a_non_string() -> None:
    with pytest.raises(TypeError, match="text"):
        classify_overlap(None)  # type: ignore[arg-type]


def test_settings_validate() -> None:
    with pytest.raises(ValidationError, match="policy"):
        BargeInSettings(policy="sometimes")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="decide_window"):
        BargeInSettings(confirm_window=1.0, decide_window=0.5)
    with pytest.raises(TypeError, match="settings"):
        BargeInArbiter(settings={"policy": "interrupt"})  # type: ignore[arg-type]


def test_a_blip_pauses_then_resumes_after_the_hold() -> None:
    arbiter = BargeInArbiter()
    assert arbiter.begin(D, s(1.0), "ignore_backchannel") == "pause"
    assert arbiter.update(D, position=s(1.1), active=True, speech_end=s(1.1)) == "none"
    # The sound stopped short of min_speech: wait resume_hold (0.4 s) for more.
    assert arbiter.update(D, position=s(1.2), active=False, speech_end=s(1.15)) == "none"
    assert arbiter.update(D, position=s(1.5), active=False, speech_end=s(1.15)) == "none"
    assert arbiter.update(D, position=s(1.62), active=False, speech_end=s(1.15)) == "resume"
    assert arbiter.overlap is None


def test_a_rising_sound_that_never_becomes_speech_resumes_after_the_rise_hold() -> None:
    arbiter = BargeInArbiter()
    assert arbiter.begin(D, s(1.0), "ignore_backchannel", rising=True) == "pause"
    assert arbiter.update(D, position=s(1.064), active=True, speech_end=0) == "none"
    # Quiet again, no speech frame: resume after rise_hold (0.1 s), not resume_hold.
    assert arbiter.update(D, position=s(1.1), active=False, speech_end=0) == "none"
    assert arbiter.update(D, position=s(1.21), active=False, speech_end=0) == "resume"
    assert arbiter.overlap is None
    # Speech from the same onset (the detector backdates it there): resume_hold again.
    assert arbiter.begin(D, s(2.0), "ignore_backchannel", rising=True) == "pause"
    assert arbiter.begin(D, s(2.0), "ignore_backchannel") == "none"
    assert arbiter.update(D, position=s(2.1), active=False, speech_end=s(2.08)) == "none"
    assert arbiter.update(D, position=s(2.3), active=False, speech_end=s(2.08)) == "none"
    assert arbiter.update(D, position=s(2.52), active=False, speech_end=s(2.08)) == "resume"
    # Speech from a later onset takes the rising pause over ("s... top"), as any onset.
    assert arbiter.begin(D, s(3.0), "ignore_backchannel", rising=True) == "pause"
    assert arbiter.update(D, position=s(3.05), active=False, speech_end=0) == "none"
    assert arbiter.begin(D, s(3.08), "ignore_backchannel") == "none"
    assert arbiter.overlap is not None and arbiter.overlap.paused
    assert arbiter.overlap.first_onset == s(3.0) and not arbiter.overlap.rising
    # Rising frames after a speech blip keep the blip's resume_hold ("Wa... it, stop").
    arbiter = BargeInArbiter()
    assert arbiter.begin(D, s(1.0), "ignore_backchannel") == "pause"
    assert arbiter.begin(D, s(1.2), "ignore_backchannel", rising=True) == "none"
    assert arbiter.update(D, position=s(1.3), active=False, speech_end=s(1.1)) == "none"
    assert arbiter.update(D, position=s(1.6), active=False, speech_end=s(1.1)) == "none"
    assert arbiter.update(D, position=s(1.72), active=False, speech_end=s(1.1)) == "resume"
    with pytest.raises(ValidationError):
        BargeInSettings(rise_hold=-0.1)


def test_more_sound_within_the_hold_keeps_the_pause() -> None:
    arbiter = BargeInArbiter()
    assert arbiter.begin(D, s(1.0), "ignore_backchannel") == "pause"
    assert arbiter.update(D, position=s(1.2), active=False, speech_end=s(1.15)) == "none"
    # "Wa... it, stop": a new onset while paused takes the pause over (no second pause).
    assert arbiter.begin(D, s(1.4), "ignore_backchannel") == "none"
    assert arbiter.overlap is not None and arbiter.overlap.paused
    assert arbiter.confirmed() == "none"  # waits for the words
    assert arbiter.wants_words(s(1.4))
    action, kind = arbiter.transcribed("Wait, stop.", s(2.0))
    assert (action, kind) == ("fence", "request")


def test_sound_never_confirmed_resumes_at_the_confirm_window() -> None:
    arbiter = BargeInArbiter(BargeInSettings(confirm_window=0.5))
    assert arbiter.begin(D, s(2.0), "ignore_backchannel") == "pause"
    assert arbiter.update(D, position=s(2.4), active=True, speech_end=s(2.3)) == "none"
    # past the window, but the last sound is more recent than resume_hold: wait
    assert arbiter.update(D, position=s(2.5), active=True, speech_end=s(2.3)) == "none"
    assert arbiter.update(D, position=s(2.7), active=True, speech_end=s(2.3)) == "resume"
    # Not an utterance to answer if its words are an acknowledgment.
    assert arbiter.is_turn(s(2.0), "Yeah.") is False


def test_backchannel_words_resume_and_are_not_a_turn() -> None:
    arbiter = BargeInArbiter()
    arbiter.begin(D, s(3.0), "ignore_backchannel")
    assert arbiter.confirmed() == "none"
    assert arbiter.update(D, position=s(3.5), active=True, speech_end=s(3.45)) == "none"
    assert arbiter.transcribed("Mm-hmm.", s(3.45)) == ("resume", "backchannel")
    assert arbiter.update(D, position=s(3.7), active=True, speech_end=s(3.45)) == "none"
    # The user goes on speaking in the same utterance: pause again and decide again.
    assert arbiter.update(D, position=s(3.9), active=True, speech_end=s(3.85)) == "pause"
    assert arbiter.update(D, position=s(4.2), active=True, speech_end=s(4.1)) == "fence"
    assert arbiter.is_turn(s(3.0), "Mm-hmm, but what about tomorrow?") is True


def test_long_speech_fences_without_waiting_for_words() -> None:
    arbiter = BargeInArbiter(BargeInSettings(backchannel_max=0.8))
    arbiter.begin(D, s(1.0), "ignore_backchannel")
    arbiter.confirmed()
    assert arbiter.update(D, position=s(1.7), active=True, speech_end=s(1.7)) == "none"
    assert arbiter.update(D, position=s(1.9), active=True, speech_end=s(1.85)) == "fence"


def test_no_words_by_the_decide_window_fences_confirmed_speech() -> None:
    arbiter = BargeInArbiter(BargeInSettings(decide_window=1.0))
    arbiter.begin(D, s(1.0), "ignore_backchannel")
    arbiter.confirmed()
    assert arbiter.update(D, position=s(1.9), active=True, speech_end=s(1.5)) == "none"
    assert arbiter.update(D, position=s(2.0), active=True, speech_end=s(1.5)) == "fence"


def test_interrupt_policy_fences_on_confirmation() -> None:
    arbiter = BargeInArbiter()
    assert arbiter.begin(D, s(1.0), "interrupt") == "pause"
    assert arbiter.confirmed() == "fence"
    assert arbiter.is_turn(s(1.0), "Uh-huh.") is True  # under interrupt, it is a turn


def test_must_finish_never_pauses_nor_fences() -> None:
    arbiter = BargeInArbiter()
    assert arbiter.begin(D, s(1.0), "must_finish") == "none"
    assert arbiter.confirmed() == "none"
    assert arbiter.update(D, position=s(5.0), active=True, speech_end=s(5.0)) == "none"
    assert arbiter.is_turn(s(1.0), "Okay.") is False
    assert arbiter.is_turn(s(1.0), "What about tomorrow?") is True


def test_pause_on_onset_off_waits_for_confirmation() -> None:
    arbiter = BargeInArbiter(BargeInSettings(pause_on_onset=False, policy="interrupt"))
    assert arbiter.begin(D, s(1.0), "interrupt") == "none"
    assert arbiter.confirmed() == "fence"


def test_the_reply_ending_ends_the_overlap() -> None:
    arbiter = BargeInArbiter()
    arbiter.begin(D, s(1.0), "ignore_backchannel")
    assert arbiter.update(None, position=s(1.1), active=True, speech_end=s(1.1)) == "resume"
    assert arbiter.overlap is None
    assert arbiter.update(None, position=s(1.2), active=True, speech_end=s(1.2)) == "none"


def test_overlap_records_stay_bounded() -> None:
    arbiter = BargeInArbiter()
    for i in range(50):
        arbiter.begin(D, s(i), "ignore_backchannel")
        arbiter.update(D, position=s(i) + s(0.5), active=False, speech_end=s(i) + 10)
        arbiter.update(D, position=s(i) + s(0.95), active=False, speech_end=s(i) + 10)
    assert arbiter.is_turn(s(49), "Yeah.") is False
    # A finished utterance's record is dropped with every older one.
    assert arbiter.overlapped(s(10)) is None and arbiter.overlapped(s(49)) is None


class CountingStt:
    """A transcriber double (the dependency, not the unit under test): counts calls."""

    def __init__(self) -> None:
        self.calls = 0

    async def transcribe(self, audio: AudioChunk) -> Transcript | None:
        self.calls += 1
        await asyncio.sleep(0)
        return Transcript(f"{audio.num_samples} samples", audio.duration, 0.0, 0.0)


def _utterance(end: int, samples: int = 4000) -> tuple[UtterancePaused, UtteranceReady]:
    audio = AudioChunk.from_float(np.zeros(samples, np.float32), R, start_sample=0)
    return UtterancePaused(audio, 100, end), UtteranceReady(audio, 100, end)


async def test_transcript_of_a_pause_is_reused_by_the_turn_without_a_second_stt() -> None:
    stt = CountingStt()
    early = EarlyTranscriber(stt)
    paused, ready = _utterance(3000)
    early.paused(paused)
    first = await early.transcript_of(paused)
    assert first is not None and first.text == "4000 samples"
    assert await early.transcript_of(paused) is first  # already done: no new job
    assert await early.final(ready) is first
    assert stt.calls == 1 and early.statistics().used == 1
    await early.aclose()


async def test_transcript_of_waits_behind_a_stale_running_job() -> None:
    stt = CountingStt()
    early = EarlyTranscriber(stt)
    stale, _ = _utterance(1000, samples=2000)
    paused, ready = _utterance(3000)
    early.paused(stale)  # running
    transcript = await early.transcript_of(paused)  # queued next, then awaited
    assert transcript is not None and transcript.text == "4000 samples"
    assert await early.final(ready) is transcript
    assert stt.calls == 2
    await early.aclose()
    with pytest.raises(TypeError, match="UtterancePaused"):
        await early.transcript_of(ready)  # type: ignore[arg-type]


def test_a_comma_pause_before_confirmation_does_not_resume_the_reply() -> None:
    # "Stop, thanks": "Stop," is too short to confirm; "thanks" follows after the comma.
    arbiter = BargeInArbiter()
    assert arbiter.begin(D, s(1.0), "ignore_backchannel") == "pause"
    assert arbiter.update(D, position=s(1.3), active=True, speech_end=s(1.25)) == "none"
    # the confirm window (0.6 s) passes during the comma's pause: still paused
    assert arbiter.update(D, position=s(1.62), active=True, speech_end=s(1.25)) == "none"
    assert arbiter.update(D, position=s(1.7), active=True, speech_end=s(1.7)) == "none"
    assert arbiter.confirmed() != "resume"  # "thanks" confirms the barge-in
    # sound that never confirms resumes at the decide window at the latest
    noisy = BargeInArbiter()
    noisy.begin(D, s(1.0), "ignore_backchannel")
    assert noisy.update(D, position=s(3.99), active=True, speech_end=s(3.95)) == "none"
    assert noisy.update(D, position=s(4.0), active=True, speech_end=s(3.98)) == "resume"
