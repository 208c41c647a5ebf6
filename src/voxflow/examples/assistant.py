"""The example voice assistant: rule-based routes, a background job, a long story.

``voxflow demo``, ``voxflow chat``, ``voxflow chat --voice`` and ``voxflow serve`` run it
when no FLOW is given (``voxflow.examples.assistant:Assistant``). Read it top to bottom to
see a voxflow assistant whole:

* ``AssistantState`` (:class:`voxflow.wiring.AssistantState`) holds the conversation,
  the turn and reply records, the reply queue and the jobs of one session.
* ``Assistant`` is a conversational Flow: ``route_turn`` picks a route by keywords (no
  API key needed; pass ``model=`` to let an LLM answer open questions instead), and each
  ``@listen`` handler returns what to say.
* Asking about an order starts ``look_up_order``, a background job: an async function
  declared with ``@background_job`` and started from the handler with its inputs. The
  assistant answers at once ("I'm checking"); the text the job returns waits in the
  reply queue until the speaking floor is free (nobody talking, nothing playing, not
  muted), then it is announced, and what the user heard of it enters the history.
"""

from __future__ import annotations

from typing import ClassVar

from voxflow import LLM, ConversationConfig, Flow, listen
from voxflow.conversation import RouterContext
from voxflow.errors import JobNotAnnounceableError
from voxflow.jobs import JobContext, background_job
from voxflow.wiring import AssistantState

STORY = (
    "Once upon a time, in a small harbour town, there lived a lighthouse keeper named "
    "Ada. Every night she climbed one hundred and twelve steps to light the great lamp. "
    "One stormy evening, the lamp went dark, and a fishing boat was still out at sea. "
    "Ada took her grandmother's lantern, rowed to the rocks, and held it high above the "
    "waves until the boat found its way home. The town still lights a lantern on the "
    "rocks every year, to remember the night the keeper became the light."
)


LOOKUP_SECONDS = 2.0
"""How long an order lookup takes (on the session's clock)."""


@background_job(kind="order_lookup")
async def look_up_order(
    job: JobContext, order_number: str, seconds: float = LOOKUP_SECONDS
) -> str:
    """Look up an order in the (simulated) shop system; returns what to announce."""
    await job.sleep(seconds)
    return f"Good news: order {order_number} has shipped. It arrives on Thursday."


SYSTEM_PROMPT = "You are a friendly voice assistant. Answer in one or two short sentences."


@ConversationConfig(system_prompt=SYSTEM_PROMPT)
class Assistant(Flow[AssistantState]):
    """A small voice assistant that can chat, tell a story and check an order."""

    lookup_seconds: ClassVar[float] = LOOKUP_SECONDS

    def route_turn(self, context: RouterContext) -> str | None:
        text = (self.state.current_user_message or "").lower()
        if any(w in text for w in ("bye", "goodbye", "that's all")):
            return "goodbye"
        if "order" in text:
            return "order"
        if "story" in text:
            return "story"
        if text.startswith(("stop", "wait", "okay stop")):
            return "stop"
        if any(w in text for w in ("hello", "hi ", "hey")) or text.startswith("hi"):
            return "greet"
        if "what can you do" in text or "help" in text:
            return "help"
        return None  # no rule matched: the built-in converse route (an LLM, if configured)

    @listen("greet")
    def handle_greet(self) -> str:
        """Greetings."""
        return "Hello! How can I help you today?"

    @listen("help")
    def handle_help(self) -> str:
        """What the assistant can do."""
        return "I can check an order, or tell you a story."

    @listen("story")
    def handle_story(self) -> str:
        """A long answer (good for trying a barge-in)."""
        return STORY

    @listen("stop")
    def handle_stop(self) -> str:
        """The user cut the assistant off."""
        return "Okay."

    @listen("order")
    def handle_order(self) -> str:
        """Start a background order lookup; the result is announced when it is ready."""
        try:
            look_up_order.start(self, order_number="417", seconds=self.lookup_seconds)
        except JobNotAnnounceableError:  # e.g. the flow was run without a session
            return "Sorry, I can't look up orders right now."
        return "Sure, I'm checking your order now."

    @listen("goodbye")
    def handle_goodbye(self) -> str:
        """End the conversation."""
        self.state.ended = True
        return "Goodbye, and thanks for calling!"


def assistant_class(
    model: str | None = None, *, lookup_seconds: float | None = None
) -> type[Assistant]:
    """``Assistant``, or a subclass whose open questions go to the litellm ``model`` and
    whose order lookups take ``lookup_seconds``."""
    if model is None and lookup_seconds is None:
        return Assistant
    seconds = lookup_seconds if lookup_seconds is not None else LOOKUP_SECONDS
    config = ConversationConfig(system_prompt=SYSTEM_PROMPT,
                                llm=LLM(model) if model is not None else None)

    @config
    class ConfiguredAssistant(Assistant):
        lookup_seconds: ClassVar[float] = seconds

    return ConfiguredAssistant


__all__ = [
    "LOOKUP_SECONDS",
    "STORY",
    "Assistant",
    "AssistantState",
    "assistant_class",
    "look_up_order",
]
