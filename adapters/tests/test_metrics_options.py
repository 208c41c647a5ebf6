"""``--metrics-port``/``--metrics-host`` and ``VOXFLOW_METRICS_TOKEN`` of ``voxflow serve``:
what cannot be served is refused before a model loads, one line naming the fix and never
the token (the endpoints themselves: tests/test_monitoring.py; a deployment scraped by a
real Prometheus: tests/docs/test_readme_monitoring_run.py)."""

from __future__ import annotations

import pytest
from voxflow_adapters.testkit.flows import free_port

from voxflow.cli import main

pytestmark = pytest.mark.unit


def test_a_public_metrics_port_without_a_token_is_refused(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: object
) -> None:
    monkeypatch.setenv("VOXFLOW_HOME", str(tmp_path))
    monkeypatch.delenv("VOXFLOW_METRICS_TOKEN", raising=False)
    port = str(free_port())
    assert main(["serve", "--port", port, "--metrics-port", "0",
                 "--metrics-host", "0.0.0.0"]) == 2
    err = capsys.readouterr().err
    assert "--metrics-host 0.0.0.0 serves /metrics beyond this machine" in err
    assert "set VOXFLOW_METRICS_TOKEN" in err and "Traceback" not in err


def test_a_short_token_is_refused_without_showing_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("VOXFLOW_METRICS_TOKEN", "hunter2")
    assert main(["serve", "--port", str(free_port()), "--metrics-port", "0"]) == 2
    err = capsys.readouterr().err
    assert "VOXFLOW_METRICS_TOKEN" in err and "at least 16 characters" in err
    assert "hunter2" not in err


@pytest.mark.parametrize("port", ["-1", "65536", "http"])
def test_a_bad_metrics_port_names_the_option(
    port: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as refused:
        code = main(["serve", "--metrics-port", port])
        raise SystemExit(code)
    assert refused.value.code == 2
    err = capsys.readouterr().err
    assert "--metrics-port" in err and "Traceback" not in err
