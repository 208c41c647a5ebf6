"""Dispatch: routers, listeners, and_/or_, races, results and failures."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from voxflow import Flow, and_, listen, or_, router, start
from voxflow.errors import FlowRuntimeError
from voxflow.testing import EventRecorder


class ProbeGraph(Flow):
    """The reference probe: begin → decide → a, b → join_or(a), join_and(b)."""

    @start()
    def begin(self) -> str:
        return "begin"

    @router(begin)
    def decide(self) -> str:
        return "go"

    @listen("go")
    def a(self) -> str:
        return "a"

    @listen("go")
    def b(self) -> str:
        return "b"

    @listen(or_(a, "other"))
    def join_or(self) -> str:
        return "join_or"

    @listen(and_(a, b))
    def join_and(self) -> str:
        return "join_and"


def test_router_graph_runs_each_listener_once(recorder: EventRecorder) -> None:
    flow = ProbeGraph()
    assert flow.kickoff() == "join_and"
    finished = recorder.methods("method_finished")
    assert sorted(finished) == ["a", "b", "begin", "decide", "join_and", "join_or"]
    assert finished[:2] == ["begin", "decide"]


async def test_router_graph_under_kickoff_async_runs_sync_methods_in_threads() -> None:
    flow = ProbeGraph()
    assert await flow.kickoff_async() == "join_and"
    assert len(flow.method_outputs) == 6


async def test_result_is_deterministic_whatever_finishes_first() -> None:
    # Flaw 11: the reference returned whichever method finished last.
    class Timed(Flow):
        delays: dict[str, float] = {}

        @start()
        async def begin(self) -> None:
            return None

        @listen(begin)
        async def fast_deep(self) -> str:
            await asyncio.sleep(self.delays["fast"])
            return "fast"

        @listen(begin)
        async def slow(self) -> str:
            await asyncio.sleep(self.delays["slow"])
            return "slow"

    results = []
    for fast, slow in ((0.0, 0.01), (0.01, 0.0)):
        Timed.delays = {"fast": fast, "slow": slow}
        results.append(await Timed().kickoff_async())
    # Same depth: the method declared last wins, whatever the timing.
    assert results == ["slow", "slow"]


def test_router_label_equal_to_method_name_fails_clearly_never_double_fires() -> None:
    # Flaw 2 at run time (labels not declared): a clear error, the listener ran zero times.
    calls: list[str] = []

    class Undeclared(Flow):
        @start()
        def begin(self) -> None:
            return None

        @router(begin)
        def decide(self) -> str:
            return "y"

        @listen("y")
        def on_y(self) -> None:
            calls.append("on_y")

        @listen("other")
        def y(self) -> None:
            calls.append("y")

    flow = Undeclared()
    with pytest.raises(FlowRuntimeError, match=r"'y'.*also the name of method"):
        flow.kickoff()
    assert calls == []


def test_router_chain_then_listeners_in_order(recorder: EventRecorder) -> None:
    class Chain(Flow):
        @start()
        def begin(self) -> int:
            return 1

        @router(begin)
        def first(self) -> str:
            return "second_route"

        @router("second_route")
        def second(self) -> str:
            return "done"

        @listen("second_route")
        def mid(self, value: str) -> str:
            return f"mid:{value}"

        @listen("done")
        def end(self, value: str) -> str:
            return f"end:{value}"

    flow = Chain()
    flow.kickoff()
    order = recorder.methods("method_finished")
    assert order[:3] == ["begin", "first", "second"]  # routers settle before listeners
    assert set(order[3:]) == {"mid", "end"}
    assert dict(flow.method_outputs)["end"] == "end:done"  # a label's value is the label


def test_none_from_router_ends_the_chain() -> None:
    class Quiet(Flow):
        @start()
        def begin(self) -> None:
            return None

        @router(begin)
        def decide(self) -> None:
            return None

        @listen("None")
        def never(self) -> None:
            raise AssertionError("must not run")

    assert Quiet().kickoff() is None


def test_and_waits_for_all_then_clears() -> None:
    class Join(Flow):
        @start()
        def begin(self) -> None:
            return None

        @listen(begin)
        def a(self) -> str:
            return "a"

        @listen(a)
        def b(self) -> str:
            return "b"

        @listen(and_(a, b))
        def joined(self) -> str:
            return "joined"

    flow = Join()
    assert flow.kickoff() == "joined"
    assert [n for n, _ in flow.method_outputs].count("joined") == 1


def test_multi_event_or_fires_once_per_execution() -> None:
    class Either(Flow):
        @start()
        def begin(self) -> None:
            return None

        @listen(begin)
        def a(self) -> str:
            return "a"

        @listen(begin)
        def b(self) -> str:
            return "b"

        @listen(a)
        def also_a(self) -> None:  # a and b are not exclusive: no race
            return None

        @listen(or_(a, b))
        def either(self) -> str:
            return "either"

    flow = Either()
    flow.kickoff()
    names = [n for n, _ in flow.method_outputs]
    assert names.count("either") == 1
    assert {"a", "b"} <= set(names)


def test_or_listener_rearms_when_router_reemits_label() -> None:
    class Rearm(Flow):
        @start()
        def begin(self) -> None:
            return None

        @router(begin)
        def first(self) -> str:
            return "left"

        @listen("left")
        def step(self) -> None:
            return None

        @router(step)
        def second(self) -> str:
            return "right"

        @listen(or_("left", "right"))
        def joined(self, label: str) -> str:
            return f"joined:{label}"

    flow = Rearm()
    flow.kickoff()
    outputs = sorted(o for n, o in flow.method_outputs if n == "joined")
    # Fired for "left"; the router re-emitting "right" re-armed it, so it fired again.
    assert outputs == ["joined:left", "joined:right"]


def test_or_listener_rearms_on_a_cycle() -> None:
    class Cycle(Flow):
        rounds = 0

        @start()
        def begin(self) -> None:
            return None

        @listen(or_(begin, "again"))
        def work(self) -> str:
            return "worked"

        @listen(or_(work, "never"))
        def after_work(self) -> None:
            return None

        @router(after_work)
        def loop(self) -> str | None:
            self.rounds += 1
            return "again" if self.rounds < 3 else None

    flow = Cycle()
    flow.kickoff()
    names = [n for n, _ in flow.method_outputs]
    assert names.count("work") == 3 and names.count("after_work") == 3


async def test_async_or_race_cancels_and_awaits_losers(recorder: EventRecorder) -> None:
    # Flaw 10: losers are cancelled *and awaited*; their cleanup has run by kickoff's end.
    cleaned: list[str] = []

    class Race(Flow):
        @start()
        async def begin(self) -> None:
            return None

        @listen(begin)
        async def fast(self) -> str:
            return "fast"

        @listen(begin)
        async def slow(self) -> str:
            try:
                await asyncio.Event().wait()
            finally:
                cleaned.append("slow")
            return "slow"

        @listen(or_(fast, slow))
        async def winner(self, value: str) -> str:
            return f"won:{value}"

    flow = Race()
    assert await flow.kickoff_async() == "won:fast"
    assert cleaned == ["slow"]
    assert "slow" not in flow.completed_methods
    cancelled = recorder.of_kind("method_cancelled")
    assert [(e.method_name, e.reason) for e in cancelled] == [("slow", "lost_race")]


async def test_a_cancelled_kickoff_leaves_no_listener_or_racer_running() -> None:
    """Concurrent listeners and ``or_`` racers live inside their batch: when the kickoff
    is cancelled, each one's cleanup has finished by the time the cancellation arrives."""
    started: list[str] = []
    cleaned: list[str] = []
    all_started = asyncio.Event()

    async def hold(name: str) -> str:
        started.append(name)
        if len(started) == 3:
            all_started.set()
        try:
            await asyncio.Event().wait()
        finally:
            await asyncio.sleep(0.01)  # a cleanup that itself awaits
            cleaned.append(name)
        return name

    class Busy(Flow):
        @start()
        async def begin(self) -> None:
            return None

        @listen(begin)
        async def left(self) -> str:
            return await hold("left")

        @listen(begin)
        async def right(self) -> str:
            return await hold("right")

        @listen(begin)
        async def third(self) -> str:
            return await hold("third")

        @listen(or_(left, right))
        async def either(self) -> str:
            return "either"

    task = asyncio.ensure_future(Busy().kickoff_async())
    await asyncio.wait_for(all_started.wait(), timeout=30)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert sorted(cleaned) == ["left", "right", "third"]


