"""The built-in conversational graph of a Flow, and how its class is prepared for it.

A Flow class opts in with ``conversational = True`` or ``@ConversationConfig(...)``. Only
then are four built-in methods wired (by the conversation part's ``extra_methods`` hook,
:mod:`voxflow.flow.parts`), so a plain Flow carries none of them:

* ``route_conversation``: ``@start()`` + router. When a user message awaits an answer
  (received by a turn API or ``receive_user_message`` since the last routing; a bare
  ``kickoff`` that restores or starts a session has none, and routes nothing), calls
  ``conversation_start()`` then ``route_turn(context)`` and picks the route by this
  precedence: a non-empty ``route_turn`` result; else the intent pre-classified for
  *this* turn; else the deprecated ``answer_from_history`` check when configured; else
  ``converse``. The previous turn's ``last_intent`` is router context, never a fallback.
* ``converse_turn`` (listens to ``converse``): the conversation LLM over the system prompt
  and the canonical history; without an LLM it replies :data:`NO_LLM_REPLY`.
* ``end_conversation`` (listens to ``end``): sets ``state.ended`` and says goodbye.
* ``answer_from_history_turn`` (listens to ``answer_from_history``): deprecated.

Override any of them by defining a method of the same name (decorating it is optional:
an undecorated override keeps the built-in wiring). The built-ins are sync functions that
return a coroutine only when they must wait for an LLM, so a rule-based flow stays an
all-sync graph that the runtime runs inline, without thread hops.

:class:`Graph` (held by the conversation part, ``flow.conversation.graph``) runs them;
``voxflow.Flow``'s methods of those names are delegates to it. The module functions
prepare a class: :func:`builtin_methods`, :func:`default_state`, :func:`route_catalog`
(cached per class, dropped by :func:`forget_class`).

The router context is a lazy mapping (:class:`RouterContext`): ``message_history`` is
only converted when a ``route_turn`` reads it, so routing costs the same on turn 1,000 as
on turn 1.
"""

from __future__ import annotations

import contextvars
import inspect
import warnings
import weakref
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from voxflow.conversation.config import DEFAULT_SYSTEM_PROMPT, RouterConfig, class_config
from voxflow.conversation.events import ConversationRouteSelected
from voxflow.conversation.helpers import TurnFacts, get_conversation_messages, get_state_field
from voxflow.conversation.history import History
from voxflow.conversation.routing import (
    INTERNAL_ROUTES,
    ROUTER_HISTORY_WINDOW,
    RouteCatalog,
    build_route_catalog,
    route_with_llm,
)
from voxflow.conversation.state import ConversationMessage, ConversationState
from voxflow.errors import FlowDefinitionError, UnknownRouteError
from voxflow.files import model_supports_vision, without_images
from voxflow.flow.definition import annotated_labels
from voxflow.flow.dsl import listen, marks_of, router, start
from voxflow.llm import BaseLLM

if TYPE_CHECKING:
    from pydantic import BaseModel

    from voxflow.flow.host import FlowHost

__all__ = [
    "BUILTIN_METHODS",
    "END_REPLY",
    "NO_LLM_REPLY",
    "Graph",
    "RouterContext",
    "builtin_methods",
    "check_declared_routes",
    "current_llm_method",
    "default_state",
    "forget_class",
    "handled_routes",
    "route_catalog",
    "route_labels",
]

NO_LLM_REPLY = (
    "I can only answer that once a language model is configured: start voxflow with"
    " --model, for example --model gpt-4o-mini, and the provider's API key."
)
"""What ``converse_turn`` replies when no conversation LLM is configured."""

END_REPLY = "Goodbye!"
"""What ``end_conversation`` replies."""

ANSWER_FROM_HISTORY_PROMPT = (
    "Answer the user's latest message using only information already present in the conversation."
)

BUILTIN_METHODS = (
    "route_conversation",
    "converse_turn",
    "end_conversation",
    "answer_from_history_turn",
)
"""Methods a conversational flow gets for free (override by name)."""

current_llm_method: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "voxflow_current_llm_method", default=None
)
"""The built-in method making the current LLM call (stream frames carry it)."""


def _stub(name: str) -> Callable[..., Any]:
    def method(self: Any) -> Any:  # only carries the wiring marks
        raise NotImplementedError(name)

    method.__name__ = name
    method.__qualname__ = f"Graph.{name}"
    return method


def _builtin_wiring() -> dict[str, Callable[..., Any]]:
    return {
        "route_conversation": start()(router()(_stub("route_conversation"))),
        "converse_turn": listen("converse")(_stub("converse_turn")),
        "end_conversation": listen("end")(_stub("end_conversation")),
        "answer_from_history_turn": listen("answer_from_history")(
            _stub("answer_from_history_turn")
        ),
    }


