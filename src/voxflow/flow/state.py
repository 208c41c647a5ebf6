"""Flow state: one live object shared by every method of a run.

A state is either a pydantic model with an ``id`` field (subclass :class:`FlowState`) or a
plain ``dict`` carrying an ``"id"`` key. The ``id`` identifies the run across persistence
(``@persist`` saves under it, ``kickoff(inputs={"id": ...})`` restores it).

The helpers here are what the runtime, persistence and checkpoints need to read, dump,
restore and merge a state of either shape without caring which one it is.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Mapping
from typing import Any, TypeAlias

from pydantic import BaseModel, ConfigDict, Field
from pydantic_core import to_jsonable_python

__all__ = [
    "FlowState",
    "StateLike",
    "dump_state",
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
