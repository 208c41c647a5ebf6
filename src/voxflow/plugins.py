"""The entry points installed packages declare, current even when an install is stale.

An editable install (``uv sync`` of a workspace, ``pip install -e``) runs the source tree
but keeps the entry points its metadata had at install time: after ``pyproject.toml``
changes, without a reinstall, they are stale (a new setting unknown, ``--stt`` refused).
:func:`declared` reads such a distribution's entry points from the ``pyproject.toml`` its
``direct_url.json`` (PEP 610) points at, the metadata of every other one as installed, so
the packages' own code and the entry points naming it agree.
"""

from __future__ import annotations

import functools
import json
import re
import sys
import tomllib
from importlib.metadata import Distribution, EntryPoint, distributions, entry_points
from pathlib import Path
from urllib.parse import unquote, urlparse

__all__ = ["Declared", "declared"]

Declared = tuple[EntryPoint, str]
"""An entry point and the name of the distribution that declares it."""


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _source(dist: Distribution) -> dict[str, dict[str, str]] | None:
    """The entry points (group → name → value) ``dist``'s source tree declares now, if
    it is installed editable from a ``pyproject.toml`` that lists them; else None."""
    try:
        info = json.loads(dist.read_text("direct_url.json") or "null")
        editable = info["dir_info"].get("editable") is True
        url = urlparse(info["url"])
    except (ValueError, KeyError, TypeError, AttributeError):
        return None  # not installed from a directory (or unreadable): its metadata holds
    if not editable or url.scheme != "file":
        return None
    try:
        project = tomllib.loads((Path(unquote(url.path)) / "pyproject.toml").read_text(
            encoding="utf-8"))["project"]
    except (OSError, ValueError, KeyError, TypeError):
        return None  # the source tree moved or is not a project: the metadata holds
    dynamic = project.get("dynamic", []) if isinstance(project, dict) else None
    if not isinstance(dynamic, list) or "entry-points" in dynamic:
        return None  # (entry points a build hook writes: only the metadata has them)
    groups = project.get("entry-points", {})
    if not isinstance(groups, dict):
        return None
    return {group: {str(k): str(v) for k, v in entries.items()}
            for group, entries in groups.items() if isinstance(entries, dict)}


@functools.lru_cache(maxsize=4)
def _editable(path: tuple[str, ...]) -> dict[str, tuple[str, dict[str, dict[str, str]]]]:
    """Normalized name → (name, entry points) of each editable install on ``path`` (a
    ``sys.path``: read once per path, as the import system does)."""
    current: dict[str, tuple[str, dict[str, dict[str, str]]]] = {}
    for dist in distributions(path=list(path)):
        if dist.read_text("direct_url.json") is None:
            continue  # (most: a wheel's metadata is its code's)
        name = dist.metadata["Name"] or "?"
        first = next(iter(distributions(name=name, path=list(path))), dist)
        source = _source(first)  # (the one imported: a copy earlier on the path wins)
        if source is not None:
            current.setdefault(_normalized(name), (name, source))
    return current


def declared(group: str) -> list[Declared]:
    """The entry points of ``group`` with their distribution's name: an editable
    install's from its ``pyproject.toml`` (the metadata may be stale), the others' from
    their metadata."""
    current = {key: (name, groups.get(group, {}))
               for key, (name, groups) in _editable(tuple(sys.path)).items()}
    found = [(entry, entry.dist.name if entry.dist is not None else "?")
             for entry in entry_points(group=group)
             if entry.dist is None or _normalized(entry.dist.name) not in current]
    for name, entries in current.values():
        found.extend((EntryPoint(key, value, group), name) for key, value in entries.items())
    return found
