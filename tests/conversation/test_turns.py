"""handle_turn / ahandle_turn: the spec's examples, validation, persistence, ended sessions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from voxflow import (
    ConversationConfig,
    ConversationState,
    Flow,
    SQLiteFlowPersistence,
    listen,
    persist,
    start,
)
from voxflow.conversation import NO_LLM_REPLY
from voxflow.errors import (
    ConversationEndedError,
    ConversationModeError,
    FlowDefinitionError,
)
from voxflow.flow import FlowEventBus
from voxflow.testing import EventRecorder

pytestmark = pytest.mark.unit


def test_spec_quick_start_support_flow(support_module: Any, roles: Any) -> None:
    flow = support_module.SupportFlow()
    try:
        assert flow.handle_turn("Where is my order?", session_id="s-1") == (
            "Your order is on the way."
        )
        assert flow.handle_turn("What about returns?", session_id="s-1") == "How can I help?"
    finally:
        flow.finalize_session_traces()
    assert flow.state.id == "s-1"
    assert roles(flow) == [
        ("user", "Where is my order?"),
        ("assistant", "Your order is on the way."),
        ("user", "What about returns?"),
        ("assistant", "How can I help?"),
    ]
    assert flow.state.last_intent == "help"
    assert flow.state.current_user_message == "What about returns?"
    assert flow.state.last_user_message == "What about returns?"
    assert flow.state.session_ready is True


@ConversationConfig(defer_trace_finalization=True)
class QuickExample(Flow[ConversationState]):
    """The spec's quick example: two custom routes, everything else to converse."""

    def route_turn(self, context: Any) -> str | None:
        message = (self.state.current_user_message or "").lower()
        if "search" in message or "news" in message:
            return "INTERNET_SEARCH"
        if "docs" in message or "crewai" in message:
            return "CREWAI_DOCS"
        return "converse"

    @listen("INTERNET_SEARCH")
    def handle_internet_search(self) -> str:
        """Fresh web research, current news, real-time lookups."""
        reply = "I would run the web research route here."
        self.append_assistant_message(reply)
        return reply

    @listen("CREWAI_DOCS")
    def handle_crewai_docs(self) -> str:
        """Look up the CrewAI documentation for framework/API questions."""
        reply = "I would look up the CrewAI docs here."
        self.append_assistant_message(reply)
        return reply


def test_spec_quick_example_routes() -> None:
    flow = QuickExample()
    try:
        assert flow.handle_turn("What can you do?") == NO_LLM_REPLY  # converse, no LLM
        assert flow.state.last_intent == "converse"
        assert flow.handle_turn("Search the web for AI news.").startswith("I would run the web")
        assert flow.state.last_intent == "INTERNET_SEARCH"
        assert flow.handle_turn("Check the CrewAI docs.").startswith("I would look up")
        assert flow.state.last_intent == "CREWAI_DOCS"
    finally:
        flow.finalize_session_traces()
    assert len(flow.state.messages) == 6


class Plain(Flow[ConversationState]):
    @start()
    def begin(self) -> str:
        return "plain"


async def test_turn_apis_on_a_non_conversational_flow_raise_value_error() -> None:
    flow = Plain()
    for call in (
        lambda: flow.handle_turn("hi"),
        lambda: flow.stream_turn("hi"),
        lambda: flow.chat(input_fn=lambda _: "hi", output_fn=lambda _: None),
    ):
        with pytest.raises(ConversationModeError, match="conversational = True"):
            call()
    with pytest.raises(ValueError, match="ConversationConfig"):
        await flow.ahandle_turn("hi")
    with pytest.raises(ValueError):
        await flow.astream_turn("hi")
    assert flow.state.messages == []


def test_builtins_register_only_on_opted_in_classes() -> None:
    assert "route_conversation" not in Plain.flow_definition().methods
    methods = QuickExample.flow_definition().methods
    assert {"route_conversation", "converse_turn", "end_conversation"} <= set(methods)
    assert "answer_from_history_turn" in methods

    class ByAttribute(Flow[ConversationState]):
        conversational = True

    assert "route_conversation" in ByAttribute.flow_definition().methods
    assert ByAttribute().handle_turn("hello") == NO_LLM_REPLY


def test_conversational_flow_without_typed_state_gets_conversation_state() -> None:
    class Untyped(Flow):  # type: ignore[type-arg]
        conversational = True

    flow = Untyped()
    assert isinstance(flow.state, ConversationState)
    flow.handle_turn("hi")
    assert flow.state.messages[0].content == "hi"


