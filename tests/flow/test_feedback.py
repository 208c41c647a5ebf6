"""@human_feedback (console, pause/resume, outcome collapse) and ask()/input_history."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from voxflow import (
    Flow,
    FlowState,
    HumanFeedbackPending,
    HumanFeedbackResult,
    human_feedback,
    listen,
    start,
)
from voxflow.errors import FlowRuntimeError, HumanFeedbackError
from voxflow.flow import ConsoleFeedbackProvider, PauseForFeedback, collapse_feedback
from voxflow.testing import EventRecorder


class Draft(FlowState):
    text: str = ""
    published: bool = False


def _answers(*lines: str) -> ConsoleFeedbackProvider:
    it: Iterator[str] = iter(lines)
    shown: list[str] = []
    return ConsoleFeedbackProvider(input_fn=lambda prompt: next(it), output_fn=shown.append)


class Review(Flow[Draft]):
    @start()
    @human_feedback("Publish this draft?", emit=["approved", "rejected"])
    def write(self) -> str:
        self.state.text = "hello world"
        return self.state.text

    @listen("approved")
    def publish(self, result: HumanFeedbackResult) -> str:
        self.state.published = True
        return f"published: {result.output}"

    @listen("rejected")
    def discard(self, result: HumanFeedbackResult) -> str:
        return f"discarded because {result.feedback}"


def test_console_feedback_routes_by_outcome() -> None:
    flow = Review()
    flow.feedback_provider = _answers("Approved")
    assert flow.kickoff() == "published: hello world"
    assert flow.last_human_feedback is not None
    assert flow.last_human_feedback.outcome == "approved"


def test_free_text_without_llm_is_a_clear_error() -> None:
    flow = Review()
    flow.feedback_provider = _answers("looks great, ship it")
    with pytest.raises(HumanFeedbackError, match="approved, rejected") as info:
        flow.kickoff()
    assert info.value.outcomes == ("approved", "rejected")
    assert flow.state.published is False


async def test_llm_collapses_free_text_to_an_outcome() -> None:
    from voxflow.llm import LLM

    llm = LLM("openai/gpt-4o-mini", mock_response="Approved.")
    outcome = await collapse_feedback("looks great, ship it", ["approved", "rejected"], llm=llm)
    assert outcome == "approved"
    with pytest.raises(HumanFeedbackError):
        await collapse_feedback(
            "hmm", ["approved", "rejected"], llm=LLM("openai/gpt-4o-mini", mock_response="maybe")
        )


def test_llm_configured_on_the_decorator_routes_free_text() -> None:
    from voxflow.llm import LLM

    class Smart(Flow):
        @start()
        @human_feedback(
            "Ship?",
            emit=["approved", "rejected"],
            llm=LLM("openai/gpt-4o-mini", mock_response="rejected"),
        )
        def write(self) -> str:
            return "draft"

        @listen("rejected")
        def redo(self, result: HumanFeedbackResult) -> str:
            return f"redo:{result.outcome}"

    flow = Smart()
    flow.feedback_provider = _answers("no, the intro is too long")
    assert flow.kickoff() == "redo:rejected"


def test_feedback_without_emit_passes_result_on() -> None:
    class Plain(Flow):
        @start()
        @human_feedback("Any comment?")
        def draft(self) -> str:
            return "v1"

        @listen(draft)
        def after(self, result: HumanFeedbackResult) -> str:
            return f"{result.output}:{result.feedback}"

    flow = Plain()
    flow.feedback_provider = _answers("nice")
    assert flow.kickoff() == "v1:nice"


def test_pause_returns_pending_and_resume_continues(recorder: EventRecorder) -> None:
    flow = Review()
    flow.feedback_provider = PauseForFeedback()
    pending = flow.kickoff(inputs={"id": "review-1"})
    assert isinstance(pending, HumanFeedbackPending)
    assert pending.method_name == "write" and pending.flow_id == "review-1"
    assert recorder.kinds()[-1] == "flow_paused"
    assert "write" not in flow.completed_methods
    assert flow.resume("rejected") == "discarded because rejected"
    assert recorder.kinds()[-1] == "flow_finished"
    with pytest.raises(FlowRuntimeError, match="no paused feedback"):
        flow.resume("approved")


def test_resume_from_a_fresh_instance_restores_state() -> None:
    first = Review()
    first.feedback_provider = PauseForFeedback()
    assert isinstance(first.kickoff(inputs={"id": "review-2"}), HumanFeedbackPending)
    second = Review()  # e.g. after a restart: everything comes from the SQLite store
    assert second.resume("approved", flow_id="review-2") == "published: hello world"
    assert second.state.text == "hello world" and second.state.published is True


def test_human_feedback_validates_arguments() -> None:
    with pytest.raises(ValueError, match="message"):
        human_feedback("")
    with pytest.raises(ValueError, match="emit"):
        human_feedback("ok?", emit=[])
    with pytest.raises(ValueError, match="default_outcome"):
        human_feedback("ok?", emit=["a"], default_outcome="b")
    with pytest.raises(TypeError, match="provider"):
        human_feedback("ok?", provider=object())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="feedback"):
        Review().resume(3)  # type: ignore[arg-type]


def test_default_outcome_for_empty_feedback() -> None:
    class Defaulted(Flow):
        @start()
        @human_feedback("Go?", emit=["yes", "no"], default_outcome="no")
        def ask_it(self) -> str:
            return "x"

        @listen("no")
        def stopped(self) -> str:
            return "stopped"

    flow = Defaulted()
    flow.feedback_provider = _answers("")
    assert flow.kickoff() == "stopped"


def test_feedback_outcome_colliding_with_method_is_rejected() -> None:
    from voxflow.errors import FlowDefinitionError

    with pytest.raises(FlowDefinitionError, match="'publish'"):

        class Bad(Flow):
            @start()
            @human_feedback("ok?", emit=["publish", "no"])
            def write(self) -> str:
                return "x"

            @listen("no")
            def publish(self) -> None: ...


def test_ask_records_input_history() -> None:
    answers = iter(["Ada", "42"])

    class Wizard(Flow):
        @start()
        def collect(self) -> str:
            name = self.ask("Your name?")
            age = self.ask("Your age?")
            return f"{name}/{age}"

    flow = Wizard()
    flow.input_provider = lambda prompt: next(answers)
    assert flow.kickoff() == "Ada/42"
    assert [(e.method_name, e.prompt, e.response) for e in flow.input_history] == [
        ("collect", "Your name?", "Ada"),
        ("collect", "Your age?", "42"),
    ]


async def test_ask_async_from_async_step() -> None:
    async def provider(prompt: str) -> str:
        return "blue"

    class AsyncWizard(Flow):
        @start()
        async def collect(self) -> str | None:
            return await self.ask_async("Favourite colour?")

    flow = AsyncWizard()
    flow.input_provider = provider
    assert await flow.kickoff_async() == "blue"
    assert flow.input_history[0].method_name == "collect"
    with pytest.raises(ValueError, match="prompt"):
        flow.ask("")
