"""Tracked-turn and reply-queue costs: is a turn <= 1 ms, and flat over a session?

Prints, for 1,000 tracked turns on one session (a hardcoded reply, in memory and with
``@persist()`` on the default SQLite backend, then a streamed litellm ``mock_response``
reply): the median µs per turn, the medians of the first and
last hundred turns (wall clock, and CPU time of the process, which a loaded machine
disturbs less), and events per turn, each next to the same turns through
``flow.astream_turn`` alone (so TurnRunner's own share is visible); then what voxflow
itself does per turn with the history (``get_conversation_messages`` for the LLM call
plus ``normalize_messages``) at 200 and 2,000 messages, against converting every message
each turn as before; then the ReplyQueue claim → prepare → accept → settle cycle in µs
(first and last hundred of 1,000 deliveries). Each figure is the median over ``--runs``
runs (default 3). Run: ``uv run python benchmarks/turn_runner.py``; ``--persisted-only``
prints the two hardcoded rows alone.

Measured on the shared 2-core machine (median of 3 runs, others' test suites running,
so wall figures are noisy; first 100 → last 100 turns, wall / CPU):

* hardcoded reply: 0.53 → 0.50 ms / 0.52 → 0.50 ms, flat.
* hardcoded reply, ``@persist()`` (four saves per turn: after each method, the turn,
  and TurnRunner's final statuses), ``--persisted-only``, CPU first 100 → last 100 turns,
  four invocations at load 6.5 to 8.3 on 2 cores: 1.89 → 1.95, 1.98 → 2.10, 2.02 → 1.92,
  2.01 → 2.48 ms (last/first 1.03, 1.06, 0.95, 1.24: median 1.045; wall 1.03, 1.10,
  0.89, 1.16). Before the record dicts logged their own changes (``RecordDict``), each
  save compared every record's key and object (~0.12 µs a record, 8 dict diffs a turn):
  2.05 → 2.85 ms CPU, 2.26 → 3.33 ms wall (1.39 / 1.47) at load 8. Split in one process
  (thread CPU): the turn's own work 1.44 → 1.31 ms, its SQLite saves 0.63 → 0.60 ms.
* streamed ``mock_response`` reply: 21 → 58 ms / 14.8 → 38.2 ms. Before this change:
  ~21 → ~43 ms wall on a quiet machine, 18.4 → 43.6 ms wall / 13.5 → 38.8 ms CPU in a
  same-load A/B run. The growth left is litellm's: one streamed ``LLM.acall`` alone costs
  12.8 ms CPU over 200 messages and 36.7 ms over 2,000 (``function_setup`` copies every
  message to strip thought signatures, the stream builds its usage and logging payload
  from the whole prompt; a real provider must also receive the whole history).
* voxflow's own history work per turn (cached ``to_llm`` dicts + ``normalize_messages``):
  55 µs at 200 messages, 0.54 ms at 2,000 (C-level dict copies, ~0.25 µs a message);
  in the turn, measured with the same load, 2.7 ms before → 0.85 ms at 2,000 messages.
* ReplyQueue cycle: 84 µs, flat.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from typing import Any, ClassVar

from _figures import figure

from voxflow import Flow, persist
from voxflow.conversation import ConversationConfig, ConversationMessage, get_conversation_messages
from voxflow.conversation.state import MessageRole
from voxflow.jobs import JobRecord, JobState, JobUpdate, add_job, commit_job_update
from voxflow.llm import LLM, normalize_messages
from voxflow.replies import ReplyQueue, ReplyQueueState
from voxflow.testing import Acknowledger
from voxflow.turns import TurnLedger, TurnRunner, TurnState

TURNS = 1000


Chat = Acknowledger  # every turn: "Request received."


@persist()
class PersistedChat(Chat):
    """``Chat`` saved after every method and turn by the default SQLite backend."""


@ConversationConfig(
    llm=LLM("openai/gpt-4o-mini", mock_response="Sure, your order ships on Tuesday morning.")
)
class Talk(Flow[TurnState]):
    pass


Timings = tuple[list[float], list[float], list[int]]
"""Wall µs per turn, CPU µs per turn, events per turn."""


async def run_turns(flow: Flow[Any], turns: int) -> Timings:
    runner = TurnRunner(flow)
    durations: list[float] = []
    cpu: list[float] = []
    counts: list[int] = []
    for i in range(turns):
        start, start_cpu = time.perf_counter(), time.process_time()
        n = 0
        async for event in runner.astream_turn(f"message {i}"):
            runner.accept_event(event)
            n += 1
        durations.append((time.perf_counter() - start) * 1e6)
        cpu.append((time.process_time() - start_cpu) * 1e6)
        counts.append(n)
    return durations, cpu, counts


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


async def run_flow_only(flow: Flow[Any], turns: int) -> Timings:
    """The same turns through ``flow.astream_turn`` without TurnRunner: the baseline."""
    durations: list[float] = []
    cpu: list[float] = []
    counts: list[int] = []
    for i in range(turns):
        start, start_cpu = time.perf_counter(), time.process_time()
        stream = await flow.astream_turn(f"message {i}")
        n = 0
        async for _ in stream:
            n += 1
        durations.append((time.perf_counter() - start) * 1e6)
        cpu.append((time.process_time() - start_cpu) * 1e6)
        counts.append(n)
    return durations, cpu, counts


def history_work(messages: int, repeats: int = 200) -> tuple[float, float]:
    """µs voxflow spends per turn on a history of ``messages``: now, and uncached."""
    flow = Talk()
    history = flow.state.messages
    for i in range(messages):
        role: MessageRole = "user" if i % 2 == 0 else "assistant"
        history.append(ConversationMessage(role=role, content=f"message {i}: some words"))
    get_conversation_messages(flow, copy=False)  # the earlier turns' conversions
    now: list[float] = []
    before: list[float] = []
    for i in range(repeats):
        history.append(ConversationMessage(role="user", content=f"turn {i}"))
        start = time.perf_counter()
        normalize_messages(get_conversation_messages(flow, copy=False))
        now.append((time.perf_counter() - start) * 1e6)
        start = time.perf_counter()
        normalize_messages([m.to_llm() for m in history])
        before.append((time.perf_counter() - start) * 1e6)
        history.pop()
    return statistics.median(now), statistics.median(before)


def llm_call_cpu(messages: int, calls: int = 20) -> float:
    """CPU ms of one streamed ``LLM.acall`` (litellm ``mock_response``) over a history."""
    llm = LLM("openai/gpt-4o-mini", mock_response="Sure, your order ships on Tuesday morning.")
    history = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i}: some words"}
        for i in range(messages)
    ]

    async def measure() -> list[float]:
        for _ in range(3):
            await llm.acall(history, stream=True)  # warm-up
        cpu: list[float] = []
        for _ in range(calls):
            start = time.process_time()
            await llm.acall(history, stream=True)
            cpu.append((time.process_time() - start) * 1e3)
        return cpu

    return statistics.median(asyncio.run(measure()))


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
    parser.add_argument(
        "--persisted-only",
        action="store_true",
        help="only the hardcoded reply, in memory and persisted (skips the LLM and queue rows)",
    )
    args = parser.parse_args()
    if args.turns < 200 or args.runs < 1:
        parser.error("--turns must be >= 200 and --runs >= 1")
    print(f"{args.turns} tracked turns per run, median of {args.runs} runs")
    print(
        f"  {'':24s} {'wall µs/turn':>14} {'first 100':>10} {'last 100':>10} {'last/first':>10}"
        f" {'CPU first':>10} {'CPU last':>10} {'events':>7}"
    )
    home = tempfile.TemporaryDirectory()
    os.environ["VOXFLOW_HOME"] = home.name  # PersistedChat's default backend lives here
    cases = (
        ("hardcoded reply", Chat, run_turns),
        ("  (flow alone, frames)", Chat, run_flow_only),
        ("hardcoded, @persist()", PersistedChat, run_turns),
        ("streamed mock_response", Talk, run_turns),
        ("  (flow alone, frames)", Talk, run_flow_only),
    )
    if args.persisted_only:
        cases = (cases[0], cases[2])
    for label, make, run in cases:
        walls, cpus = [], []
        events = 0.0
        for _ in range(args.runs):
            durations, cpu, counts = asyncio.run(run(make(suppress_flow_events=True), args.turns))
            walls.append(summary(durations))
            cpus.append(summary(cpu))
            events = statistics.mean(counts)
        med, first, last = (statistics.median(r[i] for r in walls) for i in range(3))
        cpu_first, cpu_last = (statistics.median(r[i] for r in cpus) for i in (1, 2))
        print(
            f"  {label:24s} {med:14.1f} {first:10.1f} {last:10.1f} {last / first:10.2f}"
            f" {cpu_first:10.1f} {cpu_last:10.1f} {events:7.1f}"
        )
        if make is PersistedChat:
            figure(
                "persisted tracked turn, CPU first 100", round(cpu_first), "µs", target="<= 2000"
            )
            figure("persisted tracked turn, CPU last 100", round(cpu_last), "µs", target="flat")
    from voxflow.flow.persistence import default_persistence

    default_persistence().close()
    home.cleanup()
    if args.persisted_only:
        return
    for messages in (200, 2 * args.turns):
        results = [history_work(messages) for _ in range(args.runs)]
        now, before = (statistics.median(r[i] for r in results) for i in range(2))
        print(
            f"  history for the LLM call, {messages:5d} messages: {now:8.1f} µs "
            f"(converting every message each turn: {before:8.1f} µs)"
        )
    small, large = 200, 2 * args.turns
    cpu = [(llm_call_cpu(small), llm_call_cpu(large)) for _ in range(args.runs)]
    at_small, at_large = (statistics.median(r[i] for r in cpu) for i in range(2))
    print(
        f"  one streamed LLM.acall (litellm mock_response), CPU: {small} messages "
        f"{at_small:.1f} ms, {large} messages {at_large:.1f} ms (litellm's per-call work)"
    )
    runs = [summary(queue_cycles(args.turns)) for _ in range(args.runs)]
    med, first, last = (statistics.median(r[i] for r in runs) for i in range(3))
    print(
        f"  {'ReplyQueue cycle':24s} median {med:8.1f} µs/cycle  first 100 {first:8.1f}   "
        f"last 100 {last:8.1f}   (claim, prepare, 3 x accepts_output+accept_event, settle)"
    )


if __name__ == "__main__":
    main()
