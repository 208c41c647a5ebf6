"""Route selection inside a flow: precedence, the LLM router, converse, deprecated paths.

Every LLM here is real litellm, with ``mock_response=`` or the public kit's
``ScriptedLLM`` (a litellm custom provider that logs each prompt); no network.
"""

from __future__ import annotations

import warnings
from typing import Any, Literal

import pytest

from voxflow import ConversationConfig, ConversationState, Flow, RouterConfig, listen
from voxflow.conversation import RouterContext
from voxflow.conversation.graph import NO_LLM_REPLY
from voxflow.errors import FlowDefinitionError, FlowRuntimeError, UnknownRouteError
from voxflow.flow import FlowEventBus
from voxflow.llm import LLM
from voxflow.testing import EventRecorder, ScriptedLLM

pytestmark = pytest.mark.unit


def intent_llm(answer: str) -> LLM:
    return LLM("openai/gpt-4o-mini", mock_response=answer)


class Routes(Flow[ConversationState]):
    """Custom routes; route_turn returns whatever the test put in ``forced``."""

    conversational = True
    forced: str | None = None

    def route_turn(self, context: RouterContext) -> str | None:
        return self.forced

    @listen("ORDER")
    def handle_order(self) -> str:
        """Order questions."""
        return "order reply"

    @listen("GOODBYE")
    def handle_goodbye(self) -> str:
        """Leaving."""
        return "goodbye reply"


def test_route_turn_result_wins_over_the_classified_intent() -> None:
    flow = Routes()
    flow.forced = "GOODBYE"
    result = flow.handle_turn("x", intents=["ORDER", "GOODBYE"], intent_llm=intent_llm("ORDER"))
    assert result == "goodbye reply"
    assert flow.state.last_intent == "GOODBYE"


def test_a_falsy_route_turn_falls_back_to_this_turns_intent() -> None:
    flow = Routes()
    for forced in (None, ""):
        flow.forced = forced
        result = flow.handle_turn(
            "where is it", intents=["ORDER", "GOODBYE"], intent_llm=intent_llm("ORDER")
        )
        assert result == "order reply"


def test_a_previous_intent_is_context_never_a_fallback() -> None:
    flow = Routes()
    flow.handle_turn("x", intents=["ORDER", "GOODBYE"], intent_llm=intent_llm("ORDER"))
    assert flow.state.last_intent == "ORDER"
    seen: list[Any] = []

    class Spy(Routes):
        def route_turn(self, context: RouterContext) -> str | None:
            seen.append(context["last_intent"])
            return None

    spy = Spy(state=flow.state)
    assert spy.handle_turn("and now?") is not None
    assert seen == ["ORDER"]  # available as router context...
    assert spy.state.last_intent == "converse"  # ...but not replayed


def test_default_intents_and_intent_llm_from_the_config() -> None:
    @ConversationConfig(default_intents=["ORDER", "GOODBYE"], intent_llm=intent_llm("GOODBYE"))
    class Configured(Routes):
        pass

    assert Configured().handle_turn("see you") == "goodbye reply"


def test_route_selected_event_records_route_previous_intent_and_index() -> None:
    bus = FlowEventBus()
    flow = Routes(event_bus=bus)
    flow.forced = "ORDER"
    with EventRecorder(bus) as rec:
        flow.handle_turn("first")
        flow.forced = "GOODBYE"
        flow.handle_turn("second")
    events = rec.of_kind("conversation_route_selected")
    assert [(e.route, e.previous_intent, e.message_index, e.source) for e in events] == [
        ("ORDER", None, 0, "route_turn"),
        ("GOODBYE", "ORDER", 2, "route_turn"),
    ]


class AutoRouted(Flow[ConversationState]):
    """No route_turn override: custom routes auto-enable the LLM router."""

    conversational = True

    @listen("DOCS")
    def handle_docs(self) -> str:
        """Look up the documentation."""
        return "docs reply"


def test_custom_routes_and_an_llm_auto_enable_the_router() -> None:
    llm = ScriptedLLM('{"intent": "DOCS"}')

    @ConversationConfig(llm=llm)
    class WithLLM(AutoRouted):
        pass

    flow = WithLLM()
    assert flow.handle_turn("how do I configure X?") == "docs reply"
    system = llm.calls[0].messages[0]["content"]
    assert "Routes:\n- DOCS: Look up the documentation." in system
    assert "- converse: Ordinary chat" in system
    assert "- end: User signals the conversation is finished" in system
    assert llm.calls[0].messages[-1]["content"].endswith("how do I configure X?")


