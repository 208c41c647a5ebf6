"""Intent routing: the route catalog, the router prompt, ``classify_intent`` and the
LLM router.

The catalog lists the routes a conversational flow can take: the labels its ``@listen``
handlers listen to (method names excluded: they are completion events, not routes), plus
the built-in ``converse`` and ``end``; ``RouterConfig.routes`` limits it. Each route's
description is picked by this precedence:

1. ``RouterConfig.route_descriptions[label]``;
2. ``builtin_route_descriptions[label]`` (the flow class attribute, for built-ins);
3. the handler's declared description (``DESCRIPTION_ATTR``, set by declarations);
4. the first non-empty line of the handler's docstring;
5. empty.

The router prompt lists the catalog and asks for a structured answer (``response_format``,
synthesized as a pydantic model with a ``Literal`` of the labels when not given). An
answer naming no valid route falls back to ``fallback_intent``; a failed call to
``default_intent``. Only the last few messages go to the router, so its cost does not
grow with the conversation.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, create_model

from voxflow.blocking import sync_twin
from voxflow.conversation.config import RouterConfig
from voxflow.errors import ProviderError
from voxflow.llm import BaseLLM, LLMResponse, coerce_llm

__all__ = [
    "BUILTIN_ROUTES",
    "BUILTIN_ROUTE_DESCRIPTIONS",
    "DESCRIPTION_ATTR",
    "INTERNAL_ROUTES",
    "ROUTER_HISTORY_WINDOW",
    "RouteCatalog",
    "RouteEntry",
    "aclassify_intent",
    "build_route_catalog",
    "build_router_messages",
    "classify_intent",
    "collapse_to_outcome",
    "route_response_format",
    "route_with_llm",
]

logger = logging.getLogger(__name__)

BUILTIN_ROUTES = ("converse", "end")
"""Routes every conversational flow has."""

INTERNAL_ROUTES = frozenset({"answer_from_history"})
"""Routes that exist but are never offered to the router (deprecated compatibility)."""

BUILTIN_ROUTE_DESCRIPTIONS: Mapping[str, str] = {
    "converse": (
        "Ordinary chat, follow-ups, summaries, clarifications, and anything no other route covers."
    ),
    "end": "User signals the conversation is finished (goodbye, exit, done).",
    "answer_from_history": ("Deprecated: the answer is already in the conversation history."),
}
"""Framework text for the built-in routes, phrased for the router LLM."""

DESCRIPTION_ATTR = "__voxflow_description__"
"""Attribute holding a handler's declared description (declarative flows set it)."""

ROUTER_HISTORY_WINDOW = 6
"""How many recent messages the router sees (besides the current one)."""


@dataclasses.dataclass(frozen=True, slots=True)
class RouteEntry:
    """One route of the catalog."""

    label: str
    description: str
    handler: str | None
    """the method that listens to it (the first, if several)"""


@dataclasses.dataclass(frozen=True, slots=True)
class RouteCatalog:
    """The routes the router may choose from, sorted by label."""

    entries: tuple[RouteEntry, ...]

    @property
    def labels(self) -> tuple[str, ...]:
        """The route labels."""
        return tuple(e.label for e in self.entries)

    def custom_labels(self) -> tuple[str, ...]:
        """Labels other than the built-in routes."""
        return tuple(e.label for e in self.entries if e.label not in BUILTIN_ROUTES)

    def render(self) -> str:
        """The ``Routes:`` block of the router prompt."""
        lines = ["Routes:"]
        for e in self.entries:
            lines.append(f"- {e.label}: {e.description}" if e.description else f"- {e.label}")
        return "\n".join(lines)


def _doc_line(func: Any) -> str:
    doc = getattr(func, "__doc__", None) or ""
    for line in doc.splitlines():
        if line.strip():
            return line.strip()
    return ""


def build_route_catalog(
    handlers: Mapping[str, Sequence[Callable[..., Any]]],
    *,
    method_names: Iterable[str] = (),
    router: RouterConfig | None = None,
    builtin_descriptions: Mapping[str, str] = BUILTIN_ROUTE_DESCRIPTIONS,
) -> RouteCatalog:
    """Build the catalog from ``{label: [handler functions]}`` (see module docs).

    Args:
        handlers: the labels non-router methods listen to, with their functions.
        method_names: the flow's method names (never routes).
        router: explicit routes and description overrides.
        builtin_descriptions: the flow's ``builtin_route_descriptions``.
    """
    names = set(method_names)
    if router is not None and router.routes is not None:
        labels = set(router.routes)
    else:
        labels = {lbl for lbl in handlers if lbl not in names and lbl not in INTERNAL_ROUTES}
    labels |= set(BUILTIN_ROUTES)
    overrides = router.route_descriptions if router is not None else {}
    entries = []
    for label in sorted(labels):
        funcs = handlers.get(label, ())
        description = overrides.get(label) or builtin_descriptions.get(label, "")
        if not description:
            for func in funcs:
                declared = getattr(func, DESCRIPTION_ATTR, None)
                description = declared if isinstance(declared, str) and declared else ""
                description = description or _doc_line(func)
                if description:
                    break
        handler = getattr(funcs[0], "__name__", None) if funcs else None
        entries.append(RouteEntry(label=label, description=description, handler=handler))
    return RouteCatalog(entries=tuple(entries))


@functools.lru_cache(maxsize=256)
def _synthesized(labels: tuple[str, ...], field: str) -> type[BaseModel]:
    literal = Literal[labels]  # type: ignore[valid-type]
    model: type[BaseModel] = create_model("RouteDecision", **{field: (literal, ...)})  # type: ignore[call-overload]
    return model


