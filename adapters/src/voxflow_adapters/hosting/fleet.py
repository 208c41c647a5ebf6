"""A deployment as its database sees it: the call workers (slots, heartbeats), the calls
(the sessions leased now), the job workers and the jobs (``voxflow status``).

Everything is read from the tables the processes already keep in the first schema of
``VOXFLOW_DATABASE_URL``'s ``search_path``: ``voxflow_call_workers``
(:mod:`~voxflow_adapters.hosting.dispatch`), ``session_leases`` (a call's lease names its
worker and call: ``<worker id>/<call id>``, :mod:`~voxflow_adapters.hosting.ownership`)
and Procrastinate's ``procrastinate_workers`` and ``procrastinate_jobs``
(:mod:`voxflow.jobs.queue`). A table no process made yet reads as empty. Nothing is
written: any number of ``voxflow status`` may run beside a live deployment.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict

from voxflow.jobs.queue import TASK_NAME, PostgresJobQueue, QueueStatistics
from voxflow.pg_url import check_database_url, connection_options, database_schema

from .dispatch_tables import (
    REPORT_COLUMNS,
    DispatchUnavailableError,
    WorkerRow,
    dispatch_unavailable,
    worker_row,
)

__all__ = ["CallRow", "FleetStatus", "JobRow", "JobWorkerRow", "read_fleet", "render_fleet"]

_NOW = "extract(epoch FROM clock_timestamp())::float8"
_JOBS_SHOWN = 20


class CallRow(BaseModel):
    """A call in progress: a session whose lease is live."""

    model_config = ConfigDict(frozen=True)

    session_id: str
    worker_id: str
    call_id: str
    epoch: int
    lease_left: float
    """Seconds until the lease expires unless renewed."""


class JobWorkerRow(BaseModel):
    """A job worker (Procrastinate's row) and its heartbeat."""

    model_config = ConfigDict(frozen=True)

    worker: int
    heartbeat_age: float


class JobRow(BaseModel):
    """A queued or running job."""

    model_config = ConfigDict(frozen=True)

    job_id: str
    kind: str
    session_id: str
    state: str
    attempt: int
    age: float | None
    """Seconds since it was queued (or re-queued), or since its attempt started."""
    worker: int | None


class FleetStatus(BaseModel):
    """What :func:`read_fleet` found (``voxflow status --json`` prints it)."""

    model_config = ConfigDict(frozen=True)

    schema_name: str
    stale_after: float
    workers: list[WorkerRow]
    calls: list[CallRow]
    job_workers: list[JobWorkerRow]
    jobs: QueueStatistics
    pending_jobs: list[JobRow]
    """The oldest queued and running jobs (at most 20)."""


def read_fleet(url: str, *, stale_after: float = 5.0, connect_timeout: float = 10.0
               ) -> FleetStatus:
    """Read the deployment of ``url`` (blocking: a few short queries on one connection).

    Raises:
        ValueError: ``url`` is not a ``postgresql://`` URL.
        DispatchUnavailableError: the database is unreachable, or psycopg missing (the
            message says the fix and never shows a password).
        voxflow.errors.PersistenceUnavailableError: the job queue's tables cannot be read.
    """
    check_database_url(url)
    try:
        import psycopg  # here: the optional voxflow[postgres] extra
    except ImportError:
        raise DispatchUnavailableError(
            "voxflow status reads PostgreSQL: pip install 'voxflow[postgres]'") from None
    schema = database_schema(url)
    try:
        with psycopg.connect(url, connect_timeout=max(1, int(connect_timeout)),
                             autocommit=True,
                             options=connection_options(url, schema)) as conn:
            have = _tables(conn)
            workers = _workers(conn) if "voxflow_call_workers" in have else []
            calls = _calls(conn) if "session_leases" in have else []
            queued = "procrastinate_jobs" in have
            job_workers = _job_workers(conn) if "procrastinate_workers" in have else []
            pending = _pending_jobs(conn) if queued else []
    except psycopg.Error as exc:
        raise dispatch_unavailable(url, exc) from None
    jobs = (PostgresJobQueue(url, connect_timeout=connect_timeout).statistics() if queued
            else QueueStatistics(jobs={}, retried=0, oldest_queued_seconds=None,
                                 oldest_running_seconds=None, workers=0))
    return FleetStatus(schema_name=schema, stale_after=stale_after, workers=workers,
                       calls=calls, job_workers=job_workers, jobs=jobs, pending_jobs=pending)


def _tables(conn: Any) -> set[str]:
    names = ("voxflow_call_workers", "session_leases", "procrastinate_jobs",
             "procrastinate_workers")
    rows = conn.execute("SELECT t, to_regclass(t) IS NOT NULL FROM unnest(%s::text[]) t",
                        (list(names),)).fetchall()
    return {str(name) for name, present in rows if present}


def _workers(conn: Any) -> list[WorkerRow]:
    # (the kind and report columns are added by a process of this version at its start;
    # a table an older version made has none: its workers answer browsers, report
    # nothing but their headroom)
    report = ", ".join(f"to_jsonb(w) -> '{column}'" for column in REPORT_COLUMNS)
    rows = conn.execute(
        "SELECT worker_id, host, pid, slots, used, headroom, draining, "
        f"{_NOW} - heartbeat_at, coalesce(to_jsonb(w) ->> 'kind', 'webrtc'), {report} "
        "FROM voxflow_call_workers w ORDER BY worker_id"
    ).fetchall()
    return [worker_row(r) for r in rows]


def _calls(conn: Any) -> list[CallRow]:
    rows = conn.execute(
        f"SELECT flow_uuid, owner, epoch, expires_at - {_NOW} FROM session_leases "
        f"WHERE owner <> '' AND expires_at > {_NOW} ORDER BY owner").fetchall()
    calls = []
    for session_id, owner, epoch, left in rows:
        worker, _, call = str(owner).partition("/")
        calls.append(CallRow(session_id=str(session_id), worker_id=worker,
                             call_id=call or "?", epoch=int(epoch), lease_left=float(left)))
    return calls


def _job_workers(conn: Any) -> list[JobWorkerRow]:
    rows = conn.execute("SELECT id, extract(epoch FROM now() - last_heartbeat)::float8 "
                        "FROM procrastinate_workers ORDER BY id").fetchall()
    return [JobWorkerRow(worker=int(r[0]), heartbeat_age=max(0.0, float(r[1]))) for r in rows]


def _pending_jobs(conn: Any) -> list[JobRow]:
    rows = conn.execute(
        "SELECT j.args->>'job_id', j.args->>'kind', j.args->>'session_id', j.status::text, "
        "j.attempts, extract(epoch FROM now() - e.at)::float8, j.worker_id "
        "FROM procrastinate_jobs j LEFT JOIN LATERAL (SELECT max(at) AS at FROM "
        "procrastinate_events WHERE job_id = j.id) e ON true "
        "WHERE j.task_name = %s AND j.status IN ('todo', 'doing') "
        "ORDER BY j.status DESC, e.at LIMIT %s", (TASK_NAME, _JOBS_SHOWN)).fetchall()
    return [JobRow(job_id=str(r[0]), kind=str(r[1]), session_id=str(r[2]),
                   state="running" if r[3] == "doing" else "queued", attempt=int(r[4]) + 1,
                   age=None if r[5] is None else max(0.0, float(r[5])),
                   worker=None if r[6] is None else int(r[6])) for r in rows]


def render_fleet(status: FleetStatus) -> str:
    """``status`` as the text ``voxflow status`` prints."""
    lines: list[str] = []
    live = [w for w in status.workers
            if not w.draining and w.heartbeat_age <= status.stale_after]
    free = sum(w.free for w in live)
    kinds = sorted({w.kind for w in live})
    # (a browser's call never takes a phone worker's slot: with both kinds, each's own)
    by_kind = "" if len(kinds) < 2 else ": " + ", ".join(
        f"{sum(w.free for w in live if w.kind == kind)} {kind}" for kind in kinds)
    lines.append(f"call workers: {len(status.workers)} ({len(live)} live, {free} free "
                 f"slot(s){by_kind}) in schema {status.schema_name}")
    rows = [("worker", "kind", "host", "pid", "slots", "calls", "free", "headroom",
             "cost/call", "p95", "heartbeat", "state")]
    for w in status.workers:
        state = ("draining" if w.draining else
                 "stale" if w.heartbeat_age > status.stale_after else "live")
        rows.append((w.worker_id, w.kind, w.host, str(w.pid), _slots(w), str(w.used),
                     str(w.free), "-" if w.headroom is None else f"{w.headroom:g}",
                     "-" if w.call_cost is None else
                     f"{w.call_cost:.1%}:{w.cost_source or '?'}",
                     "-" if w.p95_ms is None else f"{w.p95_ms:,.0f}ms",
                     f"{w.heartbeat_age:.1f} s ago", state))
    if status.workers:
        lines += _table(rows)
    lines += [line for w in status.workers if (line := _reported(w))]
    lines.append(f"calls: {len(status.calls)}")
    if status.calls:
        lines += _table([("session", "worker", "call", "epoch", "lease")] + [
            (c.session_id, c.worker_id, c.call_id, str(c.epoch), f"{c.lease_left:.1f} s left")
            for c in status.calls])
    jobs = status.jobs.jobs
    shown = ", ".join(f"{jobs.get(s, 0)} {s}" for s in ("queued", "running", "succeeded",
                                                         "failed"))
    oldest = " ".join(f"oldest {label} {_age(value)}" for label, value in (
        ("queued", status.jobs.oldest_queued_seconds),
        ("running", status.jobs.oldest_running_seconds)) if value is not None)
    lines.append(f"jobs: {shown}; {status.jobs.retried} retried" + (f"; {oldest}"
                                                                     if oldest else ""))
    lines.append(f"job workers: {len(status.job_workers)}" + ("" if not status.job_workers
        else " (" + ", ".join(f"{w.worker}: heartbeat {w.heartbeat_age:.1f} s ago"
                              for w in status.job_workers) + ")"))
    if status.pending_jobs:
        lines += _table([("job", "kind", "session", "state", "attempt", "age", "job worker")]
                        + [(j.job_id, j.kind, j.session_id, j.state, str(j.attempt),
                            _age(j.age), "-" if j.worker is None else str(j.worker))
                           for j in status.pending_jobs])
    return "\n".join(lines)


def _slots(worker: WorkerRow) -> str:
    """A worker's slots: its ``--max-calls`` (and, when fewer, the slots its measured
    cost allows: ``4 (2 measured)``); with none, its measured slots (from an older
    worker, the calls it holds and its headroom; ``uncapped`` before its first heartbeat
    reported either)."""
    measured = worker.measured_slots
    if not worker.uncapped:
        return (str(worker.slots) if measured is None or measured >= worker.slots
                else f"{worker.slots} ({measured} measured)")
    if measured is not None:
        return f"{measured} measured"
    return "uncapped" if worker.headroom is None else f"{worker.used + worker.free} measured"


def _reported(worker: WorkerRow) -> str:
    """The rest of what a worker's last heartbeat reported: the prior cost of a call,
    the models' recent real-time factors, why it refuses calls ('' if nothing)."""
    said = []
    if worker.prior_call_cost is not None:
        said.append(f"prior {worker.prior_call_cost:.1%} a call")
    if worker.model_rtf:
        said.append("models' recent RTF " + ", ".join(
            f"{model} {rtf:.3f}" for model, rtf in sorted(worker.model_rtf.items())))
    if worker.refusal:
        said.append(f"refusing: {worker.refusal}")
    return f"  {worker.worker_id}: " + "; ".join(said) if said else ""


def _age(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds:.1f} s"


def _table(rows: Sequence[tuple[str, ...]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  " + "  ".join(cell.ljust(width) for cell, width in zip(row, widths,
                                                                      strict=True)).rstrip()
            for row in rows]