def test_router_prompt_includes_framing_and_the_previous_intent() -> None:
    llm = ScriptedLLM('{"intent": "DOCS"}')

    @ConversationConfig(router=RouterConfig(llm=llm, prompt="You are ACME's router."))
    class Framed(AutoRouted):
        pass

    flow = Framed()
    flow.handle_turn("one")
    flow.handle_turn("two")
    system = llm.calls[1].messages[0]["content"]
    assert system.startswith("You are ACME's router.")
    assert "previous turn was routed to: DOCS" in system
    assert "user: one" in llm.calls[1].messages[1]["content"]  # recent history, not the whole


def test_invalid_router_answer_falls_back_and_failures_use_default_intent() -> None:
    @ConversationConfig(
        router=RouterConfig(llm=intent_llm('{"intent": "NOPE"}'), fallback_intent="end")
    )
    class Invalid(AutoRouted):
        pass

    flow = Invalid()
    assert flow.handle_turn("x") == "Goodbye!"

    @ConversationConfig(
        router=RouterConfig(
            llm=intent_llm("litellm.RateLimitError"), default_intent="DOCS", fallback_intent="end"
        )
    )
    class Failing(AutoRouted):
        pass

    assert Failing().handle_turn("x") == "docs reply"


def test_custom_routes_without_any_llm_land_on_converse() -> None:
    flow = AutoRouted()
    assert flow.handle_turn("docs please") == NO_LLM_REPLY
    assert "--model" in NO_LLM_REPLY  # the reply says how to configure one
    assert flow.state.last_intent == "converse"


def test_explicit_routes_limit_what_the_router_may_pick() -> None:
    llm = ScriptedLLM('{"intent": "DOCS"}')

    class TwoRoutes(AutoRouted):
        @listen("BILLING")
        def handle_billing(self) -> str:
            """Billing."""
            return "billing"

    @ConversationConfig(router=RouterConfig(llm=llm, routes=["BILLING"]))
    class Limited(TwoRoutes):
        pass

    assert Limited.route_catalog().labels == ("BILLING", "converse", "end")
    assert Limited().handle_turn("x") == NO_LLM_REPLY


def test_converse_sends_system_prompt_and_history() -> None:
    llm = ScriptedLLM("Sure, happy to help.")

    @ConversationConfig(llm=llm, system_prompt="You are terse.")
    class Chat(Flow[ConversationState]):
        pass

    flow = Chat()
    flow.handle_turn("hello")
    assert flow.handle_turn("again") == "Sure, happy to help."
    assert llm.calls[-1].messages == [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": "Sure, happy to help."},
        {"role": "user", "content": "again"},
    ]
    assert [c.stream for c in llm.calls] == [False, False]  # streamed only in a streamed turn


def test_system_prompt_none_uses_the_default_and_empty_means_none() -> None:
    default_llm = ScriptedLLM("a")
    none_llm = ScriptedLLM("b")

    @ConversationConfig(llm=default_llm)
    class Default(Flow[ConversationState]):
        pass

    @ConversationConfig(llm=none_llm, system_prompt="")
    class NoPrompt(Flow[ConversationState]):
        pass

    Default().handle_turn("x")
    NoPrompt().handle_turn("x")
    assert default_llm.calls[0].messages[0]["role"] == "system"
    assert none_llm.calls[0].messages == [{"role": "user", "content": "x"}]


def test_router_context_is_lazy() -> None:
    contexts: list[RouterContext] = []
    read: list[Any] = []

    class Lazy(Routes):
        def route_turn(self, context: RouterContext) -> str | None:
            contexts.append(context)
            if self.state.current_user_message == "read":
                read.append(context["message_history"])
            return "ORDER"

    flow = Lazy()
    for i in range(3):
        flow.handle_turn(f"turn {i}")
    flow.handle_turn("read")
    assert all(c.computed == frozenset() for c in contexts[:3])  # nothing converted
    assert contexts[3].computed == {"message_history"}
    assert len(read[0]) == 7 and read[0][-1] == {"role": "user", "content": "read"}
    assert set(contexts[3]) == {
        "system_prompt",
        "current_user_message",
        "message_history",
        "events",
        "last_intent",
    }


async def test_async_route_turn_and_conversation_start() -> None:
    class AsyncRouting(Routes):
        async def conversation_start(self) -> None:
            self.state.session_ready = True

        async def route_turn(self, context: RouterContext) -> str | None:  # type: ignore[override]
            return "GOODBYE"

    flow = AsyncRouting()
    assert await flow.ahandle_turn("x") == "goodbye reply"
    assert flow.handle_turn("y") == "goodbye reply"
    assert flow.state.session_ready


def test_deprecated_answer_from_history_path() -> None:
    llm = ScriptedLLM("yes", "It was 42.")
    with pytest.warns(DeprecationWarning):

        @ConversationConfig(answer_from_history_llm=llm)
        class Legacy(Flow[ConversationState]):
            pass

    flow = Legacy()
    with pytest.warns(DeprecationWarning, match="answer_from_history"):
        assert flow.handle_turn("what number did I say?") == "It was 42."
    assert flow.state.last_intent == "answer_from_history"


