"""``Agent``: an LLM with a role and Python tools, run as a bounded tool-calling loop.

Tools are plain Python callables (sync or async). Each tool's JSON schema comes from its
type hints and its description from the first docstring line. The loop:

1. sends the system message (role, goal, backstory) and the input to the LLM with the
   tool specs;
2. if the model asks for tools, runs them (sync tools on a worker thread), appends the
   results as ``tool`` messages and asks again;
3. stops when the model answers without tool calls, or after ``max_iterations`` rounds,
   when one last call *without* tools asks for the final answer.

A tool that raises, or arguments that do not match its signature, become an error
message for the model rather than an exception: the model can correct itself.

Hand-offs: ``Agent(..., handoffs=[billing, shipping])`` offers the model one more tool
per agent, ``transfer_to_<name>`` (described by that agent's goal). When the model calls
one, this agent stops and that agent takes the same input (and ``context``), with its
own tools and hand-offs; its answer is the result (``agent_name`` names it,
``handoffs`` the agents before it). A hand-off to an agent that already had the input
is refused to the model (a loop), which then answers itself.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import json
import re
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from voxflow import telemetry
from voxflow.blocking import sync_twin
from voxflow.llm import (
    LLM,
    BaseLLM,
    LLMEvent,
    LLMEventType,
    Messages,
    agent_scope,
    coerce_llm,
    emit_llm_event,
    normalize_messages,
)

__all__ = ["Agent", "AgentResult", "Tool", "tool_from_callable", "transfer_tool_name"]

DEFAULT_MAX_ITERATIONS = 8


@dataclasses.dataclass(frozen=True, slots=True)
class Tool:
    """A callable the model may invoke, with its OpenAI function spec."""

    name: str
    description: str
    parameters: dict[str, Any]
    func: Callable[..., Any]
    args_model: type[BaseModel]

    def spec(self) -> dict[str, Any]:
        """The OpenAI ``tools`` entry."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }

    async def arun(self, arguments: Mapping[str, Any]) -> Any:
        """Validate ``arguments`` against the signature and run the tool."""
        args = self.args_model.model_validate(dict(arguments))
        kwargs = {name: getattr(args, name) for name in type(args).model_fields}
        if inspect.iscoroutinefunction(self.func):
            return await self.func(**kwargs)
        result = await asyncio.to_thread(self.func, **kwargs)
        if inspect.isawaitable(result):
            return await result
        return result


def tool_from_callable(func: Callable[..., Any], *, name: str | None = None) -> Tool:
    """A :class:`Tool` whose schema comes from ``func``'s type hints.

    Raises:
        TypeError: ``func`` is not callable or takes ``*args``/``**kwargs``.
    """
    if not callable(func):
        raise TypeError(f"tools must be callables, not {type(func).__name__}")
    tool_name = name or getattr(func, "__name__", None)
    if not isinstance(tool_name, str) or not tool_name.isidentifier():
        raise TypeError(f"tool {func!r} needs a name that is a Python identifier")
    signature = inspect.signature(func)
    hints = _hints(func)
    fields: dict[str, Any] = {}
    for param in signature.parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise TypeError(f"tool {tool_name}: *args/**kwargs cannot be described to a model")
        annotation = hints.get(param.name, Any)
        default = ... if param.default is param.empty else param.default
        fields[param.name] = (annotation, default)
    model = create_model(f"{tool_name}_args", **fields)
    schema = model.model_json_schema()
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        if isinstance(prop, dict):
            prop.pop("title", None)
    doc = inspect.getdoc(func) or ""
    description = next((line.strip() for line in doc.splitlines() if line.strip()), tool_name)
    return Tool(tool_name, description, schema, func, model)


def transfer_tool_name(agent: Agent) -> str:
    """The tool that hands a conversation to ``agent``: ``transfer_to_`` and its name in
    lower case, every run of other characters an underscore (``Billing specialist`` ->
    ``transfer_to_billing_specialist``)."""
    return "transfer_to_" + (re.sub(r"[^a-z0-9]+", "_", agent.name.lower()).strip("_") or "agent")


def _hints(func: Callable[..., Any]) -> dict[str, Any]:
    try:
        return typing.get_type_hints(func)
    except Exception:  # unresolvable annotation: describe the argument as "any"
        return {}


