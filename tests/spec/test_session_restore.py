"""Issue 15 item 1: restoring a session runs no turn handler a second time.

The reference re-runs the last turn's handler from the restored ``current_user_message``
when ``kickoff(inputs={"id": ...})`` restores a conversational session (its side effects
happen twice), and calls a handler with ``None`` for a new id. voxflow routes only a
user message received since the last routing; ``load_session`` loads without running
anything.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from voxflow import ConversationState, Flow, SQLiteFlowPersistence, listen, persist, start
from voxflow.errors import FlowRuntimeError
from voxflow.flow import FlowEventBus
from voxflow.testing import EventRecorder

pytestmark = pytest.mark.unit


class Effects:
    """The outside world a handler acts on (each call is a side effect)."""

    def __init__(self) -> None:
        self.orders: list[str | None] = []
        self.starts = 0


def make_flow(path: Path, effects: Effects, *, with_start: bool = False) -> type[Any]:
    backend = SQLiteFlowPersistence(path)

    @persist(backend)
    class Shop(Flow[ConversationState]):
        conversational = True

        def route_turn(self, context: Any) -> str | None:
            return "order"

        @listen("order")
        def handle_order(self) -> str:
            effects.orders.append(self.state.current_user_message)
            return f"ordered {len(effects.orders)}"

    if not with_start:
        return Shop

    class ShopWithStart(Shop):
        @start()
        def bootstrap(self) -> None:
            effects.starts += 1

    return ShopWithStart


def test_kickoff_restoring_a_session_does_not_rerun_the_answered_turn(tmp_path: Path) -> None:
    effects = Effects()
    shop = make_flow(tmp_path / "s.db", effects)
    first = shop()
    assert first.handle_turn("two teas", session_id="s1") == "ordered 1"
    assert effects.orders == ["two teas"]

    restored = shop()
    result = restored.kickoff(inputs={"id": "s1"})
    assert effects.orders == ["two teas"]  # the handler did not run again
    assert result is None  # no route was selected
    assert restored.state.id == "s1"
    assert [(m.role, m.content) for m in restored.state.messages] == [
        ("user", "two teas"),
        ("assistant", "ordered 1"),
    ]
    assert "handle_order" not in restored.completed_methods
    # the restored instance goes on with the conversation normally
    assert restored.handle_turn("and a cake", session_id="s1") == "ordered 2"
    assert effects.orders == ["two teas", "and a cake"]
    assert len(restored.state.messages) == 4


def test_kickoff_with_a_new_id_calls_no_handler_with_no_message(tmp_path: Path) -> None:
    effects = Effects()
    shop = make_flow(tmp_path / "s.db", effects)
    flow = shop()
    assert flow.kickoff(inputs={"id": "brand-new"}) is None
    assert effects.orders == []  # the reference called handle_order with None here
    assert flow.state.id == "brand-new"
    assert flow.state.messages == []
    assert flow.state.last_intent is None


def test_user_starts_still_run_on_kickoff_but_no_handler(tmp_path: Path) -> None:
    effects = Effects()
    shop = make_flow(tmp_path / "s.db", effects, with_start=True)
    shop().handle_turn("tea", session_id="s1")
    assert (effects.starts, effects.orders) == (1, ["tea"])
    shop().kickoff(inputs={"id": "s1"})
    assert (effects.starts, effects.orders) == (2, ["tea"])


def test_a_message_received_before_kickoff_is_routed_once(tmp_path: Path) -> None:
    """The lower-level pattern: receive_user_message, then kickoff, answers that message."""
    effects = Effects()
    flow = make_flow(tmp_path / "s.db", effects)()
    flow.receive_user_message("one coffee")
    assert flow.kickoff() == "ordered 1"
    assert effects.orders == ["one coffee"]
    flow.kickoff()  # nothing new was received: nothing is answered again
    assert effects.orders == ["one coffee"]


def test_load_session_runs_nothing_and_the_next_turn_continues(tmp_path: Path) -> None:
    effects = Effects()
    shop = make_flow(tmp_path / "s.db", effects, with_start=True)
    shop().handle_turn("tea", session_id="s1")
    assert (effects.starts, effects.orders) == (1, ["tea"])

    bus = FlowEventBus()
    flow = shop(event_bus=bus)
    with EventRecorder(bus) as recorder:
        assert flow.load_session("s1") is True
    assert recorder.events == []  # no run, no event
    assert (effects.starts, effects.orders) == (1, ["tea"])  # no start, no handler
    assert flow.state.id == "s1"
    assert [m.content for m in flow.state.messages] == ["tea", "ordered 1"]
    assert flow.state.current_user_message == "tea"

    assert flow.handle_turn("cake", session_id="s1") == "ordered 2"
    assert [m.content for m in flow.state.messages] == ["tea", "ordered 1", "cake", "ordered 2"]
    # and what it saved is the whole conversation
    again = shop()
    assert again.load_session("s1") is True
    assert [m.content for m in again.state.messages] == ["tea", "ordered 1", "cake", "ordered 2"]


def test_load_session_of_an_unknown_id_gives_a_fresh_state(tmp_path: Path) -> None:
    effects = Effects()
    shop = make_flow(tmp_path / "s.db", effects)
    flow = shop()
    flow.handle_turn("tea", session_id="s1")
    assert flow.load_session("nobody") is False
    assert flow.state.id == "nobody"
    assert flow.state.messages == []
    assert flow.handle_turn("hello", session_id="nobody") == "ordered 2"
    assert [m.content for m in flow.state.messages] == ["hello", "ordered 2"]


async def test_aload_session(tmp_path: Path) -> None:
    effects = Effects()
    shop = make_flow(tmp_path / "s.db", effects)
    await shop().ahandle_turn("tea", session_id="s1")
    flow = shop()
    assert await flow.aload_session("s1") is True
    assert [m.content for m in flow.state.messages] == ["tea", "ordered 1"]
    assert effects.orders == ["tea"]


def test_load_session_rejects_bad_input_and_changes_nothing(tmp_path: Path) -> None:
    effects = Effects()
    flow = make_flow(tmp_path / "s.db", effects)()
    flow.handle_turn("tea", session_id="s1")
    before = flow.state.model_dump()
    for bad in ("", None, 3):
        with pytest.raises(ValueError, match="session_id"):
            flow.load_session(bad)  # type: ignore[arg-type]
    assert flow.state.model_dump() == before

    class Plain(Flow[ConversationState]):
        conversational = True

    with pytest.raises(ValueError, match=r"@persist\(\)"):
        Plain().load_session("s1")


def test_load_session_during_a_run_is_refused(tmp_path: Path) -> None:
    errors: list[Exception] = []

    @persist(SQLiteFlowPersistence(tmp_path / "s.db"))
    class Busy(Flow[ConversationState]):
        @start()
        def begin(self) -> str:
            try:
                self.load_session("other")
            except FlowRuntimeError as exc:
                errors.append(exc)
            return self.state.id

    flow = Busy()
    own_id = flow.state.id
    assert flow.kickoff() == own_id  # the state was not replaced mid-run
    assert len(errors) == 1 and "in progress" in str(errors[0])
