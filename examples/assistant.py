"""The demo's voice assistant: rule-based routes, a background job, a long story.

Read this file top to bottom to see a voxflow assistant whole:

* ``AssistantState`` combines the conversation, turn/reply records, the reply queue and
  the jobs of one session, in one pydantic model.
* ``Assistant`` is a conversational Flow: ``route_turn`` picks a route by keywords (no
  API key needed; pass ``model=`` to let an LLM answer open questions instead), and each
  ``@listen`` handler returns what to say.
* Asking about an order starts ``OrderLookup``, a background job. The assistant answers
  at once ("I'm checking"), and when the job completes, its result waits in the reply
  queue until the speaking floor is free (nobody talking, nothing playing, not muted),
  then it is announced.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from voxflow import LLM, ConversationConfig, Flow, listen, start
from voxflow.conversation import RouterContext
from voxflow.jobs import JobRecord, JobState, JobWorkFlow, JobWorkState, add_job
from voxflow.replies import ReplyQueueState

STORY = (
    "Once upon a time, in a small harbour town, there lived a lighthouse keeper named "
    "Ada. Every night she climbed one hundred and twelve steps to light the great lamp. "
    "One stormy evening, the lamp went dark, and a fishing boat was still out at sea. "
    "Ada took her grandmother's lantern, rowed to the rocks, and held it high above the "
    "waves until the boat found its way home. The town still lights a lantern on the "
    "rocks every year, to remember the night the keeper became the light."
)


class OrderJob(JobRecord):
    """Look up an order in the (simulated) shop system."""

    output_fields: ClassVar[frozenset[str]] = frozenset({"answer"})
    order_number: str = "417"
    answer: str = ""


class AssistantState(ReplyQueueState, JobState[OrderJob]):
    """One session: conversation, turns, replies, the reply queue and its jobs."""


class OrderLookup(JobWorkFlow[JobWorkState[OrderJob]]):
    """The background work: one stage that takes a while, then a result."""

    pause: Callable[[float], None] = staticmethod(lambda seconds: None)
    """How the worker waits (the demo sets it to sleep on the call's clock)."""

    work_seconds: ClassVar[float] = 2.0

    @start()
    def look_up(self) -> None:
        self.check_open()
        self.publish_update("started")
        self.publish_update("stage_started", stage="lookup")
        self.pause(self.work_seconds)
        self.check_open()
        answer = (
            f"Good news: order {self.state.job.order_number} has shipped. "
            "It arrives on Thursday."
        )
        self.publish_update("stage_completed", stage="lookup", outputs={"answer": answer})
        self.publish_update("completed")


SYSTEM_PROMPT = "You are a friendly voice assistant. Answer in one or two short sentences."


@ConversationConfig(system_prompt=SYSTEM_PROMPT)
class Assistant(Flow[AssistantState]):
    """A small voice assistant that can chat, tell a story and check an order."""

    start_job: Callable[[OrderJob], None] | None = None
    """Set by the application: submits a registered job to its JobRunner."""

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
        running = [t for t in self.state.turns.values() if t.status == "running"]
        job = OrderJob(
            session_id=self.state.id,
            origin_turn_id=running[-1].turn_id if running else None,
            kind="order_lookup",
        )
        if self.start_job is None or not add_job(self.state, job):
            return "Sorry, I can't look up orders right now."
        self.start_job(job)
        return "Sure, I'm checking your order now."

    @listen("goodbye")
    def handle_goodbye(self) -> str:
        """End the conversation."""
        self.state.ended = True
        return "Goodbye, and thanks for calling!"



def assistant_class(model: str | None = None) -> type[Assistant]:
    """``Assistant``, or a subclass whose open questions go to the litellm ``model``."""
    if model is None:
        return Assistant

    @ConversationConfig(system_prompt=SYSTEM_PROMPT, llm=LLM(model))
    class LLMAssistant(Assistant):
        pass

    return LLMAssistant


__all__ = ["STORY", "Assistant", "AssistantState", "OrderJob", "OrderLookup", "assistant_class"]
