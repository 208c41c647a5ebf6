"""``spec/flow-runtime-model.txt``: the runtime model under the decorators.

That document has no Python example, only a dispatch-cycle chart; each test here runs
one behaviour it describes (names as in voxflow: ``crewai.flow`` -> ``voxflow``).
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any, Literal

import pytest

from voxflow import (
    CheckpointConfig,
    Flow,
    FlowState,
    SQLiteFlowPersistence,
    and_,
    listen,
    or_,
    persist,
    router,
    start,
)

pytestmark = pytest.mark.unit


class Notes(FlowState):
    seen: list[str] = []


def test_the_graph_comes_from_the_class_shape_and_is_built_once() -> None:
    class Shape(Flow[Notes]):
        @start()
        def begin(self) -> None: ...

        @router(begin)
        def decide(self) -> Literal["left", "right"]:
            return "left"

        @listen("left")
        def go_left(self) -> str:
            return "left"

    definition = Shape.flow_definition()
    assert definition is Shape.flow_definition()  # cached, not rebuilt per kickoff
    assert definition.starts() == ("begin",)
    assert definition.routers() == ("decide",)
    assert set(definition.methods) == {"begin", "decide", "go_left"}
    assert Shape().kickoff() == "left"
    assert Shape.flow_definition() is definition


def test_dispatch_cycle_routers_one_at_a_time_then_listeners() -> None:
    """Method complete -> router loop (a router chains into a router) -> listeners."""
    order: list[str] = []

    class Cycle(Flow[Notes]):
        @start()
        def begin(self) -> None:
            order.append("begin")

        @router(begin)
        def first_router(self) -> Literal["checked"]:
            order.append("first_router")
            return "checked"

        @router("checked")
        def second_router(self) -> Literal["approved"]:
            order.append("second_router")
            return "approved"

        @listen(begin)
        def on_begin(self) -> None:
            order.append("on_begin")

        @listen("approved")
        def on_approved(self) -> str:
            order.append("on_approved")
            return "done"

    assert Cycle().kickoff() == "done"
    # both routers ran (in chain order) before any normal listener
    assert order[:3] == ["begin", "first_router", "second_router"]
    assert set(order[3:]) == {"on_begin", "on_approved"}


def test_listeners_fan_out_as_coroutines_on_one_loop() -> None:
    threads: set[int] = set()

    class Fan(Flow[Notes]):
        @start()
        async def begin(self) -> None:
            self.a_ready = asyncio.Event()
            self.b_ready = asyncio.Event()

        @listen(begin)
        async def a(self) -> str:
            threads.add(threading.get_ident())
            self.a_ready.set()
            await asyncio.wait_for(self.b_ready.wait(), 5)  # needs b running concurrently
            return "a"

        @listen(begin)
        async def b(self) -> str:
            threads.add(threading.get_ident())
            self.b_ready.set()
            await asyncio.wait_for(self.a_ready.wait(), 5)
            return "b"

        @listen(and_(a, b))
        async def both(self) -> str:
            return "both"

    assert Fan().kickoff() == "both"
    assert len(threads) == 1  # no thread per listener


def test_and_waits_for_every_event_or_fires_once_per_cycle() -> None:
    fired: list[str] = []

    class Conditions(Flow[Notes]):
        @start()
        def begin(self) -> None: ...

        @listen(begin)
        def one(self) -> None: ...

        @listen(begin)
        def two(self) -> None: ...

        @listen(and_(one, two))
        def after_both(self) -> None:
            fired.append("and")

        @listen(or_(one, two))
        def after_either(self) -> None:
            fired.append("or")

        @listen(one)
        def also_one(self) -> None:  # one/two are shared, so this or_ does not race
            ...

    Conditions().kickoff()
    assert sorted(fired) == ["and", "or"]  # the or_ listener fired once, not twice


async def test_exclusive_or_alternatives_race_and_losers_are_cancelled() -> None:
    class Race(Flow[Notes]):
        @start()
        async def begin(self) -> None: ...

        @listen(begin)
        async def quick(self) -> str:
            return "quick"

        @listen(begin)
        async def slow(self) -> str:
            await asyncio.sleep(30)
            return "slow"

        @listen(or_(quick, slow))
        async def first(self, value: str) -> str:
            return f"first:{value}"

    flow = Race()
    assert await asyncio.wait_for(flow.kickoff_async(), 10) == "first:quick"
    assert "slow" not in flow.completed_methods


def test_kickoff_from_sync_code_and_from_inside_a_running_loop() -> None:
    class Plain(Flow[Notes]):
        @start()
        def begin(self) -> str:
            return "ran"

    assert Plain().kickoff() == "ran"

    async def inside_a_loop() -> Any:
        return Plain().kickoff()  # the escape hatch: runs elsewhere, blocks this caller

    assert asyncio.run(inside_a_loop()) == "ran"


def test_state_is_restored_before_any_start_runs(tmp_path: Path) -> None:
    store = SQLiteFlowPersistence(tmp_path / "runs.db")

    @persist(store)
    class Resumable(Flow[Notes]):
        @start()
        def begin(self) -> list[str]:
            self.state.seen.append(f"run {len(self.state.seen) + 1}")
            return list(self.state.seen)

    first = Resumable()
    assert first.kickoff() == ["run 1"]
    again = Resumable()
    # the start sees the restored state, not a fresh one
    assert again.kickoff(inputs={"id": first.state.id}) == ["run 1", "run 2"]
    # restore_from_state_id forks: the prior state under a new identity
    fork = Resumable()
    assert fork.kickoff(restore_from_state_id=first.state.id) == ["run 1", "run 2", "run 3"]
    assert fork.state.id != first.state.id


def test_from_checkpoint_and_restore_from_state_id_cannot_be_combined(tmp_path: Path) -> None:
    class Plain(Flow[Notes]):
        @start()
        def begin(self) -> None:
            raise AssertionError("nothing may run")

    with pytest.raises(ValueError, match="Cannot combine"):
        Plain().kickoff(
            from_checkpoint=CheckpointConfig(directory=tmp_path), restore_from_state_id="x"
        )


def test_an_awaited_action_is_just_the_method_result() -> None:
    """A method may await other work (a crew, another flow): the engine awaits it."""

    class Inner(Flow[Notes]):
        @start()
        async def work(self) -> str:
            await asyncio.sleep(0)
            return "inner result"

    class Outer(Flow[Notes]):
        @start()
        async def delegate(self) -> str:
            return str(await Inner().kickoff_async())

        @listen(delegate)
        def use(self, value: str) -> str:
            return f"got {value}"

    assert Outer().kickoff() == "got inner result"


def test_a_state_whose_id_defaults_to_empty_gets_one_and_persists(tmp_path: Path) -> None:
    """Issue 15 item 4 (done by harden-persist): an empty ``id`` is given a fresh uuid,
    so ``@persist`` saves the method's work instead of failing after it ran."""
    from uuid import UUID

    from pydantic import BaseModel

    class Counter(BaseModel):
        id: str = ""
        count: int = 0

    @persist(SQLiteFlowPersistence(tmp_path / "runs.db"))
    class Count(Flow[Counter]):
        @start()
        def bump(self) -> int:
            self.state.count += 1
            return self.state.count

    flow = Count()
    assert flow.kickoff() == 1
    UUID(flow.state.id)
    assert Count().kickoff(inputs={"id": flow.state.id}) == 2  # the first run was saved
    given = Count(state=Counter())
    UUID(given.state.id)
    assert given.state.id != flow.state.id
