"""The ``voxflow.flow/v1`` declaration schema (YAML/JSON) and its validation.

A declaration is parsed into these frozen models and checked as a whole before any class
is built or anything runs; every problem is reported as a
:class:`~voxflow.errors.DeclarationError` entry naming the dotted path of the bad field
(``methods.handle_order.do.with.role``)::

    schema: voxflow.flow/v1
    name: SupportFlow
    conversational:            # the opt-in; `enabled: false` keeps it off
      llm: openai/gpt-4o-mini  # a model id or {model: ..., max_tokens: 512}
      router: {llm: openai/gpt-4o-mini}
    state:                     # optional: {json_schema: {...}} or {python: pkg.mod.State}
      json_schema: {properties: {tier: {type: string, default: basic}}}
    methods:
      handle_order:
        description: Order status, shipping and delivery questions.
        listen: order          # a label, or {and: [...]} / {or: [...]}
        do:
          call: agent          # agent | llm | code
          with: {role: Support, goal: Answer order questions}
"""

from __future__ import annotations

import keyword
import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from voxflow.conversation.declaration_template import check_template
from voxflow.errors import DeclarationError

__all__ = [
    "SCHEMA_ALIASES",
    "SCHEMA_ID",
    "AgentAction",
    "CodeAction",
    "ConditionSpec",
    "ConversationalSpec",
    "Declaration",
    "FeedbackSpec",
    "LLMAction",
    "MethodSpec",
    "PythonRef",
    "RouterSpec",
    "StateSpec",
    "parse_declaration",
    "templated_fields",
]

SCHEMA_ID = "voxflow.flow/v1"
"""The declaration schema this version reads."""

SCHEMA_ALIASES = frozenset({"crewai.flow/v1"})
"""Schema ids read as :data:`SCHEMA_ID`: the spec's spelling of the same schema."""

_DOTTED = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$")

LLMSpec = str | dict[str, Any]
"""A model id or a configuration mapping such as ``{model: ..., max_tokens: 512}``."""


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class PythonRef(_Spec):
    """``{python: package.module.Name}``: a Python object the caller allowed."""

    python: str

    @field_validator("python")
    @classmethod
    def _dotted(cls, value: str) -> str:
        if not _DOTTED.match(value):
            raise ValueError("must be a dotted path like package.module.Name")
        return value


class AndCondition(_Spec):
    """``{and: [...]}``: every member must happen."""

    and_: list[ConditionSpec] = Field(alias="and", min_length=1)


class OrCondition(_Spec):
    """``{or: [...]}``: any member."""

    or_: list[ConditionSpec] = Field(alias="or", min_length=1)


ConditionSpec = Annotated[str, Field(min_length=1)] | AndCondition | OrCondition


class RouterSpec(_Spec):
    """``conversational.router``: the RouterConfig fields."""

    prompt: str | None = None
    response_format: PythonRef | None = None
    llm: LLMSpec | None = None
    routes: list[str] | None = None
    route_descriptions: dict[str, str] = Field(default_factory=dict)
    default_intent: str = "converse"
    fallback_intent: str = "converse"
    intent_field: str = "intent"


class ConversationalSpec(_Spec):
    """``conversational``: the ConversationConfig fields plus ``enabled``."""

    enabled: bool = True
    system_prompt: str | None = None
    llm: LLMSpec | None = None
    router: RouterSpec | None = None
    intent_llm: LLMSpec | None = None
    default_intents: list[str] | None = None
    visible_agent_outputs: Literal["all"] | list[str] | None = None
    defer_trace_finalization: bool = True
    trace_scope: Literal["turn", "session"] | None = None
    answer_from_history_prompt: str | None = None
    answer_from_history_llm: LLMSpec | None = None


class StateSpec(_Spec):
    """``state``: exactly one of ``json_schema`` or ``python``."""

    json_schema: dict[str, Any] | None = None
    python: str | None = None

    @field_validator("python")
    @classmethod
    def _dotted(cls, value: str | None) -> str | None:
        if value is not None and not _DOTTED.match(value):
            raise ValueError("must be a dotted path like package.module.State")
        return value


class AgentWith(_Spec):
    """``do.with`` of ``call: agent``."""

    role: str = Field(min_length=1)
    goal: str = Field(min_length=1)
    backstory: str = ""
    input: str = "${state.current_user_message}"
    llm: LLMSpec | None = None
    tools: list[PythonRef] = Field(default_factory=list)
    max_iterations: int = Field(default=8, ge=1)


class AgentAction(_Spec):
    """Run an ``Agent`` on the rendered ``input``; its answer is the method's result."""

    call: Literal["agent"]
    with_: AgentWith = Field(alias="with")


class LLMWith(_Spec):
    """``do.with`` of ``call: llm``."""

    prompt: str = Field(min_length=1)
    system: str | None = None
    llm: LLMSpec | None = None


class LLMAction(_Spec):
    """One LLM call on the rendered ``prompt``; the answer text is the result."""

    call: Literal["llm"]
    with_: LLMWith = Field(alias="with")


class CodeAction(_Spec):
    """Call ``python`` (a function ``f(flow, input, **with)``); its return is the result."""

    call: Literal["code"]
    python: str
    with_: dict[str, Any] = Field(default_factory=dict, alias="with")

    @field_validator("python")
    @classmethod
    def _dotted(cls, value: str) -> str:
        if not _DOTTED.match(value):
            raise ValueError("must be a dotted path like package.module.function")
        return value


Action = Annotated[AgentAction | LLMAction | CodeAction, Field(discriminator="call")]


