"""``Flow.from_declaration``: build a Flow class from a YAML/JSON declaration.

The document (see :mod:`voxflow.conversation.declaration_schema`) is parsed, validated
and fully resolved before the class exists: LLM configurations are built, the state model
is composed, every ``python:`` reference is imported, template expressions are checked.
Any problem raises :class:`~voxflow.errors.DeclarationError` naming the field's path, and
nothing has run.

**LLM endpoints.** A declared LLM cannot send the provider's key anywhere: it may name
a model id, the parameters that shape the answer and an ``api_base``/``base_url`` that
the code (``llm_endpoints=[...]``) or the operator (``VOXFLOW_LLM_ENDPOINTS``) allowed;
never credentials, headers or a model id that is a URL (:mod:`voxflow.llm.endpoints`).

**Python references.** A declaration cannot run arbitrary code on its own. ``python:``
refs (``call: code``, agent ``tools``, ``state.python``, ``router.response_format``) are
resolved only when the caller allows their module: ``allow_python=("my_project",)``
allows ``my_project`` and every module under it (``my_project.tools.lookup``). With the
default ``allow_python=()`` any ``python:`` ref is an error. An allowed ref must also be
importable and name an existing attribute.

**What the declaration builds.** With a ``conversational`` block (enabled by default)
the class is a conversational Flow: the built-in graph is added, the state is
``ConversationState`` (a ``json_schema`` or ``python`` state is composed with it), and
the route catalog is inferred from the methods' ``listen`` labels (descriptions from
``description:``). Declaring ``route_conversation`` (a ``call: code`` action returning a
label) replaces the built-in router. Without the block, or with ``enabled: false``, it is
a plain Flow that needs its own ``start`` method.

Actions: ``call: agent`` runs an :class:`~voxflow.Agent` on the rendered ``input``;
``call: llm`` sends the rendered ``prompt``; ``call: code`` calls ``f(flow, input,
**with)``. Their result (an agent's or model's answer text) is the method's return value,
so on a route handler it becomes the assistant reply. Templates: ``${state.<path>}`` and
``${input}`` (the trigger's value) resolve declared data only, by plain names and indexes
(:mod:`voxflow.conversation.declaration_template`); the text itself is read with size
and depth limits (:mod:`voxflow.conversation.declaration_source`).
"""

from __future__ import annotations

import importlib
import inspect
import keyword
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ValidationError, create_model

from voxflow.agent import Agent
from voxflow.conversation.config import ConversationConfig, RouterConfig
from voxflow.conversation.declaration_schema import (
    AgentAction,
    AndCondition,
    CodeAction,
    ConditionSpec,
    Declaration,
    LLMAction,
    MethodSpec,
    parse_declaration,
    templated_fields,
)
from voxflow.conversation.declaration_source import load_declaration_document
from voxflow.conversation.declaration_template import check_template, render
from voxflow.conversation.graph import BUILTIN_METHODS
from voxflow.conversation.routing import DESCRIPTION_ATTR
from voxflow.conversation.state import ConversationState
from voxflow.endpoints import normalize_endpoints
from voxflow.errors import DeclarationError
from voxflow.flow.dsl import Condition, and_, listen, or_, router, start
from voxflow.flow.feedback import human_feedback
from voxflow.flow.state import FlowState
from voxflow.llm import LLM, BaseLLM, LLMConfig
from voxflow.llm.endpoints import check_declared_llm, llm_endpoints

__all__ = ["flow_class_from_declaration", "load_declaration_document", "render_template"]

_PROPERTY = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")

_JSON_TYPES: Mapping[str, tuple[Any, Any]] = {
    "string": (str, ""),
    "integer": (int, 0),
    "number": (float, 0.0),
    "boolean": (bool, False),
    "array": (list[Any], None),
    "object": (dict[str, Any], None),
}


