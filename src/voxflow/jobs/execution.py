"""One queued job, as a job worker runs it: its payload (:class:`QueuedJob`), the job
function found by kind and run, and every step reported to the session's durable inbox
(:func:`run_queued_job`).

The queue (:mod:`voxflow.jobs.queue`) hands each job to :func:`run_queued_job`. A report
the inbox refuses because the queue no longer runs this attempt (it was re-queued: its
worker looked dead) stops the attempt quietly; one it refuses to store settles the job
``failed``, saying why, never leaving it ``running``. While the database is unreachable a
report waits for it (tried again with backoff, for up to the worker's
``report_patience``), so a job that finishes during an outage reports its result once
the database returns. Past the patience the attempt ends with :class:`ReportNotStored`,
and the queue runs the job again as its next attempt once the database answers (on any
job worker): its reports are made then, so the session never sees the job running for
good.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError, field_validator

from voxflow import telemetry
from voxflow.clock import Clock
from voxflow.errors import JobPayloadError, PersistenceUnavailableError
from voxflow.ids import JobId, SessionId, TurnId
from voxflow.jobs.background import JobContext, job_function
from voxflow.jobs.inbox import JobInbox
from voxflow.jobs.records import JobUpdate, JobUpdateKind
from voxflow.jobs.results import BackgroundJob, check_job_result
from voxflow.logs import bind_log_context
from voxflow.storable import json_problem, storable_text

__all__ = ["REPORT_PATIENCE", "QueuedJob", "ReportNotStored", "run_queued_job"]

logger = logging.getLogger("voxflow.jobs")

REPORT_PATIENCE = 900.0
"""Seconds a job's report waits for an unreachable database by default (``run_worker``'s
``report_patience``, ``voxflow jobs worker --report-patience``)."""
_BACKOFF = (0.5, 5.0)  # the first wait before trying a report again, the longest


class QueuedJob(BaseModel):
    """The payload of a queued job: what a job worker needs to run it and report on it."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, defer_build=True)

    session_id: SessionId = Field(min_length=1, max_length=200)
    job_id: JobId = Field(min_length=1, max_length=200)
    kind: str = Field(min_length=1, max_length=500)
    revision: int = Field(ge=1)
    origin_turn_id: TurnId | None = Field(None, max_length=200)
    inputs: dict[str, JsonValue] = Field(default_factory=dict)
    traceparent: str | None = Field(None, max_length=200)
    """the W3C trace context of the turn that queued it (when tracing): the job worker's
    span continues that trace"""

    @field_validator("inputs")
    @classmethod
    def _strict_json(cls, value: dict[str, JsonValue]) -> dict[str, JsonValue]:
        try:
            json.dumps(value, allow_nan=False)
        except ValueError:
            raise ValueError("inputs must be JSON values (no NaN or infinity)") from None
        found = json_problem(value)
        if found is not None:  # PostgreSQL's jsonb refuses them
            raise ValueError(f"{found[0] or 'a key'} {found[1]}")
        return value

    @classmethod
    def parse(cls, payload: Mapping[str, Any]) -> QueuedJob:
        """Validate a payload from the queue.

        Raises:
            JobPayloadError: a field is missing, unknown or mistyped (named).
        """
        try:
            return cls.model_validate(dict(payload))
        except (ValidationError, TypeError, ValueError) as exc:
            if isinstance(exc, ValidationError):
                first = exc.errors()[0]
                where = ".".join(str(p) for p in first["loc"]) or "payload"
                raise JobPayloadError(f"bad queued job payload: {where}: {first['msg']}"
                                      ) from None
            raise JobPayloadError(f"bad queued job payload: {exc}") from None


class _DeadAttempt(Exception):
    """The queue no longer runs this attempt (it was retried): stop quietly."""


class ReportNotStored(PersistenceUnavailableError):
    """A job's report waited ``report_patience`` for an unreachable database: the
    attempt ends, and the queue runs the job again as its next attempt (its reports
    made then), never leaving the session's job running for good."""


