"""The figures of a job queue's database (:class:`QueueStatistics`), read in one
connection by :func:`read_statistics`: what ``voxflow status``, a job worker's
``/metrics`` (:mod:`voxflow.jobs.metrics`) and the fleet's view show, through
:meth:`~voxflow.jobs.PostgresJobQueue.statistics`, which opens the connection and
says when the database is away.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:
    import psycopg

__all__ = ["QueueStatistics", "read_statistics"]


class QueueStatistics(BaseModel):
    """The jobs of a queue's database, as one query found them.

    Attributes:
        jobs: jobs by state: ``queued`` (waiting for a worker, a retry included),
            ``running``, ``succeeded``, ``failed``, ``cancelled``, ``aborted`` (every
            state present, 0 when none).
        retried: jobs whose current attempt is not their first (re-run after a worker
            stopped heartbeating).
        oldest_queued_seconds: how long the longest-waiting queued job has waited since
            it was queued (or re-queued); None without one.
        oldest_running_seconds: how long the longest-running job has run in its current
            attempt; None without one.
        workers: job workers heartbeating within the last minute.
    """

    model_config = ConfigDict(frozen=True, defer_build=True)

    jobs: dict[str, int]
    retried: int
    oldest_queued_seconds: float | None
    oldest_running_seconds: float | None
    workers: int


_STATES = {"todo": "queued", "doing": "running", "succeeded": "succeeded", "failed": "failed",
           "cancelled": "cancelled", "aborting": "running", "aborted": "aborted"}
"""Procrastinate's job statuses under voxflow's names."""


def read_statistics(conn: psycopg.Connection[Any], task_name: str) -> QueueStatistics:
    """The figures of the jobs of ``task_name`` (three short queries on ``conn``).

    Raises:
        psycopg.Error: a query failed (the caller says what that means).
    """
    counts = ("SELECT status::text, count(*), count(*) FILTER (WHERE attempts > 0) "
              "FROM procrastinate_jobs WHERE task_name = %s GROUP BY status")
    # (the age of a queued or running job: since its latest event, its (re)queueing
    # or its start)
    ages = ("SELECT j.status::text, max(extract(epoch FROM now() - e.at))::float8 "
            "FROM procrastinate_jobs j CROSS JOIN LATERAL (SELECT max(at) AS at FROM "
            "procrastinate_events WHERE job_id = j.id) e "
            "WHERE j.task_name = %s AND j.status IN ('todo', 'doing') GROUP BY j.status")
    workers = ("SELECT count(*) FROM procrastinate_workers "
               "WHERE last_heartbeat > now() - interval '1 minute'")
    found = conn.execute(counts, (task_name,)).fetchall()
    aged = dict(conn.execute(ages, (task_name,)).fetchall())
    live = conn.execute(workers).fetchone()
    jobs = dict.fromkeys(_STATES.values(), 0)
    retried = 0
    for status, count, again in found:
        state = _STATES.get(str(status), "other")
        jobs[state] = jobs.get(state, 0) + int(count)
        retried += int(again)
    return QueueStatistics(
        jobs=jobs, retried=retried,
        oldest_queued_seconds=_age(aged.get("todo")),
        oldest_running_seconds=_age(aged.get("doing")),
        workers=int(live[0]) if live is not None else 0)


def _age(seconds: Any) -> float | None:
    return None if seconds is None else max(0.0, float(seconds))
