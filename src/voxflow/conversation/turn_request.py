"""A turn's arguments, checked before anything changes: :class:`TurnRequest`.

``handle_turn``, ``ahandle_turn``, ``stream_turn`` and ``astream_turn`` validate what
they were given (:func:`check_call`, :func:`resolve_intents`) and carry it as one
:class:`TurnRequest` into the turn, so a rejected turn leaves no trace (step 1 of
:mod:`voxflow.conversation.part`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from voxflow.conversation.helpers import validate_user_message
from voxflow.files import FileRef
from voxflow.ids import SessionId
from voxflow.llm import BaseLLM, coerce_llm

if TYPE_CHECKING:
    from voxflow.conversation.config import ConversationConfig

__all__ = ["KICKOFF_OPTIONS", "TurnRequest", "check_call", "resolve_intents"]

KICKOFF_OPTIONS = frozenset({"from_checkpoint", "restore_from_state_id", "input_files"})
"""The keyword arguments a turn passes on to the kickoff."""


@dataclasses.dataclass(frozen=True, slots=True)
class TurnRequest:
    """One turn's validated arguments (``files``: the input files, read)."""

    message: str
    session_id: SessionId | None
    intents: tuple[str, ...] | None
    intent_llm: BaseLLM | None
    from_checkpoint: Any
    restore_from_state_id: str | None
    files: dict[str, FileRef]


def check_call(api: str, message: Any, session_id: Any, kickoff_kwargs: Mapping[str, Any]) -> None:
    """Check the message, the session id and the kickoff option names of a call of ``api``.

    Raises:
        TypeError / ValueError: an invalid argument, named in the message.
    """
    validate_user_message(message)
    if session_id is not None and (not isinstance(session_id, str) or not session_id):
        raise ValueError("session_id must be a non-empty string or None")
    unknown = set(kickoff_kwargs) - KICKOFF_OPTIONS
    if unknown:
        raise TypeError(f"{api}() got unexpected keyword argument(s): {sorted(unknown)}")


def resolve_intents(
    intents: Any, intent_llm: Any, config: ConversationConfig
) -> tuple[tuple[str, ...] | None, BaseLLM | None]:
    """The intents to classify the message into and the LLM to do it (``config``'s
    defaults when none are given).

    Raises:
        ValueError: malformed intents, or intents without an intent LLM.
        TypeError: ``intent_llm`` is not an LLM, a model id or a config mapping.
    """
    if intents is not None:
        if isinstance(intents, str) or not isinstance(intents, Sequence) or not intents:
            raise ValueError("intents must be a non-empty list of labels")
        if not all(isinstance(i, str) and i for i in intents):
            raise ValueError("intents must contain non-empty strings only")
        intents = tuple(intents)
    else:
        intents = config.default_intents
    llm = coerce_llm(intent_llm, name="intent_llm") or config.intent_llm
    if intents is not None and llm is None:
        raise ValueError("intent_llm is required with intents (or ConversationConfig.intent_llm)")
    return intents, llm
