"""Flow state: one live object shared by every method of a run.

A state is either a pydantic model with an ``id`` field (subclass :class:`FlowState`) or a
plain ``dict`` carrying an ``"id"`` key. The ``id`` identifies the run across persistence
(``@persist`` saves under it, ``kickoff(inputs={"id": ...})`` restores it).

The helpers here are what the runtime, persistence and checkpoints need to read, dump,
restore and merge a state of either shape without caring which one it is.
"""

from __future__ import annotations

import copy
import typing
import uuid
from collections.abc import Mapping
from typing import Any, TypeAlias

from pydantic import BaseModel, ConfigDict, Field
from pydantic_core import to_jsonable_python

from voxflow.errors import FlowDefinitionError

__all__ = [
    "FlowState",
    "StateLike",
    "checked_state",
    "dump_state",
    "fresh_state",
    "generic_state_model",
    "load_state_like",
    "merge_inputs",
    "new_state_id",
    "stamp_id",
    "state_id",
]

StateLike: TypeAlias = "BaseModel | dict[str, Any]"
"""What a Flow's state may be."""


def new_state_id() -> str:
    """A fresh state identity (uuid4)."""
    return str(uuid.uuid4())


class FlowState(BaseModel):
    """Base class for typed flow state; provides the ``id`` every state needs."""

    model_config = ConfigDict(defer_build=True)  # validators built on first use: light import

    id: str = Field(default_factory=new_state_id, description="identity of the run/session")


def state_id(state: StateLike) -> str:
    """The ``id`` of a state of either shape."""
    if isinstance(state, dict):
        return str(state.get("id", ""))
    return str(state.id)  # type: ignore[attr-defined]


def stamp_id(state: StateLike, value: str) -> None:
    """Set the state's ``id`` in place."""
    if isinstance(state, dict):
        state["id"] = value
    else:
        state.id = value  # type: ignore[attr-defined]


def dump_state(state: StateLike) -> dict[str, Any]:
    """A JSON-compatible snapshot of the state (a copy; used for persistence only)."""
    if isinstance(state, dict):
        dumped = to_jsonable_python(state, fallback=repr)
        assert isinstance(dumped, dict)
        return dumped
    return state.model_dump(mode="json")


def load_state_like(template: StateLike, data: Mapping[str, Any]) -> StateLike:
    """Build a new state of ``template``'s shape from a snapshot ``data``."""
    if isinstance(template, dict):
        return copy.deepcopy(dict(data))
    return type(template).model_validate(dict(data))


def merge_inputs(state: StateLike, inputs: Mapping[str, Any]) -> StateLike:
    """Merge kickoff ``inputs`` into ``state`` in place and return it.

    For a model the merge is validated first (a bad value raises pydantic's
    ``ValidationError``, a ``ValueError`` naming the field), so the state is left
    untouched on error.
    """
    if not inputs:
        return state
    if isinstance(state, dict):
        state.update(inputs)
        return state
    model = type(state)
    unknown = [k for k in inputs if k not in model.model_fields]
    extra = model.model_config.get("extra")
    if unknown and extra != "allow":
        raise ValueError(
            f"inputs: {sorted(unknown)} are not fields of {model.__name__} "
            f"(fields: {sorted(model.model_fields)})"
        )
    merged = model.model_validate({**state.model_dump(), **inputs})
    # Copy the validated values onto the live object, so references taken before the
    # kickoff (e.g. ``flow.state``) keep seeing the run's state.
    for key in inputs:
        if key in model.model_fields:
            setattr(state, key, getattr(merged, key))
    return state


def generic_state_model(cls: type, root: type) -> type[BaseModel] | None:
    """The pydantic model given as ``root``'s generic parameter in ``cls``'s bases
    (``class Chat(Flow[MyState])``), or None."""
    for klass in cls.__mro__:
        for base in getattr(klass, "__orig_bases__", ()):
            origin = typing.get_origin(base)
            if isinstance(origin, type) and issubclass(origin, root):
                for arg in typing.get_args(base):
                    if isinstance(arg, type) and issubclass(arg, BaseModel):
                        return arg
    return None


def fresh_state(default: Any, flow: str) -> StateLike:
    """A fresh state from a Flow's ``initial_state`` (a model class, a model or a dict,
    copied) or, when None, a dict with a fresh id.

    Raises:
        FlowDefinitionError: ``default`` is none of these (``flow`` names the class).
    """
    if default is None:
        return {"id": new_state_id()}
    if isinstance(default, type) and issubclass(default, BaseModel):
        return checked_state(default())
    if isinstance(default, BaseModel):
        return checked_state(default.model_copy(deep=True))
    if isinstance(default, dict):
        return checked_state(copy.deepcopy(default))
    raise FlowDefinitionError(
        f"{flow}.initial_state must be a pydantic model class, a model or a dict", flow=flow
    )


def checked_state(state: Any) -> StateLike:
    """``state`` with an id (an empty one gets a fresh one: persistence saves under it).

    Raises:
        TypeError: neither a pydantic model with an ``id`` field nor a dict.
    """
    if isinstance(state, dict):
        if state.get("id") in (None, ""):
            state["id"] = new_state_id()
    elif isinstance(state, BaseModel):
        if "id" not in type(state).model_fields:
            raise TypeError(
                f"state: {type(state).__name__} has no 'id' field; subclass voxflow.FlowState"
            )
        if state.id in (None, ""):  # type: ignore[attr-defined]
            stamp_id(state, new_state_id())
    else:
        raise TypeError("state must be a pydantic model (with an id) or a dict")
    result: StateLike = state
    return result
