"""kickoff()/kickoff_async(): state, inputs, threads, loops, events and bad input."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from voxflow import Flow, FlowEventBus, FlowState, listen, start
from voxflow.errors import FlowDefinitionError, FlowRuntimeError
from voxflow.flow import CheckpointConfig, FlowEvent, MethodFinished
from voxflow.testing import EventRecorder, FakeClock


class Counter(FlowState):
    count: int = 0
    name: str = ""


class Typed(Flow[Counter]):
    @start()
    def begin(self) -> int:
        self.state.count += 1
        return self.state.count

    @listen(begin)
    def second(self) -> int:
        self.state.count += 10
        return self.state.count


def test_typed_state_is_shared_and_has_id() -> None:
    flow = Typed()
    assert isinstance(flow.state, Counter)
    assert flow.state.id
    assert flow.kickoff() == 11
    assert flow.state.count == 11


def test_inputs_are_hydrated_before_any_method_runs() -> None:
    seen: list[tuple[str, int]] = []

    class Hydrated(Flow[Counter]):
        @start()
        def begin(self) -> None:
            seen.append((self.state.name, self.state.count))

    flow = Hydrated()
    before = flow.state
    flow.kickoff(inputs={"id": "run-1", "name": "ada", "count": 5})
    assert seen == [("ada", 5)]
    assert flow.state.id == "run-1"
    assert flow.state is before  # one live object


def test_dict_state_gets_an_id() -> None:
    class Plain(Flow):
        @start()
        def begin(self) -> Any:
            self.state["seen"] = True
            return self.state["id"]

    flow = Plain()
    assert flow.kickoff(inputs={"id": "abc"}) == "abc"
    assert flow.state == {"id": "abc", "seen": True}


def test_bad_inputs_raise_and_lose_no_state() -> None:
    flow = Typed()
    flow.kickoff()
    with pytest.raises(TypeError, match="inputs must be a mapping"):
        flow.kickoff(inputs=["id"])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"inputs\['id'\]"):
        flow.kickoff(inputs={"id": 3})
    with pytest.raises(ValueError, match="not fields of Counter"):
        flow.kickoff(inputs={"nope": 1})
    with pytest.raises(ValueError, match="count"):
        flow.kickoff(inputs={"count": "not a number"})
    assert flow.state.count == 11


def test_checkpoint_and_restore_cannot_be_combined(tmp_path: Any) -> None:
    with pytest.raises(ValueError, match=r"from_checkpoint.*restore_from_state_id"):
        Typed().kickoff(
            from_checkpoint=CheckpointConfig(directory=tmp_path), restore_from_state_id="x"
        )


async def test_combination_also_rejected_by_kickoff_async(tmp_path: Any) -> None:
    with pytest.raises(ValueError, match="Cannot combine"):
        await Typed().kickoff_async(
            from_checkpoint=CheckpointConfig(directory=tmp_path), restore_from_state_id="x"
        )


def test_constructor_validates_arguments() -> None:
    with pytest.raises(ValueError, match="max_method_calls"):
        Typed(max_method_calls=0)
    with pytest.raises(TypeError, match="event_bus"):
        Typed(event_bus=object())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="clock"):
        Typed(clock=object())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="persistence"):
        Typed(persistence=object())  # type: ignore[arg-type]


def test_flow_without_start_raises_definition_error() -> None:
    class Empty(Flow):
        pass

    with pytest.raises(FlowDefinitionError, match="no @start"):
        Empty().kickoff()


def test_sync_kickoff_runs_sync_methods_inline_without_thread_hops() -> None:
    threads: set[int] = set()

    class Inline(Flow):
        @start()
        def begin(self) -> None:
            threads.add(threading.get_ident())

        @listen(begin)
        def after(self) -> None:
            threads.add(threading.get_ident())

    Inline().kickoff()
    assert threads == {threading.get_ident()}


def test_sync_kickoff_reuses_one_loop_and_starts_no_threads() -> None:
    # Flaw 4: the reference built a new event loop and thread pool per sync kickoff.
    class Mixed(Flow):
        loops: list[int] = []

        @start()
        async def begin(self) -> None:
            Mixed.loops.append(id(asyncio.get_running_loop()))

    flow = Mixed()
    flow.kickoff()
    threads_before = threading.active_count()
    for _ in range(20):
        flow.kickoff()
    Mixed().kickoff()
    assert len(set(Mixed.loops)) == 1
    assert threading.active_count() == threads_before


async def test_kickoff_async_runs_sync_methods_off_the_loop() -> None:
    loop_thread = threading.get_ident()
    ran_in: list[int] = []
    ticks: list[int] = []

    class Blocking(Flow):
        @start()
        def begin(self) -> None:
            ran_in.append(threading.get_ident())
            gate.wait(timeout=5)

    gate = threading.Event()

    async def ticker() -> None:
        ticks.append(1)  # the loop is free while the sync method blocks its thread
        gate.set()

    flow_task = asyncio.create_task(Blocking().kickoff_async())
    await asyncio.sleep(0)
    await ticker()
    await flow_task
    assert ran_in and ran_in[0] != loop_thread
    assert ticks == [1]


async def test_sync_kickoff_inside_running_loop_uses_worker_with_context() -> None:
    import contextvars

    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")
    var.set("copied")
    seen: list[str] = []

    class Ctx(Flow):
        @start()
        def begin(self) -> str:
            seen.append(var.get())
            return "done"

    assert Ctx().kickoff() == "done"
    assert seen == ["copied"]


def test_repeated_kickoffs_reuse_the_instance() -> None:
    flow = Typed()
    assert [flow.kickoff() for _ in range(3)] == [11, 22, 33]
    assert [n for n, _ in flow.method_outputs] == ["begin", "second"]


async def test_concurrent_kickoff_on_one_instance_is_refused() -> None:
    gate = asyncio.Event()

    class Slow(Flow):
        @start()
        async def begin(self) -> None:
            await gate.wait()

    flow = Slow()
    first = asyncio.create_task(flow.kickoff_async())
    await asyncio.sleep(0)
    with pytest.raises(FlowRuntimeError, match="already running"):
        await flow.kickoff_async()
    gate.set()
    await first


def test_events_sequence_and_no_state_copy() -> None:
    bus = FlowEventBus()
    clock = FakeClock(start=5.0)
    with EventRecorder(bus) as rec:
        flow = Typed(event_bus=bus, clock=clock)
        flow.kickoff()
    assert rec.kinds() == [
        "flow_started",
        "method_started",
        "method_finished",
        "method_started",
        "method_finished",
        "flow_finished",
    ]
    assert all(e.at == 5.0 and e.flow_id == flow.state.id for e in rec.events)
    for event in rec.events:  # events identify the run; they never carry the state
        assert "state" not in type(event).model_fields
    assert rec.of(MethodFinished)[0].output == 1


def test_suppress_flow_events_drops_only_method_events() -> None:
    bus = FlowEventBus()
    with EventRecorder(bus) as rec:
        Typed(event_bus=bus, suppress_flow_events=True).kickoff()
    assert rec.kinds() == ["flow_started", "flow_finished"]


def test_slow_subscribers_never_block_dispatch() -> None:
    # Flaw 12: the reference blocked up to 30 s on end-of-turn listeners.
    bus = FlowEventBus()
    release = threading.Event()
    got: list[str] = []

    def slow_sync(event: FlowEvent) -> None:
        release.wait(timeout=10)
        got.append(event.kind)

    async def slow_async(event: FlowEvent) -> None:
        await asyncio.to_thread(release.wait, 10)
        got.append("async:" + event.kind)

    bus.subscribe(slow_sync)
    bus.subscribe(slow_async)
    flow = Typed(event_bus=bus)
    assert flow.kickoff() == 11  # returned while both subscribers are still blocked
    assert got == []
    release.set()
    assert bus.flush(timeout=10)
    assert got.count("flow_finished") == 1 and got.count("async:flow_finished") == 1
    assert len(got) == 12


def test_subscriber_errors_are_contained() -> None:
    bus = FlowEventBus()

    def broken(event: FlowEvent) -> None:
        raise RuntimeError("subscriber bug")

    bus.subscribe(broken, inline=True)
    bus.subscribe(broken)
    assert Typed(event_bus=bus).kickoff() == 11
    assert bus.flush(timeout=10)


def test_subscribe_validates_arguments() -> None:
    bus = FlowEventBus()
    with pytest.raises(TypeError, match="handler"):
        bus.subscribe(42)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="event_type"):
        bus.subscribe(print, event_type=int)  # type: ignore[arg-type]

    async def handler(event: FlowEvent) -> None:
        return None

    with pytest.raises(ValueError, match="inline"):
        bus.subscribe(handler, inline=True)


class CountingState(FlowState):
    """Counts snapshots, to prove events never serialise the state."""

    blob: list[int] = list(range(1000))
    dumps: int = 0

    def model_dump(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        object.__setattr__(self, "dumps", self.dumps + 1)
        return super().model_dump(*args, **kwargs)


def test_events_never_snapshot_the_state() -> None:
    # Flaw 3: the reference deep-copied and serialised the whole state for every event.
    class Big(Flow[CountingState]):
        @start()
        def one(self) -> None:
            return None

        @listen(one)
        def two(self) -> None:
            return None

    bus = FlowEventBus()
    received: list[FlowEvent] = []
    bus.subscribe(received.append, inline=True)
    flow = Big(event_bus=bus)
    flow.kickoff()
    assert len(received) == 6
    assert flow.state.dumps == 0