def _router_dict(message: Any) -> dict[str, Any]:
    """A message for the router's prompt: its text only, never attached file content."""
    if isinstance(message, ConversationMessage):
        if message.files:
            return {"role": message.role, "content": message.text}
        return message.to_llm()
    return {k: v for k, v in dict(message).items() if k not in ("files", "metadata")}


class RouterContext(Mapping[str, Any]):
    """What ``route_turn(context)`` receives, computed on first access of each key.

    Keys: ``system_prompt``, ``current_user_message``, ``message_history`` (the whole
    history as chat dicts: O(history), built only if read), ``events`` and
    ``last_intent``. :meth:`recent_history` gives the last few messages cheaply.
    """

    KEYS = ("system_prompt", "current_user_message", "message_history", "events", "last_intent")

    def __init__(self, flow: Any, system_prompt: Callable[[], str | None]) -> None:
        self._flow = flow
        self._system_prompt = system_prompt
        self._cache: dict[str, Any] = {}

    def __getitem__(self, key: str) -> Any:
        if key in self._cache:
            return self._cache[key]
        flow = self._flow
        if key == "system_prompt":
            value: Any = self._system_prompt()
        elif key == "message_history":
            value = get_conversation_messages(flow)
        elif key == "events":
            events = get_state_field(flow, "events", None) or []
            value = [e.model_dump() if hasattr(e, "model_dump") else dict(e) for e in events]
        elif key in ("current_user_message", "last_intent"):
            value = get_state_field(flow, key, None)
        else:
            raise KeyError(key)
        self._cache[key] = value
        return value

    def __iter__(self) -> Iterator[str]:
        return iter(self.KEYS)

    def __len__(self) -> int:
        return len(self.KEYS)

    @property
    def computed(self) -> frozenset[str]:
        """The keys read so far (the others cost nothing)."""
        return frozenset(self._cache)

    def recent_history(self, count: int = ROUTER_HISTORY_WINDOW) -> list[dict[str, Any]]:
        """The last ``count`` messages *before* the current user message, as chat dicts."""
        messages = get_state_field(self._flow, "messages", None) or []
        window = messages[-(count + 1) : -1] if count > 0 else []
        return [_router_dict(m) for m in window]


# ---------------------------------------------------------------------- the class

_CATALOGS: weakref.WeakKeyDictionary[type[Any], RouteCatalog] = weakref.WeakKeyDictionary()
_HANDLED: weakref.WeakKeyDictionary[type[Any], tuple[str, ...]] = weakref.WeakKeyDictionary()


def forget_class(flow_cls: type[Any]) -> None:
    """``flow_cls`` was created or reconfigured: drop its cached route catalog."""
    _CATALOGS.pop(flow_cls, None)
    _HANDLED.pop(flow_cls, None)


def handled_routes(flow_cls: type[Any]) -> tuple[str, ...]:
    """The labels some method of ``flow_cls`` listens to (a ``@listen``, a router's or a
    conditional start's trigger), method names and the deprecated internal routes
    excluded, sorted: the routes a turn may take (cached per class)."""
    routes = _HANDLED.get(flow_cls)
    if routes is None:
        definition = flow_cls.flow_definition()
        labels: set[str] = set()
        for method in definition.methods.values():
            for condition in (method.listen, method.start_condition):
                if condition is not None:
                    labels |= condition.labels()
        routes = tuple(sorted(labels - set(definition.methods) - INTERNAL_ROUTES))
        _HANDLED[flow_cls] = routes
    return routes


def _no_handler(flow_cls: type[Any]) -> str:
    return (f"which no handler listens to; the routes are "
            f"{', '.join(handled_routes(flow_cls))}")


def check_declared_routes(flow_cls: type[Any]) -> None:
    """Refuse a conversational class whose ``route_turn`` declares (a ``Literal[...]`` or
    ``Enum`` return annotation) a route no handler listens to: the turn would answer
    nothing.

    Raises:
        FlowDefinitionError: naming the route and the routes there are.
    """
    if not getattr(flow_cls, "conversational", False):
        return
    declared = annotated_labels(flow_cls.route_turn)
    for route in declared or ():
        if route not in handled_routes(flow_cls):
            name = flow_cls.__name__
            raise FlowDefinitionError(
                f"{name}.route_turn declares the route {route!r}, {_no_handler(flow_cls)}"
                f": add @listen({route!r}) or remove it from the Literal",
                flow=name,
                method="route_turn",
                label=route,
            )


def builtin_methods(flow_cls: type[Any]) -> Mapping[str, Callable[..., Any]]:
    """The wiring of the built-in methods a conversational class registers (none for
    another class); a decorated override of the same name keeps its own."""
    if not getattr(flow_cls, "conversational", False):
        return {}
    return {
        name: stub
        for name, stub in _builtin_wiring().items()
        if marks_of(getattr(flow_cls, name, None)) is None
    }


