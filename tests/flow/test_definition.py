"""Definition: compiled from class metadata, inherited through the MRO, validated."""

from __future__ import annotations

import enum
from typing import Literal

import pytest

from voxflow import Flow, FlowDefinition, and_, listen, or_, router, start
from voxflow.errors import FlowDefinitionError


class Base(Flow):
    @start()
    def begin(self) -> str:
        return "base"

    @listen(begin)
    def middle(self, value: str) -> str:
        return value + "-middle"


class Child(Base):
    @listen("middle")
    def finish(self, value: str) -> str:
        return value + "-finish"


class Overrides(Base):
    def middle(self, value: str) -> str:  # no decorator: keeps the base wiring
        return value + "-overridden"


class Mixin:
    @listen("begin")
    def from_mixin(self) -> str:
        return "mixin"


class WithMixin(Mixin, Base):
    pass


def test_definition_is_cached_per_class() -> None:
    assert Child.flow_definition() is Child.flow_definition()
    assert isinstance(Child.flow_definition(), FlowDefinition)
    assert Child.flow_definition() is not Base.flow_definition()


def test_base_class_methods_are_registered_on_subclass() -> None:
    # Flaw 1 of the reference: base-class methods were silently not registered.
    definition = Child.flow_definition()
    assert list(definition.methods) == ["begin", "middle", "finish"]
    assert Child().kickoff() == "base-middle-finish"


def test_override_without_decorator_keeps_the_wiring() -> None:
    flow = Overrides()
    assert flow.kickoff() == "base-overridden"
    assert Overrides.flow_definition().methods["middle"].listen is not None


def test_mixin_methods_are_registered() -> None:
    flow = WithMixin()
    flow.kickoff()
    assert "from_mixin" in flow.completed_methods


def test_listening_to_own_name_is_rejected() -> None:
    with pytest.raises(FlowDefinitionError) as info:

        class Bad(Flow):
            @start()
            def begin(self) -> None: ...

            @listen(or_("begin", and_("x", "order")))
            def order(self) -> None: ...

    assert info.value.flow == "Bad"
    assert info.value.method == "order"
    assert info.value.label == "order"
    assert "own name" in str(info.value)


@pytest.mark.parametrize("trigger", ["", "   ", and_(), or_()])
def test_empty_trigger_is_rejected(trigger: object) -> None:
    with pytest.raises(FlowDefinitionError) as info:

        class Bad(Flow):
            @start()
            def begin(self) -> None: ...

            @listen(trigger)  # type: ignore[arg-type]
            def handler(self) -> None: ...

    assert info.value.method == "handler"
    assert "Bad.handler" in str(info.value)


def test_non_label_trigger_member_is_rejected() -> None:
    with pytest.raises(FlowDefinitionError, match="is not a label"):

        class Bad(Flow):
            @start()
            def begin(self) -> None: ...

            @listen(or_("begin", 42))  # type: ignore[arg-type]
            def handler(self) -> None: ...


def test_non_callable_decorated_object_is_rejected() -> None:
    with pytest.raises(FlowDefinitionError) as info:

        class Bad(Flow):
            @start()
            def begin(self) -> None: ...

            not_a_method = listen("begin")(42)  # type: ignore[type-var]

    assert info.value.flow == "Bad"
    assert info.value.method == "not_a_method"
    assert "non-callable" in str(info.value)


def test_router_without_trigger_is_rejected() -> None:
    with pytest.raises(FlowDefinitionError, match="needs a trigger"):

        class Bad(Flow):
            @start()
            def begin(self) -> None: ...

            @router()
            def route(self) -> str:
                return "x"


def test_literal_label_equal_to_method_name_is_rejected_at_class_creation() -> None:
    # Flaw 2 of the reference: this double-fired at run time.
    with pytest.raises(FlowDefinitionError) as info:

        class Bad(Flow):
            @start()
            def begin(self) -> None: ...

            @router(begin)
            def decide(self) -> Literal["ok", "y"]:
                return "y"

            @listen("ok")
            def y(self) -> None: ...

    assert (info.value.flow, info.value.method, info.value.label) == ("Bad", "decide", "y")


def test_explicit_labels_equal_to_method_name_are_rejected() -> None:
    with pytest.raises(FlowDefinitionError) as info:

        class Bad(Flow):
            @start()
            def begin(self) -> None: ...

            @router(begin, paths=["fine", "y"])
            def decide(self) -> str:
                return "fine"

            @listen("fine")
            def y(self) -> None: ...

    assert info.value.label == "y"


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


def test_enum_annotation_declares_labels() -> None:
    with pytest.raises(FlowDefinitionError) as info:

        class Bad(Flow):
            @start()
            def begin(self) -> None: ...

            @router(begin)
            def decide(self) -> Color:
                return Color.RED

            @listen(decide)
            def red(self) -> None: ...

    assert info.value.label == "red"


def test_router_labels_are_recorded() -> None:
    class Good(Flow):
        @start()
        def begin(self) -> None: ...

        @router(begin)
        def decide(self) -> Literal["left", "right"] | None:
            return "left"

    assert Good.flow_definition().methods["decide"].labels == ("left", "right")


def test_router_arguments_are_validated() -> None:
    with pytest.raises(ValueError, match="labels= or paths="):
        router("x", labels=["a"], paths=["b"])
    with pytest.raises(TypeError, match="labels must be a list"):
        router("x", labels="a")


def test_state_model_without_id_is_rejected() -> None:
    from pydantic import BaseModel

    class NoId(BaseModel):
        value: int = 0

    class F(Flow[NoId]):  # type: ignore[type-var]
        @start()
        def begin(self) -> None: ...

    with pytest.raises(TypeError, match="no 'id' field"):
        F()
