"""The entry points of the installed packages (:mod:`voxflow.plugins`): read once per
``sys.path`` for the settings, the commands, the doctor and the engines alike, again
after :func:`~voxflow.plugins.refresh`; an editable install's from its
``pyproject.toml`` for every one of them. The per-call cost it saved is printed by a
timeit of ``Settings.from_env`` (issue 31's closing note), not asserted here."""

from __future__ import annotations

from importlib.metadata import distribution
from pathlib import Path

import pytest
from voxflow_voice.engines import installed_engines

from tests.test_settings import _install
from voxflow import plugins
from voxflow.commands import installed_commands


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


def test_the_packages_are_read_once_until_refresh(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A folder put on ``sys.path`` is read at once; a package installed into a folder
    already on it, after :func:`~voxflow.plugins.refresh` (as ``importlib`` caches)."""
    _install(tmp_path, "acme-one", "[voxflow.stt]\nacme-one = acme:ONE\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    names = lambda: {d.entry.name for d in plugins.declared("voxflow.stt")}  # noqa: E731
    assert "acme-one" in names()
    _install(tmp_path, "acme-two", "[voxflow.stt]\nacme-two = acme:TWO\n")
    assert "acme-two" not in names()  # (the registry read before it was there)
    plugins.refresh()
    assert {"acme-one", "acme-two"} <= names()
    found = {d.entry.name: d for d in plugins.declared("voxflow.stt")}
    assert (found["acme-two"].package, found["acme-two"].version) == ("acme-two", "0.1")
