"""voxflow installs like real software: from the three built wheels, in a fresh virtual
environment outside the checkout, every command a user types first works, from an empty
folder, with the example assistant that ships inside the package."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from .conftest import ROOT, clean_env

pytestmark = pytest.mark.packaging


def voxflow(bin_dir: Path, *args: str, cwd: Path, stdin: str | None = None,
            timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(bin_dir / "voxflow"), *args], cwd=cwd, input=stdin,
                          env=clean_env(), capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def empty_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "empty"
    folder.mkdir()
    assert not folder.is_relative_to(ROOT)
    return folder


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
    # what is missing in a voxflow[voice]-only install is named with its fix
    assert all(c["fix"] for c in checks if c["status"] == "missing")
    assert doctor.returncode == (1 if any(c["status"] == "missing" for c in checks) else 0)
