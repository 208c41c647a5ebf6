"""The entry points of the installed packages (:mod:`voxflow.plugins`): read once per
``sys.path`` (and times of its folders) for the settings, the commands, the doctor and
the engines alike, again after :func:`~voxflow.plugins.refresh`; an editable install's from its
``pyproject.toml`` for every one of them. The per-call cost it saved is printed by a
timeit of ``Settings.from_env`` (issue 31's closing note), not asserted here."""

from __future__ import annotations

import os
import sys
import uuid
from importlib.metadata import distribution
from pathlib import Path

import pytest
from voxflow_voice.engines import choose_engine, installed_engines

from tests.test_settings import _install
from voxflow.commands import installed_commands
from voxflow.settings import Settings


def test_commands_and_engines_know_a_stale_editable_install_as_the_settings_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """voxflow-voice and voxflow-adapters installed editable, their metadata without any
    entry point (pyproject.toml changed without a `uv sync`): the settings read their
    pyproject.toml, the commands and engines read the metadata only (``voxflow serve``
    unknown, no STT engine) until all four read one registry."""
    for name in ("voxflow-voice", "voxflow-adapters"):
        installed = distribution(name)
        _install(tmp_path, name, "", direct_url=installed.read_text("direct_url.json"))
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "whisper" in installed_engines("stt")
    assert installed_engines("stt")["whisper"].package.startswith("voxflow-voice ")
    assert "serve" in installed_commands().commands


def _tick(folder: Path) -> None:
    """Move ``folder``'s time on by a second, as the clock does during a real install
    (pip takes longer than one tick of a coarse file-system clock; a test does not)."""
    now = folder.stat().st_mtime_ns
    os.utime(folder, ns=(now, now + 1_000_000_000))


def test_a_package_installed_into_a_folder_on_the_path_is_seen_without_refresh(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A notebook's ``%pip install voxflow-mystt`` then ``--stt mystt``: a ``.dist-info``
    appears in a folder already on ``sys.path`` after the first lookup. Before, the
    registry was read once per ``sys.path`` until :func:`~voxflow.plugins.refresh`:
    ``UnknownEngineError`` and ``VOXFLOW_MYSTT_KEY`` unknown, although
    ``importlib.metadata`` saw the package (review finding 3)."""
    module = f"mystt_{uuid.uuid4().hex[:10]}"
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "mystt" not in installed_engines("stt")  # (the first lookup)
    unknown, = Settings.unknown_variables({"VOXFLOW_MYSTT_KEY": "k"})
    assert unknown.startswith("VOXFLOW_MYSTT_KEY is not a voxflow variable")
    (tmp_path / f"{module}.py").write_text(
        "from voxflow.settings import SettingsSection\n"
        "from voxflow_voice.engines import EngineFactory\n"
        "ENGINE = EngineFactory('stt', lambda options, context: None)\n"
        "class Section(SettingsSection):\n    mystt_key: str = ''\n")
    _install(tmp_path, "voxflow-mystt", f"[voxflow.stt]\nmystt = {module}:ENGINE\n"
             f"[voxflow.settings]\nmystt_key = {module}:Section\n")
    _tick(tmp_path)
    try:
        assert installed_engines("stt")["mystt"].package == "voxflow-mystt 0.1"
        assert choose_engine("stt", "mystt").installed.package == "voxflow-mystt 0.1"  # type: ignore[union-attr]
        assert Settings.unknown_variables({"VOXFLOW_MYSTT_KEY": "k"}) == []
    finally:
        sys.modules.pop(module, None)