def test_answer_from_history_is_skipped_when_route_turn_or_intent_decide() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)

        @ConversationConfig(answer_from_history_llm=intent_llm("yes"))
        class Legacy(Routes):
            pass

    flow = Legacy()
    flow.forced = "ORDER"
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        assert flow.handle_turn("x") == "order reply"


def test_spec_pattern_b_classify_inside_route_turn() -> None:
    class Classifying(Flow[ConversationState]):
        conversational = True

        def _routing_prompt(self, message: str | None) -> str:
            return f"Route this support message: {message}"

        def route_turn(self, context: RouterContext) -> str | None:
            intent = self.classify_intent(
                self._routing_prompt(self.state.current_user_message),
                ("GREETING", "ORDER", "RESEARCH", "GOODBYE"),
                llm=LLM("openai/gpt-4o-mini", mock_response="RESEARCH"),
            )
            self.state.last_intent = intent
            return intent

        @listen("RESEARCH")
        def handle_research(self) -> str:
            """Multi-step research with tools."""
            return "researching"

    flow = Classifying()
    assert flow.handle_turn("find papers on X") == "researching"
    assert flow.state.last_intent == "RESEARCH"


def test_spec_custom_router_side_effects_then_super() -> None:
    buses: list[object] = []

    @ConversationConfig(llm=intent_llm('{"intent": "DOCS"}'))
    class SideEffects(AutoRouted):
        def route_turn(self, context: RouterContext) -> Any:
            buses.append(object())  # e.g. self.event_bus = MyBus(self)
            return super().route_turn(context)

    flow = SideEffects()
    assert flow.handle_turn("docs?") == "docs reply"
    assert flow.handle_turn("more docs?") == "docs reply"
    assert len(buses) == 2


# ---------------------------------------------------------------- a route nobody handles


def test_a_route_nobody_handles_is_an_error_naming_the_routes() -> None:
    flow = Routes()
    flow.forced = "bomb"
    with pytest.raises(UnknownRouteError) as raised:
        flow.handle_turn("boom")
    error = raised.value
    assert (error.route, error.source, error.routes) == (
        "bomb", "route_turn", ("GOODBYE", "ORDER", "converse", "end"))
    assert str(error) == (
        "Routes.route_turn chose the route 'bomb', which no handler listens to; the routes "
        "are GOODBYE, ORDER, converse, end: return one of them, or add @listen('bomb')")
    assert isinstance(error, FlowRuntimeError)
    assert [m.role for m in flow.state.messages] == ["user"]  # no empty reply said
    flow.forced = "ORDER"
    assert flow.handle_turn("where is it?") == "order reply"  # the next turn goes on


def test_a_pre_classified_intent_nobody_handles_is_an_error_too() -> None:
    flow = Routes()
    with pytest.raises(UnknownRouteError, match="this turn's intent chose the route 'REFUND'"):
        flow.handle_turn("money back", intents=["ORDER", "REFUND"],
                         intent_llm=intent_llm("REFUND"))


async def test_an_async_route_turn_choosing_no_route_raises_from_the_async_api() -> None:
    class AsyncRouting(Routes):
        async def route_turn(self, context: RouterContext) -> str | None:  # type: ignore[override]
            return "nowhere"

    with pytest.raises(UnknownRouteError, match="'nowhere'"):
        await AsyncRouting().ahandle_turn("x")


def test_a_route_turn_declaring_its_routes_is_checked_when_the_class_is_created() -> None:
    with pytest.raises(FlowDefinitionError) as raised:

        class Declared(Routes):
            def route_turn(self, context: RouterContext) -> Literal["ORDER", "bomb"] | None:
                return "ORDER"

    assert raised.value.label == "bomb" and raised.value.method == "route_turn"
    assert str(raised.value) == (
        "Declared.route_turn declares the route 'bomb', which no handler listens to; the "
        "routes are GOODBYE, ORDER, converse, end: add @listen('bomb') or remove it from "
        "the Literal")

    class Good(Routes):
        def route_turn(self, context: RouterContext) -> Literal["ORDER", "end"] | None:
            return "ORDER"

    assert Good().handle_turn("x") == "order reply"


def test_a_declared_route_is_checked_when_a_decorator_makes_the_class_conversational() -> None:
    with pytest.raises(FlowDefinitionError, match="'REFUND', which no handler listens to"):

        @ConversationConfig(system_prompt="Shop.")
        class Shop(Flow[ConversationState]):
            def route_turn(self, context: RouterContext) -> Literal["ORDER", "REFUND"]:
                return "ORDER"

            @listen("ORDER")
            def handle_order(self) -> str:
                return "order reply"
