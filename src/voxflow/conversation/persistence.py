"""How a conversational flow is saved: only what the turn appended, whatever the length.

A conversation's history only grows: ``state.messages`` and ``state.events`` are
append-only. :class:`~voxflow.flow.persistence.SQLiteFlowPersistence` (the default
``@persist`` backend) stores those two lists one row per item and the rest of the state
as a small snapshot, and offers ``save_state_delta``. :func:`prepare_state_save` (the
``_prepare_state_save`` hook of a conversational flow) uses it: a save after turn 1,000
writes the turn's new messages plus a few hundred bytes, not the whole transcript, in
one transaction. Loading reassembles the full state, so ``load_state`` returns exactly
what was saved. Any other :class:`~voxflow.flow.persistence.FlowPersistence` (without
``save_state_delta``) still gets full snapshots.

When a save is a full one (the state is re-dumped and every item rewritten):

* the first save of a Flow instance to a backend that did not restore the session from
  it (a turn that restores marks the restored lists as saved: :func:`remember_restored`);
* ``state.messages``/``state.events`` was reassigned or shrank (e.g. a trimmed history);
* one of the last :data:`CHECKED_TAIL` saved items was replaced in place (e.g. an
  interrupted assistant reply cut to what the user heard); replacing an older item in
  place is not detected: reassign the list instead (``state.messages = [...]``).

One writer per session at a time, as with any snapshot store. If another writer saved
the session since (the stored counts differ), the backend refuses the delta and the
save falls back to a full one: the last writer wins, as with plain snapshots, and the
stored history never has gaps.

``SQLiteConversationPersistence`` is the same class as ``SQLiteFlowPersistence``, kept
as a name for code written when the item-wise store was opt-in.

Example::

    @persist()  # the default SQLite backend saves conversations incrementally
    class Support(Flow[ConversationState]): ...
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from voxflow.conversation.state import ConversationState
from voxflow.flow.persistence import APPEND_ONLY_FIELDS, LISTS_KEY, SQLiteFlowPersistence
from voxflow.flow.state import dump_state

__all__ = [
    "APPEND_ONLY_FIELDS",
    "CHECKED_TAIL",
    "LISTS_KEY",
    "SQLiteConversationPersistence",
    "SavedLists",
    "prepare_state_save",
    "remember_restored",
]

SQLiteConversationPersistence = SQLiteFlowPersistence
"""The default backend (the item-wise store is built in); kept as a name."""

CHECKED_TAIL = 8
"""How many of the last saved items of each list are checked for in-place replacement."""


@dataclasses.dataclass(frozen=True, slots=True)
class _ListMark:
    """What one list looked like at the last successful save."""

    list_id: int
    length: int
    tail: tuple[Any, ...]  # the last CHECKED_TAIL items (the objects, compared by identity)

    @classmethod
    def of(cls, items: list[Any]) -> _ListMark:
        return cls(id(items), len(items), tuple(items[-CHECKED_TAIL:]))

    def appended_to(self, items: list[Any]) -> bool:
        """True when ``items`` is the saved list with items only appended since."""
        n = self.length
        if id(items) != self.list_id or len(items) < n:
            return False
        tail = self.tail
        start = n - len(tail)
        return all(items[start + i] is old for i, old in enumerate(tail))


SavedLists = dict[tuple[int, str], tuple[_ListMark, ...]]
"""Per ``(id(backend), flow_id)``: the lists' marks at the last successful save."""


def prepare_state_save(
    state: Any, flow_id: str, backend: Any, method_name: str, saved: SavedLists
) -> Callable[[], None]:
    """Snapshot ``state`` now (on the loop) and return the blocking write.

    Args:
        state: the flow's state; only a :class:`ConversationState` is saved incrementally.
        flow_id: the session id to save under.
        backend: a ``FlowPersistence``; incremental only if it has ``save_state_delta``.
        method_name: the method that triggered the save.
        saved: the flow instance's marks, updated once a write succeeds.
    """
    delta = getattr(backend, "save_state_delta", None)
    if delta is None or not isinstance(state, ConversationState):
        data = dump_state(state)
        return lambda: backend.save_state(flow_id, method_name, data)
    key = (id(backend), flow_id)
    lists = [getattr(state, f) for f in APPEND_ONLY_FIELDS]
    marks = tuple(_ListMark.of(items) for items in lists)
    previous = saved.get(key)

    def remember() -> None:
        saved[key] = marks

    if previous is not None and all(
        mark.appended_to(items) for items, mark in zip(lists, previous, strict=True)
    ):
        snapshot = state.model_dump(mode="json", exclude=set(APPEND_ONLY_FIELDS))
        appended = {
            field: [item.model_dump(mode="json") for item in items[old.length :]]
            for field, items, old in zip(APPEND_ONLY_FIELDS, lists, previous, strict=True)
        }
        counts = {f: old.length for f, old in zip(APPEND_ONLY_FIELDS, previous, strict=True)}

        def write_delta() -> None:
            saved.pop(key, None)  # a failed write leaves no marks: the next save is full
            if not delta(flow_id, method_name, snapshot, appended, counts):
                # Another writer saved this session: rewrite it all (the lists' prefixes
                # as of this save; their items are frozen models, safe to dump here).
                full = dict(snapshot)
                for field, items, mark in zip(APPEND_ONLY_FIELDS, lists, marks, strict=True):
                    full[field] = [item.model_dump(mode="json") for item in items[: mark.length]]
                backend.save_state(flow_id, method_name, full)
            remember()

        return write_delta
    data = dump_state(state)

    def write_full() -> None:
        saved.pop(key, None)
        backend.save_state(flow_id, method_name, data)
        remember()

    return write_full


def remember_restored(state: Any, flow_id: str, backend: Any, saved: SavedLists) -> None:
    """Mark the lists of a state just loaded from ``backend`` as saved.

    The next save is then a delta, so a fresh Flow instance per turn (a stateless server
    restoring the session every time) does not rewrite the whole history. Safe even if
    the stored lists were not what was loaded: the backend refuses a delta whose counts
    do not match and the save falls back to a full one.
    """
    if getattr(backend, "save_state_delta", None) is None or not isinstance(
        state, ConversationState
    ):
        return
    saved[(id(backend), flow_id)] = tuple(
        _ListMark.of(getattr(state, f)) for f in APPEND_ONLY_FIELDS
    )