def render_template(text: str, state: Any, value: Any, *, field: str = "") -> str:
    """Replace ``${state.<path>}`` and ``${input<path>}`` in ``text`` with declared data.

    See :mod:`voxflow.conversation.declaration_template` (``None`` renders as '').

    Raises:
        DeclarationError: an expression reaches something that is not declared data;
            ``.path`` is ``field``.
    """
    return render(text, state, value, field=field)


class _Resolver:
    """Resolves LLM specs and python refs, collecting errors with their paths."""

    def __init__(self, allow_python: Sequence[str], endpoints: Sequence[str] = ()) -> None:
        self.allow = tuple(allow_python)
        self.endpoints = (*endpoints, *llm_endpoints())
        self.errors: list[tuple[str, str]] = []

    def python(self, ref: str, path: str) -> Any:
        module_name, _, attr = ref.rpartition(".")
        if not any(module_name == a or module_name.startswith(a + ".") for a in self.allow):
            self.errors.append(
                (
                    path,
                    f"python ref {ref!r} is not allowed: pass allow_python=[...] naming its module",
                )
            )
            return None
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            self.errors.append((path, f"cannot import {module_name!r}: {exc}"))
            return None
        if not hasattr(module, attr):
            self.errors.append((path, f"{module_name!r} has no attribute {attr!r}"))
            return None
        return getattr(module, attr)

    def llm(self, spec: str | dict[str, Any] | None, path: str) -> BaseLLM | None:
        if spec is None:
            return None
        checked, refused = check_declared_llm(spec, path, self.endpoints)
        if refused:
            self.errors.extend(refused)
            return None
        try:
            return LLM(LLMConfig.from_value(checked))
        except (TypeError, ValidationError) as exc:
            self.errors.append((path, f"invalid llm configuration: {exc}"))
            return None


def _condition(spec: ConditionSpec) -> str | Condition:
    if isinstance(spec, str):
        return spec
    if isinstance(spec, AndCondition):
        return and_(*(_condition(m) for m in spec.and_))
    return or_(*(_condition(m) for m in spec.or_))


def _state_model(decl: Declaration, resolver: _Resolver) -> Any:
    base: type[BaseModel] = ConversationState if decl.is_conversational else FlowState
    spec = decl.state
    if spec is None:
        return ConversationState if decl.is_conversational else None
    if spec.python is not None:
        cls = resolver.python(spec.python, "state.python")
        if cls is None:
            return None
        if not (isinstance(cls, type) and issubclass(cls, BaseModel)):
            resolver.errors.append(("state.python", "must name a pydantic model class"))
            return None
        if issubclass(cls, base):
            return cls
        try:
            return type(f"{decl.name}State", (cls, base), {})
        except TypeError as exc:
            resolver.errors.append(("state.python", f"cannot compose with {base.__name__}: {exc}"))
            return None
    assert spec.json_schema is not None
    properties = spec.json_schema.get("properties", {})
    if not isinstance(properties, dict):
        resolver.errors.append(("state.json_schema.properties", "must be a mapping"))
        return None
    fields: dict[str, Any] = {}
    for name, prop in properties.items():
        path = f"state.json_schema.properties.{name}"
        kind = prop.get("type") if isinstance(prop, dict) else None
        if not isinstance(kind, str) or kind not in _JSON_TYPES:
            resolver.errors.append((f"{path}.type", f"must be one of {sorted(_JSON_TYPES)}"))
            continue
        if name in base.model_fields:
            resolver.errors.append((path, f"{name!r} is already a {base.__name__} field"))
            continue
        plain = isinstance(name, str) and _PROPERTY.match(name) and not keyword.iskeyword(name)
        if not plain or hasattr(base, name):
            resolver.errors.append(
                (path, "a property name must be a plain identifier (not starting with '_') "
                 f"that is not a {base.__name__} attribute")
            )
            continue
        annotation, empty = _JSON_TYPES[kind]
        default = prop.get("default", empty)
        if default is None and kind in ("array", "object"):
            fields[name] = (annotation, [] if kind == "array" else {})
        else:
            fields[name] = (annotation, default)
    try:
        return create_model(f"{decl.name}State", __base__=base, **fields)
    except (TypeError, ValueError) as exc:
        resolver.errors.append(("state.json_schema", str(exc)))
        return None


