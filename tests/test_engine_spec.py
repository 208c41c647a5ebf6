"""Engine specs (``whisper:base``): read strictly, refused in one line naming what is wrong
and the form, from settings, the environment and options alike (fuzzed with hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from voxflow_voice.settings import VoiceSection

from voxflow.engine_spec import (
    DEFAULT_ENGINES,
    ENGINE_KINDS,
    EngineKind,
    EngineSpec,
    parse_engine_spec,
)
from voxflow.errors import EngineSpecError
from voxflow.settings import Settings, SettingsError

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("text", "expected"), [
    ("whisper", EngineSpec("stt", "whisper")),
    ("whisper:base", EngineSpec("stt", "whisper", "base")),
    ("whisper:base,beam_size=2", EngineSpec("stt", "whisper", "base", (("beam_size", "2"),))),
    ("whisper:beam_size=2,language=de",
     EngineSpec("stt", "whisper", None, (("beam_size", "2"), ("language", "de")))),
    ("whisper:/models/my whisper", EngineSpec("stt", "whisper", "/models/my whisper")),
    ("piper:C:\\voices\\joe.onnx", EngineSpec("stt", "piper", "C:\\voices\\joe.onnx")),
    ("my.engine-2_x:a=b=c", EngineSpec("stt", "my.engine-2_x", None, (("a", "b=c"),))),
    ("whisper:x y=1", EngineSpec("stt", "whisper", "x y=1")),  # no option name: a value
])
def test_a_spec_is_a_name_a_value_and_named_options(text: str, expected: EngineSpec) -> None:
    spec = parse_engine_spec(text, "stt")
    assert spec == expected
    assert parse_engine_spec(str(spec), "stt") == spec


@pytest.mark.parametrize(("text", "said"), [
    ("whisper:", "nothing after ':'"),
    (":base", "no engine name before ':'"),
    ("whisper\n", "control character"),
    ("whisper:base\nrm -rf /", "control character"),
    ("whisper:\tbase", "control character"),
    ("", "empty"),
    ("   ", "empty"),
    (" whisper", "not an engine name"),
    ("-whisper", "not an engine name"),
    ("whis per:base", "not an engine name"),
    ("whisper:base,", "option 2 is empty"),
    ("whisper:,base", "option 1 is empty"),
    ("whisper:base,,beam_size=1", "option 2 is empty"),
    ("whisper:base,tiny.en", "'tiny.en' has no name"),
    ("whisper:beam_size=", "'beam_size' has no value"),
    ("whisper:=base", "has no name before '='"),
    ("whisper:beam_size=1,beam_size=2", "given twice"),
    ("whisper: base", "spaces around 'base'"),
    ("whisper:beam_size= 2", "spaces around '2'"),
    ("w" * 65, "not an engine name"),
    ("whisper:" + "x" * 3000, "longer than 2048"),
])
def test_a_malformed_spec_is_one_line_naming_what_is_wrong_and_the_form(
    text: str, said: str
) -> None:
    with pytest.raises(EngineSpecError) as caught:
        parse_engine_spec(text, "stt")
    message = str(caught.value)
    assert said in message
    assert message.isprintable() and len(message) < 400  # one line; the input quoted
    assert "the form is NAME or NAME:OPTIONS, e.g. whisper:base" in message
    assert caught.value.kind == "stt" and isinstance(caught.value, ValueError)


def test_none_is_no_end_of_turn_model_and_takes_no_options() -> None:
    assert parse_engine_spec("none", "end_of_turn") == EngineSpec("end_of_turn", "none")
    with pytest.raises(EngineSpecError, match="takes no options"):
        parse_engine_spec("none:1", "end_of_turn")
    with pytest.raises(EngineSpecError, match="must be a string"):
        parse_engine_spec(None, "vad")
    with pytest.raises(ValueError, match="kind must be one of"):
        parse_engine_spec("whisper", "asr")  # type: ignore[arg-type]


# -- fuzzed: any text is a spec or an EngineSpecError, and a spec reads back the same ----

_NASTY = st.text(alphabet=st.sampled_from(list("ab:=,. -_/\\\n\t\x00\u2028é1")), max_size=24)
_NAME = st.from_regex(r"[a-z0-9][a-z0-9._-]{0,10}", fullmatch=True)
_VALUE = st.from_regex(r"[^\s,:=]([^,\x00-\x1f\x7f]{0,8}[^\s,])?", fullmatch=True).filter(
    str.isprintable)
_KEY = st.from_regex(r"[a-z_][a-z0-9_]{0,8}", fullmatch=True)


@settings(max_examples=1500, derandomize=True, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(text=st.one_of(_NASTY, st.text(max_size=40)), kind=st.sampled_from(ENGINE_KINDS))
def test_any_text_is_a_spec_or_a_one_line_spec_error(text: str, kind: EngineKind) -> None:
    try:
        spec = parse_engine_spec(text, kind)
    except EngineSpecError as exc:
        assert str(exc).isprintable() and exc.kind == kind
        assert exc.reason in str(exc)
    else:
        assert text.isprintable() and ":" not in spec.name
        assert parse_engine_spec(str(spec), kind) == spec
        assert str(spec) == text  # nothing is dropped or rewritten


@settings(max_examples=500, derandomize=True, deadline=None, database=None)
@given(name=_NAME, value=st.none() | _VALUE,
       options=st.dictionaries(_KEY, _VALUE, max_size=3))
def test_every_well_formed_spec_reads_as_written(
    name: str, value: str | None, options: dict[str, str]
) -> None:
    spec = EngineSpec("tts", name, value, tuple(options.items()))
    assert parse_engine_spec(str(spec), "tts") == spec


# -- the settings: VOXFLOW_STT and friends, --stt and friends, the old variables ------------

def test_the_variables_choose_the_engines() -> None:
    chosen = Settings.from_env({"VOXFLOW_STT": "whisper:base", "VOXFLOW_TTS": "piper:/v.onnx",
                                "VOXFLOW_VAD": "energy:threshold_db=-35",
                                "VOXFLOW_END_OF_TURN": "smart-turn"})
    voice = chosen.section(VoiceSection)
    assert voice.engine("stt") == EngineSpec("stt", "whisper", "base")
    assert voice.engine("vad").options == (("threshold_db", "-35"),)
    assert voice.judges_end_of_turn
    assert {kind: getattr(VoiceSection(), kind) for kind in ENGINE_KINDS} == DEFAULT_ENGINES


@pytest.mark.parametrize("kind", ENGINE_KINDS)
@pytest.mark.parametrize("bad", ["whisper:", ":base", "x\ny", "a:b,,c"])
def test_a_malformed_spec_names_its_variable_or_option(kind: EngineKind, bad: str) -> None:
    variable = f"VOXFLOW_{kind.upper()}"
    with pytest.raises(SettingsError) as caught:
        Settings.from_env({variable: bad})
    message = str(caught.value)
    assert message.startswith(f"{variable}={bad!r}: ") and message.isprintable()
    assert message.count(repr(bad)) == 1  # said once
    assert "the form is NAME or NAME:OPTIONS" in message
    with pytest.raises(SettingsError) as option:
        Settings().with_options(**{kind: bad})
    flag = "--" + kind.replace("_", "-")
    assert str(option.value).startswith(f"{flag} {bad!r}: ")


@pytest.mark.parametrize(("old", "value", "new"), [
    ("VOXFLOW_STT_MODEL", "base", "VOXFLOW_STT='whisper:base'"),
    ("VOXFLOW_VOICE", "/voices/en.onnx", "VOXFLOW_TTS='piper:/voices/en.onnx'"),
    ("VOXFLOW_END_OF_TURN_MODEL", "smart-turn", "VOXFLOW_END_OF_TURN='smart-turn'"),
])
def test_the_replaced_variables_are_refused_with_their_replacement(
    old: str, value: str, new: str
) -> None:
    """``VOXFLOW_STT_MODEL=base`` would otherwise be ignored, silently: a deployment that
    set it would run tiny.en."""
    with pytest.raises(SettingsError) as caught:
        Settings.from_env({old: value})
    assert str(caught.value) == (f"{old} is replaced by {new.split('=')[0]}: set {new} and "
                                 f"unset {old}")
    assert Settings.from_env({old: "  "}) == Settings()  # set empty: as unset
    field = old.removeprefix("VOXFLOW_").lower()
    with pytest.raises(ValueError, match=f"{field} is replaced by"):
        VoiceSection.model_validate({field: value})
