"""``--stt``, ``--tts``, ``--vad`` and ``--end-of-turn`` of ``voxflow demo``, ``chat --voice``
and ``serve`` (and ``VOXFLOW_STT``...): every engine is found and its options checked
before anything loads, opens or listens; whatever is wrong is one line naming the option
or variable, what was wrong and the fix, never a traceback."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from voxflow.cli import main

pytestmark = pytest.mark.unit


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    err = capsys.readouterr().err
    return code, err


def _one_line_error(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    return lines[0]


@pytest.mark.parametrize(("argv", "said"), [
    (("demo", "--fast", "--stt", "whispr:base"),
     "error: --stt 'whispr:base': no installed package registers 'whispr' (voxflow.stt); did "
     "you mean whisper? installed: whisper, whisper-streaming (install the package that "
     "provides it, or choose one of those)"),
    (("demo", "--fast", "--stt", "whisper:"),
     "error: --stt 'whisper:': nothing after ':' (leave out the ':' for the defaults); the "
     "form is NAME or NAME:OPTIONS, e.g. whisper:base (voxflow doctor lists the engines "
     "installed)"),
    (("demo", "--fast", "--tts", ":/voices/x.onnx"), "error: --tts ':/voices/x.onnx': no "
     "engine name before ':'"),
    (("demo", "--fast", "--vad", "silero\nrm -rf ~"),
     "error: --vad 'silero\\nrm -rf ~': it holds a control character"),
    (("demo", "--fast", "--vad", "energy:loud"),
     "error: --vad 'energy:loud': threshold_db='loud': Input should be a valid number"),
    (("demo", "--fast", "--end-of-turn", "smart-turn:window=3"),
     "error: --end-of-turn 'smart-turn:window=3': smart-turn takes no option 'window'; its "
     "options: model_path"),
    (("serve", "--port", "1", "--stt", "whisper:beem_size=2"),
     "error: --stt 'whisper:beem_size=2': whisper takes no option 'beem_size' (did you mean "
     "beam_size?)"),
    (("serve", "--worker", "--tts", "espeak"), "error: --worker dispatches calls through "
     "PostgreSQL"),  # (the role's check comes first)
    (("serve", "--front-door", "--vad", "energy"),
     "error: --vad: the front door runs no call (give it to the call workers); drop it with "
     "--front-door"),
    (("chat", "--voice", "--input-device", "nope", "--tts", "espeak"),
     "error: --tts 'espeak': no installed package registers 'espeak' (voxflow.tts)"),
    (("chat", "--stt", "whisper"), "need --voice"),
])
def test_a_bad_engine_option_is_one_line_with_the_fix_before_anything_runs(
    argv: tuple[str, ...], said: str, capsys: pytest.CaptureFixture[str], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("VOXFLOW_DATABASE_URL", raising=False)
    code, err = _run(capsys, *argv)
    line = _one_line_error(err)
    assert said in line, line
    assert code == 2
    assert not (tmp_path / "voxflow-demo" / "call.wav").exists()  # nothing ran


@pytest.mark.parametrize(("variable", "value", "said"), [
    ("VOXFLOW_VAD", "webrtc",
     "error: VOXFLOW_VAD='webrtc': no installed package registers 'webrtc' (voxflow.vad); "
     "installed: energy, silero"),
    ("VOXFLOW_STT", "whisper:base,", "error: VOXFLOW_STT='whisper:base,': option 2 is empty"),
    ("VOXFLOW_STT_MODEL", "base", "error: VOXFLOW_STT_MODEL is replaced by VOXFLOW_STT: set "
     "VOXFLOW_STT='whisper:base' and unset VOXFLOW_STT_MODEL"),
    ("VOXFLOW_END_OF_TURN_MODEL", "smart-turn", "error: VOXFLOW_END_OF_TURN_MODEL is replaced "
     "by VOXFLOW_END_OF_TURN: set VOXFLOW_END_OF_TURN='smart-turn'"),
])
def test_the_variables_are_checked_the_same_way(
    variable: str, value: str, said: str, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(variable, value)
    code, err = _run(capsys, "demo", "--fast")
    assert said in _one_line_error(err)
    assert code == 2


def test_an_option_wins_over_its_variable(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("VOXFLOW_STT", "vosk")
    code, err = _run(capsys, "demo", "--fast", "--stt", "whisper", "--vad", "webrtc")
    assert "error: --vad 'webrtc'" in _one_line_error(err) and code == 2  # not VOXFLOW_STT


def test_a_broken_engine_package_is_named_with_its_reinstall(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """An installed package whose entry point cannot be imported: the command fails (exit
    1, the package is broken, not the input) with the package and the command that fixes
    it; the other engines are unaffected."""
    module = f"broken_{uuid.uuid4().hex[:8]}"
    info = tmp_path / "site" / "broken_engines-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-engines\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[voxflow.stt]\nmine = {module}:engine\n")
    (tmp_path / "site" / f"{module}.py").write_text("import vosk_api_that_is_not_there\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.chdir(tmp_path)
    code, err = _run(capsys, "demo", "--fast", "--stt", "mine")
    line = _one_line_error(err)
    assert line.startswith(f"error: --stt 'mine': 'mine' ({module}:engine from broken-engines "
                           "1.0) cannot be loaded (ModuleNotFoundError: No module named "
                           "'vosk_api_that_is_not_there'); reinstall it: pip install "
                           "--force-reinstall broken-engines"), line
    assert code == 1
    code, err = _run(capsys, "demo", "--fast", "--stt", "whisper:x=1")
    assert "whisper takes no option 'x'" in _one_line_error(err)


@pytest.mark.parametrize("argv", [("demo", "--help"), ("serve", "--help"),
                                  ("chat", "--help")])
def test_the_help_names_the_engine_options(
    argv: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as done:
        main(list(argv))
    assert done.value.code == 0
    out = capsys.readouterr().out
    for option in ("--stt ENGINE", "--tts ENGINE", "--vad ENGINE", "--end-of-turn ENGINE"):
        assert option in out
    assert "voxflow doctor lists the engines installed" in out
    assert "VOXFLOW_STT" in out and "VOXFLOW_END_OF_TURN " in out
