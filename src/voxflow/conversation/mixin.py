"""``ConversationMixin``: everything conversational that :class:`voxflow.Flow` inherits.

It combines the turn APIs (:mod:`.turns`), the history API (:mod:`.history`) and the
built-in graph (:mod:`.graph`). A Flow that is not conversational carries the methods
but none of the wiring: its turn APIs raise ``ConversationModeError``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from voxflow.conversation.graph import ConversationGraph
from voxflow.conversation.history import ConversationHistory
from voxflow.conversation.turns import ConversationTurns

__all__ = ["ConversationMixin"]


class ConversationMixin(ConversationTurns, ConversationHistory, ConversationGraph):
    """Conversational mode of :class:`voxflow.Flow` (see :mod:`voxflow.conversation`)."""

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
        from voxflow.conversation.declaration import flow_class_from_declaration

        flow_class = flow_class_from_declaration(
            path=path, contents=contents, allow_python=allow_python
        )
        return flow_class(**flow_kwargs)
