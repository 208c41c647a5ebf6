"""History API (append_*, agent results, receive_user_message) and the module helpers."""

from __future__ import annotations

from typing import Any

import pytest

from voxflow import (
    Agent,
    ChatState,
    ConversationalConfig,
    ConversationConfig,
    ConversationState,
    Flow,
    listen,
    start,
)
from voxflow.conversation import (
    append_message,
    get_conversation_messages,
    get_conversational_config,
    input_history_to_messages,
    normalize_kickoff_inputs,
    prepare_conversational_turn,
    receive_user_message,
    set_state_field,
)
from voxflow.llm import LLM

pytestmark = pytest.mark.unit


class Research(Flow[ConversationState]):
    conversational = True

    def route_turn(self, context: Any) -> str | None:
        return "research"

    @listen("research")
    async def handle_research(self) -> str:
        agent = Agent(
            role="Researcher",
            goal="Find facts",
            llm=LLM("openai/gpt-4o-mini", mock_response="Fact: water is wet."),
        )
        result = await agent.akickoff(self.state.current_user_message or "")
        self.append_agent_result("Researcher", result)
        return "Summary: water is wet."


def test_private_agent_results_stay_out_of_the_history() -> None:
    flow = Research()
    assert flow.handle_turn("is water wet?") == "Summary: water is wet."
    assert [(m.role, m.content) for m in flow.state.messages] == [
        ("user", "is water wet?"),
        ("assistant", "Summary: water is wet."),
    ]
    event = flow.state.events[0]
    assert (event.type, event.agent_name, event.visibility) == (
        "agent_result",
        "Researcher",
        "private",
    )
    assert event.payload == {"content": "Fact: water is wet."}
    thread = flow.state.agent_threads["Researcher"]
    assert [(m.role, m.content, m.name) for m in thread] == [
        ("assistant", "Fact: water is wet.", "Researcher")
    ]


def test_public_and_visible_agent_outputs_become_assistant_messages() -> None:
    class Public(Flow[ConversationState]):
        conversational = True

        def route_turn(self, context: Any) -> str | None:
            return "go"

        @listen("go")
        def handle_go(self) -> None:
            self.append_agent_result("writer", "Public text.", visibility="public")
            self.append_agent_result("critic", "Private note.")

    flow = Public()
    flow.handle_turn("x")
    assert [m.content for m in flow.state.messages if m.role == "assistant"] == ["Public text."]

    @ConversationConfig(visible_agent_outputs=["critic"])
    class Visible(Public):
        pass

    flow2 = Visible()
    flow2.handle_turn("x")
    assert [m.content for m in flow2.state.messages if m.role == "assistant"] == [
        "Public text.",
        "Private note.",
    ]
    assert [e.visibility for e in flow2.state.events] == ["public", "public"]
    with pytest.raises(ValueError, match="visibility"):
        flow2.append_agent_result("x", "y", visibility="secret")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="agent_name"):
        flow2.append_agent_result("", "y")


def test_append_message_and_conversation_messages() -> None:
    flow = Research()
    flow.append_message("system", "Be nice.")
    flow.append_message("tool", "42", tool_call_id="c1", name="calc", metadata={"ms": 3})
    flow.append_assistant_message("Hi")
    assert flow.conversation_messages == [
        {"role": "system", "content": "Be nice."},
        {"role": "tool", "content": "42", "name": "calc", "tool_call_id": "c1"},
        {"role": "assistant", "content": "Hi"},
    ]
    assert flow.state.messages[1].metadata == {"ms": 3}
    with pytest.raises(ValueError, match="role"):
        flow.append_message("robot", "x")
    with pytest.raises(TypeError, match="content"):
        flow.append_assistant_message(3)


def test_receive_user_message_and_classify_intent() -> None:
    flow = Research()
    assert flow.receive_user_message("hello") is None
    assert flow.state.current_user_message == "hello"
    llm = LLM("openai/gpt-4o-mini", mock_response="ORDER")
    assert flow.receive_user_message("my parcel", outcomes=["ORDER", "OTHER"], llm=llm) == "ORDER"
    assert flow.state.last_intent == "ORDER"
    assert flow.classify_intent("x", ["ORDER", "OTHER"], llm=llm) == "ORDER"
    with pytest.raises(ValueError, match="llm"):
        flow.receive_user_message("x", outcomes=["A"])
    with pytest.raises(ValueError, match="text"):
        flow.receive_user_message(" ")


class Legacy(Flow[ChatState]):
    conversational_config = ConversationalConfig(
        intents=["ORDER", "OTHER"], intent_llm=LLM("openai/gpt-4o-mini", mock_response="OTHER")
    )

    @start()
    def begin(self) -> str:
        return "ok"


def test_legacy_chat_state_helpers() -> None:
    flow = Legacy()
    flow.state.last_intent = "ORDER"
    assert get_conversational_config(flow) is Legacy.conversational_config
    assert prepare_conversational_turn(flow, user_message="something else") == "OTHER"
    assert flow.state.messages == [{"role": "user", "content": "something else"}]
    assert flow.state.last_user_message == "something else"
    assert prepare_conversational_turn(flow, user_message="again", intents=None) == "OTHER"
    flow.state.last_intent = "kept?"
    assert receive_user_message(flow, "no classify") is None
    assert flow.state.last_intent == "kept?"  # only prepare_conversational_turn clears it
    append_message(flow, "assistant", "hi", name="bot")
    assert get_conversation_messages(flow)[-1] == {
        "role": "assistant",
        "content": "hi",
        "name": "bot",
    }
    set_state_field(flow, "session_ready", True)
    set_state_field(flow, "custom", 1)  # ChatState allows extras
    assert flow.state.session_ready is True


def test_set_state_field_on_dict_and_strict_models() -> None:
    class DictFlow(Flow):  # type: ignore[type-arg]
        @start()
        def begin(self) -> None:
            pass

    flow = DictFlow()
    set_state_field(flow, "x", 1)
    assert flow.state["x"] == 1
    append_message(flow, "user", "hi")
    assert get_conversation_messages(flow) == [{"role": "user", "content": "hi"}]
    strict = Research()
    with pytest.raises(AttributeError, match="nope"):
        set_state_field(strict, "nope", 1)


def test_normalize_kickoff_inputs() -> None:
    assert normalize_kickoff_inputs({"a": 1}, user_message="hi", session_id="s") == {
        "a": 1,
        "id": "s",
        "user_message": "hi",
    }
    assert normalize_kickoff_inputs(None) == {}
    with pytest.raises(ValueError, match="session_id"):
        normalize_kickoff_inputs({"id": "a"}, session_id="b")
    with pytest.raises(ValueError, match="user_message"):
        normalize_kickoff_inputs(user_message="")
    with pytest.raises(TypeError, match="inputs"):
        normalize_kickoff_inputs([1])  # type: ignore[arg-type]


def test_input_history_to_messages() -> None:
    class Entry:
        prompt = "Your name?"
        response = "Ada"

    entries = [Entry(), {"prompt": "Age?", "response": None}]
    assert input_history_to_messages(entries) == [
        {"role": "assistant", "content": "Your name?"},
        {"role": "user", "content": "Ada"},
        {"role": "assistant", "content": "Age?"},
    ]
    assert Research().input_history == []
