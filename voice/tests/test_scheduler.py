"""ModelScheduler: earliest deadline first over per-call queues, bounded threads.

Deterministic: deadlines come from a clock the test sets, the single worker is held by
a gate job while the others queue, and the order the jobs ran in is what is checked
(no timing is asserted).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import pytest
from voxflow_voice.scheduler import ModelScheduler, Work, current_work, scheduled


class FakeClock:
    """A clock the test moves by hand (the scheduler reads it from its threads)."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _recorder(order: list[str], name: str) -> Callable[[], str]:
    def job() -> str:
        order.append(name)
        return name

    return job


async def _gated(scheduler: ModelScheduler) -> tuple[threading.Event, asyncio.Task[None]]:
    """Occupy the scheduler's worker(s) until the returned event is set."""
    gate, started = threading.Event(), threading.Event()

    def hold() -> None:
        started.set()
        gate.wait()

    task = asyncio.create_task(scheduler.run(hold))
    await asyncio.to_thread(started.wait)
    return gate, task


async def _submit(scheduler: ModelScheduler, work: Work, job: Callable[[], str],
                  resource: str | None = None) -> asyncio.Task[str]:
    with scheduled(work):
        task = asyncio.create_task(scheduler.run_on(resource, job))
    await asyncio.sleep(0)  # let it reach the queue
    await asyncio.sleep(0)
    return task


async def test_jobs_run_earliest_deadline_first_across_calls() -> None:
    clock = FakeClock()
    scheduler = ModelScheduler(1, urgent_lanes=0, clock=clock)
    order: list[str] = []
    gate, holder = await _gated(scheduler)
    tasks = [
        await _submit(scheduler, Work("a", "ahead", 3.0), _recorder(order, "a+3")),
        await _submit(scheduler, Work("b", "ahead", 1.0), _recorder(order, "b+1")),
        await _submit(scheduler, Work("a", "ahead", 2.0), _recorder(order, "a+2")),
    ]
    clock.now += 1.5  # submitted now: due at 101.5, after b+1 (101) and before a+2 (102)
    tasks.append(await _submit(scheduler, Work("c", "ahead", 0.0), _recorder(order, "c+0")))
    assert scheduler.statistics().queued["ahead"] == 4
    gate.set()
    await holder
    assert await asyncio.gather(*tasks) == ["a+3", "b+1", "a+2", "c+0"]
    assert order == ["b+1", "c+0", "a+2", "a+3"]
    scheduler.close()


async def test_an_urgent_job_runs_before_queued_later_clauses_of_other_calls() -> None:
    clock = FakeClock()
    scheduler = ModelScheduler(1, urgent_lanes=0, clock=clock)
    order: list[str] = []
    gate, holder = await _gated(scheduler)
    later = [await _submit(scheduler, Work(f"call{i}", "ahead", 0.4),
                           _recorder(order, f"clause{i}")) for i in range(3)]
    first_clause = await _submit(scheduler, Work("new", "urgent"), _recorder(order, "first"))
    stt = await _submit(scheduler, Work("other", "urgent"), _recorder(order, "stt"), "stt")
    gate.set()
    await asyncio.gather(holder, first_clause, stt, *later)
    assert order == ["first", "stt", "clause0", "clause1", "clause2"]
    scheduler.close()


async def test_a_late_clause_goes_before_urgent_work_submitted_after_its_deadline() -> None:
    clock = FakeClock()
    scheduler = ModelScheduler(1, urgent_lanes=0, clock=clock)
    order: list[str] = []
    gate, holder = await _gated(scheduler)
    clause = await _submit(scheduler, Work("a", "ahead", 0.5), _recorder(order, "clause"))
    clock.now += 2.0  # the clause's playout ran dry before this urgent job came
    urgent = await _submit(scheduler, Work("b", "urgent"), _recorder(order, "urgent"))
    gate.set()
    await asyncio.gather(holder, clause, urgent)
    assert order == ["clause", "urgent"]
    assert scheduler.statistics().late == 1  # the clause started after its deadline
    scheduler.close()


