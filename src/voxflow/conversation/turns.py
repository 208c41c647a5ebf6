"""The turn APIs of a conversational Flow: ``handle_turn``, ``stream_turn``, ``chat``.

One turn, in order (``ahandle_turn`` is the real implementation; ``handle_turn`` runs it
on the thread's cached loop, ``stream_turn``/``astream_turn`` on a stream session):

1. Validate everything (message, session id, intents, kickoff options, mode, an ended
   conversation) *before* anything changes: a rejected turn leaves no trace.
2. A different ``session_id`` than the current state's starts from a fresh state (then
   restored from ``@persist`` if that session was saved); ``None`` continues the current
   session.
3. Emit ``conversation_turn_started``; reset per-execution tracking (unless resuming a
   checkpoint); ``kickoff(inputs={"id": session_id})``: the state id is stamped and, with
   persistence, the latest snapshot for it is loaded.
4. Hydration (the runtime's ``_before_starts`` hook, after the restore): refuse an ended
   conversation; if the restored history ends with a user message no reply was stored
   for (the process stopped mid-turn), mark it interrupted
   (:func:`~voxflow.conversation.persistence.mark_unanswered`); append the user
   message; set ``current_user_message`` and ``last_user_message``; classify this
   turn's intent when ``intents`` are given.
5. The graph: user ``@start`` methods, ``route_conversation`` last, the chosen handler.
6. A string result (or a string ``.raw``) becomes the assistant reply unless the handler
   already appended one, it is a route label or ``last_intent``, or it was recorded with
   ``append_agent_result``; the state is then persisted again, so a fresh Flow with the
   same session id continues the conversation.
7. Emit ``conversation_turn_completed`` (or ``conversation_turn_failed`` and re-raise).
   Event delivery never blocks the turn.

Trace finalization is deferred by default: ``flow_started`` is emitted on the first turn
of a session, ``flow_finished`` once by :meth:`finalize_session_traces`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from voxflow._loops import run_blocking
from voxflow.conversation.chat import DEFAULT_EXIT_COMMANDS, run_chat
from voxflow.conversation.events import (
    ConversationTurnCompleted,
    ConversationTurnFailed,
    ConversationTurnStarted,
    SessionTracesFinalized,
)
from voxflow.conversation.graph import current_llm_method, route_labels
from voxflow.conversation.helpers import get_state_field
from voxflow.conversation.history import result_text
from voxflow.conversation.persistence import (
    SavedLists,
    mark_unanswered,
    prepare_state_save,
    remember_restored,
    remember_revision,
)
from voxflow.conversation.routing import aclassify_intent
from voxflow.conversation.tracing import SessionTracer
from voxflow.conversation.turn_request import TurnRequest, check_call, resolve_intents
from voxflow.errors import ConversationEndedError, ConversationModeError, FlowRuntimeError
from voxflow.files import FileRef, InputFilePolicy, prepare_input_files
from voxflow.flow.events import FlowFinished
from voxflow.flow.state import load_state_like, stamp_id
from voxflow.flow.streaming import StreamSession
from voxflow.ids import SessionId
from voxflow.llm import BaseLLM, LLMEvent, observe_llm

if TYPE_CHECKING:
    from voxflow.clock import Clock
    from voxflow.conversation.config import ConversationConfig
    from voxflow.conversation.part import Conversation
    from voxflow.flow.definition import FlowDefinition
    from voxflow.flow.persistence import FlowPersistence

__all__ = ["DEFAULT_EXIT_COMMANDS", "ConversationTurns"]

class ConversationTurns:
    """Mixin of :class:`voxflow.Flow`: the turn APIs (see the module docs)."""

    _pending_turn: TurnRequest | None = None
    _turn_index: int = 0
    _session_open: bool = False
    _session_result: Any = None
    _tracer: SessionTracer | None = None
    _held_session: str | None = None
    _saved_lists: SavedLists | None = None
    _state_before_restore: Any = None

    if TYPE_CHECKING:
        conversational: ClassVar[bool]
        defer_trace_finalization: bool | None
        _frame_sink: Any
        _state: Any
        _inline: bool
        _running: bool
        _skip_persistence_restore: bool
        conversation: Conversation

        @property
        def state(self) -> Any: ...
        @property
        def flow_id(self) -> str: ...
        @property
        def clock(self) -> Clock: ...
        @classmethod
        def flow_definition(cls) -> FlowDefinition: ...
        @classmethod
        def _conversation_config(cls) -> ConversationConfig: ...
        def _initial_state(self, state: Any) -> Any: ...
        def _check_kickoff_args(self, inputs: Any, fc: Any, rsid: Any) -> None: ...
        async def _kickoff(self, inputs: Any, fc: Any, rsid: Any, private_loop: bool) -> Any: ...
        async def _load(self, flow_uuid: str) -> dict[str, Any] | None: ...
        _input_files: dict[str, FileRef]
        input_file_policy: ClassVar[InputFilePolicy]
        def reset_execution(self) -> None: ...
        def persistence_configured(self) -> bool: ...
        def _backend(self, method: Any = None) -> FlowPersistence: ...
        async def _write_state(self, write: Callable[[], None]) -> None: ...
        def _emit(self, event_type: type[Any], channel: str | None = None, **f: Any) -> None: ...
        def emit_frame(
            self, channel: str, type: str, data: Mapping[str, Any] | None = None
        ) -> None: ...
        def append_assistant_message(self, content: Any, **extra: Any) -> Any: ...

    # ------------------------------------------------------------------ validation

    def _require_conversational(self, api: str) -> None:
        if not type(self).conversational:
            raise ConversationModeError(
                f"{api}() needs a conversational flow: set `conversational = True` on "
                f"{type(self).__name__} or decorate it with @ConversationConfig(...)"
            )

    def _turn_request(
        self,
        api: str,
        message: Any,
        session_id: Any,
        intents: Any,
        intent_llm: Any,
        kickoff_kwargs: Mapping[str, Any],
        *,
        read_files: bool = True,
    ) -> TurnRequest:
        """Validate a turn's arguments; ``read_files=False`` leaves ``input_files`` to
        :meth:`_aread_files` (async callers read them off the loop)."""
        self._require_conversational(api)
        check_call(api, message, session_id, kickoff_kwargs)
        intents, llm = resolve_intents(intents, intent_llm, self._conversation_config())
        fc = kickoff_kwargs.get("from_checkpoint")
        rsid = kickoff_kwargs.get("restore_from_state_id")
        self._check_kickoff_args({"id": session_id or "x"}, fc, rsid)
        if get_state_field(self, "ended", False) and session_id in (None, self.flow_id):
            raise ConversationEndedError(
                "this conversation has ended (state.ended is true); start a new session "
                "with another session_id"
            )
        files = kickoff_kwargs.get("input_files")
        refs = {} if files is None or not read_files else self._read_files(files)
        return TurnRequest(message, session_id, intents, llm, fc, rsid, refs)

    def _read_files(self, files: Any) -> dict[str, FileRef]:
        return prepare_input_files(files, self.input_file_policy)

    async def _aread_files(
        self, request: TurnRequest, kickoff_kwargs: Mapping[str, Any]
    ) -> TurnRequest:
        files = kickoff_kwargs.get("input_files")
        if files is None:
            return request
        refs = await asyncio.to_thread(self._read_files, files)
        return dataclasses.replace(request, files=refs)

    # ------------------------------------------------------------------ one turn

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
        request = self._turn_request(
            "handle_turn", message, session_id, intents, intent_llm, kickoff_kwargs
        )
        return run_blocking(lambda: self._aturn(request, private_loop=True))

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
        request = self._turn_request(
            "ahandle_turn", message, session_id, intents, intent_llm, kickoff_kwargs,
            read_files=False,
        )
        request = await self._aread_files(request, kickoff_kwargs)
        return await self._aturn(request, private_loop=False)

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
        """
        request = self._turn_request(
            "stream_turn", message, session_id, intents, intent_llm, kickoff_kwargs
        )
        return StreamSession.run_sync(self, lambda private: self._aturn(request, private))  # type: ignore[arg-type]

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
        request = self._turn_request(
            "astream_turn", message, session_id, intents, intent_llm, kickoff_kwargs,
            read_files=False,
        )
        request = await self._aread_files(request, kickoff_kwargs)
        return StreamSession.run_async(self, lambda private: self._aturn(request, False))  # type: ignore[arg-type]

    async def _aturn(self, request: TurnRequest, private_loop: bool) -> Any:
        if request.session_id is not None and request.session_id != self.flow_id:
            # Another conversation: never carry this one's history into it.
            self.finalize_session_traces()
            self._state = self._initial_state(None)
            self._held_session = None
            self._saved_lists = None  # marks of the previous session's lists
        session_id = SessionId(request.session_id or self.flow_id)
        # The instance that ran this session's last turn holds its live state: reloading
        # the same snapshot every turn would cost O(history) per turn for nothing.
        skip_restore = self._skip_persistence_restore
        self._skip_persistence_restore = skip_restore or self._held_session == session_id
        self._turn_index += 1
        index = self._turn_index
        self.conversation.turn.reset()  # only this turn's message is routed
        self._pending_turn = request
        self._input_files = dict(request.files)
        self._state_before_restore = self._state
        tracer = self._session_tracer()
        with contextlib.ExitStack() as stack:
            if self._frame_sink is not None:
                stack.enter_context(observe_llm(self._llm_frame))
            if tracer is not None:
                stack.enter_context(tracer.turn(index, session_id))
            self.conversation.history.emit(ConversationTurnStarted, turn_index=index)
            try:
                if request.from_checkpoint is None:
                    self.reset_execution()
                result = await self._kickoff(
                    {"id": session_id},
                    request.from_checkpoint,
                    request.restore_from_state_id,
                    private_loop,
                )
                if self._promote(result):
                    await self._persist_turn()
            except BaseException as exc:
                self._pending_turn = None
                self.conversation.turn.user_message_waiting = False
                self._held_session = None  # reload the last good snapshot next turn
                self._skip_persistence_restore = skip_restore
                self.conversation.history.emit(
                    ConversationTurnFailed,
                    turn_index=index,
                    error_type=type(exc).__name__,
                    error=str(exc),
                )
                raise
            self._skip_persistence_restore = skip_restore
            self._held_session = session_id
            self._session_result = result
            if tracer is not None:
                tracer.annotate(route=self.conversation.turn.route or "", turn_index=index)
            self.conversation.history.emit(
                ConversationTurnCompleted,
                turn_index=index,
                route=self.conversation.turn.route,
                reply=self.conversation.turn.reply,
            )
        return result

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
        self._check_load_session(session_id)
        return run_blocking(lambda: self._aload_session(session_id, inline=True))

    async def aload_session(self, session_id: str) -> bool:
        """:meth:`load_session` for async callers (the read runs in a worker thread)."""
        self._check_load_session(session_id)
        return await self._aload_session(session_id, inline=False)

    def _check_load_session(self, session_id: Any) -> None:
        if not isinstance(session_id, str) or not session_id:
            raise ValueError("session_id must be a non-empty string")
        if not self.persistence_configured():
            raise ValueError(
                f"load_session() needs persistence: decorate {type(self).__name__} with "
                "@persist() or pass persistence= to its constructor"
            )
        if self._running:
            raise FlowRuntimeError(
                f"{type(self).__name__}: a run is in progress; load the session before "
                "or after it, or on another instance"
            )

    async def _aload_session(self, session_id: str, *, inline: bool) -> bool:
        if session_id != self.flow_id:
            self.finalize_session_traces()
        state = self._initial_state(None)
        stamp_id(state, session_id)
        self._inline = inline
        self._saved_lists = SavedLists()  # the load notes the stored revision in it
        data = await self._load(session_id)
        if data is not None:
            state = load_state_like(state, data)
            stamp_id(state, session_id)
        self._state = state
        self.conversation.turn.user_message_waiting = False
        if data is not None:
            remember_restored(state, session_id, self._backend(), self._saved_lists)
            mark_unanswered(state)
        self._held_session = session_id
        return data is not None

    async def _before_starts(self) -> None:
        """Runtime hook, after the restore and before any start: hydrate the pending turn."""
        request, self._pending_turn = self._pending_turn, None
        if request is None:
            return
        before, self._state_before_restore = self._state_before_restore, None
        if (
            self._state is not before  # kickoff replaced it: restored from the backend
            and request.restore_from_state_id is None  # a fork is stored under another id
            and request.from_checkpoint is None
            and self.persistence_configured()
        ):
            if self._saved_lists is None:
                self._saved_lists = SavedLists()
            remember_restored(self._state, self.flow_id, self._backend(), self._saved_lists)
            mark_unanswered(self._state)
        if get_state_field(self, "ended", False):
            raise ConversationEndedError(
                "this conversation has ended (state.ended is true in the restored session)"
            )
        files = tuple(request.files.values())
        self.conversation.history.record_user_message(request.message, files)
        if request.intents is not None:
            assert request.intent_llm is not None
            self.conversation.turn.intent = await aclassify_intent(
                request.message, request.intents, llm=request.intent_llm
            )

    def _promote(self, result: Any) -> bool:
        """Record a string result as the assistant reply (see module docs, step 6)."""
        if self.conversation.turn.assistant_appended:
            return False
        text = result_text(result)
        if not text or id(result) in self.conversation.turn.agent_results:
            return False
        if text in route_labels(type(self)) or text == get_state_field(self, "last_intent"):
            return False
        self.append_assistant_message(text)
        return True

    async def _persist_turn(self) -> None:
        if not self.persistence_configured():
            return
        write = self._prepare_state_save(self._backend(), "handle_turn")
        if self._inline:
            write()
        else:
            await self._write_state(write)

    def _remember_revision(self, backend: Any, flow_id: str, revision: int) -> None:
        """Runtime hook: ``backend`` was just read at ``revision`` for ``flow_id``; the
        next save of that session must build on it."""
        if self._saved_lists is None:
            self._saved_lists = SavedLists()
        remember_revision(flow_id, backend, self._saved_lists, revision)

    def _prepare_state_save(self, backend: Any, method_name: str) -> Callable[[], None]:
        """Runtime hook: snapshot the state now (on the loop); return the blocking write.

        A conversation saves only what was appended to ``messages``/``events`` since this
        instance's last save when the backend supports it (the default SQLite one does),
        so the cost of a save does not grow with the history; see
        :func:`voxflow.conversation.persistence.prepare_state_save`.
        """
        if self._saved_lists is None:
            self._saved_lists = SavedLists()
        return prepare_state_save(
            self._state, self.flow_id, backend, method_name, self._saved_lists
        )

    def _llm_frame(self, event: LLMEvent) -> None:
        self.emit_frame(
            "tool" if event.type.startswith("tool_") else "llm",
            event.type,
            {
                "tool_name": event.tool_name,
                "call_id": event.call_id,
                "model": event.model,
                "content": event.content,
                "has_tools": event.has_tools,
                "agent_name": event.agent_name,
                "method": current_llm_method.get(),
            },
        )

    # ------------------------------------------------------------------ tracing

    def _should_defer_trace_finalization(self) -> bool:
        """Whether per-turn ``flow_finished`` and trace export wait for the session end."""
        if self.defer_trace_finalization is not None:
            return bool(self.defer_trace_finalization)
        config = self._conversation_config()
        if config.trace_scope is not None:
            return config.trace_scope == "session"
        return config.defer_trace_finalization

    def _deferring(self) -> bool:
        return type(self).conversational and self._should_defer_trace_finalization()

    def _emit_flow_started(self) -> bool:
        """Runtime hook: ``flow_started`` only on a deferred session's first turn."""
        if not self._deferring():
            return True
        if self._session_open:
            return False
        self._session_open = True
        return True

    def _emit_flow_failed(self) -> bool:
        """Runtime hook: deferred turns report failure with the turn, not the flow."""
        return not self._deferring()

    def _emit_flow_finished(self) -> bool:
        """Runtime hook: deferred sessions emit ``flow_finished`` once, at finalization."""
        return not self._deferring()

    def _session_tracer(self) -> SessionTracer | None:
        tracer = self._tracer
        if tracer is None:
            tracer = SessionTracer.for_flow(type(self).__name__, self.clock)
            if tracer is None:
                return None
            self._tracer = tracer
        tracer.deferred = self._should_defer_trace_finalization()
        return tracer

    def finalize_session_traces(self) -> None:
        """Close the session: emit the deferred ``flow_finished`` and export the trace batch.

        Idempotent; a later turn opens a new session batch. Call it in a ``finally`` when
        you own the loop (``chat()`` calls it for you).
        """
        if self._tracer is not None:
            self._tracer.finalize()
        if not self._session_open:
            return
        self._session_open = False
        self._emit(FlowFinished, result=self._session_result)
        self.conversation.history.emit(SessionTracesFinalized, turns=self._turn_index)

    # ------------------------------------------------------------------ chat

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
        self._require_conversational("chat")
        run_chat(
            self,
            session_id=session_id,
            prompt=prompt,
            assistant_prefix=assistant_prefix,
            exit_commands=exit_commands,
            input_fn=input_fn,
            output_fn=output_fn,
            defer_trace_finalization=defer_trace_finalization,
        )
