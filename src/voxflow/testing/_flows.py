"""Small flows for tests: answer every turn at once, with no LLM."""

from __future__ import annotations

from typing import Any, ClassVar

from voxflow.conversation import ConversationConfig
from voxflow.flow import Flow, listen
from voxflow.turns import TurnState

__all__ = ["Acknowledger"]


@ConversationConfig(system_prompt="")
class Acknowledger(Flow[TurnState]):
    """A conversational flow that answers every turn with :attr:`reply`.

    For tests of turn tracking, persistence and voice plumbing, where the answer itself
    does not matter. Subclass it to change the reply or to add ``@persist``::

        @persist(SQLiteFlowPersistence(path))
        class Saved(Acknowledger):
            reply = "Noted."
    """

    reply: ClassVar[str] = "Request received."

    def route_turn(self, context: Any) -> str:
        """Every turn goes to :meth:`handle_acknowledge`."""
        return "acknowledge"

    @listen("acknowledge")
    def handle_acknowledge(self) -> str:
        """The fixed reply."""
        return self.reply