async def test_speculative_work_yields_until_it_is_made_urgent() -> None:
    clock = FakeClock()
    scheduler = ModelScheduler(1, urgent_lanes=0, clock=clock)
    order: list[str] = []
    gate, holder = await _gated(scheduler)
    pause_a = Work("a", "speculative")
    pause_b = Work("b", "speculative")
    tasks = [
        await _submit(scheduler, pause_a, _recorder(order, "spec-a"), "stt"),
        await _submit(scheduler, pause_b, _recorder(order, "spec-b"), "stt"),
        await _submit(scheduler, Work("c", "ahead", 3.0), _recorder(order, "far-clause")),
        await _submit(scheduler, Work("d", "ahead", 0.5), _recorder(order, "near-clause")),
    ]
    clock.now += 0.9  # submitted after both speculations, still goes first
    tasks.append(await _submit(scheduler, Work("e", "urgent"), _recorder(order, "urgent")))
    clock.now += 0.2
    pause_b.update("urgent", 0.0)  # b's turn ended on the paused audio, after e's job
    stats = scheduler.statistics()
    assert (stats.queued["speculative"], stats.queued["urgent"]) == (1, 2)
    gate.set()
    await asyncio.gather(holder, *tasks)
    # near-clause due at 100.5, urgent at 100.9, a's speculation at 101 (submission +
    # SPECULATIVE_SLACK), b's (made urgent) at 101.1, the clause with 3 s left at 103.
    assert order == ["near-clause", "urgent", "spec-a", "spec-b", "far-clause"]
    scheduler.close()


async def test_no_more_threads_than_workers_and_one_decode_per_model() -> None:
    scheduler = ModelScheduler(2, urgent_lanes=0)
    lock = threading.Lock()
    running: list[str] = []
    most = 0
    gate = threading.Event()
    two_running = threading.Event()

    def job(name: str) -> Callable[[], str]:
        def run() -> str:
            nonlocal most
            with lock:
                running.append(name)
                most = max(most, len(running))
                if len(running) == 2:
                    two_running.set()
            gate.wait()
            with lock:
                running.remove(name)
            return name

        return run

    tasks = [await _submit(scheduler, Work(f"call{i}", "urgent"), job(f"stt{i}"), "stt")
             for i in range(3)]
    tasks += [await _submit(scheduler, Work(f"call{i}", "urgent"), job(f"tts{i}"))
              for i in range(3)]
    await asyncio.to_thread(two_running.wait)
    stats = scheduler.statistics()
    assert stats.workers == 2 and stats.running == 2
    assert stats.queued["urgent"] == 4
    with lock:
        # stt1 came before tts0, but Whisper is busy with stt0: the free worker took TTS.
        assert sorted(running) == ["stt0", "tts0"]
    gate.set()
    assert await asyncio.gather(*tasks) == [f"stt{i}" for i in range(3)] + [
        f"tts{i}" for i in range(3)]
    assert most == 2
    assert sum(scheduler.statistics().completed.values()) == 6
    scheduler.close()


async def test_cancelling_a_queued_job_drops_it_and_errors_reach_the_caller() -> None:
    scheduler = ModelScheduler(1, urgent_lanes=0)
    order: list[str] = []
    gate, holder = await _gated(scheduler)
    dropped = await _submit(scheduler, Work("a"), _recorder(order, "dropped"))
    kept = await _submit(scheduler, Work("b"), _recorder(order, "kept"))

    def fails() -> str:
        raise ValueError("model failed")

    failing = await _submit(scheduler, Work("c"), fails)
    dropped.cancel()
    await asyncio.wait({dropped})  # the cancellation reached the queue
    gate.set()
    await holder
    assert await kept == "kept"
    with pytest.raises(ValueError, match="model failed"):
        await failing
    with pytest.raises(asyncio.CancelledError):
        await dropped
    assert order == ["kept"]
    scheduler.close()


async def test_the_ticket_travels_in_the_context_into_tasks() -> None:
    work = Work("a", "ahead", 1.0)
    assert current_work() is None
    with scheduled(work):
        task = asyncio.create_task(asyncio.sleep(0, result=current_work()))
    assert current_work() is None
    assert await task is work


def test_tickets_and_schedulers_refuse_bad_values() -> None:
    with pytest.raises(ValueError, match="urgency"):
        Work("a", "soon")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="slack"):
        Work("a", "ahead", -1.0)
    with pytest.raises(ValueError, match="slack"):
        Work("a", "ahead", float("nan"))
    with pytest.raises(ValueError, match="slack"):
        Work("a").update(slack=float("inf"))
    with pytest.raises(ValueError, match="workers"):
        ModelScheduler(0)
    with pytest.raises(ValueError, match="limit"):
        ModelScheduler(1, limits={"stt": 0})
    with pytest.raises(TypeError, match="Work"), scheduled("urgent"):  # type: ignore[arg-type]
        pass
    scheduler = ModelScheduler(1, urgent_lanes=0)
    scheduler.close()
    with pytest.raises(RuntimeError, match="closed"):
        scheduler.submit(lambda: None, Work(), done=lambda ok, value: None)


