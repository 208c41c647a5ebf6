"""How a conversational or job flow is saved: only what changed, whatever the length.

A conversation's history only grows: ``state.messages`` and ``state.events`` are
append-only. Its records (``turns``, ``replies``, ``deliveries``, ``covered_updates``,
``jobs``: :data:`RECORD_FIELDS`) are dicts that grow by one or two entries a turn and
whose entries change in place. :class:`~voxflow.flow.persistence.SQLiteFlowPersistence`
(the default ``@persist`` backend) stores list items and records one row each and the
rest of the state as a small snapshot, and offers ``save_state_changes``.
:func:`prepare_state_save` (the ``_prepare_state_save`` hook of a flow) uses it: a save
after turn 1,000 writes the turn's new messages, the records added, changed or removed
since the last save, and a few hundred bytes, in one transaction. Loading reassembles
the full state (each dict in its order), so ``load_state`` returns exactly what was
saved. Any other :class:`~voxflow.flow.persistence.FlowPersistence` (without
``save_state_changes``) still gets full snapshots.

How changes are found (see ``voxflow.conversation._record_marks`` for records):

* lists: the items after the saved length; the last :data:`CHECKED_TAIL` saved items are
  checked for in-place replacement (e.g. an interrupted assistant reply cut to what the
  user heard); replacing an older item in place is not detected: reassign the list
  instead (``state.messages = [...]``);
* records: added, removed and replaced entries by identity (a dict restored to an older
  snapshot, older record objects put back), any field assignment anywhere (a saved
  record is watched through its ``__pydantic_fields_set__``), and in-place changes
  inside the containers of the 8 newest records of each dict. For an older record,
  assign a container field rather than changing it in place.

When a save is a full one (the state is re-dumped and every row rewritten):

* the first save of a Flow instance to a backend that did not restore the session from
  it (a turn that restores marks what it loaded as saved: :func:`remember_restored`);
* ``state.messages``/``state.events`` was reassigned or shrank (e.g. a trimmed history),
  or one of its last :data:`CHECKED_TAIL` saved items was replaced in place.

A dict of records whose surviving keys were reordered is rewritten alone (its rows
only).

Every save carries the session's **revision** (a per-session integer the backend stores
with the snapshot and bumps in the save's transaction): the revision this Flow instance
loaded or last wrote. If another writer saved the session since, the backend refuses the
save with :class:`~voxflow.errors.PersistenceConflictError` and writes nothing, so two
instances (or processes) writing one session never lose a turn silently: the one that is
behind gets the error from its turn and reloads the session on its next one. A save
whose stored counts differ at the same revision falls back to a full save.

``SQLiteConversationPersistence`` is the same class as ``SQLiteFlowPersistence``, kept
as a name for code written when the item-wise store was opt-in.

Example::

    @persist()  # the default SQLite backend saves conversations incrementally
    class Support(Flow[ConversationState]): ...
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import functools
import logging
import threading
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

from pydantic import BaseModel

from voxflow.conversation._record_marks import RecordsMark, record_dumper
from voxflow.conversation.state import ConversationEvent, ConversationState
from voxflow.flow.persistence import (
    APPEND_ONLY_FIELDS,
    LISTS_KEY,
    RECORD_FIELDS,
    RecordChanges,
    SQLiteFlowPersistence,
    StateChanges,
)
from voxflow.flow.state import dump_state

__all__ = [
    "APPEND_ONLY_FIELDS",
    "CHECKED_TAIL",
    "LISTS_KEY",
    "RECORD_FIELDS",
    "UNANSWERED_REASON",
    "SQLiteConversationPersistence",
    "SavedLists",
    "mark_unanswered",
    "prepare_state_save",
    "remember_restored",
    "remember_revision",
]

SQLiteConversationPersistence = SQLiteFlowPersistence
"""The default backend (the item-wise store is built in); kept as a name."""

logger = logging.getLogger("voxflow.flow.persistence")

T = TypeVar("T")

CHECKED_TAIL = 8
"""How many of the last saved items of each list are checked for in-place replacement."""

_LOOP_TIMEOUT = 10.0
"""Seconds a write thread waits for the state's loop to snapshot a fallback full save."""


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


@dataclasses.dataclass(frozen=True, slots=True)
class _Saved:
    """What a flow instance last saved of one session to one backend."""

    list_fields: tuple[str, ...]
    lists: tuple[_ListMark, ...]
    records: dict[str, RecordsMark]
    version: int  # the stored revision this instance loaded or wrote (0: none)


class SavedLists(dict[tuple[int, str], _Saved]):
    """Per ``(id(backend), flow_id)``: what the last successful save (or load) stored.

    Its ``lock`` serialises this flow instance's writes, so each one builds on the
    revision the previous one stored.
    """

    def __init__(self) -> None:
        super().__init__()
        self.lock = threading.Lock()


