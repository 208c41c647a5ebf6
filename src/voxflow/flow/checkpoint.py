"""Checkpoints: the whole runtime state of a run, saved to a file and resumable.

A checkpoint holds what ``@persist`` does not: besides the state, the per-execution
tracking (completed methods, their outputs, pending ``and_`` events, fired ``or_``
listeners, call counts). ``kickoff(from_checkpoint=CheckpointConfig(directory=d))``
writes ``d/<state id>.json`` after every method completes (atomically: a temporary file
then ``os.replace``, so a crash leaves the previous checkpoint whole);
``kickoff(from_checkpoint=CheckpointConfig(restore_from=path))`` restores it and resumes:
completed methods are not re-run, their listeners are walked again with the recorded
outputs, so the run continues where it stopped.

Outputs are stored as JSON (non-JSON values as their ``repr``), so a resumed listener
receives the JSON form of an earlier output.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic_core import to_jsonable_python

from voxflow.flow._engine import Execution
from voxflow.flow.state import dump_state, load_state_like

if TYPE_CHECKING:
    from voxflow.flow.host import FlowHost

__all__ = [
    "CheckpointConfig",
    "export_execution",
    "import_execution",
    "load_checkpoint",
    "write_checkpoint",
]

_FORMAT = 1


class CheckpointConfig(BaseModel):
    """Where checkpoints are written and/or which one to resume from.

    Args:
        directory: write ``<directory>/<state id>.json`` after every method (None: don't).
        restore_from: a checkpoint file to resume from (None: start fresh).
    """

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    directory: Path | None = Field(default=None, description="where to write checkpoints")
    restore_from: Path | None = Field(default=None, description="checkpoint file to resume")

    @field_validator("restore_from")
    @classmethod
    def _exists(cls, value: Path | None) -> Path | None:
        if value is not None and not value.is_file():
            raise ValueError(f"restore_from: no checkpoint file at {value}")
        return value


def _json(value: Any) -> Any:
    return to_jsonable_python(value, fallback=repr)


def export_execution(ex: Execution) -> dict[str, Any]:
    """A JSON-compatible snapshot of per-execution tracking."""
    return {
        "completed": sorted(ex.completed),
        "outputs": [[name, _json(out)] for name, out in ex.outputs],
        "last_output": {k: _json(v) for k, v in ex.last_output.items()},
        "pending_and": {k: sorted(v) for k, v in ex.pending_and.items()},
        "fired_or": sorted(ex.fired_or),
        "calls": dict(ex.calls),
        "result": _json(ex.result),
        "result_key": list(ex.result_key),
        "has_result": ex.has_result,
    }


def import_execution(data: dict[str, Any], *, replay: bool) -> Execution:
    """Rebuild tracking from :func:`export_execution`; ``replay`` marks completed methods
    to be skipped (not re-run) once while their listeners are walked again."""
    ex = Execution()
    ex.completed = set(data.get("completed", ()))
    ex.outputs = [(str(n), o) for n, o in data.get("outputs", ())]
    ex.last_output = dict(data.get("last_output", {}))
    ex.pending_and = {k: set(v) for k, v in data.get("pending_and", {}).items()}
    ex.fired_or = set(data.get("fired_or", ()))
    ex.calls = {str(k): int(v) for k, v in data.get("calls", {}).items()}
    ex.result = data.get("result")
    key = data.get("result_key", (-1, -1))
    ex.result_key = (int(key[0]), int(key[1]))
    ex.has_result = bool(data.get("has_result", False))
    if replay:
        ex.replay = set(ex.completed)
    return ex


def write_checkpoint(host: FlowHost, config: CheckpointConfig) -> Path:
    """Atomically write the checkpoint of ``host``'s flow into ``config.directory``;
    returns the path."""
    if config.directory is None:
        raise ValueError("config.directory is None: nowhere to write the checkpoint")
    directory = config.directory
    directory.mkdir(parents=True, exist_ok=True)
    payload = {
        "format": _FORMAT,
        "flow": type(host.flow).__qualname__,
        "state": dump_state(host.state),
        "execution": export_execution(host.execution),
    }
    path = directory / f"{host.flow.flow_id}.json"
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".ckpt-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(payload, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def load_checkpoint(host: FlowHost, config: CheckpointConfig) -> None:
    """Restore ``config.restore_from`` into ``host``'s flow (state and tracking, set to
    resume)."""
    if config.restore_from is None:
        raise ValueError("config.restore_from is None: nothing to restore")
    payload = json.loads(config.restore_from.read_text(encoding="utf-8"))
    if not isinstance(payload, dict) or payload.get("format") != _FORMAT:
        raise ValueError(f"restore_from: {config.restore_from} is not a voxflow checkpoint")
    expected = type(host.flow).__qualname__
    if payload.get("flow") != expected:
        raise ValueError(
            f"restore_from: checkpoint of {payload.get('flow')!r} cannot resume {expected!r}"
        )
    host.state = load_state_like(host.state, payload["state"])
    host.execution = import_execution(payload["execution"], replay=True)
