"""A call worker's heartbeat: its dispatch row renewed from a thread of its own.

Front doors count only the workers whose heartbeat is fresh, and a worker whose heartbeat
is stale cannot claim (:mod:`~voxflow_adapters.hosting.dispatch`); one whose heartbeat
stopped is dead, and its calls' leases are taken over at once. :class:`Heartbeat` writes it
every ``interval`` seconds on its own thread and database connection, so a busy event loop
(speech models, many calls) never delays it; each beat carries the worker's measured
headroom and the rest of its load (:class:`~voxflow_adapters.hosting.dispatch_tables.
WorkerReport`: its measured slots, what a call costs and where that figure comes from,
the models' recent real-time factors, its p95, why it refuses) and corrects the row's
count of used slots if it drifted. The
:class:`~voxflow_adapters.hosting.worker.CallWorker` starts and stops it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from .dispatch import DispatchStore
from .dispatch_tables import WorkerReport

__all__ = ["Heartbeat", "Report", "SlotCount"]

logger = logging.getLogger(__name__)

Report = Callable[[], WorkerReport]
"""The load the worker reports with each heartbeat (its headroom among it; a worker
that measures its headroom alone reports ``WorkerReport(headroom=...)``)."""

SlotCount = Callable[[], tuple[int, int] | None]
"""The slots the worker holds, as ``(version, count)``; None while a claim or a release
is under way (the version changes with each of them)."""


class Heartbeat:
    """Renews a worker's heartbeat every ``interval`` seconds from a thread of its own
    (its own database connection): the event loop's load cannot make it miss.

    Args:
        store: the dispatch store (its URL and heartbeat statement).
        worker_id: the row to renew.
        interval: seconds between beats.
        report: the load reported with each beat, its headroom among it (called on the
            heartbeat thread: :meth:`~voxflow_adapters.hosting.worker.CallWorker.report`,
            or for a worker of one's own that measures its headroom only,
            ``lambda: WorkerReport(headroom=...)``); None: nothing reported (no headroom).
        used: the slots the worker holds (called on the heartbeat thread): each beat
            writes it over the row's count, which a lost reply or a bug may have made
            drift, under the row's lock and only while no claim or release is under way
            (the version read before and after the lock is the same); None: the count
            is left alone.
        on_missing: called (on the heartbeat thread) when a beat finds no row: it was
            removed as dead while this worker could not reach the database.

    Raises:
        ValueError: ``interval`` is not a positive number.
    """

    def __init__(self, store: DispatchStore, worker_id: str, *, interval: float,
                 report: Report | None = None, used: SlotCount | None = None,
                 on_missing: Callable[[], None] | None = None) -> None:
        if not 0 < interval < float("inf"):
            raise ValueError("interval must be a positive, finite number of seconds")
        self.store = store
        self.worker_id = worker_id
        self.interval = float(interval)
        self.report = report
        self.used = used
        self.on_missing = on_missing
        self.beats = 0
        """Heartbeats written so far."""
        self.failures = 0
        """Heartbeats that could not be written (the database was unreachable)."""
        self.report_failures = 0
        """Heartbeats written without a headroom or load, ``report`` having raised or
        returned what is not a :class:`WorkerReport`."""
        self.failing = False
        """Whether the latest heartbeat could not be written (the worker is not ready)."""
        self.corrections = 0
        """Heartbeats that found the row's count of used slots wrong and corrected it."""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start beating (idempotent)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, daemon=True,
                                            name=f"heartbeat-{self.worker_id}")
            self._thread.start()

    def stop(self) -> None:
        """Stop beating and wait for the thread."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval + self.store.connect_timeout)
            self._thread = None

    def _run(self) -> None:
        import psycopg  # here: the optional voxflow[postgres] extra

        conn: psycopg.Connection[Any] | None = None
        while not self._stop.is_set():
            # a connection that broke since the last beat (a reset) is replaced at once:
            # one more try on a fresh one before the beat counts as missed
            for fresh in (conn is None, True):
                try:
                    if conn is None or conn.closed:
                        conn = psycopg.connect(self.store.url,
                                               connect_timeout=int(self.store.connect_timeout),
                                               **self.store.connect_options)
                    self._beat(conn)
                    self.beats += 1
                    self.failing = False
                    break
                except Exception as exc:  # the thread lives on: a dead one is a stale worker
                    broken = conn is None or conn.broken
                    if conn is not None:
                        conn.close()
                    conn = None
                    if fresh or not broken:
                        self.failures += 1
                        self.failing = True
                        # the type only: a driver's or a callback's message may carry a secret
                        logger.warning("heartbeat not written (%s); retrying",
                                       type(exc).__name__)
                        break
            self._stop.wait(self.interval)
        if conn is not None:
            conn.close()

    def _beat(self, conn: Any) -> None:
        """One heartbeat, in one transaction: the row's lock, its count corrected when no
        claim or release can be between the count read and the write, the beat."""
        params: dict[str, Any] = {"worker_id": self.worker_id, **self._report().params(),
                                  "used": None}
        before = self.used() if self.used is not None else None
        with conn.transaction():
            if before is not None and self.used is not None:
                row = conn.execute(self.store.slots_sql(), params).fetchone()
                if self.used() == before:  # (a claim or release begun since: next beat)
                    params["used"] = before[1]
                    if row is not None and row[0] != before[1]:
                        self.corrections += 1
                        logger.warning("the dispatch row said %d slot(s) used, the worker "
                                       "holds %d: corrected", row[0], before[1],
                                       extra={"worker_id": self.worker_id})
            updated = conn.execute(self.store.heartbeat_sql(), params).rowcount
        if not updated and self.on_missing is not None:
            self.on_missing()

    def _report(self) -> WorkerReport:
        """The load to report; nothing (not measured) when its callback fails: the beat
        itself, which keeps the worker live, is written anyway. The warning names the
        error's type, not its message (a callback's message may carry a secret)."""
        if self.report is None:
            return WorkerReport()
        try:
            report = self.report()
            if not isinstance(report, WorkerReport):
                raise TypeError(f"report must return a WorkerReport, got "
                                f"{type(report).__name__}")
            return report
        except Exception as exc:
            self.report_failures += 1
            logger.warning("load report failed (%s); heartbeat written without headroom "
                           "or load", type(exc).__name__)
            return WorkerReport()
