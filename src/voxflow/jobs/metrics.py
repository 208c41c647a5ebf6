"""The job queue's metrics, read from its database when Prometheus scrapes a job worker.

:func:`watch_queue` registers a collector that runs
:meth:`~voxflow.jobs.queue.PostgresJobQueue.statistics` at each scrape (on the
scraper's thread, never the worker's event loop): the jobs by state, the retried ones,
the oldest queued and running ages and the live job workers. They are the queue's, not
one process's: every job worker reports the same figures (aggregate with ``max``, not
``sum``). A database that cannot be reached gives ``voxflow_job_queue_up 0`` and no
job figures, not a failed scrape: the process itself is up.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from voxflow.errors import PersistenceUnavailableError
from voxflow.jobs.statistics import QueueStatistics

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry
    from prometheus_client.core import Metric

__all__ = ["watch_queue"]

logger = logging.getLogger(__name__)


def watch_queue(registry: CollectorRegistry,
                statistics: Callable[[], QueueStatistics]) -> None:
    """Report ``statistics()`` (a queue's :meth:`~voxflow.jobs.queue.PostgresJobQueue.statistics`)
    at each scrape of ``registry``."""
    registry.register(_QueueCollector(statistics))


class _QueueCollector:
    def __init__(self, statistics: Callable[[], QueueStatistics]) -> None:
        self._statistics = statistics
        self._failing = False

    def describe(self) -> list[Metric]:
        return []  # (collecting queries the database: never at registration)

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.core import GaugeMetricFamily  # the voxflow[metrics] extra

        try:
            stats = self._statistics()
        except PersistenceUnavailableError as exc:
            if not self._failing:  # once per outage, not once per scrape
                logger.warning("job queue metrics unavailable: %s", exc)
            self._failing = True
            yield GaugeMetricFamily("voxflow_job_queue_up", "1 when the job queue's "
                                    "database answered this scrape", value=0.0)
            return
        self._failing = False
        yield GaugeMetricFamily("voxflow_job_queue_up", "1 when the job queue's database "
                                "answered this scrape", value=1.0)
        jobs = GaugeMetricFamily("voxflow_jobs", "the queue's jobs by state (queued, "
                                 "running, succeeded, failed, cancelled, aborted)",
                                 labels=("state",))
        for state, count in sorted(stats.jobs.items()):
            jobs.add_metric((state,), count)
        yield jobs
        yield GaugeMetricFamily("voxflow_jobs_retried", "jobs on an attempt after their "
                                "first (re-run after their worker stopped heartbeating)",
                                value=stats.retried)
        age = GaugeMetricFamily("voxflow_job_oldest_age_seconds", "how long the oldest "
                                "queued job has waited, and the oldest running one has run "
                                "(0 when none)", labels=("state",))
        age.add_metric(("queued",), stats.oldest_queued_seconds or 0.0)
        age.add_metric(("running",), stats.oldest_running_seconds or 0.0)
        yield age
        yield GaugeMetricFamily("voxflow_job_workers", "job workers that heartbeat within "
                                "the last minute", value=stats.workers)
