"""``benchmarks/capacity.py``'s command line: a bad ``--stt`` spec is refused before any
model loads, in one line naming the option, with argparse's exit status 2; so is a bad
``--lull``."""

from __future__ import annotations

import sys
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from voxflow.errors import VoxflowError

from .conftest import benchmark_module


@pytest.mark.parametrize(("spec", "error"), [
    ("whisper:nosuch", "--stt: unknown whisper model 'nosuch': use 'tiny.en', 'base' or "
                       "the path of a faster-whisper model directory"),
    ("nosuch", "--stt: speech-to-text engine 'nosuch': no installed package registers "
               "'nosuch' (voxflow.stt); installed: "),
])
def test_a_bad_stt_spec_is_one_line_and_exit_status_2_before_any_model_loads(
    spec: str, error: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    capacity = benchmark_module("capacity")

    def never(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the benchmark started: the spec was not refused first")

    monkeypatch.setattr(capacity, "_main", never)
    monkeypatch.setattr(capacity, "load_engines", never)
    monkeypatch.setattr(sys, "argv", ["capacity.py", "--stt", spec, "--calls", "1"])
    with pytest.raises(SystemExit) as exited:
        capacity.main()
    assert exited.value.code == 2
    out, err = capsys.readouterr()
    assert out == ""
    last = err.rstrip("\n").splitlines()[-1]
    assert last.startswith(f"capacity.py: error: {error}")
    assert err.startswith("usage: capacity.py ")  # argparse's: the usage, then the line


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=40))
def test_any_stt_text_is_taken_or_refused_typed(text: str) -> None:
    """What ``main`` turns into its one line: a spec is checked, or refused with a typed
    error (never another exception: a traceback)."""
    check_stt = benchmark_module("_capacity_calls").check_stt
    try:
        check_stt(text)
    except (VoxflowError, ValueError) as exc:
        assert str(exc).strip()


@pytest.mark.parametrize(("argv", "error"), [
    (["--offered", "4", "--lull", "-1"], "--lull must be seconds in [0, 600]"),
    (["--offered", "4", "--lull", "nan"], "--lull must be seconds in [0, 600]"),
    (["--offered", "4", "--lull", "inf"], "--lull must be seconds in [0, 600]"),
    (["--offered", "4", "--lull", "long"], "argument --lull: invalid float value: 'long'"),
    (["--lull", "60"], "--lull goes with --offered"),
])
def test_a_bad_lull_is_one_line_and_exit_status_2(
    argv: list[str], error: str, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    capacity = benchmark_module("capacity")

    def never(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the benchmark started: the lull was not refused first")

    monkeypatch.setattr(capacity, "_main", never)
    monkeypatch.setattr(sys, "argv", ["capacity.py", *argv])
    with pytest.raises(SystemExit) as exited:
        capacity.main()
    assert exited.value.code == 2
    last = capsys.readouterr().err.rstrip("\n").splitlines()[-1]
    assert last.startswith(f"capacity.py: error: {error}")
