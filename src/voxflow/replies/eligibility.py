"""Whether a delivery may still speak: the eligibility predicates of the reply queue.

Pure reads of a session state (a :class:`~voxflow.replies.records.ReplyQueueState` that
is also a :class:`~voxflow.jobs.records.JobState`); :class:`~voxflow.replies.queue.
ReplyQueue` checks them, under its lock, before each step of a delivery. A delivery is
eligible while the conversation has not ended, its turn is still the one it answers
(same session and input revision), and every job version it covers is current (the
job's completed version, accepted by the ``is_relevant`` policy) and not yet covered by
another delivery or an explicit summary.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

from voxflow.jobs.records import JobRecord, JobState, job_copy
from voxflow.replies.records import CoveredUpdate, DeliveryRecord, ReplyQueueState

__all__ = ["Relevance", "eligible", "is_covered", "is_current", "jobs_of"]

Relevance = Callable[[JobRecord], bool] | None
"""The queue's optional policy: a job copy for which it returns False is never announced."""


def jobs_of(state: ReplyQueueState) -> dict[str, JobRecord]:
    """The session's job records (the state is also a ``JobState``)."""
    # a string cast: subscripting the generic at run time would build its schema
    return cast("JobState[JobRecord]", state).jobs


def is_current(state: ReplyQueueState, cov: CoveredUpdate, is_relevant: Relevance) -> bool:
    """``cov`` names the job's current completed version, and the policy accepts it."""
    job = jobs_of(state).get(cov.job_id)
    if job is None or job.session_id != state.id or job.status != "completed":
        return False
    if (job.revision, job.attempt, job.last_update_seq) != (cov.revision, cov.attempt, cov.seq):
        return False
    return is_relevant is None or bool(is_relevant(job_copy(job)))


def is_covered(state: ReplyQueueState, cov: CoveredUpdate) -> bool:
    """This version of the job (or a later update of it) was already delivered."""
    stored = state.covered_updates.get(cov.job_id)
    return (
        stored is not None
        and (stored.revision, stored.attempt) == (cov.revision, cov.attempt)
        and stored.seq >= cov.seq
    )


def eligible(state: ReplyQueueState, rec: DeliveryRecord, is_relevant: Relevance) -> bool:
    """``rec`` may still be announced (see the module's rule)."""
    if state.ended or rec.session_id != state.id:
        return False
    turn = state.turns.get(rec.turn_id)
    if turn is None or (turn.session_id, turn.input_revision) != (
        rec.session_id,
        rec.input_revision,
    ):
        return False
    return bool(rec.covered_updates) and all(
        is_current(state, c, is_relevant) and not is_covered(state, c) for c in rec.covered_updates
    )
