"""JobWorkFlow: the worker side of a background job.

A worker is an ordinary (non-streaming) Flow whose state holds a *copy* of its job
(:class:`JobWorkState`). It reports progress with :meth:`JobWorkFlow.publish_update`,
which blocks until the parent session has committed the update (a round-trip through
``JobRunner``), so a stage never starts before the previous one is accepted. Stops are
cooperative and happen at stage boundaries only: call :meth:`JobWorkFlow.check_open`
there.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

from pydantic import Field, JsonValue

from voxflow.conversation.flow import Flow
from voxflow.errors import JobUpdateRejectedError, ResourceClosedError
from voxflow.flow.state import FlowState
from voxflow.jobs.records import JobRecord, JobUpdate, JobUpdateKind

__all__ = ["JobWorkFlow", "JobWorkState", "Publisher"]

JobT = TypeVar("JobT", bound=JobRecord)
WorkStateT = TypeVar("WorkStateT", bound="JobWorkState[Any]")

Publisher = Callable[[JobUpdate], bool]
"""Sends one update to the parent and blocks until it is committed (True) or not."""


class JobWorkState(FlowState, Generic[JobT]):
    """A worker's state: a copy of its job plus whatever the worker adds."""

    job: JobT = Field(description="a copy of the job record this worker executes")


class JobWorkFlow(Flow[WorkStateT]):
    """A Flow that executes one job and publishes its progress to the parent session.

    Args:
        publish: the publisher ``JobRunner`` passed to ``make_work``.
        kwargs: Flow constructor arguments (``state=JobWorkState[MyJob](job=job)``, ...).

    Example:
        >>> class ReportWork(JobWorkFlow[JobWorkState[ReportJob]]):
        ...     @start()
        ...     def collect(self):
        ...         self.check_open()
        ...         self.publish_update("started")
        ...         self.publish_update("stage_completed", stage="collect",
        ...                             outputs={"notes": ["Example fact"]})
        ...         self.publish_update("completed")
    """

    def __init__(self, *, publish: Publisher, **kwargs: Any) -> None:
        if not callable(publish):
            raise TypeError("publish must be the callable JobRunner passed to make_work")
        super().__init__(**kwargs)
        if not isinstance(self.state, JobWorkState):
            raise TypeError(
                f"{type(self).__name__} state must be a JobWorkState, "
                f"got {type(self.state).__name__}"
            )
        self._publish = publish
        self._seq = self.state.job.last_update_seq
        self._stop = threading.Event()

    @property
    def job(self) -> JobRecord:
        """The worker's copy of its job (outputs are committed in the parent, not here)."""
        job: JobRecord = self.state.job
        return job

    def publish_update(
        self,
        kind: JobUpdateKind,
        *,
        stage: str | None = None,
        outputs: Mapping[str, JsonValue] | None = None,
        error: str | None = None,
    ) -> None:
        """Report progress and block until the parent committed it.

        Must run off the parent's event loop (flow methods of a worker run in a worker
        thread under ``JobRunner``).

        Raises:
            JobUpdateRejectedError: the parent rejected the update or the job session
                closed; the work should stop.
        """
        self._seq += 1
        job = self.job
        update = JobUpdate(
            session_id=job.session_id,
            job_id=job.job_id,
            revision=job.revision,
            attempt=job.attempt,
            seq=self._seq,
            kind=kind,
            stage=stage,
            outputs=dict(outputs or {}),
            error=error,
        )
        if not self._publish(update):
            raise JobUpdateRejectedError("Job session closed or update rejected.")
        if kind == "stage_started" and stage is not None:
            job.stage = stage

    def request_stop(self) -> None:
        """Ask the worker to stop at its next stage boundary (thread-safe, idempotent)."""
        self._stop.set()

    @property
    def stop_requested(self) -> bool:
        """True once :meth:`request_stop` was called."""
        return self._stop.is_set()

    def check_open(self) -> None:
        """Call at stage boundaries: raises once a stop was requested.

        Raises:
            ResourceClosedError: the job session is closing; stop the work.
        """
        if self._stop.is_set():
            raise ResourceClosedError("Job session closed: stop at this stage boundary.")
