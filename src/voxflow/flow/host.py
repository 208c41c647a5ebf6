"""``FlowHost``: what the parts of a Flow see of the Flow that holds them.

A Flow's parts are the objects it holds: the core's own (its saves and restores,
:class:`~voxflow.flow.saving.StateSaving`; its human input,
:class:`~voxflow.flow.feedback.HumanInput`; checkpoints, :mod:`voxflow.flow.checkpoint`)
and those a layer adds (:mod:`voxflow.flow.parts`; the conversation of
:class:`voxflow.Flow`). They reach the Flow through this protocol only: the Flow's
public API (:attr:`FlowHost.flow`) and the few operations on its run a part needs. The
runtime implements it (a small handle over its own attributes,
:mod:`voxflow.flow._handle`) and imports the parts; they never import the runtime, so
``voxflow.flow`` has no import cycle.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from voxflow.files import FileRef
    from voxflow.flow._engine import Execution
    from voxflow.flow.persistence import FlowPersistence
    from voxflow.flow.state import StateLike
    from voxflow.flow.streaming import StreamSession

__all__ = ["FlowHost"]


class FlowHost(Protocol):
    """A Flow as the parts it holds see it (:mod:`voxflow.flow.parts`): its public API
    (:attr:`flow`) and the few operations on its run a part needs, nothing private."""

    @property
    def flow(self) -> Any:
        """The Flow itself, for its public API (``state``, ``flow_id``, ``clock``,
        ``emit_frame``, ``persistence_configured()``, the methods a subclass may
        override)."""
        ...

    @property
    def state(self) -> StateLike:
        """The live state (what ``flow.state`` returns)."""
        ...

    @state.setter
    def state(self, state: StateLike) -> None:
        """Replace the live state (a fresh session, a loaded snapshot)."""
        ...

    @property
    def execution(self) -> Execution:
        """The per-execution tracking (what ran, with which output): a checkpoint or a
        paused step saves and restores it."""
        ...

    @execution.setter
    def execution(self, execution: Execution) -> None: ...

    @property
    def running(self) -> bool:
        """True while a kickoff (or a resumed step) runs."""
        ...

    @property
    def streaming(self) -> bool:
        """True while the run is streamed (a :class:`StreamSession` takes its frames)."""
        ...

    def fresh_state(self) -> StateLike:
        """A new initial state of the flow's class (a new id)."""
        ...

    def check_kickoff(self, inputs: Any, from_checkpoint: Any, restore_from_state_id: Any) -> None:
        """Refuse what :meth:`kickoff` would refuse, before anything changes."""
        ...

    async def kickoff(
        self,
        inputs: Mapping[str, Any],
        from_checkpoint: Any,
        restore_from_state_id: str | None,
        private_loop: bool,
        prepare: Callable[[], Awaitable[None]] | None = None,
    ) -> Any:
        """Run the flow (``kickoff_async``'s run, without reading input files or
        streaming; ``private_loop``: on the thread's own loop, sync methods inline).
        ``prepare`` runs after the restore and ``FlowStarted``, right before the starts
        (not when resuming): a turn hydrates its request there.
        ``from_checkpoint`` is a ``CheckpointConfig`` or None (``Any`` here: that module
        builds on this one)."""
        ...

    def stream(self, make: Callable[[bool], Any], *, sync: bool) -> StreamSession:
        """Run ``make(private_loop)`` as a streamed run: on a worker thread (``sync``) or
        as a task on the running loop; its frames go to the returned session."""
        ...

    def set_input_files(self, files: Mapping[str, FileRef]) -> None:
        """The files the next run's methods read from ``flow.input_files``."""
        ...

    def emit(self, event_type: type[Any], *, channel: str | None = None, **fields: Any) -> None:
        """Emit ``event_type(**fields)`` (stamped with the flow's time, name and id) on
        the flow's bus and, when streaming, as a frame (on ``channel``; by default the
        flow event's own, ``flow`` or ``method``). Nothing is built when nobody listens."""
        ...

    def backend(self) -> FlowPersistence:
        """Where the flow's state is saved (its own backend, else ``@persist``'s)."""
        ...

    async def load(self, flow_id: str, *, inline: bool) -> dict[str, Any] | None:
        """The latest snapshot saved under ``flow_id`` (None: none), read on this thread
        when ``inline``, else in a worker thread; the parts hear the revision read."""
        ...

    async def save(self, method_name: str) -> None:
        """Save the state now: snapshot on the loop (the parts' ``prepare_state_save``),
        write inline on a private all-sync loop, else in a worker thread."""
        ...
