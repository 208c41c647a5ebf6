"""``voxflow status``: its refusals, each one line with the fix (a real deployment's status
is read in ``tests/docs/test_readme_monitoring_run.py``)."""

from __future__ import annotations

import pytest

from voxflow.cli import main

pytestmark = pytest.mark.unit


def test_without_a_database_it_says_which_variable(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("VOXFLOW_DATABASE_URL", raising=False)
    assert main(["status"]) == 2
    err = capsys.readouterr().err
    assert "set VOXFLOW_DATABASE_URL=postgresql://" in err and "Traceback" not in err


def test_an_unreachable_database_is_one_line_without_its_password(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("VOXFLOW_DATABASE_URL", "postgresql://ops:hunter2@127.0.0.1:1/fleet")
    assert main(["status"]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("error: cannot use the dispatch database at ")
    assert "hunter2" not in err and "Traceback" not in err and err.count("\n") == 1


def test_it_runs_no_flow(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as refused:
        main(["status", "examples/support.py:Support"])
    assert refused.value.code == 2
    assert "unrecognized arguments" in capsys.readouterr().err