async def test_race_loser_failure_is_reported(recorder: EventRecorder) -> None:
    class Race(Flow):
        @start()
        async def begin(self) -> None:
            return None

        @listen(begin)
        async def good(self) -> str:
            await asyncio.sleep(0.01)
            return "good"

        @listen(begin)
        async def broken(self) -> str:
            raise ValueError("boom")

        @listen(or_(good, broken))
        async def after(self, value: str) -> str:
            return value

    assert await Race().kickoff_async() == "good"
    failed = recorder.of_kind("method_failed")
    assert [(e.method_name, e.error_type) for e in failed] == [("broken", "ValueError")]


def test_sync_race_on_sync_kickoff_is_deterministic(recorder: EventRecorder) -> None:
    # Sync members cannot be interrupted: the first declared success wins, the rest never
    # start, so nothing depends on thread timing and kickoff never waits for a loser.
    class SyncRace(Flow):
        @start()
        def begin(self) -> None:
            return None

        @listen(begin)
        def first(self) -> str:
            return "first"

        @listen(begin)
        def second(self) -> str:
            raise AssertionError("never started")

        @listen(or_(first, second))
        def after(self, value: str) -> str:
            return value

    assert SyncRace().kickoff() == "first"
    assert [(e.method_name, e.reason) for e in recorder.of_kind("method_cancelled")] == [
        ("second", "not_started")
    ]


