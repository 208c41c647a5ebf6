"""The ``voxflow`` command line, run as a user runs it (a subprocess)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from voxflow.cli import main
from voxflow.demo import run_text_demo

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]


def voxflow(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "voxflow.cli", *args], cwd=ROOT, input=stdin,
        capture_output=True, text=True, timeout=120, check=False,
    )


def test_text_demo_answers_every_scripted_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_text_demo(json_output=True) == 0
    report = json.loads(capsys.readouterr().out)
    routes = [t["route"] for t in report["turns"]]
    assert routes == ["greet", "help", "story", "goodbye"]
    assert report["turns"][2]["assistant"].startswith("Once upon a time")


def test_chat_runs_a_flow_named_by_path() -> None:
    result = voxflow("chat", "voxflow.examples.assistant:Assistant", stdin="hello\n\nexit\n")
    assert result.returncode == 0, result.stderr
    assert "How can I help you today?" in result.stdout


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        ("no_colon", "must look like"),
        ("missing.py:Flow", "flow file not found"),
        ("voxflow.examples.assistant:Nope", "has no attribute 'Nope'"),
        ("voxflow.examples.assistant:STORY", "not a voxflow Flow subclass"),
        ("no_such_module_xyz:Flow", "cannot be imported"),
    ],
)
def test_bad_flow_reference_is_a_usage_error(ref: str, message: str) -> None:
    result = voxflow("chat", ref)
    assert result.returncode == 2
    assert message in result.stderr


def test_doctor_json_lists_models_and_fixes() -> None:
    result = voxflow("doctor", "--json")
    checks = {c["name"]: c for c in json.loads(result.stdout)}
    assert checks["Whisper tiny.en (default STT)"]["status"] == "ok"
    assert checks["Piper en_US-joe-medium (default TTS)"]["status"] == "ok"
    assert all(c["fix"] for c in checks.values() if c["status"] != "ok")
    assert result.returncode == (1 if any(c["status"] == "missing" for c in checks.values())
                                 else 0)


def test_unknown_command_exits_2() -> None:
    with pytest.raises(SystemExit) as exc:
        main(["no-such-command"])
    assert exc.value.code == 2


def test_the_voice_commands_are_found_through_entry_points() -> None:
    """The core names no adapter: the `voxflow.commands` entry points of the installed
    voxflow-adapters give each voice command, with the attributes the CLI calls."""
    from voxflow.commands import load_command

    chat, serve, demo = load_command("chat"), load_command("serve"), load_command("demo")
    assert chat.parse_device("3") == 3 and chat.parse_device("USB mic") == "USB mic"
    assert getattr(chat, "__name__", "") == "voxflow_adapters.local_chat"
    assert getattr(serve, "__name__", "") == "voxflow_adapters.webrtc.command"
    assert len(demo.DEMO_LINES) >= 4 and all(isinstance(x, str) for x in demo.DEMO_LINES)