def _config(decl: Declaration, resolver: _Resolver) -> ConversationConfig | None:
    spec = decl.conversational
    if spec is None or not spec.enabled:
        return None
    router: dict[str, Any] | None = None
    if spec.router is not None:
        r = spec.router
        fmt = None
        if r.response_format is not None:
            fmt = resolver.python(r.response_format.python, "conversational.router.response_format")
        router = {
            "prompt": r.prompt,
            "response_format": fmt,
            "llm": resolver.llm(r.llm, "conversational.router.llm"),
            "routes": r.routes,
            "route_descriptions": dict(r.route_descriptions),
            "default_intent": r.default_intent,
            "fallback_intent": r.fallback_intent,
            "intent_field": r.intent_field,
        }
    values: dict[str, Any] = {
        "system_prompt": spec.system_prompt,
        "llm": resolver.llm(spec.llm, "conversational.llm"),
        "router": None,
        "intent_llm": resolver.llm(spec.intent_llm, "conversational.intent_llm"),
        "default_intents": spec.default_intents,
        "visible_agent_outputs": spec.visible_agent_outputs,
        "defer_trace_finalization": spec.defer_trace_finalization,
        "trace_scope": spec.trace_scope,
        "answer_from_history_prompt": spec.answer_from_history_prompt,
        "answer_from_history_llm": resolver.llm(
            spec.answer_from_history_llm, "conversational.answer_from_history_llm"
        ),
    }
    if resolver.errors:
        return None
    try:
        if router is not None:
            values["router"] = RouterConfig(**router)
        return ConversationConfig(**values)
    except ValidationError as exc:
        for e in exc.errors():
            where = ".".join(str(p) for p in e["loc"])
            resolver.errors.append((f"conversational.{where}".rstrip("."), e["msg"]))
        return None


def _action(
    name: str, method: MethodSpec, config: ConversationConfig | None, resolver: _Resolver
) -> Callable[..., Any]:
    action = method.do
    base = f"methods.{name}.do"
    if action is None:

        async def noop(self: Any, input: Any = None) -> Any:
            return None

        return noop
    if isinstance(action, AgentAction):
        w = action.with_
        tools = [resolver.python(t.python, f"{base}.with.tools.{i}") for i, t in enumerate(w.tools)]
        llm = resolver.llm(w.llm, f"{base}.with.llm") or (config.llm if config else None)
        try:
            agent = Agent(
                w.role,
                w.goal,
                w.backstory,
                llm,
                [t for t in tools if t is not None],
                max_iterations=w.max_iterations,
            )
        except (TypeError, ValueError) as exc:
            resolver.errors.append((f"{base}.with", str(exc)))
            agent = None

        async def run_agent(self: Any, input: Any = None) -> Any:
            assert agent is not None
            text = render_template(w.input, self.state, input, field=f"{base}.with.input")
            if not text.strip():
                raise DeclarationError(
                    [(f"{base}.with.input", f"{w.input!r} rendered to empty text: the agent "
                      "has nothing to answer (is the state field set?)")]
                )
            result = await agent.akickoff(text)
            return result.raw

        return run_agent
    if isinstance(action, LLMAction):
        lw = action.with_
        model = resolver.llm(lw.llm, f"{base}.with.llm") or (config.llm if config else None)

        async def run_llm(self: Any, input: Any = None) -> Any:
            assert model is not None
            messages: list[dict[str, Any]] = []
            if lw.system:
                system = render_template(lw.system, self.state, input, field=f"{base}.with.system")
                messages.append({"role": "system", "content": system})
            prompt = render_template(lw.prompt, self.state, input, field=f"{base}.with.prompt")
            messages.append({"role": "user", "content": prompt})
            return (await model.acall(messages)).content or ""

        return run_llm
    assert isinstance(action, CodeAction)
    func = resolver.python(action.python, f"{base}.python")
    if func is not None and not callable(func):
        resolver.errors.append((f"{base}.python", f"{action.python!r} is not callable"))
    kwargs = dict(action.with_)

    async def run_code(self: Any, input: Any = None) -> Any:
        result = func(self, input, **kwargs)
        return await result if inspect.isawaitable(result) else result

    return run_code


