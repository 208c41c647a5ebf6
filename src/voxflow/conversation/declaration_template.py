"""Declaration templates: ``${state.<path>}`` and ``${input<path>}`` over declared data only.

A templated field (an agent's ``input``, an llm action's ``prompt`` and ``system``) may
name two roots: ``state`` (the flow's state, a pydantic model whose fields the
declaration or its ``python`` state declares) and ``input`` (the value the method was
triggered with). A path below a root is a chain of plain names and indexes::

    ${state.tier}   ${state.profile.name}   ${state.messages[-1].content}   ${input.items.0}

A name is ``[A-Za-z][A-Za-z0-9_]*`` (no leading underscore, so no dunder and no private
attribute is ever named) and reads only a *declared* value: a field of a pydantic model
(``model_fields``), a key of a ``dict``; an index reads a ``list`` or ``tuple``. Nothing
else is traversed: not attributes of arbitrary objects, not methods, not modules, not
other mappings (``os.environ`` is not a ``dict``). A missing key, an index out of range
or a ``None`` on the way renders as ``''``.

What renders: ``None`` as ``''``, strings as themselves, numbers and booleans with
``str``, and ``dict``/``list``/``tuple``/models as JSON. Any other object is refused.

Checks happen twice. :func:`check_template` runs when the declaration loads: the syntax
of every expression, and, when the state model is known, that the first name below
``state`` (and every name through nested models) is a declared field. :func:`render`
enforces the same rules on the live values at run time. Either way a violation is a
:class:`~voxflow.errors.DeclarationError` whose path is the templated field and whose
message quotes the bad expression, and nothing is sent anywhere.
"""

from __future__ import annotations

import inspect
import json
import re
from types import UnionType
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic_core import PydanticSerializationError, to_jsonable_python

from voxflow.errors import DeclarationError

__all__ = [
    "MAX_EXPRESSION_CHARS",
    "MAX_PATH_PARTS",
    "TemplatePath",
    "check_template",
    "parse_expression",
    "render",
]

MAX_EXPRESSION_CHARS = 256
"""The longest ``${...}`` expression accepted."""

MAX_PATH_PARTS = 16
"""The most names/indexes one expression may chain below its root."""

_TEMPLATE = re.compile(r"\$\{([^}]*)\}")
_ROOT = re.compile(r"\s*(state|input)")
_PART = re.compile(r"\.([A-Za-z][A-Za-z0-9_]*)|\.([0-9]{1,9})|\[(-?[0-9]{1,9})\]")

TemplatePath = tuple[str, tuple[str | int, ...]]
"""A parsed expression: its root (``state`` or ``input``) and the names/indexes below it."""

_USAGE = "use ${state.<field>} or ${input}, with plain names and [index] below them"


class _Refused(Exception):
    """A path step is not allowed (internal; becomes a DeclarationError)."""


def parse_expression(expr: str) -> TemplatePath:
    """Parse the inside of one ``${...}``.

    Raises:
        ValueError: not ``state.<name>...`` or ``input...`` with plain names and indexes.
    """
    if len(expr) > MAX_EXPRESSION_CHARS:
        raise ValueError(f"longer than {MAX_EXPRESSION_CHARS} characters")
    text = expr.rstrip()
    root = _ROOT.match(text)
    if root is None:
        raise ValueError(f"unknown root: {_USAGE}")
    parts: list[str | int] = []
    at = root.end()
    while at < len(text):
        step = _PART.match(text, at)
        if step is None:
            rest = text[at:]
            if rest.startswith(".") and rest[1:2] == "_":
                raise ValueError("names starting with '_' are never reachable")
            raise ValueError(f"cannot read {rest!r}: {_USAGE}")
        name, dotted, bracket = step.groups()
        parts.append(name if name is not None else int(dotted if dotted is not None else bracket))
        at = step.end()
    if len(parts) > MAX_PATH_PARTS:
        raise ValueError(f"more than {MAX_PATH_PARTS} names/indexes")
    if root.group(1) == "state" and not (parts and isinstance(parts[0], str)):
        raise ValueError("name a state field: ${state.<field>}")
    return root.group(1), tuple(parts)


def _known(annotation: Any) -> Any:
    """The annotation without ``| None``; ``None`` when the type says too little."""
    if get_origin(annotation) in (Union, UnionType):
        members = [a for a in get_args(annotation) if a is not type(None)]
        return _known(members[0]) if len(members) == 1 else None
    return annotation


