"""Change detection for dicts of mutable records (internal to incremental saves).

Turn, reply, delivery and job records are plain mutable pydantic models, changed in
place long after they were added (a late ``accept_event``, an interrupt, a job update).
Comparing every record on every save costs ~0.1 to 0.2 µs per record (a C-level
``dict == dict``), which over a long session is more than the rest of the save, so a
saved record is *watched* instead: its ``__pydantic_fields_set__`` (to which pydantic
adds the field's name on every assignment) is swapped for an equal :class:`set`
subclass that also notes the record's key in the saver's :class:`Channel`. A save then
costs, per record, two C-level identity comparisons (the keys, and the record objects,
so a replaced record is seen) and, per change, one dump.

What is detected, in every mode: added, removed and replaced records (by identity), and
any field assignment (``reply.status = ...``). A change *inside* a container field
(``reply.segments.append(...)``) is not an assignment: it is detected for the
:data:`HOT_RECORDS` newest records of each dict, compared field by field on every save
(containers copied), and for any record also assigned since; for an older record,
assign the field instead (``rec.items = [*rec.items, x]``). Writes that bypass
pydantic (``object.__setattr__``) are not seen.

A :class:`RecordDict` (what the record fields of the turn, job and reply-queue states
hold) also logs the keys added to it and the values replaced in it, so a watched save
of such a dict reads its logs from the mark's positions and compares only the hot
records: its cost does not grow with the session. A delete (or another dict assigned
to the field) makes the next save rewrite the field.

Records that cannot be watched (not pydantic models, extra fields allowed,
``validate_assignment`` which replaces the set, or a pydantic whose assignment no longer
calls ``fields_set.add``, checked once) make the dict *exact*: every record is compared
on every save (a copy of its ``__dict__``, or a deep copy of the value).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import operator
from collections.abc import Callable, Hashable
from itertools import compress, islice
from typing import Any, get_args, get_origin

from pydantic import BaseModel, TypeAdapter

__all__ = [
    "HOT_RECORDS",
    "Channel",
    "RecordDict",
    "RecordsDiff",
    "RecordsMark",
    "record_dumper",
]

HOT_RECORDS = 8
"""The newest records of a dict, compared field by field (containers too) on every save."""

_ATOMIC: frozenset[type] = frozenset({str, int, float, bool, type(None), bytes})
_DICT = operator.attrgetter("__dict__")


class RecordDict(dict[str, Any]):
    """A dict of records that logs its keys as they are added or replaced.

    The record fields of :class:`~voxflow.turns.TurnState`, ``JobState`` and
    ``ReplyQueueState`` hold one, so a save finds what changed in time proportional to
    the changes, not to the session: new keys are ``added[n:]``, replaced values
    ``replaced[m:]``; anything else (a delete, ``pop``, ``clear``) bumps ``reshaped``
    and the next save rewrites the field. It is a plain ``dict`` to everything else
    (equality, JSON, pydantic); copies and pickles are fresh ``RecordDict`` s.
    """

    __slots__ = ("added", "replaced", "reshaped")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        dict.__init__(self, *args, **kwargs)
        self.added: list[str] = []
        self.replaced: list[str] = []
        self.reshaped = 0

    def __setitem__(self, key: str, value: Any) -> None:
        if key not in self:
            self.added.append(key)
        elif dict.__getitem__(self, key) is not value:
            self.replaced.append(key)
        dict.__setitem__(self, key, value)

    def __delitem__(self, key: str) -> None:
        dict.__delitem__(self, key)
        self.reshaped += 1

    def pop(self, *args: Any) -> Any:
        self.reshaped += 1
        return dict.pop(self, *args)

    def popitem(self) -> tuple[str, Any]:
        self.reshaped += 1
        return dict.popitem(self)

    def clear(self) -> None:
        self.reshaped += 1
        dict.clear(self)

    def update(self, *args: Any, **kwargs: Any) -> None:
        for key, value in dict(*args, **kwargs).items():
            self[key] = value

    def setdefault(self, key: str, default: Any = None) -> Any:
        if key not in self:
            self[key] = default
        return dict.__getitem__(self, key)

    def __ior__(self, other: Any) -> RecordDict:  # type: ignore[override,misc]
        self.update(other)
        return self

    def __copy__(self) -> RecordDict:
        return RecordDict(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> RecordDict:
        return RecordDict({k: copy.deepcopy(v, memo) for k, v in self.items()})

    def __reduce__(self) -> tuple[Any, ...]:
        return (RecordDict, (dict(self),))


def as_record_dict(value: Any) -> Any:
    """``value`` as a :class:`RecordDict` (a pydantic after-validator of record fields)."""
    return RecordDict(value) if type(value) is dict else value


class Channel:
    """Where watched records of one (saver, field) note their keys when assigned to."""

    __slots__ = ("dirty",)

    def __init__(self) -> None:
        self.dirty: set[str] = set()

    def drain(self) -> set[str]:
        """The keys noted since the last drain (atomic per key: safe against other threads)."""
        dirty, taken = self.dirty, set()
        while True:
            try:
                taken.add(dirty.pop())
            except KeyError:
                return taken


class _Watch(set[str]):
    """A record's ``__pydantic_fields_set__`` that also tells its savers when it is set."""

    __slots__ = ("subscribers",)

    subscribers: dict[Hashable, tuple[Channel, str]]

    # May run on any thread (e.g. ``TurnLedger.interrupt``): iterate a copy (one C call).
    def add(self, name: str) -> None:
        for channel, key in tuple(self.subscribers.values()):
            channel.dirty.add(key)
        set.add(self, name)

    def discard(self, name: object) -> None:
        for channel, key in tuple(self.subscribers.values()):
            channel.dirty.add(key)
        set.discard(self, name)

    # Copies of the record (model_copy, deepcopy, pickle) get a plain set: unwatched.
    def __copy__(self) -> set[str]:
        return set(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> set[str]:
        return set(self)

    def __reduce__(self) -> tuple[Any, ...]:
        return (set, (list(self),))


def _watch(record: BaseModel, saver: Hashable, channel: Channel, key: str) -> None:
    fields_set = record.__pydantic_fields_set__
    if type(fields_set) is not _Watch:
        watch = _Watch(fields_set)
        watch.subscribers = {}
        object.__setattr__(record, "__pydantic_fields_set__", watch)
        fields_set = watch
    fields_set.subscribers[saver] = (channel, key)


@functools.cache
def _watching_works() -> bool:
    """Whether assigning a field of a pydantic model still calls ``fields_set.add``."""

    class Probe(BaseModel):
        value: int = 0

    probe, channel = Probe(), Channel()
    _watch(probe, "probe", channel, "k")
    probe.value = 1
    return channel.drain() == {"k"} and probe.model_fields_set == {"value"}


def _watchable(value: Any) -> bool:
    return (
        isinstance(value, BaseModel)
        and value.__pydantic_extra__ is None
        and not value.model_config.get("validate_assignment")
    )


def _frozen_copy(value: Any) -> Any:
    """``value`` with every mutable container copied (scalars and frozen models shared)."""
    kind = type(value)
    if kind in _ATOMIC:
        return value
    if kind is list:
        return [_frozen_copy(v) for v in value]
    if kind is dict:
        return {k: _frozen_copy(v) for k, v in value.items()}
    if kind is tuple:
        return tuple(_frozen_copy(v) for v in value)
    if isinstance(value, BaseModel) and value.model_config.get("frozen"):
        return value
    return copy.deepcopy(value)


def _print_of(value: Any, exact_generic: bool) -> Any:
    if exact_generic:
        return copy.deepcopy(value)
    return {k: _frozen_copy(v) for k, v in value.__dict__.items()}


@dataclasses.dataclass(frozen=True, slots=True)
class RecordsDiff:
    """What a dict of records changed since its mark."""

    upserts: list[str]
    """Changed keys, then added keys in dict order."""
    deletes: list[str]
    base_count: int


@dataclasses.dataclass(frozen=True, slots=True)
class RecordsMark:
    """What one dict of records looked like at the last successful save.

    ``prints`` holds a print per record in exact mode and per hot record (the last
    :data:`HOT_RECORDS`) in watched mode; ``types`` is empty and ``channel`` set in
    watched mode (a replaced record is found by identity).
    """

    keys: list[str]
    values: list[Any]
    types: list[type]
    prints: list[Any]
    channel: Channel | None
    saver: Hashable
    generic: bool
    # Tracked mode (a watched RecordDict): keys/values/prints are the hot records only,
    # and the dict's logs from these positions on are what changed since.
    tracked: RecordDict | None = None
    added_at: int = 0
    replaced_at: int = 0
    reshaped_at: int = 0
    count: int = 0

    @property
    def size(self) -> int:
        """How many records the dict held at this mark."""
        return self.count if self.tracked is not None else len(self.keys)

    @classmethod
    def of(cls, records: dict[Any, Any], saver: Hashable) -> RecordsMark | None:
        """The mark of ``records`` now (watching them if it can); None for a non-str key."""
        keys = list(records)
        if not all(type(k) is str for k in keys):
            return None
        values = list(records.values())
        if _watching_works() and all(map(_watchable, values)):
            channel = Channel()
            for key, value in zip(keys, values, strict=True):
                _watch(value, saver, channel, key)
            prints = [_print_of(v, False) for v in values[-HOT_RECORDS:]]
            if isinstance(records, RecordDict):
                return cls(
                    keys[-HOT_RECORDS:],
                    values[-HOT_RECORDS:],
                    [],
                    prints,
                    channel,
                    saver,
                    False,
                    records,
                    len(records.added),
                    len(records.replaced),
                    records.reshaped,
                    len(keys),
                )
            return cls(keys, values, [], prints, channel, saver, False)
        generic = not all(map(_is_plain_model, values))
        prints = [_print_of(v, generic) for v in values]
        return cls(keys, values, list(map(type, values)), prints, None, saver, generic)

    def diff(self, records: dict[Any, Any]) -> tuple[RecordsDiff, RecordsMark] | None:
        """What changed in ``records`` since this mark, and the mark after saving it.

        None when the dict cannot be saved as a diff: its surviving keys were reordered,
        a new key is not a string, or a new record cannot be handled in this mark's mode.
        Save the field in full then (``RecordsMark.of``).
        """
        if self.tracked is not None:
            if records is not self.tracked or self.tracked.reshaped != self.reshaped_at:
                return None  # another dict, or keys deleted: rewrite the field
            return self._tracked(self.tracked)
        keys = list(records)
        values = list(records.values())
        old_keys, old_values, types, prints = self.keys, self.values, self.types, self.prints
        n = len(old_keys)
        deletes: list[str] = []
        if keys[:n] != old_keys:
            kept = list(map(records.__contains__, old_keys))
            survivors = list(compress(old_keys, kept))
            n = len(survivors)
            if keys[:n] != survivors:
                return None
            deletes = [k for k, keep in zip(old_keys, kept, strict=True) if not keep]
            old_values = list(compress(old_values, kept))
            types = list(compress(types, kept)) if types else types
            if self.channel is None:
                prints = list(compress(prints, kept))
            else:
                hot_kept = kept[-len(prints) :] if prints else []
                prints = list(compress(prints, hot_kept))
        added = keys[n:]
        if not all(type(k) is str for k in added):
            return None
        if self.channel is None:
            return self._exact(keys, values, n, types, prints, deletes)
        return self._watched(records, keys, values, n, old_values, prints, deletes)

    def _tracked(self, records: RecordDict) -> tuple[RecordsDiff, RecordsMark] | None:
        """:meth:`diff` from the dict's logs: O(changes + hot records), whatever its size."""
        channel, saver = self.channel, self.saver
        assert channel is not None
        added = records.added[self.added_at :]
        added_set = set(added)
        if not all(_watchable(records[k]) for k in added):
            return None
        changed: list[str] = []
        seen = set(added_set)
        for key in records.replaced[self.replaced_at :]:
            if key not in seen:  # a record replaced by another object
                seen.add(key)
                changed.append(key)
                value = records[key]
                if not _watchable(value):
                    return None
                _watch(value, saver, channel, key)
        for key, value, before in zip(self.keys, self.values, self.prints, strict=True):
            if key not in seen and (records[key] is not value or _DICT(value) != before):
                seen.add(key)  # a hot record changed inside a container
                changed.append(key)
        changed.extend(k for k in channel.drain() if k not in seen and k in records)
        for key in added:
            _watch(records[key], saver, channel, key)
        hot_keys = list(islice(reversed(records), HOT_RECORDS))[::-1]
        hot_values = [records[k] for k in hot_keys]
        kept = {k: p for k, p in zip(self.keys, self.prints, strict=True) if k not in seen}
        prints = [
            kept[k] if k in kept else _print_of(v, False)
            for k, v in zip(hot_keys, hot_values, strict=True)
        ]
        mark = RecordsMark(
            hot_keys,
            hot_values,
            [],
            prints,
            channel,
            saver,
            False,
            records,
            len(records.added),
            len(records.replaced),
            records.reshaped,
            len(records),
        )
        return RecordsDiff([*changed, *added], [], self.count), mark

    def _watched(
        self,
        records: dict[str, Any],
        keys: list[str],
        values: list[Any],
        n: int,
        old_values: list[Any],
        prints: list[Any],
        deletes: list[str],
    ) -> tuple[RecordsDiff, RecordsMark] | None:
        channel, saver = self.channel, self.saver
        assert channel is not None
        if not all(map(_watchable, values[n:])):
            return None
        changed: set[int] = set()
        # map() stops at the shorter list: values[:n] against old_values, without a copy.
        if any(map(operator.is_not, values, old_values)):  # a record replaced (rare)
            changed.update(compress(range(n), map(operator.is_not, values, old_values)))
            if not all(_watchable(values[i]) for i in changed):
                return None
        start = n - len(prints)  # prints[j] is the print of values[start + j]
        hot_now = list(map(_DICT, values[start:n]))
        changed.update(
            start + j for j in compress(range(len(prints)), map(operator.ne, hot_now, prints))
        )
        added = set(keys[n:])
        assigned = {k for k in channel.drain() if k in records and k not in added}
        upserts = [keys[i] for i in sorted(changed)]
        upserts.extend(assigned.difference(upserts))
        for i in changed:
            _watch(values[i], saver, channel, keys[i])
        for key, value in zip(keys[n:], values[n:], strict=True):
            _watch(value, saver, channel, key)
        upserts.extend(keys[n:])
        total = len(values)
        new_prints = []
        for i in range(max(0, total - HOT_RECORDS), total):
            if start <= i < n and i not in changed and keys[i] not in assigned:
                new_prints.append(prints[i - start])
            else:
                new_prints.append(_print_of(values[i], False))
        mark = RecordsMark(keys, values, [], new_prints, channel, saver, False)
        return RecordsDiff(upserts, deletes, len(self.keys)), mark

    def _exact(
        self,
        keys: list[str],
        values: list[Any],
        n: int,
        types: list[type],
        prints: list[Any],
        deletes: list[str],
    ) -> tuple[RecordsDiff, RecordsMark] | None:
        generic = self.generic
        now_types = list(map(type, values))
        head = values[:n]
        if not generic and not all(map(_is_plain_model, values[n:])):
            return None
        if generic:
            probes: list[Any] = head
        else:
            try:
                probes = list(map(_DICT, head))
            except AttributeError:  # a record was replaced by something without fields
                return None
        changed = set(compress(range(n), map(operator.ne, probes, prints)))
        if now_types[:n] != types:
            changed.update(compress(range(n), map(operator.is_not, now_types[:n], types)))
        if changed and not generic and not all(_is_plain_model(values[i]) for i in changed):
            return None
        new_prints = list(prints)
        for i in changed:
            new_prints[i] = _print_of(values[i], generic)
        new_prints.extend(_print_of(v, generic) for v in values[n:])
        upserts = [keys[i] for i in sorted(changed)]
        upserts.extend(keys[n:])
        mark = RecordsMark(keys, values, now_types, new_prints, None, self.saver, generic)
        return RecordsDiff(upserts, deletes, len(self.keys)), mark


def _is_plain_model(value: Any) -> bool:
    return isinstance(value, BaseModel) and value.__pydantic_extra__ is None


@functools.lru_cache(maxsize=256)
def record_dumper(state_type: type[BaseModel], field: str) -> Callable[[Any], Any]:
    """Dump one value of ``state_type.field`` to JSON-compatible data.

    Uses the field's declared value type (``dict[str, TurnRecord]`` → ``TurnRecord``), so
    a record is dumped exactly as ``state.model_dump(mode="json")`` dumps it.
    """
    info = state_type.model_fields.get(field)
    annotation = info.annotation if info is not None else None
    value_type: Any = Any
    if get_origin(annotation) is dict:
        args = get_args(annotation)
        if len(args) == 2:
            value_type = args[1]
    adapter: TypeAdapter[Any] = TypeAdapter(value_type)
    return functools.partial(adapter.dump_python, mode="json")