async def test_sync_loser_in_thread_is_awaited() -> None:
    finished = threading.Event()

    class Mixed(Flow):
        @start()
        async def begin(self) -> None:
            return None

        @listen(begin)
        async def quick(self) -> str:
            return "quick"

        @listen(begin)
        def blocking(self) -> str:
            time.sleep(0.05)
            finished.set()
            return "blocking"

        @listen(or_(quick, blocking))
        async def after(self, value: str) -> str:
            return value

    assert await Mixed().kickoff_async() == "quick"
    assert finished.is_set()  # the loser's thread ended before kickoff returned


async def test_sync_loser_failing_in_its_thread_is_reported(recorder: EventRecorder) -> None:
    quick_ran = threading.Event()

    class Mixed(Flow):
        @start()
        async def begin(self) -> None:
            return None

        @listen(begin)
        async def quick(self) -> str:
            quick_ran.set()
            return "quick"

        @listen(begin)
        def doomed(self) -> str:
            quick_ran.wait(timeout=10)
            raise OSError("disk gone")

        @listen(or_(quick, doomed))
        async def after(self, value: str) -> str:
            return value

    assert await Mixed().kickoff_async() == "quick"
    failed = [(e.method_name, e.error_type) for e in recorder.of_kind("method_failed")]
    assert failed == [("doomed", "OSError")]


def test_failing_method_is_reported_and_raised(recorder: EventRecorder) -> None:
    class Fails(Flow):
        @start()
        def begin(self) -> None:
            return None

        @listen(begin)
        def ok(self) -> str:
            return "ok"

        @listen(begin)
        def bad(self) -> None:
            raise KeyError("missing")

    flow = Fails()
    with pytest.raises(KeyError):
        flow.kickoff()
    assert "ok" in flow.completed_methods  # the sibling ran to completion
    assert recorder.methods("method_failed") == ["bad"]
    assert recorder.kinds()[-1] == "flow_failed"


def test_max_method_calls_raises_recursion_error() -> None:
    class Cycle(Flow):
        @start()
        def begin(self) -> None:
            return None

        @router(begin)
        def kick(self) -> str:
            return "loop"

        @router("loop")
        def spin(self) -> str:
            return "loop"

    with pytest.raises(RecursionError, match="own name"):
        Cycle(max_method_calls=5).kickoff()


def test_listener_receives_trigger_value_only_when_declared() -> None:
    class Args(Flow):
        @start()
        def begin(self) -> int:
            return 41

        @listen(begin)
        def with_arg(self, value: int) -> int:
            return value + 1

        @listen(begin)
        def without_arg(self) -> str:
            return "no-arg"

    flow = Args()
    flow.kickoff()
    outputs = dict(flow.method_outputs)
    assert outputs["with_arg"] == 42 and outputs["without_arg"] == "no-arg"


def test_conditional_start_runs_on_router_label() -> None:
    class Cond(Flow):
        @start()
        def begin(self) -> None:
            return None

        @router(begin)
        def decide(self) -> str:
            return "restart"

        @start("restart")
        def second_start(self) -> str:
            return "second"

    flow = Cond()
    assert flow.kickoff() == "second"


def test_start_that_is_router_triggers_own_name_then_label() -> None:
    class StartRouter(Flow):
        @start()
        @router()
        def route(self) -> str:
            return "talk"

        @listen(route)
        def saw_route(self, value: str) -> str:
            return f"route:{value}"

        @listen("talk")
        def handle_talk(self, value: str) -> str:
            return f"talk:{value}"

    flow = StartRouter()
    assert flow.kickoff() == "talk:talk"
    outputs = [n for n, _ in flow.method_outputs]
    assert outputs == ["route", "saw_route", "handle_talk"]


def test_method_outputs_hold_references_not_copies() -> None:
    payload: dict[str, Any] = {"big": list(range(10))}

    class Ref(Flow):
        @start()
        def begin(self) -> dict[str, Any]:
            return payload

    flow = Ref()
    assert flow.kickoff() is payload