def _check_against(model: type[BaseModel], parts: tuple[str | int, ...]) -> str | None:
    """Why ``parts`` cannot name declared data of ``model``, as far as its types tell."""
    current: Any = model
    for part in parts:
        current = _known(current)
        origin = get_origin(current) or current
        if inspect.isclass(current) and issubclass(current, BaseModel):
            if isinstance(part, int):
                return f"{current.__name__} is a model, not a list: it has no index {part}"
            field = current.model_fields.get(part)
            if field is None:
                return f"{part!r} is not a field of {current.__name__}"
            current = field.annotation
        elif origin in (list, tuple):
            if not isinstance(part, int):
                return f"cannot read {part!r} of a list: index it, as in [0]"
            args = get_args(current)
            current = args[0] if args else None
        elif origin is dict and isinstance(part, str):
            args = get_args(current)
            current = args[1] if len(args) == 2 else None
        else:
            return None  # Any, a scalar, a dict indexed by a number: only run time knows
    return None


def check_template(
    text: str,
    field: str,
    errors: list[tuple[str, str]],
    *,
    state_model: type[BaseModel] | None = None,
) -> list[TemplatePath]:
    """Check every ``${...}`` of ``text`` (the templated ``field``); append problems.

    With ``state_model`` the names below ``state`` are checked against its fields.
    Returns the expressions that parsed.
    """
    paths: list[TemplatePath] = []
    for expr in _TEMPLATE.findall(text):
        try:
            path = parse_expression(expr)
        except ValueError as exc:
            errors.append((field, f"${{{_quote(expr)}}}: {exc}"))
            continue
        if state_model is not None and path[0] == "state":
            problem = _check_against(state_model, path[1])
            if problem is not None:
                errors.append((field, f"${{{_quote(expr)}}}: {problem}"))
                continue
        paths.append(path)
    return paths


def _quote(expr: str) -> str:
    return expr if len(expr) <= 80 else expr[:77] + "..."


def _step(current: Any, part: str | int) -> Any:
    if isinstance(part, int):
        if isinstance(current, list | tuple):
            return current[part] if -len(current) <= part < len(current) else None
        raise _Refused(f"cannot index a {type(current).__name__}")
    if isinstance(current, BaseModel):
        if part in type(current).model_fields:
            return getattr(current, part)
        extra = current.model_extra
        if extra is not None and part in extra:
            return extra[part]
        raise _Refused(f"{part!r} is not a field of {type(current).__name__}")
    if isinstance(current, dict):
        return current.get(part)
    raise _Refused(
        f"cannot read {part!r} of a {type(current).__name__}: only model fields, "
        "dict keys and list indexes are reachable"
    )


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, bool | int | float):
        return str(value)
    if isinstance(value, dict | list | tuple | BaseModel):
        try:
            data = value.model_dump(mode="json") if isinstance(value, BaseModel) else value
            return json.dumps(to_jsonable_python(data), ensure_ascii=False)
        except (PydanticSerializationError, TypeError, ValueError) as exc:
            raise _Refused(f"holds a value that is not data ({exc})") from None
    raise _Refused(f"is a {type(value).__name__}, not data (text, numbers, lists, mappings)")


def render(text: str, state: Any, value: Any, *, field: str = "") -> str:
    """Replace every ``${...}`` of ``text`` with the declared data it names.

    Args:
        text: the templated field's text.
        state: the flow's state.
        value: the method's trigger value (``${input}``).
        field: the field's dotted path, for errors.

    Raises:
        DeclarationError: an expression is malformed or reaches something that is not
            declared data; nothing was rendered.
    """

    def resolve(match: re.Match[str]) -> str:
        expr = match.group(1)
        try:
            root, parts = parse_expression(expr)
        except ValueError as exc:
            raise DeclarationError([(field, f"${{{_quote(expr)}}}: {exc}")]) from None
        current = state if root == "state" else value
        try:
            for part in parts:
                if current is None:
                    break
                current = _step(current, part)
            return _text(current)
        except _Refused as exc:
            raise DeclarationError([(field, f"${{{_quote(expr)}}}: {exc}")]) from None

    return _TEMPLATE.sub(resolve, text)
