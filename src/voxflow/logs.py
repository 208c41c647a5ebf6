"""Log lines for people and for machines: ``--log-format text`` (the default) or ``json``.

Every line carries its time. Identities given with ``extra=`` (``call_id``,
``session_id``, ``turn_id``, ``delivery_id`` and any figure such as ``reason`` or
``duration_s``) are appended to a text line as ``key=value`` and become fields of a JSON
line, so ``logger.info("call ended", extra={"call_id": c, "reason": "hangup"})`` reads
well in a terminal and can be queried in production.
"""

from __future__ import annotations

import datetime
import json
import logging
import sys
from typing import Any, Literal, TextIO

__all__ = ["JsonFormatter", "TextFormatter", "configure_logging"]

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
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    if _installed is not None:
        root.removeHandler(_installed)
    root.addHandler(handler)
    root.setLevel(level)
    _installed = handler