def _revision_only(version: int) -> _Saved:
    """Marks that know the stored revision but no lists: the next save is a full one."""
    return _Saved((), (), {}, version)


def remember_revision(flow_id: str, backend: Any, saved: SavedLists, revision: int) -> None:
    """Note that ``backend`` holds ``revision`` of ``flow_id`` (just loaded); no marks."""
    saved[(id(backend), flow_id)] = _revision_only(revision)


_Fields = tuple[tuple[str, ...], tuple[str, ...]]


def _item_fields(state: Any, backend: Any) -> _Fields | None:
    """``(list fields, record fields)`` saved incrementally, or None for a full snapshot."""
    if not isinstance(state, BaseModel) or not (
        hasattr(backend, "save_state_changes") and hasattr(backend, "save_full_state")
    ):
        return None
    lists, candidates = _field_names(type(state))
    values = state.__dict__
    records = tuple(f for f in candidates if isinstance(values.get(f), dict))
    return (lists, records) if lists or records else None


@functools.lru_cache(maxsize=256)
def _field_names(state_type: type[BaseModel]) -> _Fields:
    """The list fields and the possible record fields of a state class."""
    lists = APPEND_ONLY_FIELDS if issubclass(state_type, ConversationState) else ()
    return lists, tuple(f for f in RECORD_FIELDS if f in state_type.model_fields)


def _full_marks(state: BaseModel, fields: _Fields, saver: Hashable, version: int = 0) -> _Saved:
    """The marks of every list and record dict of ``state`` as it is now."""
    list_fields, record_fields = fields
    records = {f: RecordsMark.of(getattr(state, f), (saver, f)) for f in record_fields}
    return _Saved(
        list_fields,
        tuple(_ListMark.of(getattr(state, f)) for f in list_fields),
        {f: m for f, m in records.items() if m is not None},  # non-str keys: full saves
        version,
    )


def _full(state: BaseModel, fields: _Fields, saver: Hashable) -> tuple[dict[str, Any], _Saved]:
    """The whole state, dumped now, and the marks it leaves once stored."""
    return dump_state(state), _full_marks(state, fields, saver)


def _delta(
    state: BaseModel, fields: _Fields, previous: _Saved, saver: Hashable
) -> tuple[StateChanges, _Saved] | None:
    """What changed since ``previous`` (dumped now) and the marks after it, or None."""
    list_fields, record_fields = fields
    if previous.list_fields != list_fields or set(previous.records) != set(record_fields):
        return None
    lists = [getattr(state, f) for f in list_fields]
    if not all(m.appended_to(items) for items, m in zip(lists, previous.lists, strict=True)):
        return None
    records: dict[str, RecordChanges] = {}
    marks: dict[str, RecordsMark] = {}
    for field in record_fields:
        values = getattr(state, field)
        old = previous.records[field]
        found = old.diff(values)
        dump = record_dumper(type(state), field)
        if found is None:
            mark = RecordsMark.of(values, (saver, field))
            if mark is None:
                return None
            upserts = [(k, dump(v)) for k, v in values.items()]
            change = RecordChanges(upserts, (), old.size, len(upserts), replace=True)
        else:
            diff, mark = found
            upserts = [(k, dump(values[k])) for k in diff.upserts]
            change = RecordChanges(upserts, diff.deletes, diff.base_count, mark.size)
        records[field], marks[field] = change, mark
    changes = StateChanges(
        snapshot=state.model_dump(mode="json", exclude={*list_fields, *record_fields}),
        appended={
            f: [item.model_dump(mode="json") for item in items[m.length :]]
            for f, items, m in zip(list_fields, lists, previous.lists, strict=True)
        },
        counts={f: m.length for f, m in zip(list_fields, previous.lists, strict=True)},
        records=records,
        base_version=previous.version,
    )
    new_lists = tuple(_ListMark.of(items) for items in lists)
    return changes, _Saved(list_fields, new_lists, marks, previous.version)


def _on_loop(loop: asyncio.AbstractEventLoop | None, fn: Callable[[], T]) -> T:
    """``fn()`` on ``loop`` (the state's owner) when called from another thread."""
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if loop is None or running is loop or not loop.is_running():
        return fn()
    future: concurrent.futures.Future[T] = concurrent.futures.Future()

    def run() -> None:
        if future.set_running_or_notify_cancel():
            try:
                future.set_result(fn())
            except BaseException as exc:
                future.set_exception(exc)

    try:
        loop.call_soon_threadsafe(run)
        return future.result(timeout=_LOOP_TIMEOUT)
    except (RuntimeError, concurrent.futures.TimeoutError):
        if not future.cancel() and future.done():
            return future.result()
        logger.warning("state owner loop unavailable; snapshotting the state from this thread")
        return fn()


