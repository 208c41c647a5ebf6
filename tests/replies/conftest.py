"""A real session for reply-queue tests: a TurnLedger over a ReplyQueueState+JobState."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar

import pytest

from voxflow.ids import TurnId
from voxflow.jobs import JobRecord, JobState, JobUpdate, add_job, commit_job_update
from voxflow.replies import ReplyQueue, ReplyQueueState
from voxflow.turns import ReplyEvent, TurnLedger, TurnRecord


class AnswerJob(JobRecord):
    output_fields: ClassVar[frozenset[str]] = frozenset({"answer"})
    stage: str | None = "research"
    answer: str = ""


class WorkChatState(ReplyQueueState, JobState[AnswerJob]):
    pass


@dataclass
class Session:
    state: WorkChatState
    ledger: TurnLedger
    queue: ReplyQueue
    irrelevant: set[str] = field(default_factory=set)

    def turn(self, turn_id: str | None = None) -> TurnRecord:
        """A finished foreground turn (its events handed off)."""
        active = self.ledger.begin(turn_id=TurnId(turn_id) if turn_id else None)
        try:
            for event in (
                self.ledger.issue(active, "started"),
                self.ledger.finish(active, text="ok"),
            ):
                assert self.ledger.accept_event(event)
        finally:
            self.ledger.end(active)
        return active.turn

    def job(self, turn: TurnRecord | None = None, answer: str = "42") -> AnswerJob:
        """A completed job of ``turn`` (a fresh turn by default), committed via updates."""
        origin = turn if turn is not None else self.turn()
        job = AnswerJob(session_id=self.state.id, origin_turn_id=origin.turn_id)
        assert add_job(self.state, job)
        self.commit(job, "started")
        self.commit(job, "stage_completed", stage="research", outputs={"answer": answer})
        self.commit(job, "completed")
        return job

    def commit(self, job: AnswerJob, kind: str, **fields: object) -> None:
        update = JobUpdate(
            session_id=job.session_id,
            job_id=job.job_id,
            revision=job.revision,
            attempt=job.attempt,
            seq=job.last_update_seq + 1,
            kind=kind,  # type: ignore[arg-type]
            **fields,  # type: ignore[arg-type]
        )
        assert commit_job_update(self.state, update)

    def accept_all(self, events: list[ReplyEvent]) -> list[bool]:
        return [self.ledger.accept_event(e) for e in events]


def join_answers(jobs: list[AnswerJob]) -> str:
    return "\n\n".join(job.answer for job in jobs)


@pytest.fixture
def session() -> Session:
    state = WorkChatState()
    ledger = TurnLedger(lambda: state)
    holder: dict[str, set[str]] = {"irrelevant": set()}
    queue = ReplyQueue(ledger, is_relevant=lambda job: job.job_id not in holder["irrelevant"])
    return Session(state=state, ledger=ledger, queue=queue, irrelevant=holder["irrelevant"])


@pytest.fixture
def build_text() -> Callable[[list[AnswerJob]], str]:
    return join_answers
