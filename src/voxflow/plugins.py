"""The entry points installed packages declare, current even when an install is stale.

An editable install (``uv sync`` of a workspace, ``pip install -e``) runs the source tree
but keeps the entry points its metadata had at install time: after ``pyproject.toml``
changes, without a reinstall, they are stale (a new setting unknown, ``--stt`` refused).
:func:`declared` reads such a distribution's entry points from the ``pyproject.toml`` its
``direct_url.json`` (PEP 610) points at, the metadata of every other one as installed, so
the packages' own code and the entry points naming it agree.

Reading them scans every installed distribution (3.5 to 6 ms on this project's
environment, more under load): the settings, the commands, the doctor's checks and the
engines all read them here, once per ``sys.path`` and modification times of its folders.
A package installed while the process runs (a notebook's ``%pip install``) adds a
``.dist-info`` to a folder on the path, which changes that folder's time: it is seen at
the next lookup, as ``importlib.metadata`` sees it (its path cache is keyed on the same
times), without :func:`refresh`; one ``stat`` per path entry costs microseconds, the scan
milliseconds.
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import re
import sys
import tomllib
from importlib.metadata import Distribution, EntryPoint, distributions
from pathlib import Path
from typing import NamedTuple
from urllib.parse import unquote, urlparse

__all__ = ["Declared", "declared", "refresh"]


class Declared(NamedTuple):
    """An entry point and the distribution that declares it."""

    entry: EntryPoint
    package: str
    """The distribution's name (``"?"``: unknown)."""
    version: str
    """Its version (``"?"``: unknown)."""


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


def _editable(path: tuple[str, ...]) -> dict[str, tuple[str, str, dict[str, dict[str, str]]]]:
    """Normalized name → (name, version, entry points) of each editable install on
    ``path`` (a ``sys.path``)."""
    current: dict[str, tuple[str, str, dict[str, dict[str, str]]]] = {}
    for dist in distributions(path=list(path)):
        if dist.read_text("direct_url.json") is None:
            continue  # (most: a wheel's metadata is its code's)
        name = dist.metadata["Name"] or "?"
        first = next(iter(distributions(name=name, path=list(path))), dist)
        source = _source(first)  # (the one imported: a copy earlier on the path wins)
        if source is not None:
            current.setdefault(_normalized(name), (name, first.version or "?", source))
    return current


def _mtimes(path: tuple[str, ...]) -> tuple[int | None, ...]:
    """The modification time of each entry of ``path`` (``None``: there is none): what
    changes when a package is installed into, or removed from, one of them."""
    times: list[int | None] = []
    for entry in path:
        try:
            times.append(os.stat(entry or ".").st_mtime_ns)
        except (OSError, ValueError):
            times.append(None)
    return tuple(times)


@functools.lru_cache(maxsize=4)
def _registry(path: tuple[str, ...],
              mtimes: tuple[int | None, ...]) -> dict[str, tuple[Declared, ...]]:
    """Group → its entry points, of every distribution on ``path`` (a ``sys.path``) as
    its folders were at ``mtimes`` (the cache key only): an editable install's from its
    ``pyproject.toml``, the others' from their metadata."""
    current = _editable(path)
    groups: dict[str, list[Declared]] = {}
    seen: set[str] = set()
    for dist in distributions():  # (as entry_points() reads them: the first of a name)
        name = dist.metadata["Name"] or "?"
        key = _normalized(name)
        if key in seen:
            continue
        seen.add(key)
        if key in current:
            continue  # (its pyproject.toml says, below)
        for entry in dist.entry_points:
            groups.setdefault(entry.group, []).append(
                Declared(entry, name, dist.version or "?"))
    for name, version, declared_groups in current.values():
        for group, entries in declared_groups.items():
            groups.setdefault(group, []).extend(
                Declared(EntryPoint(key, value, group), name, version)
                for key, value in entries.items())
    return {group: tuple(found) for group, found in groups.items()}


def declared(group: str) -> tuple[Declared, ...]:
    """The entry points of ``group`` with their distribution: an editable install's from
    its ``pyproject.toml`` (the metadata may be stale), the others' from their metadata;
    read again when ``sys.path`` or the time of one of its folders changes."""
    path = tuple(sys.path)
    return _registry(path, _mtimes(path)).get(group, ())


def refresh() -> None:
    """Read the installed packages again at the next :func:`declared` (a change the
    path's folders' times do not show: an editable install's ``pyproject.toml`` edited)."""
    importlib.invalidate_caches()
    _registry.cache_clear()