class AgentResult(BaseModel):
    """What an agent run produced."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    raw: str = Field(description="the final answer text")
    agent_name: str = Field(description="the agent's name")
    tool_calls: int = Field(default=0, description="tools run during the loop")
    iterations: int = Field(default=0, description="LLM calls made")
    hit_iteration_limit: bool = Field(
        default=False, description="the loop was cut at max_iterations"
    )
    messages: tuple[dict[str, Any], ...] = Field(default=(), description="the full transcript")
    handoffs: tuple[str, ...] = Field(
        default=(),
        description="the agents that handed the input on, in order, before agent_name "
        "answered (empty: the agent asked answered)",
    )

    def __str__(self) -> str:
        return self.raw


class Agent:
    """An LLM with a role, a goal, a backstory and tools.

    Args:
        role: who the agent is (also its default name).
        goal: what it tries to achieve.
        backstory: context that shapes its answers.
        llm: a model id, config mapping or ``BaseLLM``; defaults to ``openai/gpt-4o-mini``.
        tools: Python callables the model may call.
        max_iterations: tool rounds before the final answer is forced (>= 1).
        name: the agent's name in events and ``agent_threads``; defaults to ``role``.
        handoffs: agents this one may hand the conversation to (see the module docs);
            ``agent.handoffs`` is a list, so two agents can know each other.

    Raises:
        TypeError: a hand-off is not an Agent.
        ValueError: two tools or hand-offs share a name.
    """

    def __init__(
        self,
        role: str,
        goal: str,
        backstory: str = "",
        llm: BaseLLM | str | Mapping[str, Any] | None = None,
        tools: Sequence[Callable[..., Any]] = (),
        *,
        max_iterations: int = DEFAULT_MAX_ITERATIONS,
        name: str | None = None,
        handoffs: Sequence[Agent] = (),
    ) -> None:
        for param, value in (("role", role), ("goal", goal)):
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"{param} must be a non-empty string")
        if not isinstance(backstory, str):
            raise TypeError("backstory must be a string")
        if (
            isinstance(max_iterations, bool)
            or not isinstance(max_iterations, int)
            or max_iterations < 1
        ):
            raise ValueError("max_iterations must be an int >= 1")
        self.role = role
        self.goal = goal
        self.backstory = backstory
        self.name = name or role
        self.llm: BaseLLM = coerce_llm(llm, name="llm") or LLM("openai/gpt-4o-mini")
        self.max_iterations = max_iterations
        self.tools: dict[str, Tool] = {}
        for func in tools:
            tool = func if isinstance(func, Tool) else tool_from_callable(func)
            if tool.name in self.tools:
                raise ValueError(f"tools: two tools are named {tool.name!r}")
            self.tools[tool.name] = tool
        if not all(isinstance(a, Agent) for a in handoffs):
            raise TypeError("handoffs must be Agents")
        self.handoffs: list[Agent] = list(handoffs)
        self._transfers()  # a clash of names is refused now

    def __repr__(self) -> str:
        return f"Agent(name={self.name!r}, tools={sorted(self.tools)})"

    def _transfers(self) -> dict[str, Agent]:
        """``{tool name: agent}`` of the hand-offs.

        Raises:
            ValueError: two hand-offs, or a hand-off and a tool, share a name.
        """
        transfers: dict[str, Agent] = {}
        for agent in self.handoffs:
            name = transfer_tool_name(agent)
            if name in transfers:
                raise ValueError(f"handoffs: two hand-offs are named {name!r}")
            if name in self.tools:
                raise ValueError(f"tools: a tool {name!r} and a hand-off share the name")
            transfers[name] = agent
        return transfers

    def tool_specs(self) -> list[dict[str, Any]]:
        """The ``tools`` this agent offers the model: its tools, then one
        ``transfer_to_<name>`` per hand-off."""
        specs = [t.spec() for t in self.tools.values()]
        for name, agent in self._transfers().items():
            specs.append({"type": "function", "function": {
                "name": name,
                "description": f"Hand the conversation to {agent.name}: {agent.goal}",
                "parameters": {"type": "object", "properties": {}},
            }})
        return specs

    def system_message(self) -> str:
        """The system prompt built from role, goal and backstory."""
        text = f"You are {self.role}.\nYour goal: {self.goal}"
        if self.backstory:
            text += f"\n{self.backstory}"
        return text

    async def akickoff(self, input: Messages, *, context: str | None = None) -> AgentResult:
        """Run the tool-calling loop on ``input`` (a string or chat messages); a hand-off
        runs the agent handed to on the same input and returns its result.

        Raises:
            ProviderError: the LLM failed.
        """
        return await self._akickoff(input, context, ())

    async def _akickoff(
        self, input: Messages, context: str | None, before: tuple[str, ...]
    ) -> AgentResult:
        system = self.system_message() + (f"\n\nContext:\n{context}" if context else "")
        messages: list[dict[str, Any]] = [{"role": "system", "content": system}]
        messages += normalize_messages(input)
        specs = self.tool_specs() or None
        transfers = self._transfers()
        tool_calls = 0
        with agent_scope(self.name), telemetry.trace_span(
                f"invoke_agent {self.name}",
                {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": self.name,
                 "gen_ai.request.model": self.llm.model}):
            for iteration in range(1, self.max_iterations + 1):
                response = await self.llm.acall(messages, tools=specs)
                if not response.tool_calls:
                    return self._result(response.content, messages, tool_calls, iteration,
                                        False, before)
                handed = self._handoff(response.tool_calls, transfers, before)
                if handed is not None:
                    call, target = handed
                    self._tool_event("tool_call_started", call.id, call.name, call.arguments)
                    self._tool_event("tool_call_completed", call.id, call.name,
                                     f"handed to {target.name}")
                    return await target._akickoff(input, context, (*before, self.name))
                messages.append(
                    {
                        "role": "assistant",
                        "content": response.content,
                        "tool_calls": [c.to_llm() for c in response.tool_calls],
                    }
                )
                for call in response.tool_calls:
                    tool_calls += 1
                    self._tool_event("tool_call_started", call.id, call.name, call.arguments)
                    refused = transfers.get(call.name)
                    with telemetry.trace_span(f"execute_tool {call.name}", {
                            "gen_ai.operation.name": "execute_tool",
                            "gen_ai.tool.name": call.name, "gen_ai.tool.call.id": call.id,
                            "gen_ai.tool.type": "function", "gen_ai.agent.name": self.name,
                            "gen_ai.tool.call.arguments": (call.arguments
                                                           if telemetry.capture_content()
                                                           else None)}) as tool_span:
                        output = (f"error: {refused.name} already had this conversation; "
                                  "answer it yourself" if refused is not None
                                  else await self._run_tool(call.name, call.arguments))
                        if tool_span is not None:
                            if output.startswith("error:"):
                                telemetry.fail(tool_span, "tool_error")
                            if telemetry.capture_content():
                                tool_span.set_attribute("gen_ai.tool.call.result", output)
                    self._tool_event("tool_call_completed", call.id, call.name, output)
                    messages.append(
                        {
                            "role": "tool",
                            "tool_call_id": call.id,
                            "name": call.name,
                            "content": output,
                        }
                    )
            messages.append(
                {"role": "user", "content": "Give your final answer now, without calling tools."}
            )
            final = await self.llm.acall(messages)
        return self._result(final.content, messages, tool_calls, self.max_iterations + 1, True,
                            before)

    def _handoff(
        self, calls: Sequence[Any], transfers: Mapping[str, Agent], before: tuple[str, ...]
    ) -> tuple[Any, Agent] | None:
        """The first transfer the model asked for to an agent that has not had the input
        yet (the other calls of that answer are dropped with this agent's turn)."""
        for call in calls:
            target = transfers.get(call.name)
            if target is not None and target.name not in (*before, self.name):
                return call, target
        return None

    kickoff = sync_twin(akickoff)

    def _tool_event(self, kind: LLMEventType, call_id: str, name: str, content: str) -> None:
        emit_llm_event(
            LLMEvent(
                kind,
                call_id,
                self.llm.model,
                content=content,
                has_tools=True,
                agent_name=self.name,
                tool_name=name,
            )
        )

    async def _run_tool(self, name: str, arguments: str) -> str:
        tool = self.tools.get(name)
        if tool is None:
            return f"error: there is no tool named {name!r}"
        try:
            args = json.loads(arguments) if arguments.strip() else {}
            if not isinstance(args, dict):
                return "error: tool arguments must be a JSON object"
            value = await tool.arun(args)
        except (ValueError, ValidationError) as exc:
            return f"error: invalid arguments for {name}: {exc}"
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a tool failure is information for the model
            return f"error: {name} failed: {type(exc).__name__}: {exc}"
        if isinstance(value, str):
            return value
        if isinstance(value, BaseModel):
            return value.model_dump_json()
        try:
            return json.dumps(value)
        except (TypeError, ValueError):
            return str(value)

    def _result(
        self,
        content: str | None,
        messages: list[dict[str, Any]],
        tool_calls: int,
        iterations: int,
        limited: bool,
        before: tuple[str, ...],
    ) -> AgentResult:
        return AgentResult(
            raw=content or "",
            agent_name=self.name,
            tool_calls=tool_calls,
            iterations=iterations,
            hit_iteration_limit=limited,
            messages=tuple(messages),
            handoffs=before,
        )
