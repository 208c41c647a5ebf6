"""The documented hooks the conversational layer builds on, and a light import."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel

from voxflow import Flow, listen, router, start
from voxflow.flow import FlowEventBus
from voxflow.testing import EventRecorder


@start()
@router()
def _route_builtin(self: Flow[Any]) -> str:
    return "layer_reply"


@listen("layer_reply")
def _converse_builtin(self: Flow[Any]) -> str:
    return "reply"


class LayerBase(Flow):
    """What a layer on top does: register built-ins, run starts sequentially."""

    _sequential_starts = True

    @classmethod
    def _extra_flow_methods(cls) -> Mapping[str, Callable[..., Any]]:
        return {"route_layer": _route_builtin, "layer_turn": _converse_builtin}

    def _order_starts(self, names: list[str]) -> list[str]:
        return [n for n in names if n != "route_layer"] + ["route_layer"]

    def _emit_flow_finished(self) -> bool:
        return False


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
