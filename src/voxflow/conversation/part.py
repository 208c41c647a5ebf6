"""The conversation part: what :class:`voxflow.Flow` adds to the Flow core, as one object.

Every :class:`voxflow.Flow` holds a :class:`Conversation` as ``flow.conversation``
(registered through the core's part interface, :mod:`voxflow.flow.parts`). It owns the
conversation's history (:class:`~voxflow.conversation.history.History`), its built-in
graph (:class:`~voxflow.conversation.graph.Graph`), what the current turn has done
(:class:`~voxflow.conversation.helpers.TurnFacts`) and the session (tracing, which
session it holds live, what it saved); it reaches the Flow only through its
:class:`~voxflow.flow.host.FlowHost` and the Flow's public API. ``voxflow.Flow``'s
conversational methods are thin delegates to it.

One turn, in order (``ahandle_turn`` is the real implementation; ``handle_turn`` runs it
on the thread's cached loop, ``stream_turn``/``astream_turn`` on a stream session):

1. Validate everything (message, session id, intents, kickoff options, mode, an ended
   conversation) *before* anything changes: a rejected turn leaves no trace.
2. A different ``session_id`` than the current state's starts from a fresh state (then
   restored from ``@persist`` if that session was saved); ``None`` continues the current
   session.
3. Emit ``conversation_turn_started``; reset per-execution tracking (unless resuming a
   checkpoint); ``kickoff(inputs={"id": session_id})``: the state id is stamped and, with
   persistence, the latest snapshot for it is loaded, unless this instance holds that
   session live (it ran the session's last turn, or a ``TurnRunner`` tracks it).
4. Hydration (:meth:`Conversation._hydrate`, which the turn hands to the kickoff as
   its ``prepare`` step, run after the restore): refuse an ended
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
of a session, ``flow_finished`` once by :meth:`Conversation.finalize_session_traces`.
Saves are incremental (:func:`~voxflow.conversation.persistence.prepare_state_save`,
the ``prepare_state_save`` hook), for any ``voxflow.Flow``, conversational or not.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from voxflow._loops import run_blocking
from voxflow.conversation import graph
from voxflow.conversation.chat import run_chat
from voxflow.conversation.config import class_config
from voxflow.conversation.events import (
    ConversationTurnCompleted,
    ConversationTurnFailed,
    ConversationTurnStarted,
    LLMFrame,
    SessionTracesFinalized,
)
from voxflow.conversation.helpers import TurnFacts, get_state_field
from voxflow.conversation.history import History, result_text
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
from voxflow.files import FileRef, prepare_input_files
from voxflow.flow.events import FlowFinished
from voxflow.flow.parts import FlowPart
from voxflow.flow.state import load_state_like, stamp_id
from voxflow.ids import SessionId, TurnId, new_turn_id
from voxflow.llm import LLMEvent, observe_llm
from voxflow.logs import log_context, log_scope

if TYPE_CHECKING:
    from pydantic import BaseModel

    from voxflow.flow.host import FlowHost
    from voxflow.flow.streaming import StreamSession

__all__ = ["Conversation"]


class Conversation(FlowPart):
    """One Flow's conversation (see the module docs).

    Attributes:
        turn: what the current turn has done so far.
        history: the history API.
        graph: the built-in graph (routing and the built-in handlers).
    """

    attribute: ClassVar[str] = "conversation"

    __slots__ = (
        "_held_session",
        "_host",
        "_live",
        "_saved_lists",
        "_session_open",
        "_session_result",
        "_skip_restore",
        "_tracer",
        "_turn_index",
        "graph",
        "history",
        "turn",
    )

    def __init__(self, host: FlowHost) -> None:
        self._host = host
        self.turn = TurnFacts()
        self.history = History(host, self.turn)
        self.graph = graph.Graph(host, self.turn, self.history)
        self._turn_index = 0
        self._session_open = False
        self._session_result: Any = None
        self._tracer: SessionTracer | None = None
        self._held_session: str | None = None
        self._live = 0
        self._skip_restore = False
        self._saved_lists: SavedLists | None = None

    # ------------------------------------------------------------------ the class

    @classmethod
    def prepare_class(cls, flow_cls: type[Any]) -> None:
        graph.forget_class(flow_cls)

    @classmethod
    def extra_methods(cls, flow_cls: type[Any]) -> Mapping[str, Callable[..., Any]]:
        return graph.builtin_methods(flow_cls)

    @classmethod
    def default_state(cls, flow_cls: type[Any]) -> type[BaseModel] | None:
        return graph.default_state(flow_cls)

    @classmethod
    def check_class(cls, flow_cls: type[Any]) -> None:
        graph.check_declared_routes(flow_cls)

    # ------------------------------------------------------------------ validation

    def _require_conversational(self, api: str) -> None:
        flow_cls = type(self._host.flow)
        if not flow_cls.conversational:
            raise ConversationModeError(
                f"{api}() needs a conversational flow: set `conversational = True` on "
                f"{flow_cls.__name__} or decorate it with @ConversationConfig(...)"
            )

    def turn_request(
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
        """Validate a turn's arguments (step 1); ``read_files=False`` leaves
        ``input_files`` to :meth:`aread_files` (async callers read them off the loop)."""
        self._require_conversational(api)
        flow = self._host.flow
        check_call(api, message, session_id, kickoff_kwargs)
        intents, llm = resolve_intents(intents, intent_llm, class_config(type(flow)))
        fc = kickoff_kwargs.get("from_checkpoint")
        rsid = kickoff_kwargs.get("restore_from_state_id")
        self._host.check_kickoff({"id": session_id or "x"}, fc, rsid)
        if get_state_field(flow, "ended", False) and session_id in (None, flow.flow_id):
            raise ConversationEndedError(
                "this conversation has ended (state.ended is true); start a new session "
                "with another session_id"
            )
        files = kickoff_kwargs.get("input_files")
        refs = {} if files is None or not read_files else self._read_files(files)
        return TurnRequest(message, session_id, intents, llm, fc, rsid, refs)

    def _read_files(self, files: Any) -> dict[str, FileRef]:
        return prepare_input_files(files, self._host.flow.input_file_policy)

    async def aread_files(
        self, request: TurnRequest, kickoff_kwargs: Mapping[str, Any]
    ) -> TurnRequest:
        """``request`` with its ``input_files`` read in a worker thread."""
        files = kickoff_kwargs.get("input_files")
        if files is None:
            return request
        refs = await asyncio.to_thread(self._read_files, files)
        return dataclasses.replace(request, files=refs)

    # ------------------------------------------------------------------ one turn

    def handle_turn(self, request: TurnRequest) -> Any:
        """:meth:`voxflow.Flow.handle_turn` of a validated request."""
        return run_blocking(lambda: self._aturn(request, private_loop=True))

    async def ahandle_turn(self, request: TurnRequest) -> Any:
        """:meth:`voxflow.Flow.ahandle_turn` of a validated request."""
        return await self._aturn(request, private_loop=False)

    def stream_turn(self, request: TurnRequest, *, sync: bool) -> StreamSession:
        """``stream_turn`` (``sync``: on a worker thread) or ``astream_turn``."""
        return self._host.stream(lambda private: self._aturn(request, private), sync=sync)

    async def _aturn(self, request: TurnRequest, private_loop: bool) -> Any:
        host = self._host
        flow = host.flow
        if request.session_id is not None and request.session_id != flow.flow_id:
            # Another conversation: never carry this one's history into it.
            flow.finalize_session_traces()
            host.state = host.fresh_state()
            self._held_session = None
            self._saved_lists = None  # marks of the previous session's lists
        session_id = SessionId(request.session_id or flow.flow_id)
        # The instance that ran this session's last turn holds its live state: reloading
        # the same snapshot every turn would cost O(history) per turn for nothing.
        self._skip_restore = self._live > 0 or self._held_session == session_id
        self._turn_index += 1
        index = self._turn_index
        self.turn.reset()  # only this turn's message is routed
        host.set_input_files(request.files)
        before = flow.state  # a restore replaces it (see _hydrate)
        tracer = self._session_tracer()
        # Every turn, text or voice, has one id: the one a TurnRunner tracks it under
        # (its records', a voice call's), else a fresh one for this plain turn. A caller
        # that bound it to its lines already (a voice session) opened its turn span too.
        identity = self.history.reply_identity
        turn_id = TurnId(identity["turn_id"]) if identity else new_turn_id()
        opened = log_context().get("turn_id") == turn_id
        with contextlib.ExitStack() as stack:
            # its every line
            stack.enter_context(log_scope(session_id=str(session_id), turn_id=turn_id))
            if host.streaming:
                stack.enter_context(observe_llm(self._llm_frame))
            if tracer is not None:
                stack.enter_context(tracer.turn(index, session_id, turn_id,
                                                open_turn=not opened))
            self.history.emit(ConversationTurnStarted, turn_index=index)
            try:
                if request.from_checkpoint is None:
                    flow.reset_execution()
                result = await host.kickoff(
                    {"id": session_id},
                    request.from_checkpoint,
                    request.restore_from_state_id,
                    private_loop,
                    prepare=functools.partial(self._hydrate, request, before),
                )
                if self._promote(result):
                    await self.save_turn()
            except BaseException as exc:
                self.turn.user_message_waiting = False
                self._held_session = None  # reload the last good snapshot next turn
                self._skip_restore = False
                self.history.emit(
                    ConversationTurnFailed,
                    turn_index=index,
                    error_type=type(exc).__name__,
                    error=str(exc),
                )
                raise
            self._skip_restore = False
            self._held_session = session_id
            self._session_result = result
            if tracer is not None:
                tracer.annotate(route=self.turn.route or "", turn_index=index)
            self.history.emit(
                ConversationTurnCompleted,
                turn_index=index,
                route=self.turn.route,
                reply=self.turn.reply,
            )
        return result

    async def _hydrate(self, request: TurnRequest, before: Any) -> None:
        """Hydrate the turn ``request`` (step 4), after the restore and before any start;
        ``before`` is the state the turn began with (another one: it was restored)."""
        flow = self._host.flow
        state = flow.state
        if (
            state is not before  # kickoff replaced it: restored from the backend
            and request.restore_from_state_id is None  # a fork is stored under another id
            and request.from_checkpoint is None
            and flow.persistence_configured()
        ):
            remember_restored(state, flow.flow_id, self._host.backend(), self.saved_lists)
            mark_unanswered(state)
        if get_state_field(flow, "ended", False):
            raise ConversationEndedError(
                "this conversation has ended (state.ended is true in the restored session)"
            )
        self.history.record_user_message(request.message, tuple(request.files.values()))
        if request.intents is not None:
            assert request.intent_llm is not None
            self.turn.intent = await aclassify_intent(
                request.message, request.intents, llm=request.intent_llm
            )

    def order_starts(self, names: list[str]) -> list[str] | None:
        return self.graph.order_starts(names)

    def _promote(self, result: Any) -> bool:
        """Record a string result as the assistant reply (see module docs, step 6)."""
        if self.turn.assistant_appended:
            return False
        text = result_text(result)
        if not text or id(result) in self.turn.agent_results:
            return False
        flow = self._host.flow
        if text in graph.route_labels(type(flow)) or text == get_state_field(flow, "last_intent"):
            return False
        flow.append_assistant_message(text)
        return True

    def _llm_frame(self, event: LLMEvent) -> None:
        method = graph.current_llm_method.get()
        self._host.flow.emit_frame(
            "tool" if event.type.startswith("tool_") else "llm",
            event.type,
            {
                "tool_name": event.tool_name,
                "call_id": event.call_id,
                "model": event.model,
                "content": event.content,
                "has_tools": event.has_tools,
                "agent_name": event.agent_name,
                "method": method,
            },
            event=LLMFrame(event, method),
        )

    # ------------------------------------------------------------------ sessions

    def load_session(self, session_id: str) -> bool:
        """:meth:`voxflow.Flow.load_session`."""
        self._check_load_session(session_id)
        return run_blocking(lambda: self._aload_session(session_id, inline=True))

    async def aload_session(self, session_id: str) -> bool:
        """:meth:`voxflow.Flow.aload_session`."""
        self._check_load_session(session_id)
        return await self._aload_session(session_id, inline=False)

    def _check_load_session(self, session_id: Any) -> None:
        flow = self._host.flow
        if not isinstance(session_id, str) or not session_id:
            raise ValueError("session_id must be a non-empty string")
        if not flow.persistence_configured():
            raise ValueError(
                f"load_session() needs persistence: decorate {type(flow).__name__} with "
                "@persist() or pass persistence= to its constructor"
            )
        if self._host.running:
            raise FlowRuntimeError(
                f"{type(flow).__name__}: a run is in progress; load the session before "
                "or after it, or on another instance"
            )

    async def _aload_session(self, session_id: str, *, inline: bool) -> bool:
        host = self._host
        if session_id != host.flow.flow_id:
            host.flow.finalize_session_traces()
        state = host.fresh_state()
        stamp_id(state, session_id)
        self._saved_lists = SavedLists()  # the load notes the stored revision in it
        data = await host.load(session_id, inline=inline)
        if data is not None:
            state = load_state_like(state, data)
            stamp_id(state, session_id)
        host.state = state
        self.turn.user_message_waiting = False
        if data is not None:
            remember_restored(state, session_id, host.backend(), self._saved_lists)
            mark_unanswered(state)
        self._held_session = session_id
        return data is not None

    def skips_restore(self, flow_id: str) -> bool:
        """True during a turn of a session this instance holds live: it ran the session's
        last turn, or a :class:`~voxflow.turns.TurnRunner` tracks it
        (:meth:`keep_state_live`)."""
        return self._skip_restore

    @contextlib.contextmanager
    def keep_state_live(self) -> Iterator[None]:
        """Within the block, no turn reloads the session's stored snapshot: the caller
        (a ``TurnRunner``) keeps the live state, whose accepted turns are newer."""
        self._live += 1
        try:
            yield
        finally:
            self._live -= 1

    @property
    def holds_state_live(self) -> bool:
        """Whether a :meth:`keep_state_live` block is open."""
        return self._live > 0

    # ------------------------------------------------------------------ saves

    @property
    def saved_lists(self) -> SavedLists:
        """What this instance knows was saved of each session (revisions, list and record
        marks): what the next incremental save builds on."""
        if self._saved_lists is None:
            self._saved_lists = SavedLists()
        return self._saved_lists

    async def save_turn(self) -> None:
        """Save the state after a turn (a no-op without persistence)."""
        if self._host.flow.persistence_configured():
            await self._host.save("handle_turn")

    def revision_read(self, backend: Any, flow_id: str, revision: int) -> None:
        """``backend`` was just read at ``revision`` for ``flow_id``: the next save of that
        session must build on it."""
        remember_revision(flow_id, backend, self.saved_lists, revision)

    def prepare_state_save(self, backend: Any, method_name: str) -> Callable[[], None]:
        """Snapshot the state now (on the loop); return the blocking write.

        A conversation saves only what was appended to ``messages``/``events`` since this
        instance's last save when the backend supports it (the default SQLite one does),
        so the cost of a save does not grow with the history; see
        :func:`voxflow.conversation.persistence.prepare_state_save`.
        """
        flow = self._host.flow
        return prepare_state_save(flow.state, flow.flow_id, backend, method_name, self.saved_lists)

    # ------------------------------------------------------------------ tracing

    def should_defer_trace_finalization(self) -> bool:
        """:meth:`voxflow.Flow._should_defer_trace_finalization`'s default."""
        flow = self._host.flow
        if flow.defer_trace_finalization is not None:
            return bool(flow.defer_trace_finalization)
        config = class_config(type(flow))
        if config.trace_scope is not None:
            return config.trace_scope == "session"
        return config.defer_trace_finalization

    def _deferring(self) -> bool:
        flow = self._host.flow
        return bool(type(flow).conversational and flow._should_defer_trace_finalization())

    def emits_flow_started(self) -> bool:
        """``flow_started`` only on a deferred session's first turn."""
        if not self._deferring():
            return True
        if self._session_open:
            return False
        self._session_open = True
        return True

    def emits_flow_failed(self) -> bool:
        """Deferred turns report failure with the turn, not the flow."""
        return not self._deferring()

    def emits_flow_finished(self) -> bool:
        """Deferred sessions emit ``flow_finished`` once, at finalization."""
        return not self._deferring()

    def _session_tracer(self) -> SessionTracer | None:
        flow = self._host.flow
        tracer = self._tracer
        if tracer is None:
            tracer = SessionTracer.for_flow(type(flow).__name__, flow.clock)
            if tracer is None:
                return None
            self._tracer = tracer
        tracer.deferred = flow._should_defer_trace_finalization()
        return tracer

    def finalize_session_traces(self) -> None:
        """:meth:`voxflow.Flow.finalize_session_traces`."""
        if self._tracer is not None:
            self._tracer.finalize()
        if not self._session_open:
            return
        self._session_open = False
        self._host.emit(FlowFinished, result=self._session_result)
        self.history.emit(SessionTracesFinalized, turns=self._turn_index)

    # ------------------------------------------------------------------ chat

    def chat(
        self,
        *,
        session_id: str | None,
        prompt: str,
        assistant_prefix: str,
        exit_commands: Sequence[str],
        input_fn: Callable[[str], str] | None,
        output_fn: Callable[[str], Any] | None,
        defer_trace_finalization: bool | None,
    ) -> None:
        """:meth:`voxflow.Flow.chat`."""
        self._require_conversational("chat")
        run_chat(
            self._host.flow,
            session_id=session_id,
            prompt=prompt,
            assistant_prefix=assistant_prefix,
            exit_commands=exit_commands,
            input_fn=input_fn,
            output_fn=output_fn,
            defer_trace_finalization=defer_trace_finalization,
        )
