"""``voxflow.Flow``: the Flow core with the conversation it holds.

The Flow core (:class:`voxflow.flow.Flow`: the dispatch loop, state, persistence, human
feedback, checkpoints, streaming) knows nothing of conversations. ``voxflow.Flow`` is
the core holding one more part (:mod:`voxflow.flow.parts`): its
:class:`~voxflow.conversation.part.Conversation` (``flow.conversation``), which owns the
turns, the history and the built-in graph and takes the core's hooks (built-in
methods, start order, hydration before the starts, trace deferral, incremental and
revision-checked saves). The methods below are its public API, thin delegates to the
part. The import goes one way: conversation builds on flow, never the reverse.

A Flow that is not conversational carries the turn APIs but none of the wiring: they
raise ``ConversationModeError``.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, ClassVar, Literal

from voxflow.blocking import sync_twin
from voxflow.conversation.chat import DEFAULT_EXIT_COMMANDS
from voxflow.conversation.config import ConversationalConfig, ConversationConfig, class_config
from voxflow.conversation.graph import RouterContext, route_catalog
from voxflow.conversation.helpers import get_conversation_messages
from voxflow.conversation.part import Conversation
from voxflow.conversation.routing import (
    BUILTIN_ROUTE_DESCRIPTIONS,
    RouteCatalog,
    aclassify_intent,
)
from voxflow.conversation.state import ConversationEvent
from voxflow.flow.runtime import Flow as FlowCore
from voxflow.flow.runtime import StateT
from voxflow.flow.streaming import StreamSession
from voxflow.llm import BaseLLM

__all__ = ["Flow"]


class Flow(FlowCore[StateT], layer=True, parts=(Conversation,)):
    """An event-driven graph of methods sharing one state, conversational on request.

    The constructor arguments are the core's (:class:`voxflow.flow.Flow`); set
    ``conversational = True`` or decorate the class with ``@ConversationConfig(...)`` for
    the turn APIs (``handle_turn``, ``stream_turn``, ``chat``; :mod:`voxflow.conversation`).
    """

    conversational: ClassVar[bool] = False
    """Set to True (or use ``@ConversationConfig``) to enable the conversational graph."""
    conversation_config: ClassVar[ConversationConfig | None] = None
    """The class's ``ConversationConfig`` (set by the decorator)."""
    conversational_config: ClassVar[ConversationalConfig | None] = None
    """Legacy configuration read by ``prepare_conversational_turn``."""
    builtin_route_descriptions: ClassVar[Mapping[str, str]] = BUILTIN_ROUTE_DESCRIPTIONS
    """Router descriptions of the built-in routes (override per class)."""
    defer_trace_finalization: bool | None = None
    """Instance override of ``ConversationConfig.defer_trace_finalization``."""
    _conversation_layer: ClassVar[bool] = True
    conversation: Conversation
    """This flow's conversation: its turns, history and built-in graph (the methods
    below are thin delegates to it)."""

    @classmethod
    def _enable_conversation(cls) -> None:
        """Turn conversational mode on after the class was created (the decorator)."""
        cls.conversational = True
        cls._reconfigure()

    @classmethod
    def _conversation_config(cls) -> ConversationConfig:
        """The class's ``ConversationConfig`` or the defaults (for the CLI and the flow
        loader, which do not import the conversation package)."""
        return class_config(cls)

    @classmethod
    def route_catalog(cls) -> RouteCatalog:
        """The routes the LLM router may choose from (cached per class)."""
        return route_catalog(cls)

    @classmethod
    def from_declaration(
        cls,
        *,
        path: str | os.PathLike[str] | None = None,
        contents: str | None = None,
        allow_python: Iterable[str] = (),
        llm_endpoints: Iterable[str] = (),
        **flow_kwargs: Any,
    ) -> Any:
        """A Flow built from a YAML/JSON declaration (``schema: voxflow.flow/v1``).

        The declaration is validated and resolved before anything runs; ``python:`` refs
        are imported only from the modules in ``allow_python`` (and their submodules).
        See :mod:`voxflow.conversation.declaration`.

        Args:
            path: a ``.yaml``/``.yml``/``.json`` file.
            contents: the declaration text instead of a file.
            allow_python: module names whose objects ``python:`` refs may name.
            llm_endpoints: URLs its LLMs may name as ``api_base``/``base_url`` (the
                provider's key goes there), besides ``VOXFLOW_LLM_ENDPOINTS``'s
                (:mod:`voxflow.llm.endpoints`); any other endpoint is refused.
            **flow_kwargs: passed to the Flow constructor (``persistence=``, ...).

        Raises:
            DeclarationError: the declaration is invalid; ``.path`` names the bad field.
        """
        # Here, not at the top: declarations pull in the YAML parser and their schema,
        # which `from voxflow import Flow` does not load.
        from voxflow.conversation.declaration import flow_class_from_declaration

        flow_class = flow_class_from_declaration(
            path=path, contents=contents, allow_python=allow_python,
            llm_endpoints=llm_endpoints, base=Flow,
        )
        return flow_class(**flow_kwargs)

    # ------------------------------------------------------------------ turns

    def handle_turn(
        self,
        message: str,
        session_id: str | None = None,
        *,
        intents: Sequence[str] | None = None,
        intent_llm: BaseLLM | str | Mapping[str, Any] | None = None,
        **kickoff_kwargs: Any,
    ) -> Any:
        """Run one conversational turn from sync code and return the kickoff result.

        See :mod:`voxflow.conversation.part` for what a turn does, in order.

        Args:
            message: the user's text (non-empty).
            session_id: the conversation (``state.id``); None continues the current one.
            intents: outcome labels to pre-classify this message into.
            intent_llm: the LLM for that classification (required with ``intents``).
            **kickoff_kwargs: ``from_checkpoint``, ``restore_from_state_id`` or
                ``input_files`` ({name: path, bytes or binary file object}: validated,
                stored by reference and attached to this turn's user message; see
                :mod:`voxflow.files`).

        Raises:
            ConversationModeError: the flow is not conversational (a ValueError).
            ConversationEndedError: the conversation has ended.
            TypeError / ValueError: an invalid argument, named in the message.
        """
        conversation = self.conversation
        request = conversation.turn_request(
            "handle_turn", message, session_id, intents, intent_llm, kickoff_kwargs
        )
        return conversation.handle_turn(request)

    async def ahandle_turn(
        self,
        message: str,
        session_id: str | None = None,
        *,
        intents: Sequence[str] | None = None,
        intent_llm: BaseLLM | str | Mapping[str, Any] | None = None,
        **kickoff_kwargs: Any,
    ) -> Any:
        """:meth:`handle_turn` for async callers (sync methods run in the executor)."""
        conversation = self.conversation
        request = conversation.turn_request(
            "ahandle_turn", message, session_id, intents, intent_llm, kickoff_kwargs,
            read_files=False,
        )
        request = await conversation.aread_files(request, kickoff_kwargs)
        return await conversation.ahandle_turn(request)

    def stream_turn(
        self,
        message: str,
        session_id: str | None = None,
        *,
        intents: Sequence[str] | None = None,
        intent_llm: BaseLLM | str | Mapping[str, Any] | None = None,
        **kickoff_kwargs: Any,
    ) -> StreamSession:
        """Run one turn on a worker thread and stream its ordered ``StreamFrame``s.

        Frames: ``conversation_turn_started``, ``flow_started`` (first turn of a session),
        method frames (unless ``suppress_flow_events``), ``conversation_message_added``
        (user), ``conversation_route_selected``, ``llm`` frames of the reply
        (``llm_call_started``, ``llm_stream_chunk``..., ``llm_call_completed``), tool
        frames, ``conversation_message_added`` (assistant), ``conversation_turn_completed``.
        ``with stream: for frame in stream.events: ...``; then ``stream.result``.

        The turn runs to its end even when the frames stop being read (a ``break``
        without ``close()``): the process waits for it before exiting, so a persisted
        turn is stored whole.
        """
        conversation = self.conversation
        request = conversation.turn_request(
            "stream_turn", message, session_id, intents, intent_llm, kickoff_kwargs
        )
        return conversation.stream_turn(request, sync=True)

    async def astream_turn(
        self,
        message: str,
        session_id: str | None = None,
        *,
        intents: Sequence[str] | None = None,
        intent_llm: BaseLLM | str | Mapping[str, Any] | None = None,
        **kickoff_kwargs: Any,
    ) -> StreamSession:
        """:meth:`stream_turn` as a task on the running loop: ``async for frame in stream``.

        Leaving ``async with stream`` early cancels the turn, which closes an in-flight
        LLM stream instead of draining it.
        """
        conversation = self.conversation
        request = conversation.turn_request(
            "astream_turn", message, session_id, intents, intent_llm, kickoff_kwargs,
            read_files=False,
        )
        request = await conversation.aread_files(request, kickoff_kwargs)
        return conversation.stream_turn(request, sync=False)

    def chat(
        self,
        *,
        session_id: str | None = None,
        prompt: str = "You: ",
        assistant_prefix: str = "Assistant: ",
        exit_commands: Sequence[str] = DEFAULT_EXIT_COMMANDS,
        input_fn: Callable[[str], str] | None = None,
        output_fn: Callable[[str], Any] | None = None,
        defer_trace_finalization: bool | None = None,
    ) -> None:
        """A local REPL over :meth:`handle_turn`.

        Reads a line with ``input_fn(prompt)`` (default ``input``; stripped), skips blank
        lines, stops on an exit command (case-insensitive), EOF, Ctrl-C or an ended
        conversation, prints ``assistant_prefix + result`` with ``output_fn`` (default
        ``print``), and always finalizes the session traces. ``defer_trace_finalization``
        overrides the instance flag for the REPL and is restored on exit.
        """
        self.conversation.chat(
            session_id=session_id,
            prompt=prompt,
            assistant_prefix=assistant_prefix,
            exit_commands=exit_commands,
            input_fn=input_fn,
            output_fn=output_fn,
            defer_trace_finalization=defer_trace_finalization,
        )

    # ------------------------------------------------------------------ sessions

    def load_session(self, session_id: str) -> bool:
        """Load a persisted session into this flow without running anything.

        No method, handler or LLM runs and no event is emitted: the state becomes the
        session's latest snapshot (or a fresh state with that id when none is stored),
        and the next ``handle_turn(..., session_id=session_id)`` continues from it
        without reloading. ``kickoff(inputs={"id": ...})`` also restores, but it runs
        the flow's ``@start`` methods (the built-in router answers nothing then).

        Returns:
            True when a snapshot was found.

        Raises:
            ValueError: ``session_id`` is not a non-empty string, or the flow has no
                persistence (``@persist`` or ``persistence=``).
            FlowRuntimeError: a run is in progress on this instance.
        """
        return self.conversation.load_session(session_id)

    async def aload_session(self, session_id: str) -> bool:
        """:meth:`load_session` for async callers (the read runs in a worker thread)."""
        return await self.conversation.aload_session(session_id)

    def finalize_session_traces(self) -> None:
        """Close the session: emit the deferred ``flow_finished`` and export the trace batch.

        Idempotent; a later turn opens a new session batch. Call it in a ``finally`` when
        you own the loop (``chat()`` calls it for you).
        """
        self.conversation.finalize_session_traces()

    def _should_defer_trace_finalization(self) -> bool:
        """Whether per-turn ``flow_finished`` and trace export wait for the session end
        (the spec's advanced hook: ``defer_trace_finalization``, else the config's
        ``trace_scope``, else its ``defer_trace_finalization``)."""
        return self.conversation.should_defer_trace_finalization()

    # ------------------------------------------------------------------ history

    def append_message(self, role: str, content: Any, **extra: Any) -> Any:
        """Append a message (role user/assistant/system/tool) to ``state.messages``.

        Lower level than :meth:`append_assistant_message`; ``extra`` are message fields
        (``name``, ``tool_call_id``, ``tool_calls``, ``files``, ``metadata``). Every
        append is O(1) and emits ``conversation_message_added`` (on the event bus, and
        as a ``conversation`` frame when the turn is streamed).

        Raises:
            ValueError: unknown role.
        """
        return self.conversation.history.append_message(role, content, **extra)

    def append_assistant_message(self, content: Any, **extra: Any) -> Any:
        """Append a user-visible assistant reply; the next turn's ``converse`` sees it.

        A handler that calls it is not given a second copy from its return value.
        """
        return self.conversation.history.append_assistant_message(content, **extra)

    def append_agent_result(
        self,
        agent_name: str,
        result: Any,
        visibility: Literal["private", "public"] = "private",
    ) -> ConversationEvent:
        """Record an agent's result in ``state.events`` and ``state.agent_threads``.

        Private agent work stays out of the canonical history. Public results
        (``visibility="public"``, or the agent listed in
        ``ConversationConfig.visible_agent_outputs``) are also appended as an assistant
        message. Either way the result object is never promoted a second time from the
        handler's return value.

        Raises:
            ValueError: empty ``agent_name`` or an unknown ``visibility``.
        """
        return self.conversation.history.append_agent_result(agent_name, result, visibility)

    @property
    def conversation_messages(self) -> list[dict[str, Any]]:
        """The canonical history as chat dicts, ready for an LLM (a new list)."""
        return get_conversation_messages(self)

    def receive_user_message(
        self,
        text: str,
        *,
        outcomes: Sequence[str] | None = None,
        llm: BaseLLM | str | Mapping[str, Any] | None = None,
    ) -> str | None:
        """Append a user message and set ``current``/``last_user_message``.

        With ``outcomes`` the text is classified (``llm`` required) and ``last_intent``
        set; returns that intent, else None. ``handle_turn`` does this for you.
        """
        return self.conversation.history.receive_user_message(text, outcomes, llm)

    async def aclassify_intent(
        self,
        text: str,
        outcomes: Sequence[str],
        *,
        llm: BaseLLM | str | Mapping[str, Any],
        context: str | None = None,
    ) -> str:
        """Map ``text`` to one of ``outcomes`` with ``llm`` (unmatched: the first outcome)."""
        return await aclassify_intent(text, outcomes, llm=llm, context=context)

    classify_intent = sync_twin(aclassify_intent)

    # ------------------------------------------------------------------ the built-in graph

    def conversation_start(self) -> Any:
        """Called by ``route_conversation`` before routing, every turn.

        The default marks ``state.session_ready`` on the first turn. Override for
        per-session bootstrap (may be async).
        """
        return self.conversation.graph.conversation_start()

    def route_turn(self, context: RouterContext) -> str | Awaitable[str | None] | None:
        """Pick this turn's route; a falsy result defers to the precedence rules.

        The default runs the LLM router when ``ConversationConfig.router`` is set, or when
        the flow has custom routes and no ``default_intents``. Without a router LLM it
        returns ``RouterConfig.default_intent``. Override to route by rules (return a
        label) or to add side effects (then call ``super().route_turn(context)``).
        """
        return self.conversation.graph.route_turn(context)

    def route_conversation(self) -> Any:
        """The built-in start/router: ``conversation_start()``, then choose the route.

        It routes only a user message received since the last routing (by a turn API,
        ``receive_user_message`` or ``prepare_conversational_turn``). A bare
        ``kickoff(inputs={"id": ...})`` that restores a session, or starts a new one,
        has no message to answer: it selects no route and no handler runs (the
        restored ``current_user_message`` was answered by the turn that received it).
        The route: a non-empty ``route_turn`` result; else the intent pre-classified for
        this turn; else the deprecated ``answer_from_history`` check when configured;
        else ``converse``.
        """
        return self.conversation.graph.route_conversation()

    async def can_answer_from_history(self) -> bool:
        """Deprecated eligibility check: does the history already answer the message?"""
        return await self.conversation.graph.can_answer_from_history()

    def converse_turn(self) -> Any:
        """Default chat handler: the conversation LLM over the system prompt + history
        (without an LLM it replies ``NO_LLM_REPLY``)."""
        return self.conversation.graph.converse_turn()

    def end_conversation(self) -> str:
        """Mark the conversation ended (``state.ended``) and say goodbye."""
        return self.conversation.graph.end_conversation()

    def answer_from_history_turn(self) -> Any:
        """Deprecated: answer from the history. Use ``converse`` instead."""
        return self.conversation.graph.answer_from_history_turn()
