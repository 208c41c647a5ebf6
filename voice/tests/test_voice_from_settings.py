"""Settings → voice objects: ``VoiceSettings.from_settings`` and ``VoiceEngines.from_settings``
are the one place where the ``VOXFLOW_*`` values reach a voice session."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import settings as hyp_settings
from hypothesis import strategies as st
from pydantic import ValidationError
from voxflow_voice.engines import VoiceEngines
from voxflow_voice.engines.errors import ModelNotFoundError
from voxflow_voice.engines.stt import WhisperStt
from voxflow_voice.listen.turn_detector import TurnDetection
from voxflow_voice.session import VoiceSettings

from voxflow.errors import UnknownEngineError
from voxflow.settings import Settings, SettingsError

TUNED = Settings().with_options(end_of_turn_silence=1.2, min_barge_in=0.05,
                                speculative_replies=False)


def test_each_setting_reaches_the_voice_settings() -> None:
    voice = VoiceSettings.from_settings(TUNED)
    assert voice.turn_detection.end_of_turn_silence == 1.2
    assert voice.turn_detection.min_barge_in == 0.05
    assert voice.speculative_replies is False
    # every other turn-detection field keeps its default
    rest = voice.turn_detection.model_dump(exclude={"end_of_turn_silence", "min_barge_in"})
    assert rest == TurnDetection().model_dump(exclude={"end_of_turn_silence", "min_barge_in"})


def test_default_settings_give_the_default_voice_settings() -> None:
    assert VoiceSettings.from_settings(Settings()) == VoiceSettings()


def test_overrides_replace_fields_and_are_validated() -> None:
    voice = VoiceSettings.from_settings(TUNED, echo_gate=False, interruptions=False)
    assert voice.echo_gate is False and voice.interruptions is False
    assert voice.turn_detection.end_of_turn_silence == 1.2  # the settings still apply
    assert VoiceSettings.from_settings(TUNED, speculative_replies=True).speculative_replies
    with pytest.raises(ValidationError, match="no_such_field"):
        VoiceSettings.from_settings(TUNED, no_such_field=True)
    with pytest.raises(ValidationError, match="echo_gate"):
        VoiceSettings.from_settings(TUNED, echo_gate="sometimes")


@pytest.mark.parametrize("bad", [None, {"end_of_turn_silence": 1.0}, VoiceSettings()])
def test_anything_but_settings_is_refused_by_name(bad: object) -> None:
    with pytest.raises(TypeError, match="settings must be voxflow Settings"):
        VoiceSettings.from_settings(bad)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="settings must be voxflow Settings"):
        VoiceEngines.from_settings(bad)  # type: ignore[arg-type]


def test_short_and_long_silences_still_validate() -> None:
    """The extremes Settings allows build valid turn detection (end_pad is capped inside)."""
    for silence in (0.01, 5.0):
        voice = VoiceSettings.from_settings(Settings().with_options(end_of_turn_silence=silence,
                                                     min_barge_in=0.0))
        assert voice.turn_detection.end_of_turn_silence == silence


@pytest.mark.models
def test_engines_load_the_named_whisper_model() -> None:
    engines = VoiceEngines.from_settings(Settings().with_options(stt="whisper:tiny.en,beam_size=2"),
                                         deterministic=True)
    assert isinstance(engines.stt, WhisperStt)
    assert engines.stt.settings.model == "tiny.en"
    assert engines.stt.settings.beam_size == 2
    assert engines.tts.sample_rate > 0
    engines.make_vad()  # one fresh detector per session


@pytest.mark.models
def test_a_missing_voice_fails_as_load_does(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-voice.onnx"
    with pytest.raises(ModelNotFoundError) as direct:
        VoiceEngines.load(tts=f"piper:{missing}")
    with pytest.raises(ModelNotFoundError) as mapped:
        VoiceEngines.from_settings(Settings().with_options(tts=f"piper:voice={missing}"))
    assert str(mapped.value) == str(direct.value)
    assert str(missing) in str(mapped.value)



@pytest.mark.models
def test_the_end_of_turn_model_and_its_longest_wait_come_from_the_settings() -> None:
    from voxflow_voice.engines.end_of_turn import SmartTurn

    from voxflow.settings import SettingsError

    settings = Settings.from_env({"VOXFLOW_END_OF_TURN": "smart-turn",
                                  "VOXFLOW_MAX_END_OF_TURN_SILENCE": "1.2"})
    voice = VoiceSettings.from_settings(settings)
    assert voice.turn_detection.max_end_of_turn_silence == 1.2
    assert voice.turn_detection.end_pad == 0.1  # speculative STT before the model decides
    assert voice.turn_detection.decision_pause == 0.2
    # A turn may be taken back for 1 s (VOXFLOW_RESUME_GRACE), with or without the model.
    assert voice.turn_detection.resume_grace == 1.0
    assert VoiceSettings.from_settings(
        Settings.from_env({"VOXFLOW_END_OF_TURN": "smart-turn",
                           "VOXFLOW_RESUME_GRACE": "0.5"})).turn_detection.resume_grace == 0.5
    timer = {"VOXFLOW_END_OF_TURN": "none"}
    assert VoiceSettings.from_settings(Settings.from_env(
        {**timer, "VOXFLOW_RESUME_GRACE": "0.5"})).turn_detection.resume_grace == 0.5
    # A turn judged complete whose words close nothing is held VOXFLOW_COMPLETE_SILENCE
    # with the model (0 by default: a continuation merges instead); the setting means
    # nothing without it.
    assert voice.turn_detection.complete_silence == 0
    assert VoiceSettings.from_settings(
        Settings.from_env({"VOXFLOW_END_OF_TURN": "smart-turn",
                           "VOXFLOW_COMPLETE_SILENCE": "0.8"})
    ).turn_detection.complete_silence == 0.8
    assert VoiceSettings.from_settings(Settings.from_env(
        {**timer, "VOXFLOW_COMPLETE_SILENCE": "0.8"})).turn_detection.complete_silence == 0
    engines = VoiceEngines.from_settings(settings, deterministic=True)
    assert isinstance(engines.end_of_turn, SmartTurn)
    # The model is the default; the silence timer is one setting away.
    assert isinstance(VoiceEngines.from_settings(Settings(), deterministic=True).end_of_turn,
                      SmartTurn)
    assert VoiceEngines.from_settings(Settings.from_env(timer),
                                      deterministic=True).end_of_turn is None
    with pytest.raises(SettingsError, match="VOXFLOW_END_OF_TURN"):
        Settings.from_env({"VOXFLOW_END_OF_TURN": "smart:"})
    with pytest.raises(UnknownEngineError, match="did you mean smart-turn"):
        VoiceEngines.load(end_of_turn="smart")


_TURN_TAKING_VALUES = st.sampled_from(["0", "0.1", "0.2", "0.21", "0.4", "0.6", "0.8", "1.0",
                                       "1.6", "2", "5", "10"])


@hyp_settings(max_examples=200, derandomize=True, deadline=None)
@given(st.fixed_dictionaries({}, optional={
    "VOXFLOW_END_OF_TURN": st.sampled_from(["none", "smart-turn"]),
    "VOXFLOW_END_OF_TURN_SILENCE": _TURN_TAKING_VALUES,
    "VOXFLOW_MAX_END_OF_TURN_SILENCE": _TURN_TAKING_VALUES,
    "VOXFLOW_COMPLETE_SILENCE": _TURN_TAKING_VALUES,
    "VOXFLOW_RESUME_GRACE": _TURN_TAKING_VALUES,
    "VOXFLOW_MIN_BARGE_IN": _TURN_TAKING_VALUES}))
def test_settings_the_variables_accept_are_voice_settings(env: dict[str, str]) -> None:
    """Whatever turn-taking variables ``Settings.from_env`` accepts, the voice settings
    take (a conflict is a SettingsError naming a variable, never a ValidationError from
    ``from_settings`` after the command started: a traceback)."""
    try:
        settings = Settings.from_env(env)
    except SettingsError as exc:
        assert str(exc).split("=", 1)[0] in env
        return
    assert isinstance(VoiceSettings.from_settings(settings), VoiceSettings)
