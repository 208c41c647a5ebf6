"""Every code example of ``spec/conversational-flows.txt`` (part 1: the stable API).

Each example is copied from the spec and changed only in its import names
(``crewai``/``crewai.flow`` -> ``voxflow``) and in the renames listed in the README's
"Spec names and voxflow names" table; a model the example would call gets litellm's
``mock_response=`` (real litellm, no network). Each test then checks what the spec says
the example does. The experimental jobs/turns/replies examples are in
``test_conversational_experimental.py``.
"""

# The examples keep the spec's import blocks as written (only the module names changed).
# ruff: noqa: I001

from __future__ import annotations

import builtins
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import pytest

from voxflow import LLM, ConversationConfig, ConversationState, Flow, listen
from voxflow.conversation import NO_LLM_REPLY
from voxflow.errors import FlowDefinitionError
from voxflow.testing import EventRecorder

pytestmark = pytest.mark.unit


def descriptions(flow_class: Any) -> dict[str, str]:
    """``{route: description}`` of the route catalog the router LLM sees."""
    return {e.label: e.description for e in flow_class.route_catalog().entries}


@pytest.fixture
def typed_lines(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """What the terminal user types: ``input()`` reads from this list (then EOF)."""
    lines: list[str] = []
    prompts: list[str] = []

    def fake_input(prompt: str = "") -> str:
        prompts.append(prompt)
        if not lines:
            raise EOFError
        return lines.pop(0)

    monkeypatch.setattr(builtins, "input", fake_input)
    yield lines


# ---------------------------------------------------------------- Quick start


def test_quick_start() -> None:
    # --- the spec's example (imports renamed) ---
    from uuid import uuid4

    from voxflow import Flow, listen
    from voxflow import (
        ConversationConfig,
        ConversationState,
    )

    @ConversationConfig(defer_trace_finalization=True)
    class SupportFlow(Flow[ConversationState]):
        def route_turn(self, context):  # type: ignore[no-untyped-def]
            message = (self.state.current_user_message or "").lower()
            if "order" in message:
                return "order"
            if "bye" in message or "goodbye" in message:
                return "goodbye"
            return "help"

        @listen("order")
        def handle_order(self):  # type: ignore[no-untyped-def]
            reply = "Your order is on the way."
            self.append_assistant_message(reply)
            return reply

        @listen("help")
        def handle_help(self):  # type: ignore[no-untyped-def]
            reply = "How can I help?"
            self.append_assistant_message(reply)
            return reply

        @listen("goodbye")
        def handle_goodbye(self):  # type: ignore[no-untyped-def]
            reply = "Goodbye!"
            self.append_assistant_message(reply)
            return reply

    session_id = str(uuid4())
    flow = SupportFlow()

    with EventRecorder(flow_id=session_id) as events:
        try:
            first = flow.handle_turn("Where is my order?", session_id=session_id)
            second = flow.handle_turn("What about returns?", session_id=session_id)
            finished_before_finalize = events.kinds().count("flow_finished")
        finally:
            flow.finalize_session_traces()  # one trace link for the whole chat
    # --- what the spec says it does ---
    assert (first, second) == ("Your order is on the way.", "How can I help?")
    assert flow.state.id == session_id
    # the user line is stored by handle_turn; the handler's append is not doubled
    assert [(m.role, m.content) for m in flow.state.messages] == [
        ("user", "Where is my order?"),
        ("assistant", "Your order is on the way."),
        ("user", "What about returns?"),
        ("assistant", "How can I help?"),
    ]
    assert flow.state.last_intent == "help"
    kinds = events.kinds()
    assert kinds.count("flow_started") == 1  # first turn only (deferred traces)
    assert finished_before_finalize == 0
    assert kinds.count("flow_finished") == 1  # once, by finalize_session_traces()
    assert kinds.count("conversation_turn_completed") == 2
    routes = [e.route for e in events.of_kind("conversation_route_selected")]
    assert routes == ["order", "help"]


# ---------------------------------------------------------------- Streaming a turn


@ConversationConfig(llm=LLM("openai/gpt-4o-mini", mock_response="It ships on Monday."))
class StreamingChat(Flow[ConversationState]):
    """A flow whose reply comes from the conversation LLM (so there are LLM chunks)."""


def test_streaming_a_turn(capsys: pytest.CaptureFixture[str]) -> None:
    flow = StreamingChat()
    session_id = str(uuid4())
    frames = []
    # --- the spec's example ---
    stream = flow.stream_turn("Where is my order?", session_id=session_id)

    with stream:
        for frame in stream.events:
            frames.append(frame)
            if frame.channel == "llm" and frame.type == "llm_stream_chunk":
                print(frame.content, end="", flush=True)

    result = stream.result
    # --- what the spec says it does ---
    assert capsys.readouterr().out == "It ships on Monday."
    assert result == "It ships on Monday."
    assert [f.seq for f in frames] == list(range(1, len(frames) + 1))  # ordered
    types = [f.type for f in frames]
    assert types[0] == "conversation_turn_started"
    assert types[-1] == "conversation_turn_completed"
    assert types.index("conversation_route_selected") < types.index("llm_call_started")
    assert types.count("llm_stream_chunk") > 1
    added = [f for f in frames if f.type == "conversation_message_added"]
    assert [(f.data["role"], f.content) for f in added] == [
        ("user", "Where is my order?"),
        ("assistant", "It ships on Monday."),
    ]


def test_streaming_a_rule_based_turn_has_no_llm_frames(capsys: pytest.CaptureFixture[str]) -> None:
    class Rules(Flow[ConversationState]):
        conversational = True

        def route_turn(self, context: Any) -> str:
            return "order"

        @listen("order")
        def handle_order(self) -> str:
            return "Your order is on the way."

    flow = Rules(suppress_flow_events=True)
    session_id = str(uuid4())
    stream = flow.stream_turn("Where is my order?", session_id=session_id)

    with stream:
        for frame in stream.events:
            if frame.channel == "llm" and frame.type == "llm_stream_chunk":
                print(frame.content, end="", flush=True)

    reply = stream.result
    assert capsys.readouterr().out == ""
    assert reply == "Your order is on the way."


# ---------------------------------------------------------------- Lower-level ChatState


def test_chat_state_subclass() -> None:
    from voxflow import ChatState

    class MyChatState(ChatState):
        # Inherited: id, messages, last_user_message, last_intent, session_ready
        research_turn_count: int = 0
        custom_flag: bool = False

    state = MyChatState()
    UUID(state.id)  # a session uuid by default
    assert state.messages == []
    assert (state.last_user_message, state.last_intent, state.session_ready) == (
        None,
        None,
        False,
    )
    assert (state.research_turn_count, state.custom_flag) == (0, False)

    from voxflow.conversation import prepare_conversational_turn

    class Research(Flow[MyChatState]):
        @listen("never")
        def unused(self) -> None: ...

    flow = Research()
    assert prepare_conversational_turn(flow, user_message="hello") is None
    assert flow.state.messages == [{"role": "user", "content": "hello"}]
    assert flow.state.last_user_message == "hello"


# ---------------------------------------------------------------- B. classify in route_turn

INTENT_LLM = LLM("gpt-4o-mini", mock_response="ORDER")
"""The example's llm="gpt-4o-mini", answering through litellm's mock_response."""


def test_classify_inside_route_turn() -> None:
    prompts: list[str] = []

    @ConversationConfig(default_intents=None)
    class Classifying(Flow[ConversationState]):
        def _routing_prompt(self, message: str | None) -> str:
            prompts.append(f"Route this support message: {message}")
            return prompts[-1]

        # --- the spec's example (llm= given a mock_response) ---
        def route_turn(self, context):  # type: ignore[no-untyped-def]
            intent = self.classify_intent(
                self._routing_prompt(self.state.current_user_message),
                ("GREETING", "ORDER", "RESEARCH", "GOODBYE"),
                llm=INTENT_LLM,
            )
            self.state.last_intent = intent
            return intent

        @listen("ORDER")
        def handle_order(self) -> str:
            return f"order desk ({self.state.last_intent})"

    flow = Classifying()
    assert flow.handle_turn("where is my parcel") == "order desk (ORDER)"
    assert prompts == ["Route this support message: where is my parcel"]
    assert flow.state.last_intent == "ORDER"
    assert flow.state.messages[-1].content == "order desk (ORDER)"


# ---------------------------------------------------------------- Quick example


def _quick_example() -> type[Any]:
    # --- the spec's example (imports renamed) ---
    from voxflow import Flow, listen
    from voxflow import (
        ConversationConfig,
        ConversationState,
    )

    @ConversationConfig(defer_trace_finalization=True)
    class SupportFlow(Flow[ConversationState]):
        def route_turn(self, context: dict) -> str | None:  # type: ignore[type-arg]
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

    return SupportFlow


def test_quick_example() -> None:
    SupportFlow = _quick_example()
    flow = SupportFlow()
    results = []
    try:
        results.append(flow.handle_turn("What can you do?"))  # routes to converse
        results.append(flow.handle_turn("Search the web for AI news."))  # INTERNET_SEARCH
        results.append(flow.handle_turn("Check the CrewAI docs."))  # routes to CREWAI_DOCS
    finally:
        flow.finalize_session_traces()
    assert results == [
        NO_LLM_REPLY,  # converse without a conversation LLM: the configuration notice
        "I would run the web research route here.",
        "I would look up the CrewAI docs here.",
    ]
    assert flow.state.last_intent == "CREWAI_DOCS"
    assert [m.role for m in flow.state.messages] == ["user", "assistant"] * 3


def test_chat_for_a_local_terminal(
    typed_lines: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    SupportFlow = _quick_example()

    # --- the spec's example ---
    def kickoff() -> None:
        SupportFlow().chat()

    typed_lines.extend(["  ", "Search the web for AI news.", "Check the docs", "QUIT", "never"])
    kickoff()
    out = capsys.readouterr().out.splitlines()
    assert out == [
        "Assistant: I would run the web research route here.",
        "Assistant: I would look up the CrewAI docs here.",
    ]
    assert typed_lines == ["never"]  # stopped at the exit command; the blank line skipped


def test_chat_with_custom_terminal_options(
    typed_lines: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    SupportFlow = _quick_example()
    flow = SupportFlow()
    typed_lines.extend(["any news?", "bye"])
    # --- the spec's example ---
    flow.chat(
        session_id="demo-session",
        prompt="You: ",
        assistant_prefix="Assistant: ",
        exit_commands=("exit", "quit", "bye"),
    )
    assert capsys.readouterr().out == "Assistant: I would run the web research route here.\n"
    assert flow.state.id == "demo-session"
    assert len(flow.state.messages) == 2
    with EventRecorder(flow_id="demo-session") as events:
        typed_lines.append("docs")
        flow.chat(session_id=flow.state.id)  # EOF ends it; traces finalized for us
    assert "flow_finished" in events.kinds()


# ---------------------------------------------------------------- RouterConfig


def test_router_config_and_the_auto_built_route_catalog() -> None:
    # --- the spec's example (imports renamed; the LLM answers with mock_response) ---
    from typing import Literal

    from pydantic import BaseModel

    from voxflow import LLM
    from voxflow import RouterConfig

    class MyRoute(BaseModel):
        intent: Literal["INTERNET_SEARCH", "CREWAI_DOCS", "converse"]

    ROUTER_LLM = LLM(model="gpt-4o-mini", mock_response='{"intent": "CREWAI_DOCS"}')

    router_config = RouterConfig(
        prompt="Optional domain framing (policy, voice, persona).",
        response_format=MyRoute,  # optional; auto-generated otherwise
        llm=ROUTER_LLM,  # falls back to ConversationConfig.llm
        routes=["INTERNET_SEARCH", "CREWAI_DOCS"],  # optional; inferred from listeners
        route_descriptions={
            "INTERNET_SEARCH": "Override the docstring for this one route.",
        },
        default_intent="converse",  # used when LLM call fails or no LLM available
        fallback_intent="converse",  # used when LLM returns an invalid route
        intent_field="intent",
    )
    # --- what the spec says about it ---
    assert router_config.llm is ROUTER_LLM
    assert router_config.response_format is MyRoute

    SupportFlow = _quick_example()

    @ConversationConfig(router=router_config)
    class Routed(SupportFlow):  # type: ignore[misc, valid-type]
        def route_turn(self, context: Any) -> Any:
            return Flow.route_turn(self, context)  # the default: the LLM router

    catalog = Routed.route_catalog()
    rendered = catalog.render()
    # explicit override beats the docstring; the docstring is used otherwise
    assert "- INTERNET_SEARCH: Override the docstring for this one route." in rendered
    assert (
        "- CREWAI_DOCS: Look up the CrewAI documentation for framework/API questions."
        in rendered
    )
    flow = Routed()
    assert flow.handle_turn("how do flows work?") == "I would look up the CrewAI docs here."
    assert flow.state.last_intent == "CREWAI_DOCS"


def test_the_router_llm_sees_the_route_catalog() -> None:
    SupportFlow = _quick_example()
    rendered = SupportFlow.route_catalog().render().splitlines()
    assert rendered[0] == "Routes:"
    assert rendered[1:3] == [
        "- CREWAI_DOCS: Look up the CrewAI documentation for framework/API questions.",
        "- INTERNET_SEARCH: Fresh web research, current news, real-time lookups.",
    ]
    assert rendered[3].startswith("- converse: Ordinary chat, follow-ups, summaries")
    assert rendered[4].startswith("- end: User signals the conversation is finished")


def test_a_new_route_is_a_listen_plus_a_docstring() -> None:
    from voxflow import listen

    class Search(Flow[ConversationState]):
        conversational = True

        # --- the spec's example ---
        @listen("INTERNET_SEARCH")
        def handle_internet_search(self) -> str:
            """Fresh web research, current news, real-time lookups."""
            ...
            return "searched"

    assert descriptions(Search)["INTERNET_SEARCH"] == (
        "Fresh web research, current news, real-time lookups."
    )


# ---------------------------------------------------------------- Naming handlers


def test_naming_handlers() -> None:
    class Videos(Flow[ConversationState]):
        conversational = True

        def route_turn(self, context: Any) -> str:
            return "create_video"

        # --- the spec's example ---
        @listen("create_video")
        def handle_create_video(self) -> str:
            """User wants a new video."""
            ...
            return "video created"

    assert Videos().handle_turn("make me a video") == "video created"

    with pytest.raises(FlowDefinitionError, match="handle_create_video"):

        class Mirrored(Flow[ConversationState]):
            conversational = True

            # --- the spec's counter-example: rejected ---
            @listen("create_video")
            def create_video(self) -> str:  # rejected at flow instantiation
                ...
                return "never"


# ---------------------------------------------------------------- Custom router behavior


def test_custom_router_behavior() -> None:
    buses: list[Any] = []

    class MyBus:
        def __init__(self, flow: Any) -> None:
            self.flow = flow
            buses.append(self)

    # --- the spec's example (imports renamed; `self.event_bus` is voxflow's own
    # FlowEventBus, so the application's bus goes under another attribute name) ---
    from typing import Any as Any_

    from voxflow import Flow
    from voxflow import ConversationState

    class SupportFlow(Flow[ConversationState]):
        conversational = True

        def route_turn(self, context: dict[str, Any_]) -> str | None:  # type: ignore[override]
            self.app_bus = MyBus(self)
            return super().route_turn(context)  # type: ignore[arg-type, return-value]

    flow = SupportFlow()
    assert flow.handle_turn("hello") == NO_LLM_REPLY  # falsy route -> converse
    assert flow.handle_turn("again") == NO_LLM_REPLY
    assert [b.flow for b in buses] == [flow, flow]  # the side effect ran every turn
    assert flow.state.last_intent == "converse"

    class Verbatim(Flow[ConversationState]):
        conversational = True

        def route_turn(self, context: dict[str, Any_]) -> str | None:  # type: ignore[override]
            self.event_bus = MyBus(self)  # type: ignore[assignment]
            return super().route_turn(context)  # type: ignore[arg-type, return-value]

    with pytest.raises(TypeError, match=r"event_bus is the FlowEventBus.*another attribute"):
        Verbatim().handle_turn("hello")


# ---------------------------------------------------------------- Declarations

FLOW_YAML = """\
schema: crewai.flow/v1
name: SupportFlow

conversational:
  system_prompt: You are a terse support assistant.
  llm: {model: gpt-4o-mini, mock_response: "It left the warehouse today."}
  router:
    llm: {model: gpt-4o-mini, mock_response: '{"intent": "order"}'}

methods:
  handle_order:
    description: Order status, shipping and delivery questions.
    listen: order
    do:
      call: agent
      with:
        role: Support specialist
        goal: Answer order questions accurately
        backstory: Knows the fulfilment pipeline.
        input: "${state.current_user_message}"
"""
"""The spec's declaration; each ``llm: gpt-4o-mini`` is the mapping form with a
``mock_response`` (the spec: "a model id or a configuration mapping")."""


def test_declaring_a_conversational_flow_in_yaml(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "flow.yaml").write_text(FLOW_YAML)
    monkeypatch.chdir(tmp_path)
    # --- the spec's example (imports renamed) ---
    from voxflow import Flow

    flow = Flow.from_declaration(path="flow.yaml")

    try:
        result = flow.handle_turn("Where is my order?", session_id="session-1")
    finally:
        flow.finalize_session_traces()
    # --- what the spec says it does ---
    assert type(flow).__name__ == "SupportFlow"
    assert str(result) == "It left the warehouse today."
    assert flow.state.last_intent == "order"  # the router LLM chose the declared route
    assert flow.state.id == "session-1"
    assert descriptions(type(flow))["order"] == (
        "Order status, shipping and delivery questions."
    )


# ---------------------------------------------------------------- Imports


def test_imports() -> None:
    # --- the spec's example (imports renamed) ---
    from voxflow import (
        ChatState,
        ConversationalConfig,
        ConversationalInputs,
        Flow,
        listen,
        persist,
        router,
        start,
    )
    from voxflow.conversation import prepare_conversational_turn
    from voxflow import (
        ConversationConfig,
        ConversationState,
        RouterConfig,
    )

    # ChatState: id, messages, last_user_message, last_intent, session_ready; the
    # ConversationState additionally has current_user_message, ended, events, agent_threads
    chat_fields = {"id", "messages", "last_user_message", "last_intent", "session_ready"}
    assert set(ChatState.model_fields) >= chat_fields
    assert set(ConversationState.model_fields) >= chat_fields | {
        "current_user_message",
        "ended",
        "events",
        "agent_threads",
    }
    assert set(ConversationalInputs.__annotations__) >= {"id", "user_message", "last_intent"}
    assert callable(prepare_conversational_turn)
    assert all(callable(d) for d in (listen, persist, router, start))
    assert ConversationConfig().defer_trace_finalization is True
    assert RouterConfig().default_intent == "converse"
    assert ConversationalConfig is not ConversationConfig
    assert Flow.conversational is False  # opt-in


# ---------------------------------------------------------------- A. pre-classify


def test_pre_classify_via_conversation_config() -> None:
    """Pattern A (described, no code in the spec): default_intents + intent_llm classify
    each message before the graph; a non-empty route_turn result takes precedence; a
    per-turn ``intents=`` / ``intent_llm=`` overrides the configuration."""

    @ConversationConfig(
        default_intents=["ORDER", "HELP"],
        intent_llm=LLM("gpt-4o-mini", mock_response="ORDER"),
    )
    class PreClassified(Flow[ConversationState]):
        def route_turn(self, context: Any) -> str | None:
            text = self.state.current_user_message or ""
            return "HELP" if text.startswith("!") else None

        @listen("ORDER")
        def handle_order(self) -> str:
            return "order route"

        @listen("HELP")
        def handle_help(self) -> str:
            return "help route"

    flow = PreClassified()
    assert flow.handle_turn("where is it?") == "order route"  # the classified intent
    assert flow.handle_turn("!help") == "help route"  # route_turn wins
    other = LLM("gpt-4o-mini", mock_response="HELP")
    assert flow.handle_turn("hmm", intents=["ORDER", "HELP"], intent_llm=other) == "help route"
    assert flow.state.last_intent == "HELP"
