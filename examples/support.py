"""A rule-based support assistant: the conversational Flow from the spec's quick start.

No API key and no model are needed: ``route_turn`` picks a route from keywords, and each
``@listen`` handler returns what to say. Try it in a terminal::

    voxflow chat examples/support.py:SupportFlow

or from Python::

    flow = SupportFlow()
    try:
        flow.handle_turn("Where is my order?", session_id="demo")
        flow.handle_turn("What about returns?", session_id="demo")
    finally:
        flow.finalize_session_traces()

How a turn flows: ``handle_turn`` appends the user line to ``state.messages``; the
built-in ``route_conversation`` calls :meth:`SupportFlow.route_turn`; the handler for the
returned label runs and records its reply with ``append_assistant_message``. Route labels
(``order``) and handler names (``handle_order``) must differ: labels and method names
share one trigger namespace.
"""

from __future__ import annotations

from voxflow import ConversationConfig, ConversationState, Flow, listen
from voxflow.conversation import RouterContext

__all__ = ["SupportFlow"]


@ConversationConfig(defer_trace_finalization=True)
class SupportFlow(Flow[ConversationState]):
    """Answers order questions, says goodbye, and offers help otherwise."""

    def route_turn(self, context: RouterContext) -> str | None:
        """Pick the route from keywords of the current user message."""
        message = (self.state.current_user_message or "").lower()
        if "order" in message:
            return "order"
        if "bye" in message or "goodbye" in message:
            return "goodbye"
        return "help"

    @listen("order")
    def handle_order(self) -> str:
        """Order status, shipping and delivery questions."""
        reply = "Your order is on the way."
        self.append_assistant_message(reply)
        return reply

    @listen("help")
    def handle_help(self) -> str:
        """Anything else: offer help."""
        reply = "How can I help?"
        self.append_assistant_message(reply)
        return reply

    @listen("goodbye")
    def handle_goodbye(self) -> str:
        """The user is leaving: say goodbye and end the conversation."""
        reply = "Goodbye!"
        self.append_assistant_message(reply)
        self.state.ended = True  # chat() stops; further turns are refused
        return reply


if __name__ == "__main__":
    SupportFlow().chat()
