"""The conversation part: what :class:`voxflow.Flow` adds to the Flow core, as one object.

Every :class:`voxflow.Flow` holds a :class:`Conversation` as ``flow.conversation``
(registered through the core's part interface, :mod:`voxflow.flow.parts`). It owns the
conversation's history (:class:`~voxflow.conversation.history.History`) and what the
current turn has done (:class:`~voxflow.conversation.helpers.TurnFacts`); it reaches
the Flow only through its :class:`~voxflow.flow.host.FlowHost`. ``voxflow.Flow``'s
conversational methods are thin delegates to it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from voxflow.conversation.helpers import TurnFacts
from voxflow.conversation.history import History
from voxflow.flow.parts import FlowPart

if TYPE_CHECKING:
    from voxflow.flow.host import FlowHost

__all__ = ["Conversation"]


class Conversation(FlowPart):
    """One Flow's conversation (see the module docs).

    Attributes:
        turn: what the current turn has done so far.
        history: the history API.
    """

    attribute: ClassVar[str] = "conversation"

    __slots__ = ("history", "turn")

    def __init__(self, host: FlowHost) -> None:
        self.turn = TurnFacts()
        self.history = History(host, self.turn)
