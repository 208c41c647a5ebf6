"""The built-in conversational graph and the history API of a conversational Flow.

A Flow class opts in with ``conversational = True`` or ``@ConversationConfig(...)``. Only
then are four built-in methods wired (through the runtime's ``_extra_flow_methods``
extension point), so a plain Flow carries none of them:

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

The router context is a lazy mapping (:class:`RouterContext`): ``message_history`` is
only converted when a ``route_turn`` reads it, so routing costs the same on turn 1,000 as
on turn 1.
"""

from __future__ import annotations

import contextvars
import inspect
import warnings
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from voxflow.conversation.config import (
    DEFAULT_SYSTEM_PROMPT,
    ConversationalConfig,
    ConversationConfig,
    RouterConfig,
    class_config,
)
from voxflow.conversation.events import ConversationRouteSelected
from voxflow.conversation.helpers import get_conversation_messages, get_state_field
from voxflow.conversation.routing import (
    BUILTIN_ROUTE_DESCRIPTIONS,
    ROUTER_HISTORY_WINDOW,
    RouteCatalog,
    build_route_catalog,
    route_with_llm,
)
from voxflow.conversation.state import ConversationMessage, ConversationState
from voxflow.files import model_supports_vision, without_images
from voxflow.flow.dsl import listen, marks_of, router, start
from voxflow.llm import BaseLLM

if TYPE_CHECKING:
    from voxflow.conversation.part import Conversation
    from voxflow.flow.definition import FlowDefinition

