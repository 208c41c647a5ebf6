"""Background jobs that span conversational turns.

Records and rules (:class:`JobRecord`, :class:`JobState`, :class:`JobUpdate`,
:func:`add_job`, :func:`commit_job_update`) are pure and synchronous; the caller
serialises them with ``JobRunner.state_lock``. The short way to write one:
:func:`background_job` (:mod:`voxflow.jobs.background`). :class:`JobRunner` admits jobs, runs
each :class:`JobWorkFlow` worker in a thread and commits its updates; its module
docstring (:mod:`voxflow.jobs.runner`) states the lock model.

With PostgreSQL, jobs run in job-worker processes instead: :class:`PostgresJobQueue`
(:mod:`voxflow.jobs.queue`) queues them and runs the workers, their updates land in the
session's durable inbox (:class:`JobInbox`, :mod:`voxflow.jobs.inbox`) and the worker
owning the call reads them in (:class:`InboxReader`).
"""

from voxflow.jobs.background import JobContext as JobContext
from voxflow.jobs.background import JobFunction as JobFunction
from voxflow.jobs.background import background_job as background_job
from voxflow.jobs.inbox import InboxEntry as InboxEntry
from voxflow.jobs.inbox import JobInbox as JobInbox
from voxflow.jobs.inbox import apply_inbox as apply_inbox
from voxflow.jobs.queue import PostgresJobQueue as PostgresJobQueue
from voxflow.jobs.queue import QueuedJob as QueuedJob
from voxflow.jobs.queue import default_job_queue as default_job_queue
from voxflow.jobs.reader import InboxReader as InboxReader
from voxflow.jobs.records import JobRecord as JobRecord
from voxflow.jobs.records import JobState as JobState
from voxflow.jobs.records import JobStatus as JobStatus
from voxflow.jobs.records import JobUpdate as JobUpdate
from voxflow.jobs.records import JobUpdateKind as JobUpdateKind
from voxflow.jobs.records import add_job as add_job
from voxflow.jobs.records import begin_attempt as begin_attempt
from voxflow.jobs.records import commit_job_update as commit_job_update
from voxflow.jobs.results import BackgroundJob as BackgroundJob
from voxflow.jobs.results import announce_jobs as announce_jobs
from voxflow.jobs.results import max_job_result_chars as max_job_result_chars
from voxflow.jobs.results import set_max_job_result_chars as set_max_job_result_chars
from voxflow.jobs.runner import JobRunner as JobRunner
from voxflow.jobs.runner import MakeWork as MakeWork
from voxflow.jobs.work import JobWorkFlow as JobWorkFlow
from voxflow.jobs.work import JobWorkState as JobWorkState
from voxflow.jobs.work import Publisher as Publisher

__all__ = [
    "BackgroundJob",
    "InboxEntry",
    "InboxReader",
    "JobContext",
    "JobFunction",
    "JobInbox",
    "JobRecord",
    "JobRunner",
    "JobState",
    "JobStatus",
    "JobUpdate",
    "JobUpdateKind",
    "JobWorkFlow",
    "JobWorkState",
    "MakeWork",
    "PostgresJobQueue",
    "Publisher",
    "QueuedJob",
    "add_job",
    "announce_jobs",
    "apply_inbox",
    "background_job",
    "begin_attempt",
    "commit_job_update",
    "default_job_queue",
    "max_job_result_chars",
    "set_max_job_result_chars",
]
