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
