"""The authoring DSL: ``@start``, ``@listen``, ``@router``, ``and_`` and ``or_``.

The decorators only *stamp* metadata (a :class:`MethodMarks`) on the function and return
the very same function, so a decorated method stays an ordinary method: it can be called
directly, overridden in a subclass and inspected. Nothing is validated here because the
class is not known yet; :mod:`voxflow.flow.definition` reads the marks when the Flow
class is created, validates them and raises :class:`~voxflow.errors.FlowDefinitionError`
naming the class, the method and the label.

Triggers are strings (a method name or a router label; both share one namespace), the
decorated functions themselves (their ``__name__`` is used) or :class:`Condition` trees
built with :func:`and_` / :func:`or_`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, Literal, TypeAlias, TypeVar

from pydantic import BaseModel, ConfigDict

__all__ = [
    "MARKS_ATTR",
    "Condition",
    "MethodMarks",
    "Misdecorated",
    "Trigger",
    "and_",
    "listen",
    "marks_of",
    "or_",
    "router",
    "stamp_marks",
    "start",
]

MARKS_ATTR = "__voxflow_marks__"
"""The attribute under which the decorators store a function's :class:`MethodMarks`."""

F = TypeVar("F", bound=Callable[..., Any])


class Condition(BaseModel):
    """A trigger condition: ``or`` fires on any member, ``and`` once every member was seen.

    Members are labels (method names or router labels) or nested conditions. A plain
    ``@listen("x")`` is stored as ``Condition(kind="or", items=("x",))``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    kind: Literal["or", "and"]
    items: tuple[str | Condition, ...]

    def labels(self) -> frozenset[str]:
        """Every label mentioned anywhere in the tree."""
        out: set[str] = set()
        for item in self.items:
            if isinstance(item, str):
                out.add(item)
            else:
                out |= item.labels()
        return frozenset(out)

    def is_met(self, seen: frozenset[str] | set[str]) -> bool:
        """Whether the labels in ``seen`` satisfy the tree."""
        results = (
            item in seen if isinstance(item, str) else item.is_met(seen) for item in self.items
        )
        return any(results) if self.kind == "or" else all(results)

    def is_flat(self) -> bool:
        """True when every member is a plain label (no nested condition)."""
        return all(isinstance(item, str) for item in self.items)

    def __str__(self) -> str:
        inner = ", ".join(repr(i) if isinstance(i, str) else str(i) for i in self.items)
        return f"{self.kind}_({inner})"


Trigger: TypeAlias = "str | Condition | Callable[..., Any]"
"""What a decorator accepts as a trigger: a label, a method, or a condition tree."""


def _as_item(value: object) -> str | Condition | object:
    """Normalise one trigger member; invalid members are kept for the definition check."""
    if isinstance(value, str | Condition):
        return value
    name = getattr(value, "__name__", None)
    if callable(value) and isinstance(name, str):
        return name
    return value


def or_(*conditions: Trigger) -> Condition:
    """Fire when any of ``conditions`` happens.

    With two or more members the listener fires at most once per execution (re-armed when
    a member re-runs in a cycle or a router re-emits one of its labels). When the members
    are methods that only this listener listens to, they *race*: see the runtime docs.
    """
    return Condition.model_construct(kind="or", items=tuple(_as_item(c) for c in conditions))  # type: ignore[misc]


def and_(*conditions: Trigger) -> Condition:
    """Fire once every one of ``conditions`` has happened in the current execution."""
    return Condition.model_construct(kind="and", items=tuple(_as_item(c) for c in conditions))  # type: ignore[misc]


@dataclasses.dataclass(slots=True)
class MethodMarks:
    """What the decorators stamped on one function (merged across stacked decorators)."""

    start: bool = False
    start_condition: object = None
    listen: object = None
    router: bool = False
    router_condition: object = None
    labels: tuple[object, ...] | None = None
    persist: Any = None
    feedback: Any = None
    decorators: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(frozen=True, slots=True)
class Misdecorated:
    """Left in the class body when a decorator was applied to something not callable.

    The definition check turns it into a :class:`~voxflow.errors.FlowDefinitionError`
    naming the class and attribute, which the decorator alone could not know.
    """

    decorator: str
    value: object


def marks_of(func: object) -> MethodMarks | None:
    """The :class:`MethodMarks` stamped on ``func``, if any."""
    marks = getattr(func, MARKS_ATTR, None)
    return marks if isinstance(marks, MethodMarks) else None


def stamp_marks(func: Any, decorator: str) -> MethodMarks:
    """The marks of ``func``, created if needed, recording that ``decorator`` was applied."""
    marks = marks_of(func)
    if marks is None:
        marks = MethodMarks()
        setattr(func, MARKS_ATTR, marks)
    marks.decorators.append(decorator)
    return marks


def start(condition: Trigger | None = None) -> Callable[[F], F]:
    """Mark a method as an entry point of the flow.

    Args:
        condition: ``None`` for an unconditional start, run by every kickoff. With a
            condition, the start runs when a router emits a matching label (and at
            kickoff only when the flow has no unconditional start).
    """

    def decorate(func: F) -> F:
        if not callable(func):
            return Misdecorated("start", func)
        marks = stamp_marks(func, "start")
        marks.start = True
        marks.start_condition = None if condition is None else _as_item(condition)
        return func

    return decorate


def listen(condition: Trigger) -> Callable[[F], F]:
    """Run the method when ``condition`` is met (a method completed or a router label).

    The method receives the trigger's result if it declares a parameter.
    """

    def decorate(func: F) -> F:
        if not callable(func):
            return Misdecorated("listen", func)
        marks = stamp_marks(func, "listen")
        marks.listen = _as_item(condition)
        return func

    return decorate


def router(
    condition: Trigger | None = None,
    *,
    labels: Sequence[str] | None = None,
    paths: Sequence[str] | None = None,
) -> Callable[[F], F]:
    """Mark a method as a router: its return value becomes the next trigger label.

    Routers run one at a time before ordinary listeners. Declare the labels a router may
    return (``labels=[...]``, its alias ``paths=[...]``, or a ``Literal[...]`` return
    annotation) so a label that collides with a method name is rejected when the class is
    created; an undeclared colliding label is refused at run time.

    Args:
        condition: what triggers the router; ``None`` when it is also a ``@start()``.
        labels: the labels it may return.
        paths: alias of ``labels``.
    """
    if labels is not None and paths is not None:
        raise ValueError("router(): give labels= or paths=, not both")
    declared = labels if labels is not None else paths
    if isinstance(declared, str):
        raise TypeError("router(): labels must be a list of strings, not one string")

    def decorate(func: F) -> F:
        if not callable(func):
            return Misdecorated("router", func)
        marks = stamp_marks(func, "router")
        marks.router = True
        marks.router_condition = None if condition is None else _as_item(condition)
        marks.labels = None if declared is None else tuple(declared)
        return func

    return decorate