async def test_an_urgent_lane_runs_urgent_work_while_every_worker_is_busy() -> None:
    scheduler = ModelScheduler(1, urgent_lanes=1)
    order: list[str] = []
    gate, started = threading.Event(), threading.Event()

    def long_sentence() -> str:
        started.set()
        gate.wait()
        order.append("long-sentence")
        return "long-sentence"

    sentence = await _submit(scheduler, Work("a", "ahead", 2.0), long_sentence)
    await asyncio.to_thread(started.wait)  # the only worker is busy with a later sentence
    later = await _submit(scheduler, Work("b", "ahead", 0.0), _recorder(order, "clause"))
    stt = await _submit(scheduler, Work("c", "urgent"), _recorder(order, "stt"), "stt")
    assert await stt == "stt"  # ran on the lane, the worker still busy
    stats = scheduler.statistics()
    assert (stats.running, stats.queued["ahead"]) == (1, 1)  # the lane took no clause
    gate.set()
    assert await asyncio.gather(sentence, later) == ["long-sentence", "clause"]
    assert order == ["stt", "long-sentence", "clause"]
    assert stats.workers == 1 and scheduler.urgent_lanes == 1
    scheduler.close()


def test_close_runs_a_queued_job_waiting_for_a_resource_the_urgent_lane_holds() -> None:
    # the worker is busy with B; the urgent lane decodes A (stt); C (stt, speculative)
    # waits for the model. close() then B ends: the worker must not stop while C is
    # queued (it saw no runnable job, the stt model being held), nor the lane after A
    # (C is not urgent): C runs, its caller is answered
    scheduler = ModelScheduler(1, urgent_lanes=1, limits={"stt": 1})
    b_gate, a_gate, b_started, a_started = (threading.Event() for _ in range(4))
    results: dict[str, tuple[bool, object]] = {}
    finished = threading.Event()

    def blocked(started: threading.Event, gate: threading.Event, name: str) -> Callable[[], str]:
        def job() -> str:
            started.set()
            gate.wait()
            return name
        return job

    def done_for(name: str) -> Callable[[bool, object], None]:
        def done(ok: bool, value: object) -> None:
            results[name] = (ok, value)
            if name == "C":
                finished.set()
        return done

    scheduler.submit(blocked(b_started, b_gate, "B"), Work("b", "ahead", 5.0), done=done_for("B"))
    assert b_started.wait(30)
    scheduler.submit(blocked(a_started, a_gate, "A"), Work("a"), resource="stt",
                     done=done_for("A"))
    assert a_started.wait(30)
    scheduler.submit(lambda: "C", Work("c", "speculative"), resource="stt", done=done_for("C"))
    closing = threading.Thread(target=scheduler.close)
    closing.start()
    while True:  # until close() has begun (a submission is refused; probes just run)
        try:
            scheduler.submit(lambda: None, Work("probe"), done=lambda ok, value: None)
        except RuntimeError:
            break
        closing.join(0.01)
    b_gate.set()
    a_gate.set()
    closing.join(30)
    assert not closing.is_alive()
    assert finished.wait(5), f"C never ran: {results}"
    assert results == {"A": (True, "A"), "B": (True, "B"), "C": (True, "C")}


def test_a_done_callback_that_raises_does_not_kill_the_worker() -> None:
    scheduler = ModelScheduler(1, urgent_lanes=0)
    answered = threading.Event()

    def broken(ok: bool, value: object) -> None:
        raise RuntimeError("the caller's callback failed")

    scheduler.submit(lambda: 1, Work("a"), done=broken)
    scheduler.submit(lambda: 2, Work("b"), done=lambda ok, value: answered.set())
    assert answered.wait(10), "the only worker died with the first job's callback"
    scheduler.close()


async def test_a_past_overload_leaves_the_queue_wait_figure() -> None:
    """``waited_p95_ms`` is of the last ``WAIT_WINDOW`` seconds: a burst of long waits an
    hour ago no longer shows on a quiet server (it is exported as
    ``voxflow_model_urgent_wait_p95_seconds`` and read by ``GET /load``; before, the last
    256 waits counted however old, so one overload showed for good)."""
    from voxflow_voice.scheduler import WAIT_WINDOW

    clock = FakeClock()
    scheduler = ModelScheduler(1, urgent_lanes=0, clock=clock)
    gate, holder = await _gated(scheduler)
    waiting = [await _submit(scheduler, Work(f"c{i}", "urgent"), lambda: None)
               for i in range(3)]
    clock.now += 2.0  # the three urgent jobs wait 2 s behind the held worker
    gate.set()
    await asyncio.gather(holder, *waiting)
    assert scheduler.statistics().waited_p95_ms["urgent"] == pytest.approx(2000.0)
    clock.now += WAIT_WINDOW - 1.0
    assert scheduler.statistics().waited_p95_ms["urgent"] == pytest.approx(2000.0)
    clock.now += 2.0
    assert "urgent" not in scheduler.statistics().waited_p95_ms
    later = await _submit(scheduler, Work("later", "urgent"), lambda: None)
    for _ in range(100):
        if later.done():
            break
        await asyncio.sleep(0.01)
    assert scheduler.statistics().waited_p95_ms["urgent"] == pytest.approx(0.0)
    scheduler.close()
