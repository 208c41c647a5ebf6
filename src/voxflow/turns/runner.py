"""TurnRunner: one tracked conversational turn → identity-tagged public reply events.

``TurnRunner(flow).astream_turn(message, turn_id=...)`` drives the flow's own streaming
turn (``flow.astream_turn``) and maps its frames to :class:`~voxflow.turns.ReplyEvent`s:

* ``started`` first (seq 1), before the flow runs;
* ``conversation_route_selected`` → ``route_selected`` (and ``turn.route``);
* an LLM call made by a *public* responder (a method in ``public_methods``, or an agent
  whose name ``public_agent_ids()`` returns) and offering no tools →
  ``generation_started`` (``call_id``); each non-empty chunk of it → ``text``
  (``segment_id`` 1, 2, …), the very first one preceded by ``first_model_text`` with
  ``model_first_text_ms``. Router calls, tool-enabled calls and other agents are never
  public;
* the assistant ``conversation_message_added`` sets the reply text; when nothing was
  streamed (a hardcoded or non-streaming reply) that text becomes one ``text`` event;
* the terminal event: ``completed`` (with the full text), ``interrupted`` or ``failed``.

A hardcoded reply is exactly ``started``, ``route_selected``, ``text``, ``completed``.
LLM frames name the method that made the call, so method frames are not needed and
``suppress_flow_events`` stays as the flow has it (no per-method event, no state copy).

:meth:`TurnRunner.interrupt` (from any thread) during generation cancels the flow's turn
task, which closes the in-flight provider stream instead of draining it; the remaining
frames are dropped and the terminal event is ``interrupted``. Closing the iterator
before its terminal event interrupts the reply the same way.

With persistence, the state is saved once more after the terminal event (or the
interruption), so the stored turn and reply carry their final statuses, never
``running``/``generating``.

During a tracked turn the live state is authoritative: the flow's persistence reload is
skipped (``flow.conversation.keep_state_live()``), so stored snapshots never overwrite accepted
turn, reply or job records. Hold ``JobRunner.state_lock`` around the whole iteration
when background jobs share the state (see :mod:`voxflow.jobs.runner`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import threading
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Collection, Iterator
from typing import TYPE_CHECKING, Any

from voxflow._loops import thread_loop
from voxflow.clock import Clock
from voxflow.conversation.events import (
    ConversationMessageAdded,
    ConversationRouteSelected,
    LLMFrame,
)
from voxflow.errors import (
    ConversationEndedError,
    ConversationModeError,
    TurnIdentityError,
    TurnInProgressError,
    TurnRestoreError,
)
from voxflow.ids import DeliveryId, SessionId, TurnId, new_delivery_id, new_turn_id
from voxflow.turns.ledger import ActiveTurn, TurnLedger
from voxflow.turns.records import ReplyEvent, ReplyKind

if TYPE_CHECKING:
    from voxflow.conversation.flow import Flow
    from voxflow.flow.streaming import StreamSession

__all__ = ["DEFAULT_PUBLIC_METHODS", "ReplyStream", "TurnRunner"]

DEFAULT_PUBLIC_METHODS: tuple[str, ...] = ("converse_turn", "answer_from_history_turn")
"""The built-in public responder methods: only their model text streams live."""

logger = logging.getLogger(__name__)

_RESTORE_OPTIONS = frozenset({"from_checkpoint", "restore_from_state_id"})
_TURN_OPTIONS = frozenset({"intents", "intent_llm", "input_files"})


class TurnRunner(TurnLedger):
    """Run tracked turns of one conversational Flow, one at a time.

    Args:
        flow: a conversational Flow whose state is a :class:`TurnState`.
        public_methods: methods whose (tool-free) LLM calls are public speech.
        public_agent_ids: returns the agent names whose LLM calls are public speech.
        on_interrupt: called when the active reply is interrupted while generating.
        should_interrupt: polled for every frame; True interrupts the active reply.
        clock: the clock for ``elapsed_ms``/``model_first_text_ms`` (default: the flow's).

    Raises:
        ConversationModeError: the flow is not conversational.
        TypeError: the flow's state is not a TurnState, or a malformed argument.
    """

    def __init__(
        self,
        flow: Flow[Any],
        *,
        public_methods: Collection[str] = DEFAULT_PUBLIC_METHODS,
        public_agent_ids: Callable[[], Collection[str]] | None = None,
        on_interrupt: Callable[[], None] | None = None,
        should_interrupt: Callable[[], bool] | None = None,
        clock: Clock | None = None,
    ) -> None:
        # Here: the turn records (`from voxflow import TurnState`) load no Flow.
        from voxflow.conversation.flow import Flow

        if not isinstance(flow, Flow):
            raise TypeError(f"flow must be a voxflow Flow, got {type(flow).__name__}")
        if not getattr(type(flow), "conversational", False):
            raise ConversationModeError(
                f"TurnRunner needs a conversational flow: set `conversational = True` on "
                f"{type(flow).__name__} or decorate it with @ConversationConfig(...)"
            )
        if isinstance(public_methods, str) or not all(isinstance(m, str) for m in public_methods):
            raise TypeError("public_methods must be a collection of method names")
        for name, fn in (
            ("public_agent_ids", public_agent_ids),
            ("should_interrupt", should_interrupt),
        ):
            if fn is not None and not callable(fn):
                raise TypeError(f"{name} must be callable or None")
        super().__init__(lambda: flow.state, clock=clock or flow.clock, on_interrupt=on_interrupt)
        self._flow = flow
        self._public_methods = frozenset(public_methods)
        self._public_agent_ids = public_agent_ids
        self._should_interrupt = should_interrupt

    @property
    def flow(self) -> Flow[Any]:
        """The wrapped flow."""
        return self._flow

    # -- entry points -------------------------------------------------------------------

    def astream_turn(
        self,
        message: str,
        *,
        turn_id: TurnId | str | None = None,
        input_revision: int = 1,
        kind: ReplyKind = "answer",
        session_id: SessionId | str | None = None,
        **options: Any,
    ) -> ReplyStream:
        """Track one committed input and stream its public reply events.

        Its identities are given out now, before the first event: the returned
        :class:`ReplyStream` names the turn, the input revision and the reply
        (``delivery_id``) its events will carry. The turn begins when the first event is
        read.

        Args:
            message: the committed user text (non-empty).
            turn_id: a single-use id for this input (a fresh uuid when None).
            input_revision: the input's version (an int >= 1).
            kind: ``acknowledgment``, ``answer`` or ``progress``.
            session_id: must equal ``flow.state.id`` when given.
            options: ``intents`` / ``intent_llm`` / ``input_files``, passed to the flow's
                turn.

        Returns:
            The reply's events; iterate them to the terminal event (or close the stream,
            which interrupts the reply).

        Raises:
            TurnInProgressError: another tracked turn has not drained yet.
            TurnIdentityError: ``turn_id`` was used before or ``session_id`` is foreign.
            TurnRestoreError: ``from_checkpoint``/``restore_from_state_id`` was passed.
            ConversationEndedError: ``state.ended`` is true.
            TypeError, ValueError: a malformed argument.
        """
        if not isinstance(message, str):
            raise TypeError(f"message must be a str, got {type(message).__name__}")
        if not message.strip():
            raise ValueError("message must be non-empty")
        restore = _RESTORE_OPTIONS & set(options)
        if restore:
            raise TurnRestoreError(
                f"Restore state before starting a tracked live turn: {sorted(restore)} is not "
                "accepted here. Restore the flow state (and TurnRunner.restore(snapshot)) "
                "first, then start the turn."
            )
        unknown = set(options) - _TURN_OPTIONS
        if unknown:
            raise TypeError(f"astream_turn() got unexpected keyword argument(s): {sorted(unknown)}")
        params: dict[str, Any] = {
            "turn_id": TurnId(turn_id) if isinstance(turn_id, str) else turn_id,
            "input_revision": input_revision,
            "kind": kind,
            "session_id": SessionId(session_id) if isinstance(session_id, str) else session_id,
        }
        self.check_can_begin(**params)
        if params["turn_id"] is None:
            params["turn_id"] = new_turn_id()
        params["delivery_id"] = new_delivery_id()
        return ReplyStream(
            self._run(message, params, options),
            turn_id=params["turn_id"],
            input_revision=input_revision,
            delivery_id=params["delivery_id"],
        )

    def stream_turn(
        self,
        message: str,
        *,
        turn_id: TurnId | str | None = None,
        input_revision: int = 1,
        kind: ReplyKind = "answer",
        session_id: SessionId | str | None = None,
        **options: Any,
    ) -> Iterator[ReplyEvent]:
        """:meth:`astream_turn` for sync callers (runs on this thread's cached loop).

        Close the iterator (``events.close()``) to stop early; that interrupts the reply.

        Raises:
            RuntimeError: called from a running event loop (use ``astream_turn`` there).
        """
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            raise RuntimeError(
                "stream_turn() is the sync API; inside an event loop use "
                "`async for event in runner.astream_turn(...)`"
            )
        events = self.astream_turn(
            message,
            turn_id=turn_id,
            input_revision=input_revision,
            kind=kind,
            session_id=session_id,
            **options,
        )
        return _drive(events)

    # -- the turn -------------------------------------------------------------------

    def _is_public(self, call: LLMFrame) -> bool:
        if call.event.has_tools:
            return False
        agent = call.event.agent_name
        if agent is not None:
            ids = self._public_agent_ids() if self._public_agent_ids is not None else ()
            return agent in ids
        return call.method in self._public_methods

    async def _run(
        self, message: str, params: dict[str, Any], options: dict[str, Any]
    ) -> AsyncGenerator[ReplyEvent, None]:
        active = self.begin(**params)
        flow = self._flow
        history = flow.conversation.history  # its assistant messages name this reply
        history.reply_identity = {"turn_id": active.reply.turn_id,
                                  "delivery_id": active.reply.delivery_id}
        with flow.conversation.keep_state_live():  # our accepted turns are newer
            stream: StreamSession | None = None
            terminal = False
            try:
                yield self.issue(active, "started")
                stream = await flow.astream_turn(message, **options)
                active.cancel = _canceller(stream)
                if active.reply.interrupted:
                    stream.cancel()
                async for event in self._map_frames(active, stream):
                    yield event
                if active.reply.status != "interrupted":
                    await stream.aresult()  # raises the turn's error, if it failed
                    if active.segments == 0 and active.final_text:
                        # Hardcoded or final-only replies: the same text/completed contract.
                        yield self.text(active, active.final_text)
                terminal = True
                yield self.finish(active, text=active.final_text)
            except GeneratorExit:
                raise
            except Exception as exc:
                if terminal:
                    raise
                terminal = True
                yield self.finish(active, error=exc)
                raise
            finally:
                try:
                    if not terminal:  # closed (or cancelled) before the terminal event
                        reply = active.reply
                        self.interrupt(
                            session_id=reply.session_id,
                            turn_id=reply.turn_id,
                            input_revision=reply.input_revision,
                            delivery_id=reply.delivery_id,
                        )
                    if stream is not None:
                        await stream.aclose()
                finally:
                    history.reply_identity = None
                    self.end(active)
                    await _save_settled(flow, failing=sys.exc_info()[1] is not None)

    async def _map_frames(
        self, active: ActiveTurn, stream: StreamSession
    ) -> AsyncIterator[ReplyEvent]:
        reply = active.reply
        clock = self.clock
        public_calls: dict[str, float] = {}
        should_interrupt = self._should_interrupt
        async for frame in stream:
            if should_interrupt is not None and not reply.interrupted and should_interrupt():
                self.interrupt(
                    session_id=reply.session_id,
                    turn_id=reply.turn_id,
                    input_revision=reply.input_revision,
                    delivery_id=reply.delivery_id,
                )
            if reply.interrupted:
                continue  # drained silently (the cancelled run ends the stream)
            event = frame.event
            if isinstance(event, LLMFrame):
                call = event.event
                call_id = call.call_id
                if call.type == "llm_call_started":
                    if self._is_public(event):
                        public_calls[call_id] = clock.now()
                        yield self.issue(active, "generation_started", call_id=call_id)
                elif call.type == "llm_stream_chunk" and call_id in public_calls and call.content:
                    if active.first_text_at is None:
                        now = active.first_text_at = clock.now()
                        ms = max(0.0, (now - public_calls[call_id]) * 1000.0)
                        yield self.issue(
                            active, "first_model_text", call_id=call_id, model_first_text_ms=ms
                        )
                    yield self.text(active, call.content, call_id=call_id)
            elif isinstance(event, ConversationRouteSelected):
                yield self.set_route(active, event.route)
            elif isinstance(event, ConversationMessageAdded) and event.role == "assistant":
                content = event.content
                active.final_text = content if isinstance(content, str) else _text_of(content)


class ReplyStream:
    """The public reply events of one tracked turn (:meth:`TurnRunner.astream_turn`), and
    the identities they carry, known before the first event.

    Attributes:
        turn_id: the turn it answers.
        input_revision: the turn's input revision.
        delivery_id: the reply's identity (every event of it carries this one).
    """

    __slots__ = ("_events", "_read", "delivery_id", "input_revision", "turn_id")

    def __init__(
        self,
        events: AsyncGenerator[ReplyEvent, None],
        *,
        turn_id: TurnId,
        input_revision: int,
        delivery_id: DeliveryId,
    ) -> None:
        self._events = events
        self._read = False
        self.turn_id = turn_id
        self.input_revision = input_revision
        self.delivery_id = delivery_id

    def __aiter__(self) -> ReplyStream:
        return self

    async def __anext__(self) -> ReplyEvent:
        self._read = True
        return await self._events.__anext__()

    async def aclose(self) -> None:
        """Stop reading; before the terminal event this interrupts the reply.

        Before the first event too: the turn begins and ends at once, its reply
        ``interrupted`` (its ``started`` event is never handed out; the flow does not
        run). When the turn cannot begin any more (another turn is active, the
        conversation ended), nothing is recorded.
        """
        if not self._read:
            self._read = True
            with contextlib.suppress(
                TurnInProgressError, ConversationEndedError, TurnIdentityError
            ):
                await self._events.__anext__()  # begins the turn (issues `started`)
        await self._events.aclose()

    def __repr__(self) -> str:
        return (
            f"ReplyStream(turn_id={self.turn_id!r}, input_revision={self.input_revision}, "
            f"delivery_id={self.delivery_id!r})"
        )


async def _save_settled(flow: Flow[Any], *, failing: bool) -> None:
    """Persist the turn's final statuses (the flow saved the turn while it was running).

    A save that fails while the turn is already failing (e.g. the same conflict that
    failed it) is logged and the turn's own error goes on.
    """
    if not flow.persistence_configured():
        return
    try:
        await flow.asave_state("handle_turn")  # after any write still in flight
    except Exception:
        if not failing:
            raise
        logger.warning("could not save the final statuses of a failed turn", exc_info=True)


def _text_of(content: Any) -> str | None:
    if isinstance(content, list):
        parts = [p.get("text", "") for p in content if isinstance(p, dict)]
        return "".join(str(p) for p in parts)
    return None if content is None else str(content)


def _canceller(stream: StreamSession) -> Callable[[], None]:
    """A thread-safe way to cancel the stream's run task from ``interrupt``."""
    loop = asyncio.get_running_loop()
    owner = threading.get_ident()

    def cancel() -> None:
        if threading.get_ident() == owner:
            stream.cancel()
        else:
            # A closed loop means nothing is running any more: nothing to cancel.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(stream.cancel)

    return cancel


def _drive(events: AsyncIterator[ReplyEvent]) -> Iterator[ReplyEvent]:
    loop = thread_loop()
    agen: Any = events
    try:
        while True:
            try:
                event = loop.run_until_complete(agen.__anext__())
            except StopAsyncIteration:
                return
            yield event
    finally:
        loop.run_until_complete(agen.aclose())
