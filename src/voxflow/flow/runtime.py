"""The Flow runtime: :class:`Flow`, ``kickoff()`` and ``kickoff_async()``.

Behaviour (the reference contract, minus its flaws):

* **Definition.** Compiled from the decorators when the class is created (wiring errors
  surface at import), cached per class; inheritance follows the MRO. See
  :mod:`voxflow.flow.definition`.
* **Kickoff order.** Argument checks; the state is restored and hydrated (checkpoint, fork,
  ``inputs["id"]``, other inputs merged: :mod:`voxflow.flow.saving`); ``FlowStarted``;
  starts run (unconditional ones, else conditional ones; concurrently, or one at a time
  when a part orders them, e.g. ``route_conversation`` last); then the dispatch loop of
  :mod:`voxflow.flow._engine` (the runs themselves: :mod:`voxflow.flow._runs`).
  Everything above happens before any method runs.
* **Result.** ``kickoff`` returns the output of the *deepest* method run in the dispatch
  tree (depth = hops from a start), ties going to the method declared last. It does not
  depend on timing: for ``begin → decide → a, b → join_or(a), join_and(b)`` it is
  ``join_and``'s output whichever branch finishes first. A pause for human feedback
  returns the :class:`~voxflow.flow.feedback.HumanFeedbackPending` object instead.
* **Failures.** A method that raises emits ``MethodFailed`` and ``FlowFailed``, and the
  exception propagates out of kickoff; concurrent siblings finish first (they are
  awaited), the first failure in declaration order is raised.
* **Sync methods.** ``kickoff()`` (sync) runs the flow on a loop cached per thread, so a
  call costs no new loop and no thread pool. When every method of the flow is sync, they
  run inline on that private loop (no thread hop; concurrent listeners run one after the
  other in declaration order). Otherwise, and always under ``kickoff_async()``, sync
  methods run in the loop's default executor with copied context variables, so they never
  block the caller's loop. Called while a loop is running in the calling thread,
  ``kickoff()`` runs on a worker thread with the caller's copied context and blocks.
* **Events** go to :attr:`Flow.event_bus` (default :data:`~voxflow.flow.events.flow_event_bus`)
  without blocking dispatch; ``suppress_flow_events`` drops the per-method events only.

**Parts.** A Flow holds its parts, each owning its state and reaching the Flow only
through a :class:`~voxflow.flow.host.FlowHost`: the core's saves and restores
(:class:`~voxflow.flow.saving.StateSaving`) and human input
(:class:`~voxflow.flow.feedback.HumanInput`), then those a layer adds with
``class Layer(Flow, parts=(MyPart,))``, called at fixed points (:mod:`voxflow.flow.parts`).
:class:`voxflow.Flow` is this class holding a
:class:`~voxflow.conversation.part.Conversation`; this module never imports it, and
``conversational = True`` on a class built on this core alone is a
:class:`~voxflow.errors.FlowDefinitionError` naming the fix. ``reset_execution()`` clears
per-execution tracking (every kickoff does it, except when resuming a checkpoint or a
paused feedback step); ``emit_frame(channel, type, data)`` adds a frame to the active
stream.
"""

from __future__ import annotations

import os
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

from pydantic import BaseModel

from voxflow.clock import Clock, MonotonicClock
from voxflow.errors import FlowDefinitionError
from voxflow.files import FileRef, InputFilePolicy
from voxflow.flow._engine import Execution
from voxflow.flow._handle import FlowHandle
from voxflow.flow._runs import Runs
from voxflow.flow.checkpoint import CheckpointConfig, load_checkpoint
from voxflow.flow.definition import FlowDefinition, MethodDefinition, compile_definition
from voxflow.flow.events import (
    FlowEvent,
    FlowEventBus,
    flow_event_bus,
)
from voxflow.flow.feedback import (
    FeedbackProvider,
    HumanFeedbackResult,
    HumanInput,
    InputHistoryEntry,
)
from voxflow.flow.parts import FlowPart, check_part_names, checked_part_types
from voxflow.flow.persistence import FlowPersistence
from voxflow.flow.saving import StateSaving, check_backend
from voxflow.flow.state import (
    StateLike,
    checked_state,
    fresh_state,
    generic_state_model,
    state_id,
)
from voxflow.flow.streaming import FrameSink, StreamFrame, frame_from_event

__all__ = ["Flow", "StateT"]

StateT = TypeVar("StateT", bound="BaseModel | dict[str, Any]")