@pytest.mark.parametrize(
    ("message", "error"),
    [("", ValueError), ("   ", ValueError), (None, TypeError), (42, TypeError)],
)
def test_bad_messages_are_rejected_before_anything_changes(message: Any, error: type) -> None:
    bus = FlowEventBus()
    flow = QuickExample(event_bus=bus)
    flow.handle_turn("first", session_id="keep")
    before = flow.state.model_dump()
    with EventRecorder(bus) as rec, pytest.raises(error, match="message"):
        flow.handle_turn(message)
    assert rec.kinds() == []
    assert flow.state.model_dump() == before


def test_other_invalid_arguments_name_the_parameter() -> None:
    flow = QuickExample()
    with pytest.raises(ValueError, match="session_id"):
        flow.handle_turn("hi", session_id="")
    with pytest.raises(ValueError, match="intents"):
        flow.handle_turn("hi", intents="ORDER")
    with pytest.raises(ValueError, match="intent_llm"):
        flow.handle_turn("hi", intents=["ORDER"])
    with pytest.raises(TypeError, match="intent_llm"):
        flow.handle_turn("hi", intents=["ORDER"], intent_llm=3)
    with pytest.raises(TypeError, match="user_message"):
        flow.handle_turn("hi", user_message="x")
    with pytest.raises(ValueError, match="Cannot combine"):
        flow.handle_turn("hi", from_checkpoint=object(), restore_from_state_id="x")
    assert flow.state.messages == []


class Ending(Flow[ConversationState]):
    conversational = True

    def route_turn(self, context: Any) -> str | None:
        return "end" if "bye" in (self.state.current_user_message or "") else None


def test_end_route_ends_the_conversation_and_later_turns_are_refused() -> None:
    flow = Ending()
    flow.handle_turn("hello", session_id="s")
    assert flow.handle_turn("bye", session_id="s") == "Goodbye!"
    assert flow.state.ended is True
    count = len(flow.state.messages)
    with pytest.raises(ConversationEndedError, match="ended"):
        flow.handle_turn("are you there?", session_id="s")
    with pytest.raises(ConversationEndedError):
        flow.handle_turn("are you there?")
    assert len(flow.state.messages) == count
    # Another session on the same instance starts afresh.
    assert flow.handle_turn("hello", session_id="s2") == NO_LLM_REPLY
    assert [m.content for m in flow.state.messages] == ["hello", NO_LLM_REPLY]


def test_a_new_session_id_never_carries_the_previous_history() -> None:
    flow = QuickExample()
    flow.handle_turn("search news", session_id="a")
    flow.handle_turn("check docs", session_id="b")
    assert flow.state.id == "b"
    assert flow.state.messages[0].content == "check docs"


class Promoting(Flow[ConversationState]):
    conversational = True
    agent_result: Any = None

    def route_turn(self, context: Any) -> str | None:
        return (self.state.current_user_message or "").split()[0]

    @listen("plain")
    def handle_plain(self) -> str:
        return "A plain string reply."

    @listen("appended")
    def handle_appended(self) -> str:
        self.append_assistant_message("Visible reply.")
        return "internal value"

    @listen("label")
    def handle_label(self) -> str:
        return "plain"  # a route label is never promoted

    @listen("intent")
    def handle_intent(self) -> str:
        return "intent"  # equal to last_intent

    @listen("raw")
    def handle_raw(self) -> Any:
        class Result:
            raw = "From .raw"

        return Result()

    @listen("agent")
    def handle_agent(self) -> Any:
        class Result:
            raw = "agent scratch"

        result = Result()
        self.append_agent_result("researcher", result)
        return result

    @listen("number")
    def handle_number(self) -> int:
        return 42


@pytest.mark.parametrize(
    ("message", "assistant"),
    [
        ("plain", ["A plain string reply."]),
        ("appended", ["Visible reply."]),
        ("label", []),
        ("intent", []),
        ("raw", ["From .raw"]),
        ("agent", []),
        ("number", []),
    ],
)
def test_return_value_promotion_rules(message: str, assistant: list[str]) -> None:
    flow = Promoting()
    flow.handle_turn(message)
    assert [m.content for m in flow.state.messages if m.role == "assistant"] == assistant


