"""Log lines for people and for machines: ``--log-format text`` (the default) or ``json``.

Every line carries its time. Identities given with ``extra=`` (``call_id``,
``session_id``, ``turn_id``, ``delivery_id`` and any figure such as ``reason`` or
``duration_s``) are appended to a text line as ``key=value`` and become fields of a JSON
line, so ``logger.info("call ended", extra={"call_id": c, "reason": "hangup"})`` reads
well in a terminal and can be queried in production.

:func:`bind_log_context` ties identities to the running task and every task it starts
afterwards (a context variable): a server binds ``call_id`` when a call begins, and every
line logged for that call (its peer, its voice session, the libraries they use) carries
it without passing ``extra=`` everywhere; :func:`log_scope` binds them for a block (a
voice session binds ``session_id`` for the call and ``turn_id`` for each turn, a job
worker ``session_id`` and ``job_id`` for each job). When tracing is on
(:mod:`voxflow.telemetry`), a line logged inside a span carries its ``trace_id`` and
``span_id`` too, so a line leads to its trace and back.
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime
import json
import logging
import sys
from collections.abc import Iterator, Mapping
from typing import Any, Literal, TextIO

from . import telemetry

__all__ = [
    "JsonFormatter", "TextFormatter", "bind_log_context", "configure_logging", "log_context",
    "log_scope",
]

LogFormat = Literal["text", "json"]

# the attributes every LogRecord has; anything else came from ``extra=``
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message", "asctime", "taskName",
}


def _extras(record: logging.LogRecord) -> dict[str, Any]:
    return {k: v for k, v in vars(record).items() if k not in _STANDARD and not k.startswith("_")}


def _time(record: logging.LogRecord) -> str:
    moment = datetime.datetime.fromtimestamp(record.created, tz=datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


_context: contextvars.ContextVar[Mapping[str, str]] = contextvars.ContextVar(
    "voxflow_log_context"
)


def _check(ids: Mapping[str, str]) -> None:
    for name, value in ids.items():
        if name in _STANDARD or name.startswith("_"):
            raise ValueError(f"log context name {name!r} is a LogRecord attribute")
        if not isinstance(value, str):
            raise TypeError(f"log context {name} must be a str, got {type(value).__name__}")


@contextlib.contextmanager
def log_scope(**ids: str) -> Iterator[None]:
    """:func:`bind_log_context` for the block only (a call's session, a turn): the
    identities bound before it are back when it ends.

    Raises:
        ValueError, TypeError: as :func:`bind_log_context`.
    """
    _check(ids)
    token = _context.set({**_context.get({}), **ids})
    try:
        yield
    finally:
        _context.reset(token)


def bind_log_context(**ids: str) -> None:
    """Add ``ids`` (e.g. ``call_id="call-3"``) to every record logged from now on by this
    task and by the tasks it starts afterwards; an id given with ``extra=`` wins.

    Raises:
        ValueError: a name is not a plain identifier or clashes with a LogRecord attribute.
        TypeError: a value is not a string.
    """
    _check(ids)
    _context.set({**_context.get({}), **ids})


def log_context() -> dict[str, str]:
    """The identities :func:`bind_log_context` bound for this task (a copy)."""
    return dict(_context.get({}))


class _ContextFilter(logging.Filter):
    """Copies the bound identities onto each record that does not carry them already."""

    def filter(self, record: logging.LogRecord) -> bool:
        for name, value in _context.get({}).items():
            if name not in record.__dict__:
                setattr(record, name, value)
        ids = telemetry.current_trace_ids()  # the span the line was logged in, if traced
        if ids is not None and "trace_id" not in record.__dict__:
            record.trace_id, record.span_id = ids
        return True


class TextFormatter(logging.Formatter):
    """``2026-12-01T00:00:00.000Z INFO voxflow.x: message key=value ...``"""

    def format(self, record: logging.LogRecord) -> str:
        extras = " ".join(f"{k}={v}" for k, v in _extras(record).items())
        line = f"{_time(record)} {record.levelname} {record.name}: {record.getMessage()}"
        if extras:
            line = f"{line} {extras}"
        if record.exc_info:
            line = f"{line}\n{self.formatException(record.exc_info)}"
        return line


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``time``, ``level``, ``logger``, ``message``, extras."""

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {"time": _time(record), "level": record.levelname,
                                "logger": record.name, "message": record.getMessage()}
        data.update(_extras(record))
        if record.exc_info:
            data["exception"] = self.formatException(record.exc_info)
        return json.dumps(data, default=str)


class _Handler(logging.StreamHandler):  # type: ignore[type-arg]
    """A stream handler writing to ``stream``, or to whatever ``sys.stderr`` is at the time
    of each record (so a replaced stderr, e.g. a test's capture, is never written after
    it was closed)."""

    def __init__(self, stream: TextIO | None) -> None:
        super().__init__(stream if stream is not None else sys.stderr)
        self._fixed = stream

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = self._fixed if self._fixed is not None else sys.stderr
        super().emit(record)


_installed: logging.Handler | None = None


def configure_logging(
    level: str = "WARNING", fmt: LogFormat = "text", *, stream: TextIO | None = None
) -> None:
    """Send every log record at ``level`` or above to ``stream`` (stderr) in ``fmt``.

    Replaces the handler an earlier call installed; other handlers (a test runner's, an
    application's) stay. Call it at the edge of the program.

    Raises:
        ValueError: ``level`` or ``fmt`` is not one of the known values.
    """
    if level not in ("DEBUG", "INFO", "WARNING", "ERROR"):
        raise ValueError(f"log level must be DEBUG, INFO, WARNING or ERROR, got {level!r}")
    if fmt not in ("text", "json"):
        raise ValueError(f"log format must be 'text' or 'json', got {fmt!r}")
    global _installed
    handler = _Handler(stream)
    handler.addFilter(_ContextFilter())
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    if _installed is not None:
        root.removeHandler(_installed)
    root.addHandler(handler)
    root.setLevel(level)
    _installed = handler