def route_response_format(labels: Sequence[str], intent_field: str = "intent") -> type[BaseModel]:
    """A pydantic model ``{intent_field: Literal[labels]}`` for the router's answer (cached)."""
    if not labels:
        raise ValueError("labels must not be empty")
    return _synthesized(tuple(labels), intent_field)


def collapse_to_outcome(answer: str | None, outcomes: Sequence[str]) -> str | None:
    """Map a free-text answer onto one of ``outcomes``; None when nothing matches.

    Tries, in order: exact match, case-insensitive match, a JSON object whose first string
    value matches, then the single outcome the answer mentions as a word.
    """
    if answer is None:
        return None
    text = answer.strip().strip("\"'`.").strip()
    if text in outcomes:
        return text
    lowered = {o.lower(): o for o in outcomes}
    if text.lower() in lowered:
        return lowered[text.lower()]
    if text.startswith("{"):
        try:
            data = json.loads(text)
        except ValueError:
            data = None
        if isinstance(data, dict):
            for value in data.values():
                if isinstance(value, str):
                    return collapse_to_outcome(value, outcomes)
    words = {w.strip(".,:;!?\"'`()[]{}").lower() for w in text.split()}
    mentioned = [o for o in outcomes if o.lower() in words]
    return mentioned[0] if len(mentioned) == 1 else None


def _classify_messages(
    text: str, outcomes: Sequence[str], context: str | None
) -> list[dict[str, Any]]:
    system = (
        "Classify the user's message into exactly one of these outcomes: "
        + ", ".join(outcomes)
        + ". Answer with the outcome label only."
    )
    if context:
        system += f"\n\nContext:\n{context}"
    return [{"role": "system", "content": system}, {"role": "user", "content": text}]


async def aclassify_intent(
    text: str,
    outcomes: Sequence[str],
    *,
    llm: BaseLLM | str | Mapping[str, Any],
    context: str | None = None,
) -> str:
    """Map ``text`` to one of ``outcomes`` with ``llm``.

    An answer that matches no outcome collapses to the first outcome, so the result is
    always one of ``outcomes``.

    Raises:
        TypeError: ``text`` is not a string, or ``llm`` is not an LLM.
        ValueError: ``outcomes`` is empty.
        ProviderError: the LLM call failed.
    """
    if not isinstance(text, str):
        raise TypeError("text must be a string")
    if isinstance(outcomes, str) or not outcomes or not all(isinstance(o, str) for o in outcomes):
        raise ValueError("outcomes must be a non-empty sequence of labels")
    model = coerce_llm(llm, name="llm")
    if model is None:
        raise TypeError("llm is required to classify an intent")
    response = await model.acall(_classify_messages(text, outcomes, context))
    return collapse_to_outcome(response.content, outcomes) or outcomes[0]


classify_intent = sync_twin(aclassify_intent)


def build_router_messages(
    catalog: RouteCatalog,
    *,
    prompt: str | None,
    current_message: str,
    recent_history: Sequence[Mapping[str, Any]],
    last_intent: str | None,
    intent_field: str = "intent",
) -> list[dict[str, Any]]:
    """The messages sent to the router LLM: framing, catalog, recent history, the turn."""
    parts = []
    if prompt:
        parts.append(prompt.strip())
    parts.append(
        "You route each user message of a conversation to exactly one route.\n" + catalog.render()
    )
    if last_intent:
        parts.append(f"The previous turn was routed to: {last_intent}.")
    parts.append(
        f'Answer with a JSON object {{"{intent_field}": "<route>"}} naming one route above.'
    )
    history = "\n".join(
        f"{m.get('role')}: {m.get('content')}" for m in recent_history if m.get("content")
    )
    user = (
        f"Conversation so far:\n{history}\n\nLatest user message:\n{current_message}"
        if history
        else current_message
    )
    return [{"role": "system", "content": "\n\n".join(parts)}, {"role": "user", "content": user}]


def _label_of(response: LLMResponse, field: str, labels: Sequence[str]) -> str | None:
    parsed = response.parsed
    if parsed is not None:
        value = getattr(parsed, field, None)
        if isinstance(value, str) and value in labels:
            return value
    if response.content is None:
        return None
    try:
        data = json.loads(response.content)
    except ValueError:
        data = None
    if isinstance(data, dict):
        value = data.get(field)
        return value if isinstance(value, str) and value in labels else None
    answer = response.content.strip().strip("\"'`").strip()
    return answer if answer in labels else None


async def route_with_llm(
    llm: BaseLLM,
    catalog: RouteCatalog,
    config: RouterConfig,
    *,
    current_message: str,
    recent_history: Sequence[Mapping[str, Any]],
    last_intent: str | None,
) -> str:
    """Ask ``llm`` for a route: a label of ``catalog``, else the configured fallbacks."""
    labels = catalog.labels
    response_format = config.response_format or route_response_format(labels, config.intent_field)
    messages = build_router_messages(
        catalog,
        prompt=config.prompt,
        current_message=current_message,
        recent_history=recent_history,
        last_intent=last_intent,
        intent_field=config.intent_field,
    )
    try:
        response = await llm.acall(messages, response_format=response_format)
    except ProviderError as exc:
        logger.warning("router LLM failed (%s); using default_intent", type(exc).__name__)
        return config.default_intent
    label = _label_of(response, config.intent_field, labels)
    return label if label is not None else config.fallback_intent
