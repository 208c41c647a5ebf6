"""``ConversationMixin``: everything conversational that :class:`voxflow.Flow` inherits.

It combines the turn APIs (:mod:`.turns`), the history API (:mod:`.history`) and the
built-in graph (:mod:`.graph`). A Flow that is not conversational carries the methods
but none of the wiring: its turn APIs raise ``ConversationModeError``.
"""

from __future__ import annotations

from voxflow.conversation.graph import ConversationGraph
from voxflow.conversation.history import ConversationHistory
from voxflow.conversation.turns import ConversationTurns

__all__ = ["ConversationMixin"]


class ConversationMixin(ConversationTurns, ConversationHistory, ConversationGraph):
    """Conversational mode of :class:`voxflow.Flow` (see :mod:`voxflow.conversation`)."""