def test_persisted_session_continues_in_a_fresh_instance(tmp_path: Path) -> None:
    backend = SQLiteFlowPersistence(tmp_path / "flows.db")

    @persist(backend)
    class Persisted(Flow[ConversationState]):
        conversational = True

        def route_turn(self, context: Any) -> str | None:
            return "reply"

        @listen("reply")
        def handle_reply(self) -> str:
            return f"Reply {len(self.state.messages) // 2 + 1}"  # promoted, not appended

    first = Persisted()
    first.handle_turn("one", session_id="sess")
    first.handle_turn("two", session_id="sess")
    second = Persisted()
    assert second.handle_turn("three", session_id="sess") == "Reply 3"
    assert [m.content for m in second.state.messages] == [
        "one",
        "Reply 1",
        "two",
        "Reply 2",
        "three",
        "Reply 3",
    ]
    stored = backend.load_state("sess")
    assert stored is not None and len(stored["messages"]) == 6
    assert stored["messages"][-1]["content"] == "Reply 3"  # the promoted reply is persisted


def test_an_ended_persisted_session_is_refused_by_a_fresh_instance(tmp_path: Path) -> None:
    backend = SQLiteFlowPersistence(tmp_path / "flows.db")

    @persist(backend)
    class PersistedEnding(Ending):
        pass

    PersistedEnding().handle_turn("bye", session_id="done")
    fresh = PersistedEnding()
    with pytest.raises(ConversationEndedError):
        fresh.handle_turn("hello again", session_id="done")


async def test_ahandle_turn_is_the_async_contract(support_module: Any) -> None:
    flow = support_module.SupportFlow()
    assert await flow.ahandle_turn("order status?", session_id="x") == ("Your order is on the way.")
    assert await flow.ahandle_turn("hmm") == "How can I help?"
    assert flow.state.id == "x" and len(flow.state.messages) == 4


async def test_sync_handle_turn_works_inside_a_running_loop(support_module: Any) -> None:
    flow = support_module.SupportFlow()
    assert flow.handle_turn("my order") == "Your order is on the way."


def test_user_start_methods_run_before_route_conversation() -> None:
    order: list[str] = []

    class WithStart(Flow[ConversationState]):
        conversational = True

        @start()
        def bootstrap(self) -> None:
            order.append(f"bootstrap saw {self.state.current_user_message!r}")

        def conversation_start(self) -> None:
            order.append("conversation_start")

        def route_turn(self, context: Any) -> str | None:
            order.append("route_turn")
            return None

    WithStart().handle_turn("hi")
    assert order == ["bootstrap saw 'hi'", "conversation_start", "route_turn"]


def test_kickoff_does_not_apply_the_turn_wrapper() -> None:
    flow = QuickExample()
    assert flow.kickoff(inputs={"id": "raw"}) is None
    assert flow.state.id == "raw"
    # no user message was received, so no route is chosen and no handler answers
    # (the reference ran `converse` with no message here; issue 15)
    assert flow.state.messages == []
    assert flow.state.last_intent is None


def test_a_handler_named_like_its_route_is_rejected() -> None:
    with pytest.raises(FlowDefinitionError, match="handle_"):

        class Bad(Flow[ConversationState]):
            conversational = True

            @listen("create_video")
            def create_video(self) -> str:
                return "x"


def test_overriding_a_builtin_by_name_keeps_its_wiring() -> None:
    class Custom(Flow[ConversationState]):
        conversational = True

        def converse_turn(self) -> str:
            return "custom converse"

    flow = Custom()
    assert flow.handle_turn("hi") == "custom converse"
    assert flow.state.messages[-1].content == "custom converse"


def test_a_legacy_chat_state_flow_can_be_conversational() -> None:
    from voxflow import ChatState

    class LegacyChat(Flow[ChatState]):
        conversational = True

        def route_turn(self, context: Any) -> str | None:
            return "end" if "bye" in (self.state.last_user_message or "") else None

    flow = LegacyChat()
    assert flow.handle_turn("hello") == NO_LLM_REPLY
    assert flow.handle_turn("bye") == "Goodbye!"
    assert flow.state.messages == [
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": NO_LLM_REPLY},
        {"role": "user", "content": "bye"},
        {"role": "assistant", "content": "Goodbye!"},
    ]
    with pytest.raises(ConversationEndedError):
        flow.handle_turn("still there?")