__all__ = [
    "BUILTIN_METHODS",
    "END_REPLY",
    "NO_LLM_REPLY",
    "ConversationGraph",
    "RouterContext",
    "current_llm_method",
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
    method.__qualname__ = f"ConversationGraph.{name}"
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

    def __init__(self, flow: ConversationGraph) -> None:
        self._flow = flow
        self._cache: dict[str, Any] = {}

    def __getitem__(self, key: str) -> Any:
        if key in self._cache:
            return self._cache[key]
        flow = self._flow
        if key == "system_prompt":
            value: Any = flow._system_prompt()
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


class ConversationGraph:
    """Mixin of :class:`voxflow.Flow`: conversational mode and the built-in graph."""

    conversational: ClassVar[bool] = False
    """Set to True (or use ``@ConversationConfig``) to enable the conversational graph."""
    conversation_config: ClassVar[ConversationConfig | None] = None
    """The class's ``ConversationConfig`` (set by the decorator)."""
    conversational_config: ClassVar[ConversationalConfig | None] = None
    """Legacy configuration read by ``prepare_conversational_turn``."""
    builtin_route_descriptions: ClassVar[Mapping[str, str]] = BUILTIN_ROUTE_DESCRIPTIONS
    """Router descriptions of the built-in routes (override per class)."""
    defer_trace_finalization: bool | None = None
    """Instance override of ``ConversationConfig.defer_trace_finalization``."""

    _route_catalog_cache: ClassVar[RouteCatalog | None] = None

    if TYPE_CHECKING:
        _voxflow_definition: ClassVar[FlowDefinition | None]
        _sequential_starts: ClassVar[bool]
        initial_state: ClassVar[Any]
        _frame_sink: Any

        @classmethod
        def flow_definition(cls) -> FlowDefinition: ...
        @classmethod
        def _state_type(cls) -> Any: ...
        @property
        def state(self) -> Any: ...
        def append_assistant_message(self, content: Any, **extra: Any) -> Any: ...
        conversation: Conversation

    # ------------------------------------------------------------------ class set-up

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._route_catalog_cache = None
        if cls.conversational:
            cls._prepare_conversational_class()

    @classmethod
    def _prepare_conversational_class(cls) -> None:
        cls._sequential_starts = True
        if cls.initial_state is None and cls._state_type() is None:
            cls.initial_state = ConversationState

    @classmethod
    def _enable_conversation(cls) -> None:
        """Turn conversational mode on after the class was created (the decorator)."""
        cls.conversational = True
        cls._prepare_conversational_class()
        cls._route_catalog_cache = None
        cls._voxflow_definition = None
        cls.flow_definition()

    @classmethod
    def _extra_flow_methods(cls) -> Mapping[str, Callable[..., Any]]:
        if not cls.conversational:
            return {}
        return {
            name: stub
            for name, stub in _builtin_wiring().items()
            if marks_of(getattr(cls, name, None)) is None  # a decorated override wins
        }

    def _order_starts(self, names: list[str]) -> list[str]:
        if not type(self).conversational or "route_conversation" not in names:
            return names
        return [n for n in names if n != "route_conversation"] + ["route_conversation"]

    @classmethod
    def _conversation_config(cls) -> ConversationConfig:
        return class_config(cls)

    @classmethod
    def route_catalog(cls) -> RouteCatalog:
        """The routes the LLM router may choose from (cached per class)."""
        catalog = cls.__dict__.get("_route_catalog_cache")
        if catalog is None:
            definition = cls.flow_definition()
            handlers: dict[str, list[Callable[..., Any]]] = {}
            for name, method in definition.methods.items():
                if method.router or method.listen is None:
                    continue
                for label in method.listen.labels():
                    handlers.setdefault(label, []).append(getattr(cls, name))
            catalog = build_route_catalog(
                handlers,
                method_names=definition.methods,
                router=cls._conversation_config().router,
                builtin_descriptions=cls.builtin_route_descriptions,
            )
            cls._route_catalog_cache = catalog
        return catalog

    @classmethod
    def _route_labels(cls) -> frozenset[str]:
        definition = cls.flow_definition()
        labels: set[str] = set(cls.route_catalog().labels)
        for method in definition.methods.values():
            if method.listen is not None:
                labels |= method.listen.labels() - set(definition.methods)
        return frozenset(labels)

    def _system_prompt(self) -> str | None:
        prompt = self._conversation_config().system_prompt
        if prompt is None:
            return DEFAULT_SYSTEM_PROMPT
        return prompt or None

    # ------------------------------------------------------------------ built-in graph

    def conversation_start(self) -> Any:
        """Called by ``route_conversation`` before routing, every turn.

        The default marks ``state.session_ready`` on the first turn. Override for
        per-session bootstrap (may be async).
        """
        state = self.state
        if not get_state_field(self, "session_ready", True):
            if isinstance(state, dict):
                state["session_ready"] = True
            else:
                state.session_ready = True
        return None

    def route_turn(self, context: RouterContext) -> str | Awaitable[str | None] | None:
        """Pick this turn's route; a falsy result defers to the precedence rules.

        The default runs the LLM router when ``ConversationConfig.router`` is set, or when
        the flow has custom routes and no ``default_intents``. Without a router LLM it
        returns ``RouterConfig.default_intent``. Override to route by rules (return a
        label) or to add side effects (then call ``super().route_turn(context)``).
        """
        config = self._conversation_config()
        catalog = self.route_catalog()
        configured = config.router
        pre_classified = self.conversation.turn.intent is not None or config.default_intents
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
        """The built-in start/router: ``conversation_start()``, then choose the route.

        It routes only a user message received since the last routing (by a turn API,
        ``receive_user_message`` or ``prepare_conversational_turn``). A bare
        ``kickoff(inputs={"id": ...})`` that restores a session, or starts a new one,
        has no message to answer: it selects no route and no handler runs (the
        restored ``current_user_message`` was answered by the turn that received it).
        """
        turn = self.conversation.turn
        if not turn.user_message_waiting:
            return None
        turn.user_message_waiting = False
        started = self.conversation_start()
        if inspect.isawaitable(started):
            return self._aroute_after(started)
        return self._route()

    async def _aroute_after(self, started: Awaitable[Any]) -> str:
        await started
        route = self._route()
        return await route if inspect.isawaitable(route) else route

    def _route(self) -> str | Awaitable[str]:
        label = self.route_turn(RouterContext(self))
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
        if self.conversation.turn.intent:
            return self._commit_route(self.conversation.turn.intent, "intent")
        if self._answer_from_history_llm() is not None:
            return self._aanswer_from_history_route()
        return self._commit_route("converse", "default")

    def _commit_route(self, route: str, source: Any) -> str:
        previous = get_state_field(self, "last_intent", None)
        state = self.state
        if isinstance(state, dict):
            state["last_intent"] = route
        else:
            state.last_intent = route
        self.conversation.turn.route = route
        messages = get_state_field(self, "messages", None) or []
        self.conversation.history.emit(
            ConversationRouteSelected,
            route=route,
            previous_intent=previous,
            message_index=max(len(messages) - 1, 0),
            source=source,
        )
        return route

    def _answer_from_history_llm(self) -> BaseLLM | None:
        config = self._conversation_config()
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
        can: Any = self.can_answer_from_history()
        if inspect.isawaitable(can):
            can = await can
        if can:
            return self._commit_route("answer_from_history", "answer_from_history")
        return self._commit_route("converse", "default")

    async def can_answer_from_history(self) -> bool:
        """Deprecated eligibility check: does the history already answer the message?"""
        llm = self._answer_from_history_llm()
        if llm is None:
            return False
        messages = [
            {
                "role": "system",
                "content": "Can the user's latest message be answered only from the "
                "conversation so far? Answer yes or no.",
            },
            *get_conversation_messages(self, copy=False),
        ]
        response = await llm.acall(messages)
        return (response.content or "").strip().lower().startswith("yes")

    def converse_turn(self) -> Any:
        """Default chat handler: the conversation LLM over the system prompt + history."""
        llm = self._conversation_config().llm
        if llm is None:
            return self._reply(NO_LLM_REPLY)
        return self._allm_reply(llm, self._system_prompt(), "converse_turn")

    def end_conversation(self) -> str:
        """Mark the conversation ended (``state.ended``) and say goodbye."""
        state = self.state
        if isinstance(state, dict):
            state["ended"] = True
        else:
            state.ended = True
        return self._reply(END_REPLY)

    def answer_from_history_turn(self) -> Any:
        """Deprecated: answer from the history. Use ``converse`` instead."""
        warnings.warn(
            "answer_from_history_turn is deprecated; use converse_turn",
            DeprecationWarning,
            stacklevel=2,
        )
        llm = self._answer_from_history_llm()
        if llm is None:
            return self._reply(NO_LLM_REPLY)
        prompt = self._conversation_config().answer_from_history_prompt
        return self._allm_reply(
            llm, prompt or ANSWER_FROM_HISTORY_PROMPT, "answer_from_history_turn"
        )

    async def _allm_reply(self, llm: BaseLLM, system: str | None, method: str) -> str:
        messages = get_conversation_messages(self, copy=False)  # the LLM copies them
        if not model_supports_vision(str(getattr(llm, "model", ""))):
            messages = without_images(messages)  # input-file images: a note instead
        if system:
            messages.insert(0, {"role": "system", "content": system})
        token = current_llm_method.set(method)
        try:
            # Stream only when a turn is streamed: observers then see every chunk.
            response = await llm.acall(messages, stream=self._frame_sink is not None)
        finally:
            current_llm_method.reset(token)
        return self._reply(response.content or "")

    def _reply(self, text: str) -> str:
        self.append_assistant_message(text)
        return text
