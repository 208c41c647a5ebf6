"""Module helpers for custom orchestration over any flow state shape.

These work on a Flow whose state is a ``ConversationState`` (messages are
``ConversationMessage``), the legacy ``ChatState`` (messages are ``{role, content}``
dicts) or a plain ``dict`` state. ``Flow`` methods of the same names call them.

``prepare_conversational_turn`` is the lower-level, legacy hydration for custom wrappers:
unlike ``handle_turn`` it also clears ``last_intent``, and it reads the legacy
``ConversationalConfig``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, get_args

from pydantic import BaseModel

from voxflow.conversation.config import ConversationalConfig
from voxflow.conversation.routing import classify_intent
from voxflow.conversation.state import ConversationMessage, ConversationState, MessageRole
from voxflow.llm import BaseLLM

__all__ = [
    "TurnFacts",
    "append_message",
    "get_conversation_messages",
    "get_conversational_config",
    "get_state_field",
    "input_history_to_messages",
    "normalize_kickoff_inputs",
    "prepare_conversational_turn",
    "receive_user_message",
    "set_state_field",
    "validate_user_message",
]

_ROLES = frozenset(get_args(MessageRole))
_BUFFER_ATTR = "_conversation_buffer"
_LLM_CACHE_ATTR = "_conversation_llm_history"


class TurnFacts:
    """What the current turn of a conversation has done so far: its pre-classified
    intent, the route chosen, the reply appended, the agent results recorded, and
    whether a user message awaits routing. Held by the conversation part
    (``flow.conversation.turn``), shared by its history, graph and turn APIs."""

    __slots__ = (
        "agent_results",
        "assistant_appended",
        "intent",
        "reply",
        "route",
        "user_message_waiting",
    )

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """A new turn: nothing done yet."""
        self.intent: str | None = None
        self.route: str | None = None
        self.reply: str | None = None
        self.assistant_appended = False
        self.agent_results: tuple[int, ...] = ()
        self.user_message_waiting = False


def validate_user_message(message: object, name: str = "message") -> str:
    """``message`` if it is a non-blank string.

    Raises:
        TypeError: not a string.
        ValueError: empty or only whitespace.
    """
    if not isinstance(message, str):
        raise TypeError(f"{name} must be a string, not {type(message).__name__}")
    if not message.strip():
        raise ValueError(f"{name} must not be empty")
    return message


def normalize_kickoff_inputs(
    inputs: Mapping[str, Any] | None = None,
    *,
    user_message: str | None = None,
    session_id: str | None = None,
) -> dict[str, Any]:
    """A copy of ``inputs`` with ``id`` (from ``session_id``) and ``user_message`` merged in.

    Raises:
        TypeError: ``inputs`` is not a mapping, or a value has the wrong type.
        ValueError: ``session_id`` is empty, or disagrees with ``inputs["id"]``.
    """
    if inputs is not None and not isinstance(inputs, Mapping):
        raise TypeError("inputs must be a mapping")
    out = dict(inputs or {})
    if session_id is not None:
        if not isinstance(session_id, str) or not session_id:
            raise ValueError("session_id must be a non-empty string")
        if "id" in out and out["id"] != session_id:
            raise ValueError("session_id disagrees with inputs['id']")
        out["id"] = session_id
    if user_message is not None:
        out["user_message"] = validate_user_message(user_message, "user_message")
    return out


def get_state_field(flow: Any, name: str, default: Any = None) -> Any:
    """Read ``name`` from a dict or pydantic state."""
    state = flow.state
    if isinstance(state, dict):
        return state.get(name, default)
    return getattr(state, name, default)


def set_state_field(flow: Any, name: str, value: Any) -> None:
    """Set ``name`` on a dict or pydantic state.

    Raises:
        AttributeError: a pydantic state that has no such field and forbids extras.
    """
    state = flow.state
    if isinstance(state, dict):
        state[name] = value
        return
    if isinstance(state, BaseModel):
        fields = type(state).model_fields
        if name not in fields and type(state).model_config.get("extra") != "allow":
            raise AttributeError(f"{type(state).__name__} has no field {name!r}")
    setattr(state, name, value)


def _has_field(state: Any, name: str) -> bool:
    if isinstance(state, dict):
        return True
    return name in type(state).model_fields or type(state).model_config.get("extra") == "allow"


def _messages_list(flow: Any) -> list[Any]:
    state = flow.state
    if isinstance(state, dict):
        messages = state.setdefault("messages", [])
    else:
        messages = getattr(state, "messages", None)
        if messages is None:
            buffer = getattr(flow, _BUFFER_ATTR, None)
            if buffer is None:
                buffer = []
                setattr(flow, _BUFFER_ATTR, buffer)
            return buffer  # states without a messages field use a flow-level buffer
    if not isinstance(messages, list):
        raise TypeError("state.messages must be a list")
    return messages


def _uses_models(flow: Any) -> bool:
    state = flow.state
    if isinstance(state, ConversationState):
        return True
    if isinstance(state, BaseModel):
        field = type(state).model_fields.get("messages")
        if field is not None:
            return "ConversationMessage" in str(field.annotation)
    return False


def append_message(flow: Any, role: str, content: Any, **extra: Any) -> Any:
    """Append a message to the flow's history; returns the stored message.

    ``ConversationState`` stores a ``ConversationMessage``; other states a dict.

    Raises:
        ValueError: ``role`` is not user, assistant, system or tool.
        pydantic.ValidationError: ``extra`` holds fields a message does not have.
    """
    if role not in _ROLES:
        raise ValueError(f"role must be one of {sorted(_ROLES)}, not {role!r}")
    messages = _messages_list(flow)
    message: Any
    if _uses_models(flow):
        message = ConversationMessage(role=role, content=content, **extra)  # type: ignore[arg-type]
    else:
        message = {"role": role, "content": content, **extra}
    messages.append(message)
    if role == "user":
        facts = getattr(getattr(flow, "conversation", None), "turn", None)
        if isinstance(facts, TurnFacts):
            facts.user_message_waiting = True  # route_conversation answers it next run
    return message


def get_conversation_messages(flow: Any, *, copy: bool = True) -> list[dict[str, Any]]:
    """The canonical history as chat-completion dicts (a new list).

    For ``ConversationMessage`` histories the conversion is cached on the flow and only
    messages appended (or replaced) since the last call are converted, so the per-turn
    cost is a C-level pass over the list rather than a Python-level one per message.

    Args:
        flow: the flow whose history to read.
        copy: True gives new dicts (change them freely); False gives the cached dicts
            themselves, read-only, for an LLM call that copies them (``voxflow.LLM``
            does): no per-message work at all.
    """
    state = flow.state
    messages = (
        state.get("messages") if isinstance(state, dict) else getattr(state, "messages", None)
    )
    if messages is None:
        messages = getattr(flow, _BUFFER_ATTR, None) or []
    cache = getattr(flow, _LLM_CACHE_ATTR, None)
    if cache is None:
        cache = _LLMHistory()
        setattr(flow, _LLM_CACHE_ATTR, cache)
    cached = cache.sync(messages)
    if cached is not None:
        return list(map(dict.copy, cached)) if copy else list(cached)
    out: list[dict[str, Any]] = []
    for m in messages:
        if isinstance(m, ConversationMessage):
            out.append(m.to_llm())
        elif isinstance(m, Mapping):
            if m.get("files"):  # a dict history: the same parts as ConversationMessage
                known = {k: v for k, v in m.items() if k in ConversationMessage.model_fields}
                out.append(ConversationMessage.model_validate(known).to_llm())
            else:
                out.append({k: v for k, v in m.items() if k != "metadata"})
    return out


class _LLMHistory:
    """``ConversationMessage.to_llm()`` of a history, kept in step with it.

    Messages are frozen, so a message's dict never changes; the history is compared
    with the messages last converted (identity first, at C speed) and only the
    differing tail is converted again: appends, an in-place replacement (the voice
    layer cuts an interrupted reply) and a trimmed or reassigned list all stay exact.
    """

    __slots__ = ("dicts", "messages")

    def __init__(self) -> None:
        self.messages: list[Any] = []
        self.dicts: list[dict[str, Any]] = []

    def sync(self, messages: Sequence[Any]) -> list[dict[str, Any]] | None:
        """The cached dicts of ``messages`` (updated); None unless all are models."""
        known = self.messages
        k = len(known)
        if len(messages) < k or messages[:k] != known:  # equal values give equal dicts
            k = 0
            while k < min(len(messages), len(known)) and messages[k] is known[k]:
                k += 1
            del known[k:]
            del self.dicts[k:]
        for m in messages[k:]:
            if not isinstance(m, ConversationMessage):
                known.clear()
                self.dicts.clear()
                return None
            known.append(m)
            self.dicts.append(m.to_llm())
        return self.dicts


def get_conversational_config(flow: Any) -> ConversationalConfig | None:
    """The class's legacy ``conversational_config``, if any."""
    config = getattr(type(flow), "conversational_config", None)
    return config if isinstance(config, ConversationalConfig) else None


