"""The conversation part: what :class:`voxflow.Flow` adds to the Flow core, as one object.

Every :class:`voxflow.Flow` holds a :class:`Conversation` as ``flow.conversation``
(registered through the core's part interface, :mod:`voxflow.flow.parts`). It owns the
conversation's history (:class:`~voxflow.conversation.history.History`), its built-in
graph (:class:`~voxflow.conversation.graph.Graph`) and what the
current turn has done (:class:`~voxflow.conversation.helpers.TurnFacts`); it reaches
the Flow only through its :class:`~voxflow.flow.host.FlowHost`. ``voxflow.Flow``'s
conversational methods are thin delegates to it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from voxflow.conversation import graph
from voxflow.conversation.helpers import TurnFacts
from voxflow.conversation.history import History
from voxflow.flow.parts import FlowPart

if TYPE_CHECKING:
    from pydantic import BaseModel

    from voxflow.flow.host import FlowHost

__all__ = ["Conversation"]


class Conversation(FlowPart):
    """One Flow's conversation (see the module docs).

    Attributes:
        turn: what the current turn has done so far.
        history: the history API.
        graph: the built-in graph (routing and the built-in handlers).
    """

    attribute: ClassVar[str] = "conversation"

    __slots__ = ("graph", "history", "turn")

    def __init__(self, host: FlowHost) -> None:
        self.turn = TurnFacts()
        self.history = History(host, self.turn)
        self.graph = graph.Graph(host, self.turn, self.history)

    @classmethod
    def prepare_class(cls, flow_cls: type[Any]) -> None:
        graph.forget_class(flow_cls)

    @classmethod
    def extra_methods(cls, flow_cls: type[Any]) -> Mapping[str, Callable[..., Any]]:
        return graph.builtin_methods(flow_cls)

    @classmethod
    def default_state(cls, flow_cls: type[Any]) -> type[BaseModel] | None:
        return graph.default_state(flow_cls)

    def order_starts(self, names: list[str]) -> list[str] | None:
        return self.graph.order_starts(names)
