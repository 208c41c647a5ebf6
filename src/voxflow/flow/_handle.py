"""The runtime's :class:`~voxflow.flow.host.FlowHost`: the handle a Flow gives its parts.

Each Flow builds one :class:`FlowHandle` over itself and hands it to every part it holds
(:mod:`voxflow.flow.parts`, the core's saves and human input). It is the Flow runtime's
own code, kept apart from :mod:`voxflow.flow.runtime` for size: the one place besides
the Flow class that works on the Flow's internal attributes, so that no part does. The
Flow is typed ``Any`` here (the runtime imports this module); every member is exercised
by the tests of the parts that use it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from voxflow.flow.streaming import StreamSession

if TYPE_CHECKING:
    from voxflow.files import FileRef
    from voxflow.flow._engine import Execution
    from voxflow.flow.checkpoint import CheckpointConfig
    from voxflow.flow.persistence import FlowPersistence
    from voxflow.flow.saving import StateSaving
    from voxflow.flow.state import StateLike

__all__ = ["FlowHandle"]


class FlowHandle:
    """The :class:`~voxflow.flow.host.FlowHost` of one Flow (see the module docs)."""

    __slots__ = ("_flow",)

    def __init__(self, flow: Any) -> None:  # a voxflow.flow.Flow (the runtime imports us)
        self._flow = flow

    @property
    def flow(self) -> Any:
        return self._flow

    @property
    def state(self) -> StateLike:
        state: StateLike = self._flow._state
        return state

    @state.setter
    def state(self, state: StateLike) -> None:
        self._flow._state = state

    @property
    def running(self) -> bool:
        return bool(self._flow._running)

    @property
    def streaming(self) -> bool:
        return self._flow._frame_sink is not None

    def fresh_state(self) -> StateLike:
        state: StateLike = self._flow._initial_state(None)
        return state

    def check_kickoff(self, inputs: Any, from_checkpoint: Any, restore_from_state_id: Any) -> None:
        self._flow._check_kickoff_args(inputs, from_checkpoint, restore_from_state_id)

    async def kickoff(
        self,
        inputs: Mapping[str, Any],
        from_checkpoint: CheckpointConfig | None,
        restore_from_state_id: str | None,
        private_loop: bool,
        prepare: Callable[[], Awaitable[None]] | None = None,
    ) -> Any:
        return await self._flow._kickoff(
            inputs, from_checkpoint, restore_from_state_id, private_loop, prepare
        )

    def stream(self, make: Callable[[bool], Any], *, sync: bool) -> StreamSession:
        if sync:
            return StreamSession.run_sync(self._flow._attach_frames, make)
        return StreamSession.run_async(self._flow._attach_frames, make)

    def set_input_files(self, files: Mapping[str, FileRef]) -> None:
        self._flow._input_files = dict(files)

    def emit(self, event_type: type[Any], *, channel: str | None = None, **fields: Any) -> None:
        self._flow._emit(event_type, channel, **fields)

    @property
    def execution(self) -> Execution:
        execution: Execution = self._flow._ex
        return execution

    @execution.setter
    def execution(self, execution: Execution) -> None:
        self._flow._ex = execution

    def backend(self) -> FlowPersistence:
        return self._saving().backend()

    async def load(self, flow_id: str, *, inline: bool) -> dict[str, Any] | None:
        return await self._saving().load(flow_id, inline=inline)

    async def save(self, method_name: str) -> None:
        await self._saving().save(method_name, inline=bool(self._flow._inline))

    def _saving(self) -> StateSaving:
        saving: StateSaving = self._flow._saving
        return saving
