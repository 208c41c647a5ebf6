"""Tracked-turn and reply-queue costs: is a turn <= 1 ms, and flat over a session?

Prints, for 1,000 tracked turns on one session (a hardcoded reply, then a streamed
litellm ``mock_response`` reply): the median µs per turn, the medians of the first and
last hundred turns, and events per turn, each next to the same turns through
``flow.astream_turn`` alone (so TurnRunner's own share is visible); then the ReplyQueue
claim → prepare → accept → settle cycle in µs (first and last hundred of 1,000
deliveries). Each figure is the median over ``--runs`` runs (default 3).
Run: ``uv run python benchmarks/turn_runner.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any, ClassVar

from voxflow import Flow
from voxflow.conversation import ConversationConfig
from voxflow.flow import listen
from voxflow.jobs import JobRecord, JobState, JobUpdate, add_job, commit_job_update
from voxflow.llm import LLM
from voxflow.replies import ReplyQueue, ReplyQueueState
from voxflow.turns import TurnLedger, TurnRunner, TurnState

TURNS = 1000


class Chat(Flow[TurnState]):
    conversational = True

    def route_turn(self, context: Any) -> str:
        return "acknowledge"

    @listen("acknowledge")
    def handle_acknowledge(self) -> str:
        return "Request received."


@ConversationConfig(
    llm=LLM("openai/gpt-4o-mini", mock_response="Sure, your order ships on Tuesday morning.")
)
class Talk(Flow[TurnState]):
    pass


async def run_turns(flow: Flow[Any], turns: int) -> tuple[list[float], list[int]]:
    runner = TurnRunner(flow)
    durations: list[float] = []
    counts: list[int] = []
    for i in range(turns):
        start = time.perf_counter()
        n = 0
        async for event in runner.astream_turn(f"message {i}"):
            runner.accept_event(event)
            n += 1
        durations.append((time.perf_counter() - start) * 1e6)
        counts.append(n)
    return durations, counts


class Job(JobRecord):
    output_fields: ClassVar[frozenset[str]] = frozenset({"answer"})
    answer: str = ""
    stage: str | None = "work"


class QueueState(ReplyQueueState, JobState[Job]):
    pass


def queue_cycles(cycles: int) -> list[float]:
    state = QueueState()
    ledger = TurnLedger(lambda: state)
    queue = ReplyQueue(ledger)
    active = ledger.begin()
    ledger.finish(active, text="ok")
    ledger.end(active)
    origin = active.turn.turn_id
    durations: list[float] = []
    for _ in range(cycles):
        job = Job(session_id=state.id, origin_turn_id=origin)
        add_job(state, job)
        for seq, kind, extra in (
            (1, "started", {}),
            (2, "stage_completed", {"stage": "work", "outputs": {"answer": "done"}}),
            (3, "completed", {}),
        ):
            commit_job_update(
                state,
                JobUpdate(
                    session_id=state.id,
                    job_id=job.job_id,
                    revision=1,
                    attempt=1,
                    seq=seq,
                    kind=kind,  # type: ignore[arg-type]
                    **extra,  # type: ignore[arg-type]
                ),
            )
        queue.enqueue(job)
        start = time.perf_counter()
        delivery = queue.claim()
        assert delivery is not None
        for event in queue.prepare(delivery.delivery_id, lambda jobs: jobs[0].answer):
            if queue.accepts_output(delivery.delivery_id):
                ledger.accept_event(event)
        queue.settle(delivery.delivery_id, "completed")
        durations.append((time.perf_counter() - start) * 1e6)
    return durations


async def run_flow_only(flow: Flow[Any], turns: int) -> tuple[list[float], list[int]]:
    """The same turns through ``flow.astream_turn`` without TurnRunner: the baseline."""
    durations: list[float] = []
    counts: list[int] = []
    for i in range(turns):
        start = time.perf_counter()
        stream = await flow.astream_turn(f"message {i}")
        n = 0
        async for _ in stream:
            n += 1
        durations.append((time.perf_counter() - start) * 1e6)
        counts.append(n)
    return durations, counts


def summary(durations: list[float]) -> tuple[float, float, float]:
    return (
        statistics.median(durations),
        statistics.median(durations[:100]),
        statistics.median(durations[-100:]),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--turns", type=int, default=TURNS)
    args = parser.parse_args()
    print(f"{args.turns} tracked turns per run, median of {args.runs} runs")
    cases = (
        ("hardcoded reply", Chat, run_turns),
        ("  (flow alone, frames)", Chat, run_flow_only),
        ("streamed mock_response", Talk, run_turns),
        ("  (flow alone, frames)", Talk, run_flow_only),
    )
    for label, make, run in cases:
        runs = []
        events = 0.0
        for _ in range(args.runs):
            durations, counts = asyncio.run(run(make(suppress_flow_events=True), args.turns))
            runs.append(summary(durations))
            events = statistics.mean(counts)
        med, first, last = (statistics.median(r[i] for r in runs) for i in range(3))
        print(
            f"  {label:24s} median {med:8.1f} µs/turn   first 100 {first:8.1f}   "
            f"last 100 {last:8.1f}   events/turn {events:.1f}"
        )
    runs = [summary(queue_cycles(args.turns)) for _ in range(args.runs)]
    med, first, last = (statistics.median(r[i] for r in runs) for i in range(3))
    print(
        f"  {'ReplyQueue cycle':24s} median {med:8.1f} µs/cycle  first 100 {first:8.1f}   "
        f"last 100 {last:8.1f}   (claim, prepare, 3 x accepts_output+accept_event, settle)"
    )


if __name__ == "__main__":
    main()