class Flow(Runs, Generic[StateT]):
    """An event-driven graph of methods sharing one state (see the module docs).

    Args:
        state: the initial state (a pydantic model with ``id`` or a dict); by default
            built from ``initial_state``, the generic parameter (``Flow[MyState]``) or a
            dict with a fresh ``id``.
        initial_state: the spec's spelling of ``state`` (an alias; give one of them).
        persistence: the :class:`~voxflow.flow.persistence.FlowPersistence` used by
            ``@persist`` and restores, overriding the decorator's backend.
        event_bus: where events go (default: the process-wide bus).
        clock: timestamps events (default :class:`~voxflow.clock.MonotonicClock`).
        suppress_flow_events: drop per-method events (flow start/finish still emit).
        max_method_calls: how many times one method may run per execution.
    """

    initial_state: ClassVar[Any] = None
    stream: bool = False
    suppress_flow_events: bool = False
    max_method_calls: int = 100
    checkpoint: CheckpointConfig | None = None
    feedback_provider: FeedbackProvider | None = None
    """Default provider for ``@human_feedback`` steps without their own (None: console)."""
    input_provider: Callable[[str], Any] | None = None
    """What :meth:`ask` reads answers from (sync or async callable; None: ``input``)."""
    input_file_policy: ClassVar[InputFilePolicy] = InputFilePolicy()
    """What ``input_files`` accepts: size and count limits, allowed folders, where files
    are stored (:class:`voxflow.files.InputFilePolicy`)."""
    _voxflow_definition: ClassVar[FlowDefinition | None] = None
    _voxflow_state_type: ClassVar[type[BaseModel] | bool | None] = False
    _conversation_layer: ClassVar[bool] = False
    """True on :class:`voxflow.Flow`, which builds conversational mode on this core."""
    _part_types: ClassVar[tuple[type[FlowPart], ...]] = ()
    """The parts every instance holds (:mod:`voxflow.flow.parts`): the base's, then the
    class's own ``parts=``."""

    def __init_subclass__(
        cls, *, layer: bool = False, parts: tuple[type[FlowPart], ...] = (), **kwargs: Any
    ) -> None:
        """Validate the wiring when the class is created; ``layer=True`` marks a base
        class built on the core (``voxflow.Flow``): compiled on first use instead;
        ``parts`` adds part types to the base's (:mod:`voxflow.flow.parts`)."""
        super().__init_subclass__(**kwargs)
        if parts:
            cls._part_types = checked_part_types(cls, cls._part_types, parts)
        check_part_names(cls, cls._part_types)
        if getattr(cls, "conversational", False) and not cls._conversation_layer:
            cls._enable_conversation()
        cls._prepare_parts()
        if not layer:
            cls._check_parts()

    @classmethod
    def _prepare_parts(cls) -> None:
        """Let the part types prepare the class (:mod:`voxflow.flow.parts`): their caches,
        the default state, the methods they register."""
        for kind in cls._part_types:
            kind.prepare_class(cls)
        if cls.initial_state is None and cls._state_type() is None:
            for kind in cls._part_types:
                default = kind.default_state(cls)
                if default is not None:
                    cls.initial_state = default
                    break
        for name, func in cls._extra_flow_methods().items():
            if getattr(cls, name, None) is None:  # not reachable yet: install the function
                setattr(cls, name, func)
        cls._voxflow_definition = None

    @classmethod
    def _reconfigure(cls) -> None:
        """The class changed after it was created (e.g. ``@ConversationConfig``): its
        parts prepare it again and its definition is compiled again."""
        cls._prepare_parts()
        cls._check_parts()

    @classmethod
    def _check_parts(cls) -> None:
        """Compile the definition, then let the part types check the class."""
        cls.flow_definition()
        for kind in cls._part_types:
            kind.check_class(cls)

    @classmethod
    def flow_definition(cls) -> FlowDefinition:
        """The compiled, validated :class:`FlowDefinition` of this class (cached)."""
        definition = cls.__dict__.get("_voxflow_definition")
        if definition is None:
            definition = compile_definition(cls, cls._extra_flow_methods())
            cls._voxflow_definition = definition
        return definition

    @classmethod
    def _extra_flow_methods(cls) -> Mapping[str, Callable[..., Any]]:
        """Extension point: decorated functions to register besides the class's own.

        The returned function supplies the wiring (its decorator marks); what runs is
        ``getattr(self, name)``, so an undecorated method of that name on the class or a
        base is called. When no attribute of that name exists, the function itself is
        installed on the class. By default: what the part types register.
        """
        extra: dict[str, Callable[..., Any]] = {}
        for kind in cls._part_types:
            extra.update(kind.extra_methods(cls))
        return extra

    @classmethod
    def _enable_conversation(cls) -> None:
        """Extension point: conversational mode (``@ConversationConfig`` calls it); the
        core has none, so a conversational class must be built on :class:`voxflow.Flow`."""
        raise FlowDefinitionError(
            f"{cls.__name__} is conversational but built on the Flow core "
            "(voxflow.flow.Flow), which has no conversation: subclass voxflow.Flow "
            "(`from voxflow import Flow`)",
            flow=cls.__name__,
        )

    def __init__(
        self,
        *,
        state: StateT | None = None,
        initial_state: StateT | None = None,
        persistence: FlowPersistence | None = None,
        event_bus: FlowEventBus | None = None,
        clock: Clock | None = None,
        suppress_flow_events: bool | None = None,
        max_method_calls: int | None = None,
    ) -> None:
        if initial_state is not None:
            if state is not None:
                raise TypeError(
                    "give the initial state once: state= (initial_state= is the spec's "
                    "spelling of the same argument)"
                )
            state = initial_state
        if event_bus is not None and not isinstance(event_bus, FlowEventBus):
            raise TypeError("event_bus must be a FlowEventBus")
        if clock is not None and not isinstance(clock, Clock):
            raise TypeError("clock must implement voxflow.clock.Clock (now() and sleep())")
        if max_method_calls is not None:
            if isinstance(max_method_calls, bool) or not isinstance(max_method_calls, int):
                raise TypeError("max_method_calls must be an int")
            if max_method_calls < 1:
                raise ValueError("max_method_calls must be >= 1")
            self.max_method_calls = max_method_calls
        if suppress_flow_events is not None:
            self.suppress_flow_events = bool(suppress_flow_events)
        check_backend(persistence)
        cls = type(self)
        self._definition = cls.flow_definition()
        # Plain attributes: the dispatch loop reads them on every step, and pydantic's
        # private-attribute lookup on the definition is slow.
        self._plan = self._definition.plan
        self._methods = self._definition.methods
        self._bus = event_bus or flow_event_bus
        self._clock: Clock = clock or MonotonicClock()
        self._state: StateLike = self._initial_state(state)
        self._ex = Execution()
        self._inline = False
        self._running = False
        self._frame_sink: FrameSink | None = None
        self._input_files: dict[str, FileRef] = {}
        # The parts: the core's own (saves, human input), then the layers' (parts=).
        host = FlowHandle(self)
        self._saving = StateSaving(host, self._definition, persistence)
        self._human = HumanInput(host)
        self._parts: tuple[FlowPart, ...] = tuple(kind(host) for kind in cls._part_types)
        self._saving.parts = self._parts
        for part in self._parts:
            setattr(self, part.attribute, part)

    @classmethod
    def from_checkpoint(cls, path: str | os.PathLike[str], **kwargs: Any) -> Flow[Any]:
        """A new instance restored from the checkpoint file ``path``; ``kickoff()`` resumes it.

        Args:
            path: a file written by a run with ``CheckpointConfig(directory=...)``.
            kwargs: constructor arguments.
        """
        flow = cls(**kwargs)
        load_checkpoint(FlowHandle(flow), CheckpointConfig(restore_from=Path(path)))
        flow._saving.resume_next = True
        return flow

    # ------------------------------------------------------------------ state

    @classmethod
    def _state_type(cls) -> type[BaseModel] | None:
        """The model class given as generic parameter (``Flow[MyState]``), cached per class."""
        cached = cls.__dict__.get("_voxflow_state_type", False)
        if cached is False:
            cached = cls._voxflow_state_type = generic_state_model(cls, Flow)
        return typing.cast("type[BaseModel] | None", cached)

    def _initial_state(self, state: Any) -> StateLike:
        cls = type(self)
        if state is None:
            default = cls.initial_state if cls.initial_state is not None else cls._state_type()
            return fresh_state(default, cls.__name__)
        return checked_state(state)

    @property
    def state(self) -> StateT:
        """The live state shared by every method of the run (may be replaced by a restore)."""
        return self._state  # type: ignore[return-value]

    @property
    def flow_id(self) -> str:
        """``state.id``: the identity persistence saves under."""
        return state_id(self._state)

    @property
    def event_bus(self) -> FlowEventBus:
        """The bus this flow emits on (set it to another :class:`FlowEventBus` only)."""
        return self._bus

    @event_bus.setter
    def event_bus(self, bus: FlowEventBus) -> None:
        if not isinstance(bus, FlowEventBus):
            raise TypeError(
                f"{type(self).__name__}.event_bus is the FlowEventBus this flow emits on, "
                f"not {type(bus).__name__}: keep your own object under another attribute "
                "(e.g. self.app_bus)"
            )
        self._bus = bus

    @property
    def clock(self) -> Clock:
        """The clock that timestamps this flow's events."""
        return self._clock

    @property
    def input_files(self) -> dict[str, FileRef]:
        """The files of the current/last run or turn (``input_files=``), by name: stored
        :class:`~voxflow.files.FileRef` records (``read_bytes()`` gives the content)."""
        return dict(self._input_files)

    @property
    def input_history(self) -> list[InputHistoryEntry]:
        """Audit trail of :meth:`ask` prompts and answers (``InputHistoryEntry``)."""
        return self._human.input_history

    @property
    def last_human_feedback(self) -> HumanFeedbackResult | None:
        """The most recent feedback result of this flow."""
        return self._human.last_feedback

    @property
    def human_feedback_history(self) -> list[HumanFeedbackResult]:
        """Every feedback result of this flow, oldest first."""
        return self._human.feedback_history

    @property
    def method_outputs(self) -> list[tuple[str, Any]]:
        """``(method, output)`` of the current/last execution, in completion order."""
        return list(self._ex.outputs)

    @property
    def completed_methods(self) -> frozenset[str]:
        """Methods completed in the current/last execution."""
        return frozenset(self._ex.completed)

    def reset_execution(self) -> None:
        """Forget per-execution tracking, so the next kickoff runs the graph afresh."""
        self._ex = Execution()

    # ------------------------------------------------------------------ events

    def _event_fields(self) -> dict[str, Any]:
        return {
            "at": self._clock.now(),
            "flow_name": self._definition.name,
            "flow_id": state_id(self._state),
        }

    def _emit(self, event_type: type[Any], channel: str | None = None, **fields: Any) -> None:
        if not self._bus.active and self._frame_sink is None:
            return
        event = event_type(**self._event_fields(), **fields)
        self._bus.emit(event)
        if self._frame_sink is not None:
            self._frame_sink(frame_from_event(event, channel))

    def _emit_method_event(self, event_type: type[FlowEvent], **fields: Any) -> None:
        if not self.suppress_flow_events:
            self._emit(event_type, **fields)

    def _attach_frames(self, sink: FrameSink | None) -> None:
        self._frame_sink = sink

    def emit_frame(
        self, channel: str, type: str, data: Mapping[str, Any] | None = None, *,
        event: Any = None,
    ) -> None:
        """Add a frame to the active :class:`StreamSession` (no-op when not streaming);
        ``event``: the typed event it stands for (:attr:`StreamFrame.event`), if any."""
        if self._frame_sink is not None:
            self._frame_sink(
                StreamFrame(channel=channel, type=type, data=dict(data or {}), event=event)
            )

    # ------------------------------------------------------------------ human input

    def ask(self, prompt: str) -> str | None:
        """Ask a question from inside a sync step; recorded in :attr:`input_history`.

        Blocks the step until ``input_provider`` (default ``input``) answers; use
        :meth:`ask_async` from async steps.
        """
        return self._human.ask(prompt)

    async def ask_async(self, prompt: str) -> str | None:
        """:meth:`ask` for async steps (a sync provider runs in a worker thread)."""
        return await self._human.ask_async(prompt)

    async def _feedback_step(self, method: MethodDefinition, output: Any, depth: int) -> Any:
        return await self._human.run_step(method, output, depth)

    # ------------------------------------------------------------------ persistence

    async def asave_state(self, method_name: str = "save") -> None:
        """Save the state now through the flow's persistence (a no-op without one),
        after any write still in flight; the write runs in a worker thread.

        Call it with the state quiet (e.g. under the session's state lock): the
        snapshot is taken on the loop before the write starts.
        """
        await self._saving.save_now(method_name)

    def persistence_configured(self) -> bool:
        """True when this flow saves its state: a ``persistence`` of its own or ``@persist``."""
        return self._saving.configured()

    def check_persistence(self) -> None:
        """Open this flow's persistence now (a no-op without one), so an unusable store
        fails before a turn's work would be lost at its save (a chat or a call checks it
        before its first turn).

        Raises:
            PersistenceUnavailableError: the store cannot be opened or written; the
                message says why and the fix.
        """
        self._saving.check_store()

    async def _after_commit(self, method: MethodDefinition) -> None:
        await self._saving.after_commit(method, inline=self._inline)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(id={self.flow_id!r}, methods={len(self._definition.methods)}, "
            f"completed={len(self._ex.completed)})"
        )
