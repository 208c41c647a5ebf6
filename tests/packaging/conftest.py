"""Packaging tests: voxflow as a user gets it, built into wheels and installed with uv.

``installed_voxflow`` (session) builds the four wheels of the checkout with
``uv build`` and installs ``voxflow[voice,postgres]`` from them, with pytest, into a fresh
virtual environment outside the checkout (dependencies from PyPI, through uv's cache).
It returns the environment's ``bin`` directory. Tests using it carry the ``packaging``
marker; they are skipped, with the reason, when ``uv`` is not on the PATH.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WHEELS = ("voxflow", "voxflow_voice", "voxflow_adapters", "voxflow_smart_turn")


def clean_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment without this checkout's virtualenv and pytest settings, so a
    subprocess sees only what was installed into its own environment."""
    drop = ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "UV_PROJECT_ENVIRONMENT")
    env = {k: v for k, v in os.environ.items()
           if k not in drop and not k.startswith(("PYTEST_", "UV_RUN"))}
    env.update(extra or {})
    return env


def run(command: list[str], *, cwd: Path, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    """Run ``command``; a failure raises with its output."""
    result = subprocess.run(command, cwd=cwd, env=clean_env(), capture_output=True, text=True,
                            timeout=timeout)
    if result.returncode != 0:
        raise AssertionError(
            f"{' '.join(command)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
        )
    return result


def uv() -> str:
    """The uv executable (the test is skipped without it)."""
    found = shutil.which("uv")
    if found is None:
        pytest.skip("uv is not on the PATH (pip install uv)")
    return found


@pytest.fixture(scope="session")
def voxflow_wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The four wheels of this checkout (``uv build --all-packages --wheel``)."""
    out = tmp_path_factory.mktemp("wheels")
    run([uv(), "build", "--all-packages", "--wheel", "--out-dir", str(out)], cwd=ROOT)
    wheels = {}
    for name in WHEELS:
        (wheel,) = out.glob(f"{name}-*.whl")
        wheels[name] = wheel
    return wheels


def make_venv(path: Path, *requirements: str) -> Path:
    """A fresh virtual environment at ``path`` with ``requirements`` installed; its bin."""
    tool = uv()
    run([tool, "venv", "--python", sys.executable, str(path)], cwd=path.parent)
    python = path / "bin" / "python"
    run([tool, "pip", "install", "--python", str(python), *requirements], cwd=path.parent)
    return path / "bin"


@pytest.fixture(scope="session")
def installed_voxflow(
    tmp_path_factory: pytest.TempPathFactory, voxflow_wheels: dict[str, Path]
) -> Path:
    """``voxflow[voice,postgres]`` and pytest installed from this checkout's wheels into a
    fresh virtual environment outside the checkout; returns its ``bin`` directory."""
    home = tmp_path_factory.mktemp("venv-voice")
    core = voxflow_wheels["voxflow"]
    return make_venv(
        home / "venv", f"voxflow[voice,postgres] @ {core.as_uri()}",
        *voice_wheels(voxflow_wheels), "pytest",
    )


def voice_wheels(wheels: Mapping[str, Path]) -> list[str]:
    """The wheels ``voxflow[voice]`` takes from the checkout (voxflow-smart-turn is a
    dependency of voxflow-voice that is not on an index either)."""
    return [str(wheels[name]) for name in ("voxflow_voice", "voxflow_adapters",
                                           "voxflow_smart_turn")]


@pytest.fixture(scope="session")
def installed_core(
    tmp_path_factory: pytest.TempPathFactory, voxflow_wheels: dict[str, Path]
) -> Path:
    """The core ``voxflow`` wheel alone (no extra) in a fresh virtual environment; its bin."""
    home = tmp_path_factory.mktemp("venv-core")
    return make_venv(home / "venv", str(voxflow_wheels["voxflow"]))


def voxflow(bin_dir: Path, *args: str, cwd: Path, stdin: str | None = None,
            timeout: float = 600, env: Mapping[str, str] | None = None
            ) -> subprocess.CompletedProcess[str]:
    """The installed ``voxflow`` command in ``bin_dir``, run in ``cwd`` (``env``: the clean
    environment if None)."""
    return subprocess.run([str(bin_dir / "voxflow"), *args], cwd=cwd, input=stdin,
                          env=clean_env() if env is None else dict(env),
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def empty_dir(tmp_path: Path) -> Path:
    """An empty folder outside the checkout (where a user types the commands)."""
    folder = tmp_path / "empty"
    folder.mkdir()
    assert not folder.is_relative_to(ROOT)
    return folder
