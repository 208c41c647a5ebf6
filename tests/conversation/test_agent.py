"""Agent: the tool-calling loop over real litellm (mock_response), Python tools."""

from __future__ import annotations

import pytest

from voxflow.agent import Agent, tool_from_callable
from voxflow.llm import LLM, LLMEvent, observe_llm

pytestmark = pytest.mark.unit


def add(a: int, b: int = 0) -> int:
    """Add two integers.

    Longer text.
    """
    return a + b


async def lookup_order(order_id: str) -> dict[str, str]:
    """Look up an order's status."""
    return {"order_id": order_id, "status": "shipped"}


def broken(x: int) -> int:
    """Always fails."""
    raise RuntimeError("database down")


def test_tool_schema_comes_from_type_hints() -> None:
    tool = tool_from_callable(add)
    assert tool.name == "add"
    assert tool.description == "Add two integers."
    assert tool.parameters["properties"] == {
        "a": {"type": "integer"},
        "b": {"type": "integer", "default": 0},
    }
    assert tool.parameters["required"] == ["a"]
    with pytest.raises(TypeError, match="args"):
        tool_from_callable(lambda *args: None, name="f")
    with pytest.raises(TypeError, match="callables"):
        tool_from_callable(3)  # type: ignore[arg-type]


async def test_agent_runs_tools_then_answers() -> None:
    llm = LLM(
        "openai/gpt-4o-mini",
        mock_response=[
            {"tool_calls": [{"id": "c1", "name": "lookup_order", "arguments": {"order_id": "42"}}]},
            {"tool_calls": [{"id": "c2", "name": "add", "arguments": {"a": 2, "b": 3}}]},
            "Order 42 has shipped.",
        ],
    )
    agent = Agent(
        "Support specialist", "Answer order questions", "Knows shipping.", llm, [add, lookup_order]
    )
    events: list[LLMEvent] = []
    with observe_llm(events.append):
        result = await agent.akickoff("Where is order 42?")
    assert result.raw == "Order 42 has shipped."
    assert (result.tool_calls, result.iterations, result.hit_iteration_limit) == (2, 3, False)
    tool_messages = [m for m in result.messages if m["role"] == "tool"]
    assert tool_messages[0]["content"] == '{"order_id": "42", "status": "shipped"}'
    assert tool_messages[1]["content"] == "5"
    assert tool_messages[0]["tool_call_id"] == "c1"
    assert result.messages[0]["content"].startswith("You are Support specialist.")
    assert {e.agent_name for e in events} == {"Support specialist"}
    assert all(e.has_tools for e in events)


async def test_tool_errors_and_bad_arguments_are_reported_to_the_model() -> None:
    llm = LLM(
        "openai/gpt-4o-mini",
        mock_response=[
            {"tool_calls": [{"id": "c1", "name": "broken", "arguments": {"x": 1}}]},
            {"tool_calls": [{"id": "c2", "name": "add", "arguments": {"a": "not a number"}}]},
            {"tool_calls": [{"id": "c3", "name": "nope", "arguments": {}}]},
            "Sorry, the tools failed.",
        ],
    )
    result = await Agent("r", "g", llm=llm, tools=[broken, add]).akickoff("hi")
    contents = [m["content"] for m in result.messages if m["role"] == "tool"]
    assert contents[0] == "error: broken failed: RuntimeError: database down"
    assert contents[1].startswith("error: invalid arguments for add")
    assert contents[2] == "error: there is no tool named 'nope'"
    assert result.raw == "Sorry, the tools failed."


async def test_iterations_are_bounded() -> None:
    loop = {"tool_calls": [{"id": "c", "name": "add", "arguments": {"a": 1}}]}
    llm = LLM("openai/gpt-4o-mini", mock_response=[loop, loop, "Final."])
    result = await Agent("r", "g", llm=llm, tools=[add], max_iterations=2).akickoff("go")
    assert result.hit_iteration_limit
    assert result.tool_calls == 2
    assert result.raw == "Final."


def test_sync_kickoff() -> None:
    agent = Agent("r", "g", llm=LLM("openai/gpt-4o-mini", mock_response="done"))
    assert agent.kickoff("x").raw == "done"
    assert str(agent.kickoff("x")) == "done"


