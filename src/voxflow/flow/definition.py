"""The static :class:`FlowDefinition`: the trigger graph compiled from class metadata.

:func:`compile_definition` walks the class MRO from the root down, so methods decorated
on a base class or a mixin are part of every subclass; a subclass that overrides a method
*without* decorating it keeps the base wiring (the override is what runs), and one that
decorates it again replaces the wiring. The result is validated and cached on the class.

Checks (each a :class:`~voxflow.errors.FlowDefinitionError` naming class, method, label):

* a handler whose trigger references its own name (also inside nested ``and_``/``or_``):
  method completions and router labels are one namespace, it would trigger itself;
* an empty trigger (``listen("")``, ``and_()``), a trigger member that is not a label,
  a method or a condition, a router with no trigger that is not a start;
* a decorator applied to something that is not callable;
* a router whose declared labels (``labels=``/``paths=`` or a ``Literal[...]``/``Enum``
  return annotation) include a method's name: the label would fire that name's listeners
  a second time. Undeclared labels are checked by the runtime when returned.
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, PrivateAttr

from voxflow.errors import FlowDefinitionError
from voxflow.flow.dsl import Condition, MethodMarks, Misdecorated, marks_of

__all__ = [
    "FlowDefinition",
    "MethodDefinition",
    "Plan",
    "annotated_labels",
    "compile_definition",
    "declared_labels",
]

ConditionShape = Literal["single", "multi_or", "compound"]


class MethodDefinition(BaseModel):
    """One wired method of a flow."""

    model_config = ConfigDict(
        frozen=True, extra="forbid", arbitrary_types_allowed=True, defer_build=True
    )

    name: str
    index: int
    is_async: bool
    takes_input: bool
    start: bool
    start_condition: Condition | None
    listen: Condition | None
    shape: ConditionShape | None
    router: bool
    labels: tuple[str, ...] | None
    persist: Any = None
    feedback: Any = None

    @property
    def trigger(self) -> Condition | None:
        """What makes the method run after kickoff (its ``listen``/router condition)."""
        return self.listen


@dataclasses.dataclass(frozen=True, slots=True)
class Plan:
    """Lookup tables the dispatch loop uses; derived once from the definition (internal)."""

    listeners_by_label: Mapping[str, tuple[str, ...]]
    routers_by_label: Mapping[str, tuple[str, ...]]
    cond_starts_by_label: Mapping[str, tuple[str, ...]]
    multi_or_by_label: Mapping[str, tuple[str, ...]]
    race_owner: Mapping[str, str]
    starts: tuple[str, ...]
    all_sync: bool
    routers: frozenset[str]


class FlowDefinition(BaseModel):
    """The compiled, validated trigger graph of a Flow class (see module docs)."""

    model_config = ConfigDict(
        frozen=True, extra="forbid", arbitrary_types_allowed=True, defer_build=True
    )

    name: str
    methods: dict[str, MethodDefinition]
    persist: Any = None

    _plan: Plan = PrivateAttr()

    def model_post_init(self, __context: Any) -> None:
        self._plan = _build_plan(self.methods)

    @property
    def plan(self) -> Plan:
        """Dispatch lookup tables (internal to the runtime)."""
        return self._plan

    def starts(self) -> tuple[str, ...]:
        """Start methods kickoff runs: unconditional ones, else the conditional ones."""
        return self.plan.starts

    def routers(self) -> tuple[str, ...]:
        """Names of the router methods, in declaration order."""
        return tuple(n for n, m in self.methods.items() if m.router)

    def listeners_of(self, label: str) -> tuple[str, ...]:
        """Methods (routers included) whose trigger mentions ``label``."""
        return self.plan.routers_by_label.get(label, ()) + self.plan.listeners_by_label.get(
            label, ()
        )


def _build_plan(methods: Mapping[str, MethodDefinition]) -> Plan:
    listeners: dict[str, list[str]] = {}
    routers: dict[str, list[str]] = {}
    cond_starts: dict[str, list[str]] = {}
    multi_or: dict[str, list[str]] = {}
    referenced_by: dict[str, set[str]] = {}
    for name, m in methods.items():
        if m.listen is not None:
            for label in sorted(m.listen.labels(), key=str):
                (routers if m.router else listeners).setdefault(label, []).append(name)
                referenced_by.setdefault(label, set()).add(name)
                if m.shape == "multi_or":
                    multi_or.setdefault(label, []).append(name)
        if m.start and m.start_condition is not None:
            for label in m.start_condition.labels():
                cond_starts.setdefault(label, []).append(name)
    race_owner: dict[str, str] = {}
    for name, m in methods.items():
        if m.shape != "multi_or" or m.router or m.listen is None:
            continue
        for label in m.listen.labels():
            # A member races only if it is a method and nothing else listens to it.
            if label in methods and referenced_by.get(label) == {name}:
                race_owner[label] = name
    unconditional = tuple(n for n, m in methods.items() if m.start and m.start_condition is None)
    conditional = tuple(n for n, m in methods.items() if m.start and m.start_condition is not None)
    return Plan(
        listeners_by_label={k: tuple(v) for k, v in listeners.items()},
        routers_by_label={k: tuple(v) for k, v in routers.items()},
        cond_starts_by_label={k: tuple(v) for k, v in cond_starts.items()},
        multi_or_by_label={k: tuple(v) for k, v in multi_or.items()},
        race_owner=race_owner,
        starts=unconditional or conditional,
        all_sync=not any(m.is_async for m in methods.values()),
        routers=frozenset(n for n, m in methods.items() if m.router),
    )


def _normalise(raw: object, *, flow: str, method: str, what: str) -> Condition:
    """Turn a stamped trigger into a validated :class:`Condition`."""
    if isinstance(raw, str):
        if not raw.strip():
            raise FlowDefinitionError(
                f"{flow}.{method}: {what} trigger is an empty string", flow=flow, method=method
            )
        return Condition(kind="or", items=(raw,))
    if isinstance(raw, Condition):
        if not raw.items:
            raise FlowDefinitionError(
                f"{flow}.{method}: {what} trigger {raw.kind}_() has no members",
                flow=flow,
                method=method,
            )
        items: list[str | Condition] = []
        for item in raw.items:
            if isinstance(item, str):
                if not item.strip():
                    raise FlowDefinitionError(
                        f"{flow}.{method}: {what} trigger contains an empty label",
                        flow=flow,
                        method=method,
                    )
                items.append(item)
            else:
                items.append(_normalise(item, flow=flow, method=method, what=what))
        return Condition(kind=raw.kind, items=tuple(items))
    raise FlowDefinitionError(
        f"{flow}.{method}: {what} trigger {raw!r} is not a label, a method or and_/or_",
        flow=flow,
        method=method,
    )


def _shape(cond: Condition) -> ConditionShape:
    if len(cond.items) == 1 and isinstance(cond.items[0], str):
        return "single"
    if cond.kind == "or" and cond.is_flat():
        return "multi_or"
    return "compound"


def declared_labels(func: Callable[..., Any], marks: MethodMarks) -> tuple[str, ...] | None:
    """The labels a router declares: explicit list, else ``Literal``/``Enum`` return type."""
    if marks.labels is not None:
        return tuple(str(v.value if isinstance(v, enum.Enum) else v) for v in marks.labels)
    return annotated_labels(func)


def annotated_labels(func: Callable[..., Any]) -> tuple[str, ...] | None:
    """The labels ``func``'s return annotation declares (``Literal[...]`` or an ``Enum``,
    ``None`` allowed beside them); None when it declares none (``-> str``, no annotation,
    an unresolvable forward reference)."""
    try:
        hints = typing.get_type_hints(func)
    except Exception:  # unresolvable forward reference: fall back to the run-time check
        return None
    ret = hints.get("return")
    if ret is None:
        return None
    members = (
        typing.get_args(ret)
        if isinstance(ret, types.UnionType) or (typing.get_origin(ret) is typing.Union)
        else (ret,)
    )
    labels: list[str] = []
    for member in members:
        if member is type(None):
            continue
        if typing.get_origin(member) is Literal:
            labels += [
                str(a.value if isinstance(a, enum.Enum) else a) for a in typing.get_args(member)
            ]
        elif isinstance(member, type) and issubclass(member, enum.Enum):
            labels += [str(e.value) for e in member]
        else:
            return None  # e.g. "-> str": nothing declared
    return tuple(labels)


def _takes_input(func: Callable[..., Any]) -> bool:
    """Whether the (unbound) method declares a parameter after ``self``."""
    try:
        params = list(inspect.signature(func).parameters.values())
    except (TypeError, ValueError):
        return False
    positional = [
        p
        for p in params
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)
    ]
    return len(positional) > 1 or any(p.kind is p.VAR_POSITIONAL for p in positional)


def compile_definition(
    cls: type, extra: Mapping[str, Callable[..., Any]] | None = None
) -> FlowDefinition:
    """Compile and validate the definition of Flow class ``cls`` (see module docs).

    Args:
        cls: the Flow subclass.
        extra: additional decorated functions to register (e.g. built-in methods a
            subclass layer adds), as if they were declared on ``cls`` itself.
    """
    flow = cls.__name__
    found: dict[str, MethodMarks] = {}
    for klass in reversed(cls.__mro__):
        for attr, value in vars(klass).items():
            if isinstance(value, Misdecorated):
                raise FlowDefinitionError(
                    f"{flow}.{attr}: @{value.decorator} was applied to a non-callable "
                    f"{type(value.value).__name__}",
                    flow=flow,
                    method=attr,
                )
            marks = marks_of(value)
            if marks is not None:
                found[attr] = marks
            elif attr in found and not callable(value):
                del found[attr]  # a subclass replaced the method by a plain attribute
    for attr, value in (extra or {}).items():
        marks = marks_of(value)
        if marks is not None:
            found[attr] = marks
    class_persist = getattr(cls, "_voxflow_persist", None)
    methods: dict[str, MethodDefinition] = {}
    for index, (name, marks) in enumerate(found.items()):
        func = getattr(cls, name, None) or (extra or {}).get(name)
        if not callable(func):
            continue
        listen_raw = marks.router_condition if marks.router else marks.listen
        if marks.router and marks.listen is not None and marks.router_condition is None:
            listen_raw = marks.listen
        listen = (
            None
            if listen_raw is None
            else _normalise(listen_raw, flow=flow, method=name, what="listen")
        )
        start_cond = (
            None
            if marks.start_condition is None
            else _normalise(marks.start_condition, flow=flow, method=name, what="start")
        )
        if marks.router and listen is None and not marks.start:
            raise FlowDefinitionError(
                f"{flow}.{name}: @router() needs a trigger (a label, a method or and_/or_) "
                "unless it is also a @start()",
                flow=flow,
                method=name,
            )
        if "listen" in marks.decorators and marks.listen is None:
            raise FlowDefinitionError(
                f"{flow}.{name}: @listen() needs a trigger", flow=flow, method=name
            )
        for cond in (listen, start_cond):
            if cond is not None and name in cond.labels():
                raise FlowDefinitionError(
                    f"{flow}.{name}: the trigger {cond} references the handler's own name "
                    f"{name!r}. Method completions and router labels share one namespace, so "
                    f"the handler would trigger itself; rename it (for example handle_{name}).",
                    flow=flow,
                    method=name,
                    label=name,
                )
        labels = declared_labels(func, marks) if marks.router else None
        feedback = marks.feedback
        if feedback is not None and getattr(feedback, "emit", None):
            labels = (*(labels or ()), *feedback.emit)
        methods[name] = MethodDefinition(
            name=name,
            index=index,
            is_async=inspect.iscoroutinefunction(func),
            takes_input=_takes_input(func),
            start=marks.start,
            start_condition=start_cond,
            listen=listen,
            shape=None if listen is None else _shape(listen),
            router=marks.router or bool(feedback is not None and getattr(feedback, "emit", None)),
            labels=labels,
            persist=marks.persist,
            feedback=feedback,
        )
    for name, m in methods.items():
        for label in m.labels or ():
            if label in methods:
                raise FlowDefinitionError(
                    f"{flow}.{name}: router label {label!r} is also the name of method "
                    f"{label!r}; its listeners would fire twice (once for the label, once when "
                    f"the method completes). Rename the label or the method.",
                    flow=flow,
                    method=name,
                    label=label,
                )
    return FlowDefinition(name=flow, methods=methods, persist=class_persist)
