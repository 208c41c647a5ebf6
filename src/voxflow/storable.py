"""What text a voxflow store can keep, checked the same way for every backend.

PostgreSQL refuses a NUL character (U+0000) in ``text`` and ``jsonb`` (``\\u0000
cannot be converted to text``), and no driver encodes a lone surrogate (U+D800 to
U+DFFF, which Python strings and JSON's ``\\ud800`` escapes can hold) as UTF-8. SQLite
keeps a NUL, so the same input worked on one backend and failed mid-write on the other.
Every text voxflow writes where a database sees it as text (session ids, method names,
record keys, lease owners, a job's result, progress and error, the SDP of an offer) is
checked here first, and refused with :class:`~voxflow.errors.UnstorableTextError`
naming the field, before any write on either backend. Texts inside a session's state
are stored as escaped JSON (``"a\\u0000b"``), which both backends keep: they are not
refused.

* :func:`text_problem`: what is wrong with one text, or None;
* :func:`check_text`: the text, or the typed error (an optional length limit too);
* :func:`check_json`: every string and key of a JSON value;
* :func:`storable_text`: a text made storable (each bad character replaced by U+FFFD),
  for texts that must be kept whatever they hold (a failed job's error).
"""

from __future__ import annotations

import re
from typing import Any

from voxflow.errors import UnstorableTextError

__all__ = ["check_json", "check_text", "json_problem", "storable_text", "text_problem"]

_BAD = re.compile("[\x00\ud800-\udfff]")


def text_problem(text: str, *, max_chars: int | None = None) -> str | None:
    """Why no store can keep ``text`` (a phrase: ``"contains a NUL character (U+0000)
    at index 3"``), or None when every backend can.

    Raises:
        TypeError: ``text`` is not a str.
    """
    if not isinstance(text, str):
        raise TypeError(f"expected a str, got {type(text).__name__}")
    found = _BAD.search(text)
    if found is not None:
        char = found.group()
        what = "a NUL character" if char == "\x00" else "a lone surrogate"
        return f"contains {what} (U+{ord(char):04X}) at index {found.start()}"
    if max_chars is not None and len(text) > max_chars:
        return f"has {len(text):,} characters, over the limit of {max_chars:,}"
    return None


def check_text(text: str, field: str, *, max_chars: int | None = None) -> str:
    """``text`` itself when every store can keep it.

    Raises:
        UnstorableTextError: it holds a NUL or a lone surrogate, or is longer than
            ``max_chars`` (``field`` names it in the message).
        TypeError: ``text`` is not a str.
    """
    problem = text_problem(text, max_chars=max_chars)
    if problem is not None:
        raise UnstorableTextError(field, problem)
    return text


def json_problem(value: Any, *, path: str = "") -> tuple[str, str] | None:
    """The first string or key of a JSON value (dicts, lists, scalars) that no store
    can keep: ``(where, problem)``, ``where`` a path such as ``outputs.announcement`` or
    ``items[2]``; None when there is none. Other values are left alone."""
    stack: list[tuple[str, Any]] = [(path, value)]
    while stack:
        where, item = stack.pop()
        if isinstance(item, str):
            problem = text_problem(item)
            if problem is not None:
                return where, problem
        elif isinstance(item, dict):
            for key, child in item.items():
                if isinstance(key, str) and (problem := text_problem(key)) is not None:
                    return where, f"has a key that {problem}"
                stack.append((f"{where}.{key}" if where else str(key), child))
        elif isinstance(item, list | tuple):
            stack.extend((f"{where}[{i}]", child) for i, child in enumerate(item))
    return None


def check_json(value: Any, field: str) -> Any:
    """``value`` itself when every string and key in it can be stored.

    Raises:
        UnstorableTextError: naming ``field`` and the path inside it.
    """
    found = json_problem(value)
    if found is not None:
        where, problem = found
        raise UnstorableTextError(f"{field}.{where}" if where else field, problem)
    return value


def storable_text(text: str) -> str:
    """``text`` with each NUL and lone surrogate replaced by U+FFFD (every store keeps
    the result), for a text that must be kept whatever it holds."""
    return _BAD.sub("\ufffd", text)
