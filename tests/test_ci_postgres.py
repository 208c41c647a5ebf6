"""CI cannot pass with the PostgreSQL tests silently skipped: ``.ci/run`` sets
``VOXFLOW_REQUIRE_POSTGRES=1``, under which a PostgreSQL test that finds no server fails,
naming the fix; without it (a user's fresh machine) it skips with a one-line reason."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import conftest
from tests.conftest import REQUIRE_POSTGRES, skip_without_postgres

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
NOWHERE = "postgresql://postgres@127.0.0.1:1/test"  # port 1: nothing listens


def outcome() -> tuple[str, str]:
    """What :func:`skip_without_postgres` did to its test: ``("skip" | "fail", message)``."""
    try:
        skip_without_postgres()
    except pytest.skip.Exception as skipped:
        return "skip", str(skipped)
    except pytest.fail.Exception as failed:
        return "fail", str(failed)
    return "ran", ""


def test_without_a_server_a_postgres_test_skips_with_the_reason(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(conftest, "PG_URL", NOWHERE)
    for unset in ("", "0"):
        monkeypatch.setenv(REQUIRE_POSTGRES, unset)
        kind, message = outcome()
        assert kind == "skip" and message.startswith("PostgreSQL not reachable at 127.0.0.1:1")
        assert "\n" not in message  # one line


def test_required_postgres_fails_naming_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(conftest, "PG_URL", NOWHERE)
    monkeypatch.setenv(REQUIRE_POSTGRES, "1")
    kind, message = outcome()
    assert kind == "fail", message
    assert "not reachable at 127.0.0.1:1" in message
    assert "VOXFLOW_REQUIRE_POSTGRES=1 requires it" in message
    assert "start PostgreSQL" in message and "VOXFLOW_TEST_DATABASE_URL" in message


def test_ci_requires_postgres_for_the_test_run() -> None:
    script = (ROOT / ".ci" / "run").read_text()
    exported = script.index(f"\nexport {REQUIRE_POSTGRES}=1\n")
    assert exported < script.rindex("\nuv run pytest")  # set before the tests run
    assert f"`{REQUIRE_POSTGRES}=1`" in (ROOT / "README.md").read_text()
