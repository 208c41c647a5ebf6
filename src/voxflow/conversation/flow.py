"""``voxflow.Flow``: the Flow core with conversational mode built on top.

The Flow core (:class:`voxflow.flow.Flow`: the dispatch loop, state, persistence, human
feedback, checkpoints, streaming) knows nothing of conversations; it offers extension
points (see :mod:`voxflow.flow.runtime`). This module attaches the conversation through
them: the turn APIs (:mod:`.turns`), the history API (:mod:`.history`) and the built-in
graph (:mod:`.graph`) override the core's hooks (extra built-in methods, start order,
hydration before the starts, trace deferral, incremental and revision-checked saves).
The import goes one way: conversation builds on flow, never the reverse.

A Flow that is not conversational carries the turn APIs but none of the wiring: they
raise ``ConversationModeError``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any, ClassVar

from voxflow.conversation.graph import ConversationGraph
from voxflow.conversation.history import ConversationHistory
from voxflow.conversation.turns import ConversationTurns
from voxflow.flow.runtime import Flow as FlowCore
from voxflow.flow.runtime import StateT

__all__ = ["Flow"]


class Flow(
    ConversationTurns, ConversationHistory, ConversationGraph, FlowCore[StateT], layer=True
):
    """An event-driven graph of methods sharing one state, conversational on request.

    The constructor arguments are the core's (:class:`voxflow.flow.Flow`); set
    ``conversational = True`` or decorate the class with ``@ConversationConfig(...)`` for
    the turn APIs (``handle_turn``, ``stream_turn``, ``chat``; :mod:`voxflow.conversation`).
    """

    _conversation_layer: ClassVar[bool] = True

    @classmethod
    def from_declaration(
        cls,
        *,
        path: str | os.PathLike[str] | None = None,
        contents: str | None = None,
        allow_python: Iterable[str] = (),
        **flow_kwargs: Any,
    ) -> Any:
        """A Flow built from a YAML/JSON declaration (``schema: voxflow.flow/v1``).

        The declaration is validated and resolved before anything runs; ``python:`` refs
        are imported only from the modules in ``allow_python`` (and their submodules).
        See :mod:`voxflow.conversation.declaration`.

        Args:
            path: a ``.yaml``/``.yml``/``.json`` file.
            contents: the declaration text instead of a file.
            allow_python: module names whose objects ``python:`` refs may name.
            **flow_kwargs: passed to the Flow constructor (``persistence=``, ...).

        Raises:
            DeclarationError: the declaration is invalid; ``.path`` names the bad field.
        """
        # Here, not at the top: declarations pull in the YAML parser and their schema,
        # which `from voxflow import Flow` does not load.
        from voxflow.conversation.declaration import flow_class_from_declaration

        flow_class = flow_class_from_declaration(
            path=path, contents=contents, allow_python=allow_python, base=Flow
        )
        return flow_class(**flow_kwargs)