async def run_queued_job(inbox: JobInbox, context: Any, payload: Mapping[str, Any],
                         clock: Clock, format_error: Callable[[BaseException], str],
                         stop_requested: Callable[[], bool],
                         patience: float = REPORT_PATIENCE) -> None:
    """Run one queued job (Procrastinate's ``context``, the job's ``payload``) and report
    each of its steps to the session's ``inbox``: ``started``, its stage, its
    announcement and ``completed``, or ``failed`` with ``format_error(exc)``. An attempt
    the queue re-ran meanwhile (its worker looked dead) stops at its next report. A
    report waits up to ``patience`` seconds for an unreachable database.

    Raises:
        JobPayloadError: the payload is not a queued job's (the queue job fails, logged).
        ReportNotStored: the database did not answer a report within ``patience``
            (logged as an error): the queue runs the job again once it answers.
    """
    queued = QueuedJob.parse(payload)  # a JobPayloadError fails the queue job, logged
    attempt = int(context.job.attempts) + 1
    where = (int(context.job.id), attempt)
    # every line of this job (its task: Procrastinate runs each job in its own) says
    # whose it is
    bind_log_context(session_id=str(queued.session_id), job_id=str(queued.job_id))
    if await inbox.finished(queued.job_id, queued.revision):
        logger.info("job %s already reported its end; attempt %d has nothing to do",
                    queued.job_id, attempt)
        return
    record = BackgroundJob(session_id=queued.session_id, kind=queued.kind,
                           origin_turn_id=queued.origin_turn_id, revision=queued.revision,
                           attempt=attempt, inputs=queued.inputs)
    record.job_id = queued.job_id
    seq = 0

    def next_seq() -> int:
        nonlocal seq
        seq += 1
        return seq

    async def publish(kind: JobUpdateKind, stage: str | None = None,
                      outputs: dict[str, JsonValue] | None = None,
                      error: str | None = None) -> None:
        update = JobUpdate(session_id=queued.session_id, job_id=queued.job_id,
                           revision=queued.revision, attempt=attempt, seq=next_seq(),
                           kind=kind, stage=stage, outputs=outputs or {},
                           error=None if error is None else storable_text(error))
        write = functools.partial(inbox.write, update, queue_job=where)
        if not await _patiently(write, f"job {queued.job_id}'s report ({kind})", patience):
            raise _DeadAttempt

    async def progress(job: BackgroundJob, text: str) -> bool:
        ids = (queued.job_id, queued.revision, attempt, next_seq())
        return await inbox.write_progress(queued.session_id, ids, text, queue_job=where)

    try:
        try:
            await _run_job(queued, record, attempt, clock, format_error, stop_requested,
                           publish, progress)
        except (_DeadAttempt, asyncio.CancelledError):
            raise
        except PersistenceUnavailableError as exc:
            # unreachable past the patience, said: its failure cannot be stored either;
            # the queue runs the job again (ReportNotStored) once the database answers
            raise ReportNotStored("a report of the job waited its whole report patience "
                                  "for the database", path=exc.path, fix=exc.fix) from exc
        except Exception as exc:
            # a report the inbox refused: the job settles failed, saying why, never
            # stays running
            reason = (f"background job {queued.kind}'s report could not be stored: "
                      f"{_one_line(exc)}")
            logger.warning("job failed: %s", reason,
                           extra={"kind": queued.kind, "attempt": attempt})
            await publish("failed", error=reason)
    except _DeadAttempt:
        logger.warning("job %s attempt %d was re-queued meanwhile (its worker looked "
                       "dead): this execution stops, its late updates refused",
                       queued.job_id, attempt)


async def _patiently(write: Callable[[], Awaitable[bool]], what: str, patience: float
                    ) -> bool:
    """``await write()``; while the database is unreachable, tried again (0.5 s, doubling
    up to 5 s) for up to ``patience`` seconds. The wait is said once when it begins and
    once when the write is stored, not at every try.

    Raises:
        PersistenceUnavailableError: the database still unreachable after ``patience``
            (logged as an error).
    """
    began: float | None = None
    delay = _BACKOFF[0]
    while True:
        try:
            stored = await write()
        except PersistenceUnavailableError as exc:
            now = time.monotonic()
            if began is None:
                began = now
                logger.warning("%s waits for the job inbox, tried again until the database "
                               "answers (for up to %g s): %s", what, patience, exc)
            if now - began + delay > patience:
                logger.error("%s could not be stored: the database did not answer for %.0f "
                             "s; the job runs again as its next attempt once it answers",
                             what, now - began)
                raise
            await asyncio.sleep(delay)
            delay = min(delay * 2, _BACKOFF[1])
            continue
        if began is not None:
            logger.info("%s stored after %.1f s without the job inbox", what,
                        time.monotonic() - began)
        return stored


async def _run_job(queued: QueuedJob, record: BackgroundJob, attempt: int,
                   clock: Clock, format_error: Callable[[BaseException], str],
                   stop_requested: Callable[[], bool], publish: Callable[..., Any],
                   progress: Callable[[BackgroundJob, str], Any]) -> None:
    """Run the job function, reporting each step through ``publish``."""
    try:
        function = job_function(queued.kind)
    except LookupError as exc:
        await publish("failed", error=str(exc))
        return
    parent = telemetry.extract_context(
        {"traceparent": queued.traceparent} if queued.traceparent else None)
    with telemetry.trace_span(f"voxflow.job {queued.kind}", {
            "voxflow.job_id": str(queued.job_id), "voxflow.job_kind": queued.kind,
            "voxflow.session_id": str(queued.session_id), "voxflow.attempt": attempt},
            kind="consumer", context=parent):
        await _run_job_traced(queued, record, attempt, clock, format_error,
                              stop_requested, publish, progress, function)


async def _run_job_traced(queued: QueuedJob, record: BackgroundJob, attempt: int,
                          clock: Clock, format_error: Callable[[BaseException], str],
                          stop_requested: Callable[[], bool], publish: Callable[..., Any],
                          progress: Callable[[BackgroundJob, str], Any],
                          function: Any) -> None:
    await publish("started")
    began = time.monotonic()
    logger.info("job started", extra={"kind": queued.kind, "attempt": attempt})
    await publish("stage_started", stage="run")
    job_context = JobContext(record.model_copy(deep=True), clock=clock,
                             progress=progress, stop_requested=stop_requested)
    try:
        text = check_job_result(queued.kind, await function(job_context, **queued.inputs))
    except _DeadAttempt:
        raise
    except Exception as exc:
        # the type only: a job's error text may carry what it was given
        logger.warning("job failed (%s)", type(exc).__name__,
                       extra={"kind": queued.kind, "attempt": attempt})
        await publish("failed", error=format_error(exc) or type(exc).__name__)
        return
    await publish("stage_completed", stage="run", outputs={"announcement": text})
    await publish("completed")
    logger.info("job completed: its announcement is in the session's inbox",
                extra={"kind": queued.kind, "attempt": attempt,
                       "duration_s": round(time.monotonic() - began, 1)})


def _one_line(exc: BaseException, limit: int = 300) -> str:
    line = " ".join(str(exc).split()) or type(exc).__name__
    return line if len(line) <= limit else line[: limit - 1] + "…"