def default_state(flow_cls: type[Any]) -> type[BaseModel] | None:
    """A conversational class that names no state keeps a :class:`ConversationState`."""
    return ConversationState if getattr(flow_cls, "conversational", False) else None


def route_catalog(flow_cls: type[Any]) -> RouteCatalog:
    """The routes the LLM router of ``flow_cls`` may choose from (cached per class)."""
    catalog = _CATALOGS.get(flow_cls)
    if catalog is None:
        definition = flow_cls.flow_definition()
        handlers: dict[str, list[Callable[..., Any]]] = {}
        for name, method in definition.methods.items():
            if method.router or method.listen is None:
                continue
            for label in method.listen.labels():
                handlers.setdefault(label, []).append(getattr(flow_cls, name))
        catalog = build_route_catalog(
            handlers,
            method_names=definition.methods,
            router=class_config(flow_cls).router,
            builtin_descriptions=flow_cls.builtin_route_descriptions,
        )
        _CATALOGS[flow_cls] = catalog
    return catalog


def route_labels(flow_cls: type[Any]) -> frozenset[str]:
    """Every label a route of ``flow_cls`` may be (a handler's result equal to one is a
    route label, not a reply)."""
    definition = flow_cls.flow_definition()
    labels: set[str] = set(route_catalog(flow_cls).labels)
    for method in definition.methods.values():
        if method.listen is not None:
            labels |= method.listen.labels() - set(definition.methods)
    return frozenset(labels)


# ---------------------------------------------------------------------- one flow


