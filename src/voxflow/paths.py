"""Where voxflow keeps its data by default: :func:`default_data_dir`.

* ``$VOXFLOW_HOME`` when set, else
* ``$XDG_DATA_HOME/voxflow`` or ``~/.local/share/voxflow`` (Linux and other POSIX),
  ``~/Library/Application Support/voxflow`` (macOS), ``%LOCALAPPDATA%\\voxflow`` (Windows).

The default SQLite store (:mod:`voxflow.flow.persistence`, which re-exports the function)
and stored input files (:mod:`voxflow.files`) live under it. A module of its own, with no
voxflow import, so both can use it without importing each other.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

__all__ = ["default_data_dir"]


def default_data_dir() -> Path:
    """Where voxflow keeps data by default (see module docs); not created here."""
    home = os.environ.get("VOXFLOW_HOME")
    if home:
        return Path(home).expanduser()
    if sys.platform == "win32":
        base = os.environ.get("LOCALAPPDATA") or str(Path.home() / "AppData" / "Local")
        return Path(base) / "voxflow"
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Application Support" / "voxflow"
    xdg = os.environ.get("XDG_DATA_HOME")
    return (Path(xdg) if xdg else Path.home() / ".local" / "share") / "voxflow"

