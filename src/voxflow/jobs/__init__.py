"""Background jobs that span conversational turns.

Records and rules (:class:`JobRecord`, :class:`JobState`, :class:`JobUpdate`,
:func:`add_job`, :func:`commit_job_update`) are pure and synchronous; the caller
serialises them with ``JobRunner.state_lock``.
"""

from voxflow.jobs.records import JobRecord as JobRecord
from voxflow.jobs.records import JobState as JobState
from voxflow.jobs.records import JobStatus as JobStatus
from voxflow.jobs.records import JobUpdate as JobUpdate
from voxflow.jobs.records import JobUpdateKind as JobUpdateKind
from voxflow.jobs.records import add_job as add_job
from voxflow.jobs.records import commit_job_update as commit_job_update

__all__ = [
    "JobRecord",
    "JobState",
    "JobStatus",
    "JobUpdate",
    "JobUpdateKind",
    "add_job",
    "commit_job_update",
]
