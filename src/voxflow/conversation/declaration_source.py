"""Reading a declaration's text safely: size, encoding and nesting limits.

A declaration may come from anyone, so reading it is bounded before anything else looks
at it. :func:`load_declaration_document` reads at most :data:`MAX_DECLARATION_BYTES`
(also from a device or a pipe that never ends), requires UTF-8 text, parses JSON
(``.json`` files) or YAML (anything else; only plain data: no tags that build objects)
with nesting refused beyond :data:`MAX_DECLARATION_DEPTH` levels, and then walks the
document once more, with YAML aliases expanded, refusing more than
:data:`MAX_DECLARATION_VALUES` values (so a few aliases cannot expand into millions).

Every failure is a :class:`~voxflow.errors.DeclarationError` naming the source (file or
``<contents>``) and the place: the line and column, or the key path of the value.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import yaml

from voxflow.errors import DeclarationError

__all__ = [
    "MAX_DECLARATION_BYTES",
    "MAX_DECLARATION_DEPTH",
    "MAX_DECLARATION_VALUES",
    "load_declaration_document",
]

MAX_DECLARATION_BYTES = 1_000_000
"""The largest declaration read (bytes of a file, characters of ``contents=``)."""

MAX_DECLARATION_DEPTH = 64
"""The deepest nesting of mappings and lists accepted."""

MAX_DECLARATION_VALUES = 100_000
"""The most values (mappings, lists and scalars, aliases expanded) in one document."""

_TOO_DEEP = f"nested deeper than {MAX_DECLARATION_DEPTH} levels"
_JSON_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.DOTALL)


def _fail(source: str, message: str, path: str = "") -> DeclarationError:
    """An error naming the source; ``path`` is the key path, when known."""
    return DeclarationError([(path, f"{source}: {message}")])


class _BoundedLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses deep nesting and names the line of bad values."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        self._depth += 1
        try:
            if self._depth > MAX_DECLARATION_DEPTH:
                mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
                raise yaml.composer.ComposerError(None, None, _TOO_DEEP, mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_object(self, node: Any, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep)
        except (ValueError, OverflowError, TypeError) as exc:  # 2001-13-45, a huge int
            raise yaml.constructor.ConstructorError(
                None, None, f"cannot read this value: {exc}", node.start_mark
            ) from None


def _read(path: str | os.PathLike[str]) -> str:
    source = str(path)
    try:
        with Path(path).open("rb") as file:
            raw = file.read(MAX_DECLARATION_BYTES + 1)
    except OSError as exc:
        raise _fail(source, f"cannot read it: {exc.strerror or exc}") from exc
    if len(raw) > MAX_DECLARATION_BYTES:
        raise _fail(source, f"larger than {MAX_DECLARATION_BYTES} bytes")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise _fail(
            source, f"not UTF-8 text (byte 0x{raw[exc.start]:02x} on line {line})"
        ) from None


def _check_json_depth(text: str, source: str) -> None:
    depth = 0
    for token in _JSON_TOKENS.finditer(text):
        char = token.group()
        if char in "[{":
            depth += 1
            if depth > MAX_DECLARATION_DEPTH:
                line = text.count("\n", 0, token.start()) + 1
                raise _fail(source, f"line {line}: {_TOO_DEEP}")
        elif char in "]}":
            depth -= 1


def _parse(text: str, source: str, is_json: bool) -> Any:
    if is_json:
        _check_json_depth(text, source)
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise _fail(source, f"not valid JSON: {exc}") from None
        except (ValueError, RecursionError) as exc:  # an int of 5,000 digits
            raise _fail(source, f"not valid JSON: {exc}") from None
    loader: _BoundedLoader | None = None
    try:
        loader = _BoundedLoader(text)  # the reader refuses control characters here
        loader.name = source
        return loader.get_single_data()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        what = ", ".join(str(p) for p in (exc.context, exc.problem) if p)
        raise _fail(source, f"{where}not valid YAML: {what}") from None
    except yaml.YAMLError as exc:
        raise _fail(source, f"not valid YAML: {exc}") from None
    finally:
        if loader is not None:
            loader.dispose()


def _check_shape(data: Any, source: str) -> None:
    """Refuse documents that are too deep or too large once aliases are expanded."""
    stack: list[tuple[Any, tuple[Any, ...]]] = [(data, ())]
    count = 0
    while stack:
        value, where = stack.pop()
        count += 1
        if count > MAX_DECLARATION_VALUES:
            raise _fail(
                source,
                f"more than {MAX_DECLARATION_VALUES} values (YAML aliases count each time used)",
                ".".join(map(str, where)),
            )
        if len(where) >= MAX_DECLARATION_DEPTH and isinstance(value, dict | list):
            raise _fail(source, _TOO_DEEP, ".".join(map(str, where)))
        if isinstance(value, dict):
            stack.extend((v, (*where, k)) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((v, (*where, i)) for i, v in enumerate(value))


def load_declaration_document(
    path: str | os.PathLike[str] | None = None, contents: str | None = None
) -> Any:
    """Read a declaration from ``path`` (``.json`` or YAML) or from ``contents`` (YAML).

    Raises:
        ValueError: not exactly one of ``path`` and ``contents``.
        TypeError: ``contents`` is not a string.
        DeclarationError: the source is unreadable, too large, not UTF-8, not valid
            YAML/JSON, or nested too deeply; the message names the file and the place.
    """
    if (path is None) == (contents is None):
        raise ValueError("give exactly one of path= or contents=")
    if path is not None:
        source = str(path)
        text = _read(path)
        is_json = source.endswith(".json")
    else:
        if not isinstance(contents, str):
            raise TypeError("contents must be a string")
        source, text, is_json = "<contents>", contents, False
        if len(text) > MAX_DECLARATION_BYTES:
            raise _fail(source, f"longer than {MAX_DECLARATION_BYTES} characters")
    data = _parse(text, source, is_json)
    _check_shape(data, source)
    return data
