"""The part interface the conversational layer builds on, and a light import."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from voxflow import ConversationConfig, Flow, SQLiteFlowPersistence, listen, persist, router, start
from voxflow.errors import FlowDefinitionError
from voxflow.flow import Flow as CoreFlow
from voxflow.flow import FlowEventBus
from voxflow.flow.parts import FlowPart
from voxflow.testing import EventRecorder


@start()
@router()
def _route_builtin(self: Flow[Any]) -> str:
    return "layer_reply"


@listen("layer_reply")
def _converse_builtin(self: Flow[Any]) -> str:
    return "reply"


class Layer(FlowPart):
    """What a layer on top does: register built-ins, run starts in order, defer the end."""

    attribute = "layer"

    @classmethod
    def extra_methods(cls, flow_cls: type[Any]) -> Mapping[str, Callable[..., Any]]:
        return {"route_layer": _route_builtin, "layer_turn": _converse_builtin}

    def order_starts(self, names: list[str]) -> list[str] | None:
        return [n for n in names if n != "route_layer"] + ["route_layer"]

    def emits_flow_finished(self) -> bool:
        return False


class LayerBase(CoreFlow[Any], parts=(Layer,)):
    """A layer built on the core holds its part; it needs nothing of the conversation."""


class Chat(LayerBase):
    order: list[str] = []

    @start()
    def bootstrap(self) -> None:
        Chat.order.append("bootstrap")


def test_extra_methods_sequential_starts_and_deferred_finish() -> None:
    definition = Chat.flow_definition()
    assert {"route_layer", "layer_turn", "bootstrap"} <= set(definition.methods)
    assert Chat.route_layer is _route_builtin  # installed by the hook
    bus = FlowEventBus()
    with EventRecorder(bus) as rec:
        flow = Chat(event_bus=bus)
        assert isinstance(flow.layer, Layer)  # held under its attribute name
        assert flow.kickoff() == "reply"
    assert rec.methods("method_started")[:2] == ["bootstrap", "route_layer"]
    assert "flow_finished" not in rec.kinds()


class TurnStarted(BaseModel):
    kind: str = "conversation_turn_started"
    flow_id: str


def test_custom_events_share_the_bus_and_reset_execution() -> None:
    bus = FlowEventBus()
    flow = Chat(event_bus=bus, suppress_flow_events=True)
    with EventRecorder(bus, flow_id=flow.flow_id) as rec:
        flow.event_bus.emit(TurnStarted(flow_id=flow.flow_id))
        flow.kickoff()
    assert rec.kinds() == ["conversation_turn_started", "flow_started"]
    assert flow.completed_methods
    flow.reset_execution()
    assert flow.completed_methods == frozenset() and flow.method_outputs == []


def test_import_is_light_and_offline() -> None:
    # Flaw 5: the reference imported thousands of modules and made network calls.
    code = (
        "import sys, json, voxflow; "
        "print(json.dumps(sorted(m for m in ('litellm', 'numpy', 'sqlite3', 'rich', "
        "'faster_whisper', 'aiohttp', 'httpx') if m in sys.modules)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert json.loads(out.stdout) == []


def test_the_flow_core_loads_no_conversation_and_voxflow_flow_builds_on_it() -> None:
    """Conversation builds on the core (issue 19): importing the core loads none of it."""
    code = (
        "import sys, json, voxflow.flow; "
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('voxflow.conversation'))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert json.loads(out.stdout) == []
    assert issubclass(Flow, CoreFlow) and Flow is not CoreFlow
    assert not hasattr(CoreFlow, "handle_turn") and hasattr(Flow, "handle_turn")


def test_a_conversational_class_on_the_core_is_refused_with_the_fix() -> None:
    with pytest.raises(FlowDefinitionError, match=r"subclass voxflow\.Flow"):

        class Chatty(CoreFlow):  # type: ignore[type-arg]
            conversational = True

            @start()
            def begin(self) -> None:
                pass

    class Plain(CoreFlow):  # type: ignore[type-arg]
        @start()
        def begin(self) -> str:
            return "done"

    with pytest.raises(FlowDefinitionError, match=r"subclass voxflow\.Flow"):
        ConversationConfig(system_prompt="")(Plain)
    assert Plain().kickoff() == "done"


def test_the_core_saves_a_full_snapshot_through_its_save_hook(tmp_path: Path) -> None:
    """The core's default ``_prepare_state_save``: ``save_state`` with the whole state."""
    backend = SQLiteFlowPersistence(tmp_path / "core.db")

    @persist(backend)
    class Counter(CoreFlow[dict[str, Any]]):
        @start()
        def bump(self) -> int:
            self.state["count"] = self.state.get("count", 0) + 1
            return int(self.state["count"])

    flow = Counter()
    assert flow.kickoff() == 1
    assert backend.load_state(flow.flow_id) == {"id": flow.flow_id, "count": 1}
    again = Counter()
    assert again.kickoff(inputs={"id": flow.flow_id}) == 2
    assert backend.load_state(flow.flow_id) == {"id": flow.flow_id, "count": 2}
    backend.close()


