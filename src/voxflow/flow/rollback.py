"""Rollback points: put a flow's live state back as it was, in memory and in storage.

Some work runs on the live state before it is known to be wanted: a voice session
answers a turn speculatively, in the user's pause, before the end of the turn is
confirmed. If the user speaks on, that turn must leave no trace: not in the history the
next LLM call sees, not in the turn and reply records, not in a persisted snapshot.

:meth:`RollbackPoint.take` copies the state (frozen items such as conversation messages
are shared, not copied: they can never change); :meth:`RollbackPoint.restore` puts the
copy back into the *same* state object (everything holding the flow or its state keeps
working) and, when the flow persists, saves it at once, so a snapshot written by the
discarded work is superseded before anyone can load it.

**Work of others is kept.** A rollback undoes the flow's own work, never what other
work recorded meanwhile: a state class names what it keeps with a
``__rollback_keep__(restored, live)`` static method, called with the restored state and
the live field values at the time of the restore (every one found in the state's class
hierarchy is called). ``JobState`` keeps the updates its jobs' workers committed (a
job's result that arrived during a speculative turn is not lost when that turn is
undone), ``ReplyQueueState`` the announcement queue and the speaking floor. So a voice
session holds its state lock only while the speculative turn runs, not while it waits
for its verdict.

Example::

    point = RollbackPoint.take(flow)
    try:
        await run_speculative_turn()
    except Discarded:
        await point.restore()
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from voxflow.flow.runtime import Flow

__all__ = ["RollbackPoint"]

_MODEL_SLOTS = ("__dict__", "__pydantic_extra__", "__pydantic_fields_set__",
                "__pydantic_private__")


class RollbackPoint:
    """A private copy of a flow's state, to restore in place once.

    Args:
        flow: the flow whose state is copied now.
        copy_state: the copy (use :meth:`take`).
    """

    __slots__ = ("_copy", "_flow", "_state", "_used")

    def __init__(self, flow: Flow[Any], copy_state: Any) -> None:
        self._flow = flow
        self._state = flow.state
        self._copy = copy_state
        self._used = False

    @classmethod
    def take(cls, flow: Flow[Any]) -> RollbackPoint:
        """Copy ``flow``'s state now (pydantic model or dict).

        Raises:
            TypeError: ``flow`` is not a Flow, or its state is neither a pydantic model
                nor a dict.
        """
        if not isinstance(flow, Flow):
            raise TypeError(f"flow must be a Flow, got {type(flow).__name__}")
        state = flow.state
        if not isinstance(state, BaseModel | dict):
            raise TypeError(f"state must be a pydantic model or a dict, got {type(state).__name__}")
        return cls(flow, copy.deepcopy(state, _frozen_items(state)))

    @property
    def used(self) -> bool:
        """Whether :meth:`restore` was called."""
        return self._used

    async def restore(self, keep: Callable[[Any], None] | None = None) -> None:
        """Put the copied state back into the live state object; save it if persisted.

        Args:
            keep: called with the restored state before it is saved, to put back what
                must outlive the rollback (records of what the user heard): one save,
                so no stored snapshot ever lacks them.

        Raises:
            RuntimeError: already restored (a point is used once), or the flow's state
                object was replaced since :meth:`take`.
        """
        if self._used:
            raise RuntimeError("a RollbackPoint restores once")
        state = self._flow.state
        if state is not self._state:
            raise RuntimeError("the flow's state object was replaced since the point was taken")
        self._used = True
        if isinstance(state, dict):
            state.clear()
            state.update(self._copy)
        else:
            live = dict(state.__dict__)
            for slot in _MODEL_SLOTS:
                object.__setattr__(state, slot, getattr(self._copy, slot))
            for cls in type(state).__mro__:  # what other work recorded meanwhile
                hook = cls.__dict__.get("__rollback_keep__")
                if isinstance(hook, staticmethod):
                    hook(state, live)
        if keep is not None:
            keep(state)
        # A save of the undone work may still be running in its thread (its turn was
        # cancelled mid-save): asave_state lets it land first, so it cannot overwrite this.
        await self._flow.asave_state("rollback")

    def __repr__(self) -> str:
        return f"RollbackPoint(state={type(self._state).__name__}, used={self._used})"


def _frozen_items(state: BaseModel | dict[str, Any]) -> dict[int, Any]:
    """A deepcopy memo that shares the frozen models held in the state's top-level lists
    (e.g. conversation messages): copying them would cost time and change nothing."""
    values = state.values() if isinstance(state, dict) else state.__dict__.values()
    memo: dict[int, Any] = {}
    for value in values:
        if isinstance(value, list):
            for item in value:
                if isinstance(item, BaseModel) and item.model_config.get("frozen"):
                    memo[id(item)] = item
    return memo
