"""The one strict JSON reader for what arrives from outside: data-channel messages from
the page and the body of ``POST /offer``.

Every input is hostile until validated, and the reader's only failure is
:class:`ProtocolError` with a one-line reason that is safe to log and send back:

* a size limit, checked on the encoded bytes before anything is parsed;
* UTF-8 only (a binary data-channel message that is not UTF-8 is refused);
* a nesting limit, checked by a scan of the text *before* ``json.loads`` (whose C
  scanner recurses once per level: ``"[" * 1500`` would raise ``RecursionError``);
* duplicate keys refused (``json`` lets the last one win: ``{"type": "mute",
  "type": "hangup"}`` would hang up);
* ``NaN``/``Infinity`` refused (not JSON);
* the shape validated by strict pydantic models (``extra="forbid"``, no coercion:
  ``"muted": 1`` and ``"muted": "yes"`` are not booleans).

:func:`read_json` is the raw reader; :func:`read_model` reads and validates one object;
:func:`parse_offer` reads the ``/offer`` body.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from voxflow.ids import SessionId
from voxflow.storable import text_problem

__all__ = [
    "MAX_DEPTH",
    "RESUME_VERSION",
    "OfferBody",
    "ProtocolError",
    "ResumeRequest",
    "parse_offer",
    "read_json",
    "read_model",
]

MAX_DEPTH = 4
"""Deepest nesting of arrays/objects accepted (every valid message is one flat object)."""

_M = TypeVar("_M", bound=BaseModel)
_SPECIAL = re.compile(r'[\[\]{}"]')


class ProtocolError(ValueError):
    """Input from the wire was rejected; ``reason`` says why (one line, safe to log and
    send back)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _DuplicateKey(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _check_depth(text: str, limit: int) -> None:
    """Raise if arrays/objects nest deeper than ``limit`` (brackets inside strings do not
    count; malformed text is left for ``json.loads`` to name)."""
    depth = 0
    i = 0
    while (match := _SPECIAL.search(text, i)) is not None:
        char = match.group()
        i = match.end()
        if char == '"':
            while True:  # skip the string: to the next quote not escaped by a backslash
                end = text.find('"', i)
                if end < 0:
                    return
                start = end
                while start > i and text[start - 1] == "\\":
                    start -= 1
                i = end + 1
                if (end - start) % 2 == 0:
                    break
        elif char in "[{":
            depth += 1
            if depth > limit:
                raise ProtocolError(f"JSON nested deeper than {limit} levels")
        else:
            depth -= 1


def read_json(raw: str | bytes, *, max_bytes: int, max_depth: int = MAX_DEPTH) -> Any:
    """Parse one JSON document from the wire, within the limits.

    Raises:
        ProtocolError: not text, more than ``max_bytes``, not UTF-8, nested deeper than
            ``max_depth``, a duplicate key, ``NaN``/``Infinity``, or not JSON.
    """
    if isinstance(raw, bytes):
        if len(raw) > max_bytes:
            raise ProtocolError(f"message of {len(raw)} bytes exceeds {max_bytes}")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise ProtocolError("not JSON: the bytes are not UTF-8") from None
    elif isinstance(raw, str):
        # Cheap bound first: a str of n characters encodes to at least n bytes.
        size = len(raw) if len(raw) > max_bytes else len(raw.encode("utf-8", "surrogatepass"))
        if size > max_bytes:
            raise ProtocolError(f"message of {size} bytes exceeds {max_bytes}")
        text = raw
    else:
        raise ProtocolError(f"message must be text, got {type(raw).__name__}")
    _check_depth(text, max_depth)
    try:
        return json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constant)
    except _DuplicateKey as exc:
        raise ProtocolError(f"duplicate key {exc.key!r}") from None
    except ValueError as exc:  # JSONDecodeError, NaN/Infinity, an int of too many digits
        raise ProtocolError(f"not JSON: {_one_line(str(exc))}") from None


def read_model(data: Any, model: type[_M], *, what: str) -> _M:
    """Validate an already-read JSON object against a strict model.

    Raises:
        ProtocolError: bad or extra fields (the reason names each, with ``what``).
    """
    try:
        return model.model_validate(data, strict=True)
    except ValidationError as exc:
        fields = ", ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '<root>'}: {err['msg']}"
            for err in exc.errors()
        )
        raise ProtocolError(_one_line(f"invalid {what} ({fields})")) from None


def _one_line(text: str, limit: int = 300) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


RESUME_VERSION = 1
"""Version of the ``resume`` object of an offer (bumped on an incompatible change)."""


class ResumeRequest(BaseModel):
    """``{"v": 1, "session_id": "...", "token": "..."}``: go on with a stored session."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    v: Literal[1] = Field(description="the resume object's version (RESUME_VERSION)")
    session_id: SessionId = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9._:-]+$")
    token: str = Field(min_length=16, max_length=128, pattern=r"^[A-Za-z0-9_-]+$",
                       repr=False)

    @field_validator("v", mode="before")
    @classmethod
    def _exactly_one(cls, value: object) -> object:
        if type(value) is not int:  # true and 1.0 are not 1
            raise ValueError(f"Input should be 1 (the integer), got {type(value).__name__}")
        return value


class OfferBody(BaseModel):
    """The body of ``POST /offer``: ``{"type": "offer", "sdp": "..."}``, and to resume a
    call ``"resume": {"v": 1, "session_id": "...", "token": "..."}`` (optional: a page
    that never resumes sends the body it always did)."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    type: Literal["offer"]
    sdp: str
    resume: ResumeRequest | None = None

    @field_validator("sdp")
    @classmethod
    def _storable(cls, value: str) -> str:
        # the front door stores it (PostgreSQL refuses a NUL in text, and a lone
        # surrogate encodes to no UTF-8): refused the same way by every server
        problem = text_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value


def parse_offer(body: bytes, *, max_bytes: int) -> OfferBody:
    """Read and validate an offer body (``max_bytes``: the largest body accepted).

    Raises:
        ProtocolError: see :func:`read_json`; not an object; a missing, extra or
            mistyped field.
    """
    data = read_json(body, max_bytes=max_bytes)
    if not isinstance(data, dict):
        raise ProtocolError(f"the body must be a JSON object, got {type(data).__name__}")
    return read_model(data, OfferBody, what="offer")
