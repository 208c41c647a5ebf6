"""Settings from VOXFLOW_* variables: validated, and errors name the variable."""

from __future__ import annotations

import copy
import importlib
import os
import pickle
import re
import subprocess
import sys
from importlib.metadata import distribution, entry_points
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import Field
from voxflow_adapters.settings import HostingSection, PhoneSection, WebRtcSection
from voxflow_voice.settings import VoiceSection

from voxflow.settings import (
    RETIRED_GROUP,
    SETTINGS_GROUP,
    Settings,
    SettingsError,
    SettingsSection,
)

pytestmark = pytest.mark.unit

SECTIONS: tuple[type[SettingsSection], ...] = (VoiceSection, HostingSection, WebRtcSection,
                                                PhoneSection)


def voice(settings: Settings) -> VoiceSection:
    return settings.section(VoiceSection)


def test_defaults_without_variables() -> None:
    settings = Settings.from_env({})
    v = voice(settings)
    assert (v.stt, v.tts, v.vad, v.end_of_turn) == (
        "whisper:tiny.en", "piper", "silero", "smart-turn")
    assert v.judges_end_of_turn
    assert settings.model is None
    assert v.end_of_turn_silence == 0.6
    assert settings.demo_out == Path("voxflow-demo")


def test_variables_override_defaults() -> None:
    settings = Settings.from_env({
        "VOXFLOW_MODEL": "gpt-4o-mini", "VOXFLOW_END_OF_TURN_SILENCE": "0.3",
        "VOXFLOW_PORT": "9000", "VOXFLOW_LOG_LEVEL": "debug", "VOXFLOW_HOME": "/tmp/vf",
        "UNRELATED": "x",
    })
    assert settings.model == "gpt-4o-mini"
    assert voice(settings).end_of_turn_silence == 0.3
    assert settings.section(HostingSection).port == 9000
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
    fields = [*Settings.model_fields, *(f for s in SECTIONS for f in s.model_fields)]
    assert sorted(Settings.variables().values()) == sorted(fields)  # each once


def test_each_entry_point_names_the_section_that_reads_it() -> None:
    for entry in entry_points(group=SETTINGS_GROUP):
        assert entry.name in entry.load().model_fields, entry
    retired = {entry.name: entry.load() for entry in entry_points(group=RETIRED_GROUP)}
    assert retired == dict.fromkeys(VoiceSection.RETIRED, VoiceSection)


def test_the_core_knows_no_voice_or_transport_setting() -> None:
    """The voice and transport settings (secrets among them) are their packages' sections,
    registered as entry points: the core lists them without holding them."""
    assert not {"stt", "min_barge_in", "port", "max_calls", "turn_credential",
                "twilio_auth_token", "webrtc_receive_hold"} & set(Settings.model_fields)
    assert {"VOXFLOW_STT", "VOXFLOW_TURN_CREDENTIAL", "VOXFLOW_TWILIO_AUTH_TOKEN"} <= set(
        Settings.variables())
    rows = [variable for variable, _, _ in Settings.describe()]
    assert rows == list(dict.fromkeys(rows)) and set(rows) == set(Settings.variables())


def test_a_section_reads_the_variables_and_options_route_to_it() -> None:
    read = Settings.from_env({"VOXFLOW_MIN_BARGE_IN": "0.2", "VOXFLOW_TURN_USERNAME": "kim",
                              "VOXFLOW_TWILIO_AUTH_TOKEN": "tok", "VOXFLOW_PORT": "9000"})
    port = read.section(HostingSection).port
    assert voice(read).min_barge_in == 0.2 and port == 9000
    assert read.section(WebRtcSection).turn_username == "kim"
    token = read.section(PhoneSection).twilio_auth_token
    assert token is not None and token.get_secret_value() == "tok"
    changed = read.with_options(stt="whisper:base", end_of_turn="none", port=9001)
    assert (voice(changed).stt, voice(changed).min_barge_in,
            changed.section(HostingSection).port) == (
        "whisper:base", 0.2, 9001)
    assert not voice(changed).judges_end_of_turn
    assert voice(read).stt == "whisper:tiny.en"  # (the settings it came from: unchanged)
    assert Settings().section(VoiceSection) == VoiceSection()
    with pytest.raises(SettingsError, match=r"^--bogus 1: Extra inputs are not permitted"):
        Settings().with_options(bogus=1)
    with pytest.raises(TypeError, match="SettingsSection class"):
        Settings().section(Settings)


def test_a_section_no_entry_point_registers_still_reads_the_variables() -> None:
    """A stale install (entry points from an older version): the section's variables are
    read when the section is asked for, and a bad one is the same one-line error then."""

    class Extra(SettingsSection):
        extra_knob: int = Field(1, ge=0, le=9, description="a knob")

    assert Settings.from_env({"VOXFLOW_EXTRA_KNOB": "4"}).section(Extra).extra_knob == 4
    late = Settings.from_env({"VOXFLOW_EXTRA_KNOB": "12"})
    with pytest.raises(SettingsError, match=r"^VOXFLOW_EXTRA_KNOB='12': .*from 0 to 9$"):
        late.section(Extra)