def test_agent_validates_its_arguments() -> None:
    with pytest.raises(ValueError, match="role"):
        Agent("", "g")
    with pytest.raises(ValueError, match="goal"):
        Agent("r", " ")
    with pytest.raises(ValueError, match="max_iterations"):
        Agent("r", "g", max_iterations=0)
    with pytest.raises(ValueError, match="two tools"):
        Agent("r", "g", tools=[add, add])
    with pytest.raises(TypeError, match="llm"):
        Agent("r", "g", llm=5)  # type: ignore[arg-type]


# ---------------------------------------------------------------- hand-offs


def refund(order_id: str) -> str:
    """Refund an order."""
    return f"order {order_id} refunded"


def transfer(name: str) -> dict[str, object]:
    return {"tool_calls": [{"id": f"h-{name}", "name": f"transfer_to_{name}", "arguments": {}}]}


async def test_an_agent_hands_the_conversation_to_a_specialist_who_answers() -> None:
    billing_llm = LLM("openai/gpt-4o-mini", mock_response=[
        {"tool_calls": [{"id": "r1", "name": "refund", "arguments": {"order_id": "417"}}]},
        "I have refunded order 417.",
    ])
    billing = Agent("Billing specialist", "Settle invoices and refunds", llm=billing_llm,
                    tools=[refund])
    shipping = Agent("Shipping clerk", "Track parcels",
                     llm=LLM("openai/gpt-4o-mini", mock_response="never asked"))
    desk_llm = LLM("openai/gpt-4o-mini", mock_response=transfer("billing_specialist"))
    desk = Agent("Front desk", "Send each customer to the right specialist", llm=desk_llm,
                 handoffs=[billing, shipping])
    events: list[LLMEvent] = []
    with observe_llm(events.append):
        result = await desk.akickoff("I was charged twice for order 417.")
    assert result.raw == "I have refunded order 417."
    assert (result.agent_name, result.handoffs) == ("Billing specialist", ("Front desk",))
    assert (result.tool_calls, result.iterations) == (1, 2)  # the specialist's own loop
    assert result.messages[0]["content"].startswith("You are Billing specialist.")
    assert result.messages[1] == {"role": "user", "content": "I was charged twice for order 417."}
    # the desk offered one transfer tool per specialist, described by its goal
    offered = {spec["function"]["name"]: spec["function"]["description"]
               for spec in desk.tool_specs()}
    assert offered == {
        "transfer_to_billing_specialist": "Hand the conversation to Billing specialist: "
                                          "Settle invoices and refunds",
        "transfer_to_shipping_clerk": "Hand the conversation to Shipping clerk: Track parcels",
    }
    handed = [e for e in events if e.type == "tool_call_completed" and e.agent_name == "Front desk"]
    assert [(e.tool_name, e.content) for e in handed] == [
        ("transfer_to_billing_specialist", "handed to Billing specialist")]


async def test_a_hand_off_back_to_an_agent_that_had_the_conversation_is_refused() -> None:
    # Billing hands back to the desk: refused (a hand-off loop), billing answers itself.
    billing_llm = LLM("openai/gpt-4o-mini", mock_response=[transfer("front_desk"), "Done."])
    billing = Agent("Billing", "Refunds", llm=billing_llm)
    desk = Agent("Front desk", "Route", llm=LLM("openai/gpt-4o-mini",
                                                  mock_response=transfer("billing")),
                 handoffs=[billing])
    billing.handoffs.append(desk)  # a cycle, as two agents that know each other make
    result = await desk.akickoff("hi")
    assert (result.raw, result.agent_name, result.handoffs) == ("Done.", "Billing", ("Front desk",))
    refused = [m["content"] for m in result.messages if m["role"] == "tool"]
    assert refused == ["error: Front desk already had this conversation; answer it yourself"]


def test_hand_offs_are_checked_when_the_agent_is_made() -> None:
    billing = Agent("Billing", "Refunds")
    with pytest.raises(TypeError, match="handoffs must be Agents"):
        Agent("Desk", "Route", handoffs=["billing"])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="two hand-offs are named 'transfer_to_billing'"):
        Agent("Desk", "Route", handoffs=[billing, Agent("billing", "Other")])
    with pytest.raises(ValueError, match="tool 'transfer_to_billing' and a hand-off"):

        def transfer_to_billing() -> str:
            """A tool with a hand-off's name."""
            return ""

        Agent("Desk", "Route", tools=[transfer_to_billing], handoffs=[billing])
