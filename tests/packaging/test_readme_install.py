"""The README's Install section: the extras it names exist, and its commands for a
checkout (build the wheels, install them) run as written into a fresh virtual
environment outside the checkout, giving the voice kit and pytest its plugin."""

from __future__ import annotations

import glob
import re
import shlex
import subprocess
import tomllib
from pathlib import Path

import pytest

from .conftest import ROOT, clean_env, run, uv

README = ROOT / "README.md"


def install_blocks() -> list[list[str]]:
    """The ```bash blocks of the Install section, each as its command lines."""
    text = README.read_text(encoding="utf-8")
    section = text[text.index("\n## Install\n"):]
    section = section[: section.index("\n## ", 1)]
    blocks = re.findall(r"```bash\n(.*?)```", section, flags=re.DOTALL)
    return [[line.split(" #", 1)[0].strip() for line in block.splitlines() if line.strip()]
            for block in blocks]


@pytest.mark.unit
def test_every_extra_the_section_names_exists() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    named = {extra for block in install_blocks() for line in block
             for extra in re.findall(r"voxflow\[(\w+)\]", line)}
    assert named == {"voice", "all"} and named <= set(extras)


@pytest.mark.packaging
def test_the_checkout_commands_install_the_kit(tmp_path: Path) -> None:
    index, checkout = install_blocks()
    assert all(line.startswith("pip install ") for line in index)
    build, install = checkout
    # Run as written, the build's output folder and the environment outside the checkout.
    dist = tmp_path / "dist"
    argv = shlex.split(build)
    assert argv[:2] == ["uv", "build"] and argv[-2:] == ["--out-dir", "dist"]
    run([uv(), *argv[1:-1], str(dist)], cwd=ROOT)
    venv = tmp_path / "venv"
    run([uv(), "venv", "--python", "3.11", str(venv)], cwd=tmp_path)
    argv = shlex.split(install)
    assert argv[:3] == ["uv", "pip", "install"]
    wheels = [w for arg in argv[3:] for w in (sorted(glob.glob(str(tmp_path / arg)))
                                               if "*" in arg else [arg])]
    assert len([w for w in wheels if w.endswith(".whl")]) == 4
    run([uv(), "pip", "install", "--python", str(venv / "bin" / "python"), *wheels],
        cwd=tmp_path)
    project = tmp_path / "project"  # the kit's fixtures, with no conftest
    project.mkdir()
    (project / "test_kit.py").write_text(
        "def test_the_plugin_is_there(virtual_clock, voxflow_realtime):\n"
        "    assert virtual_clock.now() == 0.0 and voxflow_realtime is False\n")
    probe = subprocess.run([str(venv / "bin" / "python"), "-m", "pytest", "-q"],
                           cwd=project, env=clean_env(), capture_output=True, text=True,
                           timeout=300)
    assert probe.returncode == 0 and "1 passed" in probe.stdout, probe.stdout + probe.stderr
    kit = subprocess.run(
        [str(venv / "bin" / "python"), "-c",
         "import voxflow, voxflow_voice, voxflow_adapters.testkit as kit; print(kit.CallReply)"],
        cwd=tmp_path, env=clean_env(), capture_output=True, text=True, timeout=300)
    assert kit.returncode == 0 and "CallReply" in kit.stdout, kit.stderr