@pytest.mark.parametrize(("value", "expected"), [
    ("false", False), ("0", False), ("no", False), ("NO", False),
    ("true", True), ("1", True), ("yes", True), (" True ", True),
])
def test_speculative_replies_reads_booleans(value: str, expected: bool) -> None:
    read = Settings.from_env({"VOXFLOW_SPECULATIVE_REPLIES": value})
    assert voice(read).speculative_replies is expected
    assert voice(Settings.from_env({})).speculative_replies is True


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
    assert voice(settings).complete_silence == 0.8


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


# -- the packages that register settings (entry points) -------------------------------------


def _install(site: Path, name: str, entry_points: str, *, direct_url: str | None = None
             ) -> None:
    """A distribution's metadata as an installer leaves it in ``site``."""
    info = site / f"{name.replace('-', '_')}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(entry_points)
    if direct_url is not None:
        (info / "direct_url.json").write_text(direct_url)


def test_two_packages_registering_one_setting_are_refused_naming_both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before: the first in sorted order silently took ``--stt`` and VOXFLOW_STT."""
    (tmp_path / "acme_settings.py").write_text(
        "from pydantic import Field\nfrom voxflow.settings import SettingsSection\n"
        "class AcmeSection(SettingsSection):\n"
        "    stt: str = Field('acme-cloud', description=\"acme's speech to text\")\n")
    _install(tmp_path, "acme-plugin", "[voxflow.settings]\nstt = acme_settings:AcmeSection\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    both = (r"^VOXFLOW_STT is registered by two packages, "
            r"acme-plugin \(acme_settings:AcmeSection\) and "
            r"voxflow-voice \(voxflow_voice.settings:VoiceSection\): uninstall one of them$")
    for read in (lambda: Settings.from_env({"VOXFLOW_STT": "whisper:base"}),
                 lambda: Settings().with_options(stt="whisper:base"), Settings.variables):
        with pytest.raises(SettingsError, match=both):
            read()


def test_a_retired_option_is_named_with_its_replacement_as_its_variable_is() -> None:
    """Before: ``with_options(stt_model=...)`` said "Extra inputs are not permitted"."""
    with pytest.raises(SettingsError, match=r"^VOXFLOW_STT_MODEL is replaced by VOXFLOW_STT"):
        Settings.from_env({"VOXFLOW_STT_MODEL": "base"})
    with pytest.raises(SettingsError, match=(
            r"^stt_model is replaced by VOXFLOW_STT \(--stt\): give stt='whisper:base'$")):
        Settings().with_options(stt_model="base")
    with pytest.raises(SettingsError, match=r"^voice is replaced by VOXFLOW_TTS \(--tts\)"):
        Settings.from_env({}).with_options(voice="/v.onnx", stt="whisper:base")
    with pytest.raises(SettingsError, match=r"^end_of_turn_model is replaced by VOXFLOW_END"):
        VoiceSection().with_options(end_of_turn_model="none")


def test_settings_show_no_transport_secret_and_refuse_to_be_pickled() -> None:
    """Before: every non-core variable stayed a plain str in a private attribute, which
    a pickle carried (VOXFLOW_TWILIO_AUTH_TOKEN, VOXFLOW_TURN_CREDENTIAL, ...)."""
    env = {"VOXFLOW_TWILIO_AUTH_TOKEN": "tok-hunter2", "VOXFLOW_TURN_CREDENTIAL": "hunter2",
           "VOXFLOW_TURN_USERNAME": "kim", "VOXFLOW_NOT_REGISTERED": "https://u:hunter2@x"}
    for read in (Settings.from_env(env), Settings.from_env(env).with_options(port=9001)):
        shown = [repr(read), str(read), read.model_dump(), read.model_dump_json(),
                 read.__pydantic_private__]
        assert "hunter2" not in repr(shown)
        with pytest.raises(TypeError, match=r"^Settings holds a secret, so it is not pickled"):
            pickle.dumps(read)
        assert pickle.dumps(read.section(VoiceSection))  # (no secret in it)
        token = read.section(PhoneSection).twilio_auth_token
        assert token is not None and token.get_secret_value() == "tok-hunter2"
        with pytest.raises(TypeError, match=r"^PhoneSection holds a secret"):
            pickle.dumps(read.section(PhoneSection))
    read = pickle.loads(pickle.dumps(Settings.from_env({"VOXFLOW_PORT": "9000"})))
    assert read.section(HostingSection).port == 9000
    assert copy.deepcopy(Settings.from_env(env)).section(WebRtcSection).turn_username == "kim"


def test_a_stale_editable_install_still_knows_its_packages_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """voxflow-voice and voxflow-adapters installed editable before their settings moved
    (their metadata without the voxflow.settings entry points, as when pyproject.toml
    changed without a `uv sync`): before, `--stt` was "Extra inputs are not permitted" and
    VOXFLOW_TWILIO_AUTH_TOKEN "not a voxflow variable". Their pyproject.toml is read."""
    for name in ("voxflow-voice", "voxflow-adapters"):
        installed = distribution(name)
        groups = re.split(r"(?m)^(?=\[)", installed.read_text("entry_points.txt") or "")
        stale = "".join(part for part in groups if not part.startswith(
            ("[voxflow.settings]", "[voxflow.retired_settings]")))
        _install(tmp_path, name, stale, direct_url=installed.read_text("direct_url.json"))
    monkeypatch.syspath_prepend(str(tmp_path))
    assert not [e for e in entry_points(group=SETTINGS_GROUP)]  # (the stale metadata)

    assert voice(Settings().with_options(stt="whisper:base")).stt == "whisper:base"
    read = Settings.from_env({"VOXFLOW_MIN_BARGE_IN": "0.2", "VOXFLOW_TURN_USERNAME": "kim"})
    assert voice(read).min_barge_in == 0.2 and read.section(WebRtcSection).turn_username
    assert Settings.unknown_variables({"VOXFLOW_TWILIO_AUTH_TOKEN": "t", "VOXFLOW_STT": "x",
                                       "VOXFLOW_TURN_CREDENTIAL": "c"}) == []
    assert {"VOXFLOW_STT", "VOXFLOW_TWILIO_AUTH_TOKEN"} <= {v for v, _, _ in
                                                           Settings.describe()}
    with pytest.raises(SettingsError, match=r"^VOXFLOW_STT_MODEL is replaced by VOXFLOW_STT"):
        Settings.from_env({"VOXFLOW_STT_MODEL": "base"})
    with pytest.raises(SettingsError, match=r"^VOXFLOW_MIN_BARGE_IN='9'"):
        Settings.from_env({"VOXFLOW_MIN_BARGE_IN": "9"})


def test_reading_the_voice_and_transport_variables_imports_only_their_sections() -> None:
    """Every command reads the settings (``jobs worker``, ``status``, the text chat): a
    set voice variable loaded the whole voxflow_voice package (the session, numpy,
    onnxruntime...) since 4edb1c2, until its names loaded on first use (0fed4d9)."""
    env = {**os.environ, "VOXFLOW_STT": "whisper:base", "VOXFLOW_MIN_BARGE_IN": "0.2",
           "VOXFLOW_TURN_USERNAME": "kim", "VOXFLOW_TWILIO_AUTH_TOKEN": "tok",
           "VOXFLOW_PORT": "9000"}
    probe = ("import sys\nfrom voxflow.settings import Settings\nSettings.from_env()\n"
             "print(' '.join(sorted(sys.modules)))")
    result = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True,
                            text=True, timeout=120, check=True)
    loaded = set(result.stdout.split())
    assert {m for m in loaded if m.startswith("voxflow_")} == {
        "voxflow_voice", "voxflow_voice.settings", "voxflow_adapters",
        "voxflow_adapters.settings"}
    assert not {"numpy", "onnxruntime", "aiortc", "litellm"} & loaded


@pytest.mark.parametrize("pyproject", [
    "not toml [", "project = 1", "[project]\ndynamic = ['entry-points']",
    "[project]\nentry-points = 'stt'", "[project]\ndynamic = 3",
])
def test_an_editable_install_whose_pyproject_cannot_say_keeps_its_metadata(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pyproject: str,
) -> None:
    source = tmp_path / "src"
    source.mkdir()
    (source / "pyproject.toml").write_text(pyproject)
    (tmp_path / "knob_settings.py").write_text(
        "from pydantic import Field\nfrom voxflow.settings import SettingsSection\n"
        "class KnobSection(SettingsSection):\n"
        "    knob: int = Field(1, description='a knob')\n")
    _install(tmp_path, "knob-plugin", "[voxflow.settings]\nknob = knob_settings:KnobSection\n",
             direct_url=f'{{"url": "{source.as_uri()}", "dir_info": {{"editable": true}}}}')
    monkeypatch.syspath_prepend(str(tmp_path))
    knob = importlib.import_module("knob_settings").KnobSection
    assert Settings().with_options(knob=3).section(knob).knob == 3


def test_an_editable_install_behind_a_regular_copy_of_it_is_not_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The copy first on the path is the one imported: its metadata holds, not the
    pyproject.toml of an editable install of the same package further on."""
    installed = distribution("voxflow-voice")
    _install(tmp_path, "voxflow-voice", "[voxflow.settings]\nstt = elsewhere:Section\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert installed.read_text("direct_url.json")  # (the editable one, behind)
    known = Settings.variables()
    assert "VOXFLOW_STT" in known and "VOXFLOW_MIN_BARGE_IN" not in known