def receive_user_message(
    flow: Any,
    text: str,
    *,
    outcomes: Sequence[str] | None = None,
    llm: BaseLLM | str | Mapping[str, Any] | None = None,
) -> str | None:
    """Append a user message and set ``current``/``last_user_message``.

    With ``outcomes`` the message is classified with ``llm`` and ``last_intent`` set.
    Returns the intent, or None.

    Raises:
        TypeError / ValueError: ``text`` is not a non-empty string; ``outcomes`` without
            ``llm``.
    """
    validate_user_message(text, "text")
    if outcomes is not None and llm is None:
        raise ValueError("llm is required with outcomes")
    append_message(flow, "user", text)
    state = flow.state
    for name in ("current_user_message", "last_user_message"):
        if _has_field(state, name):
            set_state_field(flow, name, text)
    if outcomes is None:
        return None
    assert llm is not None
    intent = classify_intent(text, outcomes, llm=llm)
    set_state_field(flow, "last_intent", intent)
    return intent


def prepare_conversational_turn(
    flow: Any,
    *,
    user_message: str,
    intents: Sequence[str] | None = None,
    intent_llm: BaseLLM | str | Mapping[str, Any] | None = None,
    config: ConversationalConfig | None = None,
) -> str | None:
    """Legacy turn hydration: clear ``last_intent``, append the message, classify.

    ``intents``/``intent_llm`` default to ``config`` (else the class's
    ``conversational_config``). Returns the classified intent, or None.
    """
    validate_user_message(user_message, "user_message")
    config = config or get_conversational_config(flow)
    if config is not None:
        intents = intents if intents is not None else config.intents
        intent_llm = intent_llm if intent_llm is not None else config.intent_llm
    if intents is not None and intent_llm is None:
        raise ValueError("intent_llm is required with intents")
    if _has_field(flow.state, "last_intent"):
        set_state_field(flow, "last_intent", None)
    return receive_user_message(flow, user_message, outcomes=intents, llm=intent_llm)


def input_history_to_messages(entries: Sequence[Any]) -> list[dict[str, Any]]:
    """Convert ``Flow.input_history`` (``ask()`` prompts and answers) to chat messages.

    Each entry (an object or a mapping with ``prompt`` and ``response``) becomes an
    assistant message (the prompt) and a user message (the answer, when there is one).
    """
    out: list[dict[str, Any]] = []
    for entry in entries:
        get = entry.get if isinstance(entry, Mapping) else (lambda k, e=entry: getattr(e, k, None))
        prompt = get("prompt")
        response = get("response")
        if prompt:
            out.append({"role": "assistant", "content": str(prompt)})
        if response is not None:
            out.append({"role": "user", "content": str(response)})
    return out
