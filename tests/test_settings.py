"""Settings from VOXFLOW_* variables: validated, and errors name the variable."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from voxflow.settings import Settings, SettingsError

pytestmark = pytest.mark.unit


def test_defaults_without_variables() -> None:
    settings = Settings.from_env({})
    assert (settings.stt, settings.tts, settings.vad, settings.end_of_turn) == (
        "whisper:tiny.en", "piper", "silero", "smart-turn")
    assert settings.judges_end_of_turn
    assert settings.model is None
    assert settings.end_of_turn_silence == 0.6
    assert settings.demo_out == Path("voxflow-demo")


def test_variables_override_defaults() -> None:
    settings = Settings.from_env({
        "VOXFLOW_MODEL": "gpt-4o-mini", "VOXFLOW_END_OF_TURN_SILENCE": "0.3",
        "VOXFLOW_PORT": "9000", "VOXFLOW_LOG_LEVEL": "debug", "VOXFLOW_HOME": "/tmp/vf",
        "UNRELATED": "x",
    })
    assert settings.model == "gpt-4o-mini"
    assert settings.end_of_turn_silence == 0.3
    assert settings.port == 9000
    assert settings.log_level == "DEBUG"
    assert settings.home == Path("/tmp/vf")


@pytest.mark.parametrize(("name", "value"), [
    ("VOXFLOW_PORT", "http"), ("VOXFLOW_PORT", "0"), ("VOXFLOW_END_OF_TURN_SILENCE", "-1"),
    ("VOXFLOW_LOG_LEVEL", "LOUD"), ("VOXFLOW_SPECULATIVE_REPLIES", "maybe"),
    ("VOXFLOW_RESUME_GRACE", "-0.5"), ("VOXFLOW_RESUME_GRACE", "4"),
    ("VOXFLOW_RESUME_GRACE", "soon"), ("VOXFLOW_COMPLETE_SILENCE", "-0.1"),
    ("VOXFLOW_COMPLETE_SILENCE", "11"), ("VOXFLOW_COMPLETE_SILENCE", "later"),
])
def test_bad_values_name_the_variable(name: str, value: str) -> None:
    with pytest.raises(SettingsError, match=name):
        Settings.from_env({name: value})


def test_every_setting_has_a_variable() -> None:
    assert set(Settings.variables().values()) == set(Settings.model_fields)


@pytest.mark.parametrize(("value", "expected"), [
    ("false", False), ("0", False), ("no", False), ("NO", False),
    ("true", True), ("1", True), ("yes", True), (" True ", True),
])
def test_speculative_replies_reads_booleans(value: str, expected: bool) -> None:
    assert Settings.from_env({"VOXFLOW_SPECULATIVE_REPLIES": value}).speculative_replies is (
        expected
    )
    assert Settings.from_env({}).speculative_replies is True


# -- fuzz: any value of any variable is a Settings or a SettingsError naming it ---------------

_VARIABLES = sorted(Settings.variables())


@settings(max_examples=300, derandomize=True, deadline=None)
@given(st.dictionaries(st.sampled_from(_VARIABLES), st.text(max_size=40), max_size=4))
def test_any_environment_gives_settings_or_an_error_naming_a_variable(
    env: dict[str, str],
) -> None:
    try:
        result = Settings.from_env(env)
    except SettingsError as exc:
        message = str(exc)
        assert message.startswith("VOXFLOW_") and message.split("=", 1)[0] in env
        assert "\n" not in message.strip()  # one line
    else:
        assert isinstance(result, Settings)


@settings(max_examples=200, derandomize=True, deadline=None)
@given(st.sampled_from(["model", "log_level", "log_format", "port", "host", "demo_out"]),
       st.one_of(st.text(max_size=30), st.integers(-10, 70000)))
def test_any_option_value_gives_settings_or_an_error_naming_the_option(
    name: str, value: object,
) -> None:
    try:
        Settings().with_options(**{name: value})
    except SettingsError as exc:
        flag = {"demo_out": "--out"}.get(name, "--" + name.replace("_", "-"))  # --end-of-turn
        assert str(exc).startswith(flag + " ")


# -- turn-taking values the voice settings cannot take together ------------------------------

@pytest.mark.parametrize(("env", "named"), [
    ({"VOXFLOW_END_OF_TURN": "smart-turn", "VOXFLOW_COMPLETE_SILENCE": "1.7"},
     "VOXFLOW_COMPLETE_SILENCE"),
    ({"VOXFLOW_MAX_END_OF_TURN_SILENCE": "0.2"}, "VOXFLOW_MAX_END_OF_TURN_SILENCE"),
])
def test_turn_taking_values_that_conflict_are_a_settings_error_naming_the_variable(
    env: dict[str, str], named: str,
) -> None:
    """A ``complete_silence`` longer than ``max_end_of_turn_silence`` (with a model), or a
    maximum no longer than the 0.2 s pause where the model decides, is refused where the
    variables are read, not later by the voice settings (a traceback from ``voxflow demo``)."""
    with pytest.raises(SettingsError) as caught:
        Settings.from_env(env)
    message = str(caught.value)
    assert message.startswith(named + "=")
    assert "\n" not in message


def test_a_long_complete_silence_is_fine_without_an_end_of_turn_model() -> None:
    """Without a model the hold is unused (the voice settings take 0), so it conflicts
    with nothing."""
    settings = Settings.from_env({"VOXFLOW_END_OF_TURN": "none",
                                  "VOXFLOW_MAX_END_OF_TURN_SILENCE": "0.6",
                                  "VOXFLOW_COMPLETE_SILENCE": "0.8"})
    assert settings.complete_silence == 0.8


# -- a VOXFLOW_* variable nothing reads ---------------------------------------------------


@pytest.mark.parametrize(("name", "closest"), [
    ("VOXFLOW_MAX_CALL", "VOXFLOW_MAX_CALLS"),
    ("VOXFLOW_DATABSE_URL", "VOXFLOW_DATABASE_URL"),
    ("voxflow_log_level", "VOXFLOW_LOG_LEVEL"),  # the case matters: this one is not read
    ("VOXFLOW_LLM_TIMEOUTS", "VOXFLOW_LLM_TIMEOUT"),
])
def test_a_misspelt_variable_is_named_with_the_closest_known_one(name: str, closest: str
                                                                 ) -> None:
    secret = "postgresql://u:hunter2@db/x"
    (line,) = Settings.unknown_variables({name: secret, "VOXFLOW_PORT": "8081"})
    assert line.startswith(f"{name} is not a voxflow variable, so it is ignored")
    assert f"did you mean {closest}?" in line
    assert "hunter2" not in line and "\n" not in line


def test_a_variable_like_no_other_says_where_the_variables_are_listed() -> None:
    (line,) = Settings.unknown_variables({"VOXFLOW_ZZZZZZZZZZZZ": "1"})
    assert "did you mean" not in line and "--help" in line


def test_every_variable_voxflow_or_its_tools_read_is_known() -> None:
    known = {**dict.fromkeys(Settings.variables(), "1"),
             **dict.fromkeys(Settings.tool_variables(), "1"),
             "HOME": "/root", "OPENAI_API_KEY": "sk-x", "VOXFLOWX": "1"}
    assert Settings.unknown_variables(known) == []
    # every VOXFLOW_* name in the packages, the benchmarks and the suite's fixtures
    root = Path(__file__).resolve().parents[1]
    files = [root / "tests" / "conftest.py", *root.glob("benchmarks/*.py"),
             *(p for src in ("src", "voice/src", "adapters/src") for p in root.glob(
                 f"{src}/**/*.py"))]
    read = {name for path in files for name in re.findall(
        r"\bVOXFLOW_[A-Z0-9_]*[A-Z0-9]\b", path.read_text(encoding="utf-8"))}
    assert len(files) > 100 and "VOXFLOW_DATABASE_URL" in read
    assert read <= set(Settings.variables()) | Settings.tool_variables(), read


def test_llm_endpoints_are_a_comma_separated_list_of_urls_checked_without_echoing_secrets(
) -> None:
    assert Settings().llm_endpoints == ()
    read = Settings.from_env({"VOXFLOW_LLM_ENDPOINTS": "HTTP://LLM.local:80/v1/, ,"
                                                       "https://a.example:8443"})
    assert read.llm_endpoints == ("http://llm.local/v1", "https://a.example:8443")
    with pytest.raises(SettingsError) as refused:
        Settings.from_env({"VOXFLOW_LLM_ENDPOINTS": "https://ok.example,"
                                                    "http://me:hunter2@x.example/v1"})
    message = str(refused.value)
    assert message.startswith("VOXFLOW_LLM_ENDPOINTS=") and "entry 2" in message
    assert "credentials" in message and "hunter2" not in message
    with pytest.raises(SettingsError, match="must start with http"):
        Settings.from_env({"VOXFLOW_LLM_ENDPOINTS": "ftp://x.example"})