class Graph:
    """The built-in graph of one Flow's conversation (see the module docs).

    Args:
        host: the Flow, as its parts see it.
        turn: what the current turn has done (the route chosen is noted there).
        history: the conversation's history (replies are appended through the Flow).
    """

    __slots__ = ("_history", "_host", "_turn")

    def __init__(self, host: FlowHost, turn: TurnFacts, history: History) -> None:
        self._host = host
        self._turn = turn
        self._history = history

    def order_starts(self, names: list[str]) -> list[str] | None:
        """A conversational flow's starts run one at a time, ``route_conversation`` last."""
        if not getattr(type(self._host.flow), "conversational", False):
            return None
        return [n for n in names if n != "route_conversation"] + [
            n for n in names if n == "route_conversation"
        ]

    def system_prompt(self) -> str | None:
        """The system prompt of ``converse_turn`` (the default one when unset, none when
        set to "")."""
        prompt = class_config(type(self._host.flow)).system_prompt
        if prompt is None:
            return DEFAULT_SYSTEM_PROMPT
        return prompt or None

    # ------------------------------------------------------------------ routing

    def conversation_start(self) -> Any:
        """:meth:`voxflow.Flow.conversation_start`."""
        flow = self._host.flow
        if not get_state_field(flow, "session_ready", True):
            state = flow.state
            if isinstance(state, dict):
                state["session_ready"] = True
            else:
                state.session_ready = True
        return None

    def route_turn(self, context: RouterContext) -> str | Awaitable[str | None] | None:
        """:meth:`voxflow.Flow.route_turn`."""
        flow_cls = type(self._host.flow)
        config = class_config(flow_cls)
        catalog = route_catalog(flow_cls)
        configured = config.router
        pre_classified = self._turn.intent is not None or config.default_intents
        if configured is None and pre_classified:
            return None  # legacy pre-classification path
        if configured is None and not catalog.custom_labels():
            return None
        router_config = configured or RouterConfig()
        llm = config.router_llm()
        if llm is None:
            return router_config.default_intent
        return route_with_llm(
            llm,
            catalog,
            router_config,
            current_message=str(context["current_user_message"] or ""),
            recent_history=context.recent_history(),
            last_intent=context["last_intent"],
        )

    def route_conversation(self) -> Any:
        """:meth:`voxflow.Flow.route_conversation`."""
        turn = self._turn
        if not turn.user_message_waiting:
            return None
        turn.user_message_waiting = False
        started = self._host.flow.conversation_start()
        if inspect.isawaitable(started):
            return self._aroute_after(started)
        return self._route()

    async def _aroute_after(self, started: Awaitable[Any]) -> str:
        await started
        route = self._route()
        return await route if inspect.isawaitable(route) else route

    def _route(self) -> str | Awaitable[str]:
        flow = self._host.flow
        label = flow.route_turn(RouterContext(flow, self.system_prompt))
        if inspect.isawaitable(label):
            return self._aselect(label)
        return self._select(label)

    async def _aselect(self, label: Awaitable[str | None]) -> str:
        selected = self._select(await label)
        return await selected if inspect.isawaitable(selected) else selected

    def _select(self, label: Any) -> str | Awaitable[str]:
        value = getattr(label, "value", label)  # Enum labels
        if value is not None and not isinstance(value, str):
            raise TypeError(f"route_turn() must return a route label (str) or None, not {value!r}")
        if value:
            return self._commit_route(value, "route_turn")
        if self._turn.intent:
            return self._commit_route(self._turn.intent, "intent")
        if self._answer_from_history_llm() is not None:
            return self._aanswer_from_history_route()
        return self._commit_route("converse", "default")

    def _commit_route(self, route: str, source: Any) -> str:
        flow = self._host.flow
        flow_cls = type(flow)
        if route not in handled_routes(flow_cls) and route not in INTERNAL_ROUTES:
            chooser = (f"{flow_cls.__name__}.route_turn" if source == "route_turn"
                       else "this turn's intent" if source == "intent" else "the router")
            raise UnknownRouteError(
                f"{chooser} chose the route {route!r}, {_no_handler(flow_cls)}: "
                f"return one of them, or add @listen({route!r})",
                route=route,
                source=source,
                routes=handled_routes(flow_cls),
            )
        previous = get_state_field(flow, "last_intent", None)
        state = flow.state
        if isinstance(state, dict):
            state["last_intent"] = route
        else:
            state.last_intent = route
        self._turn.route = route
        messages = get_state_field(flow, "messages", None) or []
        self._history.emit(
            ConversationRouteSelected,
            route=route,
            previous_intent=previous,
            message_index=max(len(messages) - 1, 0),
            source=source,
        )
        return route

    def _answer_from_history_llm(self) -> BaseLLM | None:
        config = class_config(type(self._host.flow))
        if config.answer_from_history_llm is None and config.answer_from_history_prompt is None:
            return None
        return config.answer_from_history_llm or config.llm

    async def _aanswer_from_history_route(self) -> str:
        warnings.warn(
            "the answer_from_history route is deprecated; converse already receives the "
            "canonical history",
            DeprecationWarning,
            stacklevel=2,
        )
        can: Any = self._host.flow.can_answer_from_history()
        if inspect.isawaitable(can):
            can = await can
        if can:
            return self._commit_route("answer_from_history", "answer_from_history")
        return self._commit_route("converse", "default")

    async def can_answer_from_history(self) -> bool:
        """:meth:`voxflow.Flow.can_answer_from_history`."""
        llm = self._answer_from_history_llm()
        if llm is None:
            return False
        messages = [
            {
                "role": "system",
                "content": "Can the user's latest message be answered only from the "
                "conversation so far? Answer yes or no.",
            },
            *get_conversation_messages(self._host.flow, copy=False),
        ]
        response = await llm.acall(messages)
        return (response.content or "").strip().lower().startswith("yes")

    # ------------------------------------------------------------------ handlers

    def converse_turn(self) -> Any:
        """:meth:`voxflow.Flow.converse_turn`."""
        llm = class_config(type(self._host.flow)).llm
        if llm is None:
            return self._reply(NO_LLM_REPLY)
        return self._allm_reply(llm, self.system_prompt(), "converse_turn")

    def end_conversation(self) -> str:
        """:meth:`voxflow.Flow.end_conversation`."""
        state = self._host.flow.state
        if isinstance(state, dict):
            state["ended"] = True
        else:
            state.ended = True
        return self._reply(END_REPLY)

    def answer_from_history_turn(self) -> Any:
        """:meth:`voxflow.Flow.answer_from_history_turn`."""
        warnings.warn(
            "answer_from_history_turn is deprecated; use converse_turn",
            DeprecationWarning,
            stacklevel=3,
        )
        llm = self._answer_from_history_llm()
        if llm is None:
            return self._reply(NO_LLM_REPLY)
        prompt = class_config(type(self._host.flow)).answer_from_history_prompt
        return self._allm_reply(
            llm, prompt or ANSWER_FROM_HISTORY_PROMPT, "answer_from_history_turn"
        )

    async def _allm_reply(self, llm: BaseLLM, system: str | None, method: str) -> str:
        messages = get_conversation_messages(self._host.flow, copy=False)  # the LLM copies
        if not model_supports_vision(str(getattr(llm, "model", ""))):
            messages = without_images(messages)  # input-file images: a note instead
        if system:
            messages.insert(0, {"role": "system", "content": system})
        token = current_llm_method.set(method)
        try:
            # Stream only when a turn is streamed: observers then see every chunk.
            response = await llm.acall(messages, stream=self._host.streaming)
        finally:
            current_llm_method.reset(token)
        return self._reply(response.content or "")

    def _reply(self, text: str) -> str:
        self._host.flow.append_assistant_message(text)
        return text