def prepare_state_save(
    state: Any, flow_id: str, backend: Any, method_name: str, saved: SavedLists
) -> Callable[[], None]:
    """Snapshot ``state`` now (on the loop) and return the blocking write.

    Every save to a backend with ``save_full_state`` (the default SQLite one, the
    PostgreSQL one) carries the revision this instance loaded or last wrote; a backend
    holding another revision refuses it with
    :class:`~voxflow.errors.PersistenceConflictError` and writes nothing. A failed write
    keeps the known revision, so the next save (a full one) is checked the same way.

    Args:
        state: the flow's state; a pydantic state with append-only lists (a
            :class:`ConversationState`) or record dicts (:data:`RECORD_FIELDS`) is saved
            incrementally.
        flow_id: the session id to save under.
        backend: a ``FlowPersistence``; incremental only if it has ``save_state_changes``
            and ``save_full_state``; revision-checked if it has ``save_full_state``.
        method_name: the method that triggered the save.
        saved: the flow instance's marks, updated once a write succeeds.
    """
    key = (id(backend), flow_id)
    checked = hasattr(backend, "save_full_state")
    fields = _item_fields(state, backend)
    if fields is None:
        data = dump_state(state)
        if not checked:
            return lambda: backend.save_state(flow_id, method_name, data)

        def write_snapshot() -> None:
            with saved.lock:
                known = saved.get(key)
                expected = 0 if known is None else known.version
                version = backend.save_full_state(
                    flow_id, method_name, data, expected_revision=expected
                )
                saved[key] = _revision_only(version)

        return write_snapshot
    saver = (id(saved), *key)  # this flow instance saving this session to this backend
    previous = saved.get(key)
    delta = _delta(state, fields, previous, saver) if previous is not None else None
    try:
        loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:
        loop = None
    full = None if delta is not None else _full(state, fields, saver)

    def write() -> None:
        with saved.lock:
            known = saved.get(key)
            expected = 0 if known is None else known.version
            saved[key] = _revision_only(expected)  # a failed write leaves no list marks
            if delta is not None:
                changes, marks = delta
                # Applied only on top of the marks it was taken from (still the latest).
                if known is previous and changes.base_version == expected:
                    version = backend.save_state_changes(flow_id, method_name, changes)
                    if version is not None:
                        saved[key] = dataclasses.replace(marks, version=version)
                        return
                # The stored counts differ from this instance's marks, or one of its own
                # writes landed since the changes were taken: store all of it, snapshotted
                # again where the state lives (records are mutable, never dumped here).
                data, marks = _on_loop(loop, lambda: _full(state, fields, saver))
            else:
                assert full is not None
                data, marks = full
            version = backend.save_full_state(
                flow_id, method_name, data, expected_revision=expected
            )
            saved[key] = dataclasses.replace(marks, version=version)

    return write


def remember_restored(state: Any, flow_id: str, backend: Any, saved: SavedLists) -> None:
    """Mark the lists and records of a state just loaded from ``backend`` as saved.

    The next save is then a delta, so a fresh Flow instance per turn (a stateless server
    restoring the session every time) does not rewrite the whole history. It builds on
    the revision the load noted (:func:`remember_revision`): if another writer saved the
    session since, the save is refused (:class:`~voxflow.errors.PersistenceConflictError`).
    """
    fields = _item_fields(state, backend)
    if fields is None:
        return
    key = (id(backend), flow_id)
    known = saved.get(key)
    version = 0 if known is None else known.version
    saved[key] = _full_marks(state, fields, (id(saved), *key), version)


UNANSWERED_REASON = "no reply was stored for this message (the process stopped mid-turn)"
"""Why :func:`mark_unanswered` marked a restored user message interrupted."""


def mark_unanswered(state: Any) -> bool:
    """Mark a restored history's trailing, unanswered user message as interrupted.

    A turn saves the user's message before its reply exists (``@persist`` saves after
    each method); if the process died in between, the restored history ends with that
    message. Its ``metadata`` gets ``turn_status="interrupted"`` and ``reason`` (the
    message is replaced by a marked copy: messages are frozen), and a public
    ``turn_interrupted`` event records it, so the next turn never leaves two user
    messages in a row without a marker. Returns True when it marked one.
    """
    if not isinstance(state, ConversationState) or not state.messages:
        return False
    last = state.messages[-1]
    if last.role != "user" or "turn_status" in last.metadata:
        return False
    index = len(state.messages) - 1
    metadata = {**last.metadata, "turn_status": "interrupted", "reason": UNANSWERED_REASON}
    state.messages[index] = last.model_copy(update={"metadata": metadata})
    state.events.append(
        ConversationEvent(
            type="turn_interrupted",
            payload={"message_index": index, "reason": UNANSWERED_REASON},
            visibility="public",
        )
    )
    return True
