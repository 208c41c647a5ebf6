"""Fuzzing ``Settings.from_env`` (hypothesis, bounded and derandomized).

Any value in any ``VOXFLOW_*`` variable gives valid settings or a ``SettingsError``
naming the variable: never another exception.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from voxflow.settings import ENV_PREFIX, Settings, SettingsError

pytestmark = pytest.mark.unit

VARIABLES = sorted(Settings.variables())
VALUES = st.one_of(
    st.text(max_size=30),
    st.sampled_from(["nan", "inf", "-inf", "1e309", "0x10", "1_000", " 8080 ", "true", "yes",
                     "0", "-1", "1" * 5000, "\x00", "\ud800", "smart-turn", "DEBUG", "json",
                     "tiny.en", "/dev/null", "../../etc/passwd", "\uff11\uff12"]),
    st.integers().map(str),
    st.floats().map(str),
)


@settings(max_examples=300, derandomize=True, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(env=st.dictionaries(st.sampled_from(VARIABLES), VALUES, max_size=6))
def test_any_environment_gives_settings_or_a_settings_error(env: dict[str, str]) -> None:
    try:
        result = Settings.from_env(env)
    except SettingsError as exc:
        message = str(exc)
        assert message.startswith(ENV_PREFIX) and message.split("=", 1)[0] in env
    else:
        assert isinstance(result, Settings)


KNOWN = VARIABLES + sorted(Settings.tool_variables())
NAMES = st.one_of(
    st.sampled_from(KNOWN),
    st.sampled_from(KNOWN).map(lambda n: n[:-1]),  # a letter short
    st.sampled_from(KNOWN).map(str.lower),
    # any character a name can hold (not "="), printable or not
    st.text(st.characters(blacklist_characters="=\x00"), max_size=40).map(
        lambda t: ENV_PREFIX + t),
    st.text(st.characters(blacklist_characters="=\x00"), max_size=20),
)


@settings(max_examples=300, derandomize=True, deadline=None, database=None)
@given(env=st.dictionaries(NAMES, st.text(min_size=6, max_size=20).map(lambda v: "=" + v),
                           max_size=8))
def test_unknown_variables_are_one_printable_line_each_without_their_value(
    env: dict[str, str]
) -> None:
    lines = Settings.unknown_variables(env)
    unknown = [n for n in env if n.upper().startswith(ENV_PREFIX) and n not in KNOWN]
    assert len(lines) == len(unknown)
    for line in lines:
        assert line.isprintable() and "is not a voxflow variable" in line
        assert not any(value in line for value in env.values())