class FeedbackSpec(_Spec):
    """``human_feedback``: the ``@human_feedback`` arguments."""

    message: str = Field(min_length=1)
    emit: list[str] | None = None
    default_outcome: str | None = None
    llm: LLMSpec | None = None


class MethodSpec(_Spec):
    """One method of the flow."""

    description: str | None = None
    start: bool | ConditionSpec = False
    listen: ConditionSpec | None = None
    router: bool = False
    labels: list[str] | None = None
    do: Action | None = None
    human_feedback: FeedbackSpec | None = None


class Declaration(_Spec):
    """A whole ``voxflow.flow/v1`` declaration."""

    schema_: Literal["voxflow.flow/v1"] = Field(alias="schema")
    name: str
    description: str | None = None
    conversational: ConversationalSpec | None = None
    state: StateSpec | None = None
    methods: dict[str, MethodSpec] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _identifier(cls, value: str) -> str:
        if not value.isidentifier() or keyword.iskeyword(value):
            raise ValueError("must be a Python identifier (it names the Flow class)")
        return value

    @property
    def is_conversational(self) -> bool:
        """Whether the block is present and enabled."""
        return self.conversational is not None and self.conversational.enabled


def _path(loc: tuple[int | str, ...], data: Any) -> str:
    """The dotted path of an error in the *document*: union member labels are dropped."""
    parts: list[str] = []
    current = data
    for i, part in enumerate(loc):
        in_dict = isinstance(current, dict) and part in current
        in_list = isinstance(current, list) and isinstance(part, int) and part < len(current)
        if in_dict or in_list:
            current = current[part]
        elif i < len(loc) - 1 or not isinstance(current, dict):
            continue  # a union member ("str", "agent", ...), not a field of the document
        else:
            current = None
        parts.append(str(part))
    return ".".join(parts)


def _labels(cond: Any) -> list[str]:
    if isinstance(cond, str):
        return [cond]
    members = cond.and_ if isinstance(cond, AndCondition) else cond.or_
    return [label for m in members for label in _labels(m)]


def templated_fields(method: MethodSpec, base: str) -> list[tuple[str, str]]:
    """``(path, text)`` of every templated field of one method (rendered at run time)."""
    action = method.do
    if isinstance(action, AgentAction):
        return [(f"{base}.do.with.input", action.with_.input)]
    if isinstance(action, LLMAction):
        fields = [(f"{base}.do.with.prompt", action.with_.prompt)]
        if action.with_.system is not None:
            fields.append((f"{base}.do.with.system", action.with_.system))
        return fields
    return []


def _check(
    decl: Declaration, reserved: frozenset[str], builtins: frozenset[str]
) -> list[tuple[str, str]]:
    errors: list[tuple[str, str]] = []
    conversational = decl.is_conversational
    for name, method in decl.methods.items():
        base = f"methods.{name}"
        if not name.isidentifier() or keyword.iskeyword(name) or name.startswith("_"):
            errors.append((base, "a method name must be a public Python identifier"))
        elif name in reserved and not (conversational and name in builtins):
            errors.append((base, f"{name!r} is a Flow API name; choose another method name"))
        if method.listen is not None and name in _labels(method.listen):
            errors.append(
                (
                    f"{base}.listen",
                    f"the handler listens to its own name {name!r}: labels and method names "
                    f"share one namespace; rename the method (for example handle_{name})",
                )
            )
        builtin_router = conversational and name == "route_conversation"
        if method.router and method.listen is None and method.start is False and not builtin_router:
            errors.append((f"{base}.router", "a router needs `listen:` or `start:`"))
        for label in method.labels or ():
            if label in decl.methods:
                errors.append((f"{base}.labels", f"label {label!r} is also a method name"))
        for path, text in templated_fields(method, base):
            check_template(text, path, errors)
        action = method.do
        if (
            isinstance(action, LLMAction)
            and action.with_.llm is None
            and (decl.conversational is None or decl.conversational.llm is None)
        ):
            errors.append((f"{base}.do.with.llm", "no llm here and no conversational.llm"))
    if decl.state is not None and (decl.state.json_schema is None) == (decl.state.python is None):
        errors.append(("state", "give exactly one of json_schema or python"))
    if not conversational and not any(m.start is not False for m in decl.methods.values()):
        errors.append(("methods", "a non-conversational declaration needs a method with start"))
    return errors


def parse_declaration(
    data: Any, *, reserved: frozenset[str] = frozenset(), builtins: frozenset[str] = frozenset()
) -> Declaration:
    """Validate a loaded YAML/JSON document.

    Args:
        data: the document (a mapping).
        reserved: names a method may not take (the Flow API).
        builtins: built-in method names a conversational declaration may override.

    Raises:
        DeclarationError: every problem, each with the path of its field.
    """
    if not isinstance(data, dict):
        raise DeclarationError([("", "a declaration must be a mapping at the top level")])
    schema = data.get("schema")
    if isinstance(schema, str) and schema in SCHEMA_ALIASES:
        data = {**data, "schema": SCHEMA_ID}
    elif schema != SCHEMA_ID:
        raise DeclarationError([("schema", f"must be {SCHEMA_ID!r}, got {schema!r}")])
    try:
        decl = Declaration.model_validate(data)
    except ValidationError as exc:
        errors = [(_path(e["loc"], data), e["msg"]) for e in exc.errors()]
        raise DeclarationError(list(dict.fromkeys(errors))) from None
    errors = _check(decl, reserved, builtins)
    if errors:
        raise DeclarationError(errors)
    return decl