class Restoring(FlowPart):
    """A part that holds a session's state live: ``inputs["id"]`` restores nothing."""

    attribute = "restoring"

    def skips_restore(self, flow_id: str) -> bool:
        return flow_id == "live"


class Counted(CoreFlow[dict[str, Any]], parts=(Restoring,)):
    @start()
    def bump(self) -> int:
        self.state["count"] = self.state.get("count", 0) + 1
        return int(self.state["count"])


def test_a_part_that_holds_the_state_live_skips_the_restore(tmp_path: Path) -> None:
    backend = SQLiteFlowPersistence(tmp_path / "live.db")
    backend.save_state("live", "seed", {"id": "live", "count": 10})
    backend.save_state("stored", "seed", {"id": "stored", "count": 10})
    assert Counted(persistence=backend).kickoff(inputs={"id": "stored"}) == 11  # restored
    flow = Counted(persistence=backend)
    flow.state["count"] = 1
    assert flow.kickoff(inputs={"id": "live"}) == 2  # the live state, not the stored one
    backend.close()


def test_parts_are_checked_when_the_class_is_created() -> None:
    with pytest.raises(FlowDefinitionError, match="FlowPart subclasses"):

        class NotAPart(CoreFlow[Any], parts=(object,)):  # type: ignore[arg-type]
            pass

    with pytest.raises(FlowDefinitionError, match="two parts under one attribute"):

        class Twice(LayerBase, parts=(Layer,)):
            pass

    class Hiding(FlowPart):
        attribute = "kickoff"

    with pytest.raises(FlowDefinitionError, match=r"would hide HidesKickoff\.kickoff"):

        class HidesKickoff(CoreFlow[Any], parts=(Hiding,)):
            pass


def test_a_subclass_may_not_name_an_attribute_its_inherited_parts_are_held_under() -> None:
    """voxflow.Flow holds its Conversation part under ``conversation``: a method of that
    name in a user's flow would be hidden by the part on every instance, silently."""
    with pytest.raises(FlowDefinitionError, match=r"Mine\.conversation: Mine holds its"):

        class Mine(Flow[Any]):
            @start()
            def begin(self) -> None:
                pass

            def conversation(self) -> str:
                return "mine"

    with pytest.raises(FlowDefinitionError, match=r"Deeper\.layer: Deeper holds its"):

        class Deeper(LayerBase):
            layer = "a value"

    class Mixin:
        def conversation(self) -> str:
            return "the mixin's"

    with pytest.raises(FlowDefinitionError,
                       match=r"Mixin \(a base of Mixed\)\.conversation: Mixed holds its"):

        class Mixed(Mixin, Flow[Any]):
            @start()
            def begin(self) -> None:
                pass
