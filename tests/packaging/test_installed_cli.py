"""voxflow installs like real software: from the four built wheels, in a fresh virtual
environment outside the checkout, every command a user types first works, from an empty
folder, with the example assistant that ships inside the package."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from .conftest import clean_env, voxflow

pytestmark = pytest.mark.packaging


def test_the_version_and_the_packaged_example(installed_voxflow: Path, empty_dir: Path) -> None:
    version = voxflow(installed_voxflow, "--version", cwd=empty_dir)
    assert version.returncode == 0 and version.stdout.strip() == "voxflow 0.1.0"
    where = subprocess.run(
        [str(installed_voxflow / "python"), "-c",
         "import voxflow.examples.assistant as a; print(a.__file__)"],
        cwd=empty_dir, env=clean_env(), capture_output=True, text=True, check=True)
    assert Path(where.stdout.strip()).is_relative_to(installed_voxflow.parent)


def test_voxflow_demo_fast_writes_its_outputs(installed_voxflow: Path, empty_dir: Path) -> None:
    result = voxflow(installed_voxflow, "demo", "--fast", cwd=empty_dir)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    out = empty_dir / "voxflow-demo"
    for name in ("call.wav", "events.jsonl", "timeline.png"):
        assert (out / name).stat().st_size > 0, name
    events = (out / "events.jsonl").read_text()
    assert '"reply_kind":"progress"' in events.replace(" ", "")  # the job was announced
    assert "Traceback" not in result.stderr


def test_voxflow_chat_on_a_piped_script_announces_the_job(
    installed_voxflow: Path, empty_dir: Path
) -> None:
    script = "Hello!\nWhere is my order?\n"
    result = voxflow(installed_voxflow, "chat", "voxflow.examples.assistant:Assistant",
                     cwd=empty_dir, stdin=script, timeout=120)
    assert result.returncode == 0, result.stderr
    lines = [ln for ln in result.stdout.split("Assistant: ") if ln.strip()]
    assert "How can I help you today?" in lines[1]
    assert "checking your order" in lines[2]
    assert "order 417 has shipped" in lines[3]  # announced once the job finished


def test_voxflow_serve_help_and_doctor(installed_voxflow: Path, empty_dir: Path) -> None:
    serve = voxflow(installed_voxflow, "serve", "--help", cwd=empty_dir)
    assert serve.returncode == 0 and "--max-calls" in serve.stdout
    doctor = voxflow(installed_voxflow, "doctor", "--json", cwd=empty_dir)
    assert doctor.returncode in (0, 1) and "Traceback" not in doctor.stderr
    assert '"Whisper tiny.en (default STT)"' in doctor.stdout
    checks = __import__("json").loads(doctor.stdout)
    by_name = {c["name"]: c for c in checks}
    assert by_name["Whisper tiny.en (default STT)"]["status"] == "ok"
    # what is missing in a voxflow[voice,postgres] install is named with its fix
    assert all(c["fix"] for c in checks if c["status"] == "missing")
    assert doctor.returncode == (1 if any(c["status"] == "missing" for c in checks) else 0)


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def test_the_voice_commands_come_from_the_adapters_wheel(
    installed_voxflow: Path, empty_dir: Path
) -> None:
    found = subprocess.run(
        [str(installed_voxflow / "python"), "-c",
         "from importlib.metadata import entry_points as e; "
         "print(sorted((p.name, p.value, p.dist.name) for p in e(group='voxflow.commands')))"],
        cwd=empty_dir, env=clean_env(), capture_output=True, text=True, check=True)
    assert found.stdout.strip() == str(sorted([
        ("chat", "voxflow_adapters.commands:voice_chat", "voxflow-adapters"),
        ("demo", "voxflow_adapters.commands:voice_demo", "voxflow-adapters"),
        ("phone", "voxflow_adapters.commands:phone", "voxflow-adapters"),
        ("serve", "voxflow_adapters.commands:serve", "voxflow-adapters"),
        ("status", "voxflow_adapters.commands:status", "voxflow-adapters"),
    ]))
    # voxflow[voice] has the adapters without the `local` extra (sounddevice): named
    chat = voxflow(installed_voxflow, "chat", "--voice", cwd=empty_dir, timeout=120)
    assert chat.returncode == 1, chat.stderr
    assert "pip install 'voxflow[local]'" in chat.stderr and "Traceback" not in chat.stderr


def test_the_core_alone_names_the_extra_for_each_voice_command(
    installed_core: Path, empty_dir: Path
) -> None:
    listed = voxflow(installed_core, "--help", cwd=empty_dir)  # no voice command listed
    assert listed.returncode == 0 and "    chat " in listed.stdout
    assert "serve" not in listed.stdout and "WebRTC" not in listed.stdout
    serve = voxflow(installed_core, "serve", "--port", str(_free_port()), cwd=empty_dir)
    assert serve.returncode == 1 and "Traceback" not in serve.stderr, serve.stderr
    assert "voxflow serve is not installed" in serve.stderr
    assert "pip install 'voxflow[webrtc]'" in serve.stderr
    chat = voxflow(installed_core, "chat", "--voice", cwd=empty_dir)
    assert chat.returncode == 1 and "pip install 'voxflow[local]'" in chat.stderr, chat.stderr
    script = voxflow(installed_core, "demo", "--script", str(empty_dir), cwd=empty_dir)
    assert script.returncode == 2 and "pip install 'voxflow[voice]'" in script.stderr
    # the demo itself still runs: the same conversation as text
    demo = voxflow(installed_core, "demo", "--json", cwd=empty_dir, timeout=120)
    assert demo.returncode == 0, demo.stderr
    assert "pip install 'voxflow[voice]'" in demo.stderr
    assert __import__("json").loads(demo.stdout)["mode"] == "text"


def test_bench_says_the_benchmarks_live_in_the_source_checkout(
    installed_voxflow: Path, empty_dir: Path
) -> None:
    # The wheels ship no benchmarks/: one line saying where they are, not a search in
    # some folder of the virtual environment.
    result = voxflow(installed_voxflow, "bench", "--list", cwd=empty_dir)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: the benchmarks live in the voxflow source checkout")
    assert "site-packages" not in line and str(installed_voxflow.parent) not in line