def _method(
    name: str, method: MethodSpec, config: ConversationConfig | None, resolver: _Resolver
) -> Callable[..., Any]:
    func = _action(name, method, config, resolver)
    func.__name__ = func.__qualname__ = name
    func.__doc__ = method.description
    if method.description:
        setattr(func, DESCRIPTION_ATTR, method.description)
    if method.human_feedback is not None:
        fb = method.human_feedback
        try:
            func = human_feedback(
                fb.message,
                emit=fb.emit,
                llm=resolver.llm(fb.llm, f"methods.{name}.human_feedback.llm"),
                default_outcome=fb.default_outcome,
            )(func)
        except (TypeError, ValueError) as exc:
            resolver.errors.append((f"methods.{name}.human_feedback", str(exc)))
    is_router = method.router or (config is not None and name == "route_conversation")
    if is_router:
        func = router(_condition(method.listen) if method.listen else None, labels=method.labels)(
            func
        )
    elif method.listen is not None:
        func = listen(_condition(method.listen))(func)
    if method.start is not False or (config is not None and name == "route_conversation"):
        func = start(None if method.start in (True, False) else _condition(method.start))(func)  # type: ignore[arg-type]
    return func


def flow_class_from_declaration(
    *,
    path: str | os.PathLike[str] | None = None,
    contents: str | None = None,
    allow_python: Iterable[str] = (),
    llm_endpoints: Iterable[str] = (),
    base: type[Any],
) -> type[Any]:
    """Build (and validate) the Flow class a declaration describes; nothing runs.

    Args:
        llm_endpoints: endpoints (``http(s)://host[:port][/path]``) its LLMs may name as
            ``api_base``/``base_url``, besides :func:`voxflow.llm.endpoints.llm_endpoints`
            (``VOXFLOW_LLM_ENDPOINTS`` in the CLI).
        base: the class it subclasses (``voxflow.Flow``: ``Flow.from_declaration``
            passes it, so this module does not import the class that imports it).

    Raises:
        DeclarationError: the declaration is invalid; ``.path`` names the field.
        ValueError: not exactly one of ``path``/``contents``; a bad ``llm_endpoints``
            entry.
    """
    if isinstance(allow_python, str):
        raise TypeError("allow_python must be a list of module names, not one string")
    if isinstance(llm_endpoints, str):
        raise TypeError("llm_endpoints must be a list of URLs, not one string")
    endpoints = normalize_endpoints(llm_endpoints, lambda i: f"llm_endpoints[{i}]")
    data = load_declaration_document(path, contents)
    reserved = frozenset(n for n in dir(base) if not n.startswith("_"))
    decl = parse_declaration(data, reserved=reserved, builtins=frozenset(BUILTIN_METHODS))
    resolver = _Resolver(list(allow_python), endpoints)
    config = _config(decl, resolver)
    state_model = _state_model(decl, resolver)
    if isinstance(state_model, type) and issubclass(state_model, BaseModel):
        for name, method in decl.methods.items():
            for field, text in templated_fields(method, f"methods.{name}"):
                check_template(text, field, resolver.errors, state_model=state_model)
    namespace: dict[str, Any] = {"__doc__": decl.description or f"{decl.name} (declared)."}
    for name, method in decl.methods.items():
        namespace[name] = _method(name, method, config, resolver)
    if resolver.errors:
        raise DeclarationError(resolver.errors)
    if state_model is not None:
        namespace["initial_state"] = state_model
    namespace["conversational"] = config is not None
    try:
        cls = type(decl.name, (base,), namespace)
    except Exception as exc:  # a wiring error the schema could not see
        raise DeclarationError([("methods", str(exc))]) from exc
    if config is not None:
        config(cls)
    return cls
