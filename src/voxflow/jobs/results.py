"""What a background job leaves to announce: its record (:class:`BackgroundJob`), the
checks its result passes before it is stored (:func:`check_job_result`: at most
:func:`max_job_result_chars`, ``VOXFLOW_MAX_JOB_RESULT_CHARS``), the progress records it
reports (:func:`commit_progress`) and the text the session says (:func:`announce_jobs`).

The in-process runner (:mod:`voxflow.jobs.background`), a job worker
(:mod:`voxflow.jobs.execution`) and a session reading its job inbox
(:mod:`voxflow.jobs.inbox`) share them, so a job settles the same way on every backend.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from pydantic import Field, JsonValue

from voxflow.errors import UnstorableTextError
from voxflow.ids import JobId
from voxflow.jobs.records import (
    JobRecord,
    JobUpdate,
    JobUpdateKind,
    add_job,
    commit_job_update,
)
from voxflow.storable import check_text, text_problem

__all__ = [
    "MAX_PROGRESS_CHARS",
    "BackgroundJob",
    "announce_jobs",
    "check_job_result",
    "commit_progress",
    "max_job_result_chars",
    "set_max_job_result_chars",
]

MAX_PROGRESS_CHARS = 2000
"""The longest progress text a job may announce (``job.progress``), on every backend."""

DEFAULT_MAX_JOB_RESULT_CHARS = 4000
"""The default longest result a job may return (about four minutes of speech)."""
LIMIT_VARIABLE = "VOXFLOW_MAX_JOB_RESULT_CHARS"

_max_result_chars = DEFAULT_MAX_JOB_RESULT_CHARS


def max_job_result_chars() -> int:
    """The longest result a job function may return in this process (see
    :func:`set_max_job_result_chars`); a longer one fails the job, naming the limit."""
    return _max_result_chars


def set_max_job_result_chars(limit: int) -> int:
    """Make ``limit`` characters the longest job result of this process (the CLI passes
    ``VOXFLOW_MAX_JOB_RESULT_CHARS``: a job worker and a call worker read their own);
    returns the previous limit.

    Raises:
        ValueError: ``limit`` is not an int of at least 1.
    """
    global _max_result_chars
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError(f"the job result limit must be an int of at least 1, got {limit!r}")
    previous, _max_result_chars = _max_result_chars, limit
    return previous


def check_job_result(kind: str, text: object) -> str:
    """The text a job function returned, if it can be announced and stored: what both
    the in-process runner and a job worker check before they record it, so a job settles
    the same way on SQLite and on PostgreSQL.

    Raises:
        TypeError: it is not a non-empty str.
        UnstorableTextError: it holds a NUL or a lone surrogate (no store keeps it; the
            message names the character and its index), or it is longer than
            :func:`max_job_result_chars` (4,000 by default; the message names the limit
            and its variable).
    """
    if not isinstance(text, str) or not text.strip():
        raise TypeError(f"background job {kind} returned {type(text).__name__}, not the "
                        "text to announce (a non-empty str)")
    field = f"the result of background job {kind}"
    check_text(text, field)
    if len(text) > _max_result_chars:
        problem = text_problem(text, max_chars=_max_result_chars)
        raise UnstorableTextError(field, f"{problem} ({LIMIT_VARIABLE})")
    return text


class BackgroundJob(JobRecord):
    """The record of a job started with :meth:`JobFunction.start`.

    Attributes:
        inputs: the keyword arguments the function was started with (JSON values).
        announcement: the text the function returned: what the session says.
    """

    output_fields: ClassVar[frozenset[str]] = frozenset({"announcement"})
    inputs: dict[str, JsonValue] = Field(default_factory=dict)
    announcement: str = ""


def announce_jobs(jobs: Sequence[JobRecord]) -> str:
    """The text of an announcement: each job's ``announcement`` (what its function
    returned), in order.

    Raises:
        ValueError: a job has no announcement text (nothing explicit to say).
    """
    parts: list[str] = []
    for job in jobs:
        text = getattr(job, "announcement", None)
        if not isinstance(text, str) or not text.strip():
            raise ValueError(
                f"job {job.job_id} ({job.kind}) has no announcement text: a background "
                "job function must return the text to say"
            )
        parts.append(text.strip())
    return " ".join(parts)


def commit_progress(
    state: Any, parent: BackgroundJob, text: str, *, job_id: str | None = None
) -> BackgroundJob | None:
    """Register and complete a progress record of ``parent`` (kind ``<kind>.progress``,
    ``inputs["progress_of"]``) whose announcement is ``text``; it is announced like a result.

    ``job_id`` makes it idempotent (a progress report read twice from a job inbox is
    registered once). Returns the record, or None when it was refused (already there).
    Not locked: hold the session's state lock.
    """
    child = BackgroundJob(session_id=parent.session_id, origin_turn_id=parent.origin_turn_id,
                          kind=f"{parent.kind}.progress", inputs={"progress_of": parent.job_id})
    if job_id is not None:
        child.job_id = JobId(job_id)
    said: dict[str, JsonValue] = {"announcement": text}
    plan: list[tuple[JobUpdateKind, str | None, dict[str, JsonValue]]] = [
        ("started", None, {}), ("stage_started", "progress", {}),
        ("stage_completed", "progress", said), ("completed", None, {}),
    ]
    if not add_job(state, child):
        return None
    for seq, (kind, stage, outputs) in enumerate(plan, 1):
        update = JobUpdate(session_id=child.session_id, job_id=child.job_id, revision=1,
                           attempt=1, seq=seq, kind=kind, stage=stage, outputs=outputs)
        if not commit_job_update(state, update):
            return None
    return child
