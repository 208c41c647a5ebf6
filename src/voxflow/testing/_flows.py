"""Small flows for tests: answer every turn at once, with no LLM."""

from __future__ import annotations

from typing import Any, ClassVar

from voxflow.conversation import ConversationConfig, ConversationState
from voxflow.conversation.flow import Flow
from voxflow.flow import listen
from voxflow.turns import TurnState

__all__ = ["Acknowledger", "Echo"]


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


@ConversationConfig(system_prompt="")
class Echo(Flow[ConversationState]):
    """A conversational flow that answers every turn with ``echo <what the user said>``.

    For tests of persistence and restore, where each stored reply must name its turn.
    ``@persist`` marks the class it decorates, so persist a subclass::

        @persist
        class Saved(Echo):
            pass
    """

    def route_turn(self, context: Any) -> str:
        """Every turn goes to :meth:`handle_reply`."""
        return "reply"

    @listen("reply")
    def handle_reply(self) -> str:
        """The user's words, echoed."""
        return f"echo {self.state.current_user_message}"
