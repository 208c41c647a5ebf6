"""The numbers of ``Settings`` read from ``VOXFLOW_*`` variables: a value is taken only
within its field's bounds (never NaN or infinite), and a refused one is a one-line
``SettingsError`` naming the variable and saying the range to give."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from voxflow_adapters.settings import HostingSection, PhoneSection, WebRtcSection
from voxflow_voice.settings import VoiceSection

from voxflow.settings import ENV_PREFIX, Settings, SettingsError, SettingsSection

pytestmark = pytest.mark.unit

OWNER: dict[str, type[SettingsSection]] = {
    name: section for section in (Settings, VoiceSection, HostingSection, WebRtcSection,
                                    PhoneSection)
    for name in section.model_fields}
FIELDS = {name: OWNER[name].model_fields[name] for name in OWNER}
NUMBERS = [name for name, info in FIELDS.items() if info.annotation in (int, float)]
FLOATS = [name for name in NUMBERS if FIELDS[name].annotation is float]
INTS = [name for name in NUMBERS if FIELDS[name].annotation is int]


def setting(settings: Settings, name: str) -> object:
    """The setting ``name``, from the core or the section that owns it."""
    owner = OWNER[name]
    return getattr(settings if owner is Settings else settings.section(owner), name)


def bounds(name: str) -> tuple[float, bool, float]:
    """(lowest, lowest included, highest) of a numeric setting, from its field."""
    found = {k: getattr(m, k) for m in FIELDS[name].metadata
             for k in ("ge", "gt", "le") if getattr(m, k, None) is not None}
    return (found["ge"], True, found["le"]) if "ge" in found else (found["gt"], False,
                                                                   found["le"])


def test_every_number_has_both_bounds() -> None:
    assert {"p95_target_ms", "min_barge_in", "resume_grace"} <= set(NUMBERS)
    for name in NUMBERS:
        bounds(name)  # a KeyError names the field without one


@pytest.mark.parametrize("value", ["1e9", "nan", "inf", "-inf", "-1", "NaN", " 1e999 "])
@pytest.mark.parametrize("name", NUMBERS)
def test_an_out_of_range_variable_is_one_line_naming_it_with_the_fix(
    name: str, value: str,
) -> None:
    variable = ENV_PREFIX + name.upper()
    with pytest.raises(SettingsError) as caught:
        Settings.from_env({variable: value})
    message = str(caught.value)
    assert message.startswith(f"{variable}=") and "\n" not in message
    assert "; give " in message, message  # the range to give instead


def test_the_fix_says_the_range() -> None:
    with pytest.raises(SettingsError) as caught:
        Settings.from_env({"VOXFLOW_MIN_BARGE_IN": "nan"})
    assert str(caught.value) == ("VOXFLOW_MIN_BARGE_IN='nan': Input should be a finite "
                                 "number; give seconds, at least 0 and at most 5")
    with pytest.raises(SettingsError, match=r"give a whole number from 1 to 10000, or leave "
                       r"it unset \(as many calls as their measured cost leaves room for\)$"):
        Settings.from_env({"VOXFLOW_MAX_CALLS": "0"})
    assert setting(Settings.from_env({}), "max_calls") is None  # no cap: measured slots decide
    with pytest.raises(SettingsError, match=r"give milliseconds, more than 0 and at most 60000$"):
        Settings.from_env({"VOXFLOW_P95_TARGET_MS": "inf"})


@settings(max_examples=300, derandomize=True, deadline=None, database=None)
@given(name=st.sampled_from(FLOATS),
       value=st.floats(allow_nan=True, allow_infinity=True, min_value=None, max_value=None),
       shown=st.sampled_from([repr, str, "{:e}".format, "{:.3f}".format, " {} ".format]))
def test_a_float_variable_is_taken_exactly_when_it_is_in_range(
    name: str, value: float, shown: Callable[[float], str],
) -> None:
    text = shown(value)
    parsed = float(text)  # what the text says (the formats round)
    low, included, high = bounds(name)
    fits = math.isfinite(parsed) and (parsed >= low if included else parsed > low) \
        and parsed <= high
    try:
        # (the silence timer: with the end-of-turn model, complete_silence is also bounded
        # by max_end_of_turn_silence, a rule of two variables tested in test_settings.py)
        result = Settings.from_env({ENV_PREFIX + name.upper(): text,
                                    "VOXFLOW_END_OF_TURN": "none"})
    except SettingsError as exc:
        assert not fits, (name, text, exc)
        assert str(exc).startswith(ENV_PREFIX + name.upper() + "=")
    else:
        assert fits, (name, text)
        assert setting(result, name) == parsed


@settings(max_examples=200, derandomize=True, deadline=None, database=None)
@given(name=st.sampled_from(INTS), number=st.integers(-(10**20), 10**20))
def test_a_whole_number_variable_is_taken_exactly_when_it_is_in_range(
    name: str, number: int,
) -> None:
    low, _, high = bounds(name)
    try:
        result = Settings.from_env({ENV_PREFIX + name.upper(): str(number)})
    except SettingsError as exc:
        assert not low <= number <= high, (name, number, exc)
    else:
        assert setting(result, name) == number and low <= number <= high
