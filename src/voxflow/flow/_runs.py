"""A Flow's runs: ``kickoff()``, ``kickoff_async()`` and ``resume()``: the checks, the
restore, the starts and the flow events around the dispatch loop of
:mod:`voxflow.flow._engine` (the behaviour is documented in :mod:`voxflow.flow.runtime`).

:class:`Runs` is a mixin like :class:`~voxflow.flow._engine.Engine`, which it builds on:
:class:`voxflow.flow.Flow` provides the attributes it declares.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, ClassVar

from voxflow._loops import run_blocking
from voxflow.blocking import sync_twin
from voxflow.errors import FlowDefinitionError, FlowRuntimeError
from voxflow.files import FileRef, InputFilePolicy, prepare_input_files
from voxflow.flow._engine import Engine, Execution
from voxflow.flow.checkpoint import CheckpointConfig
from voxflow.flow.events import FlowFailed, FlowFinished, FlowPaused, FlowStarted
from voxflow.flow.feedback import HumanFeedbackPending, HumanInput
from voxflow.flow.parts import FlowPart
from voxflow.flow.saving import StateSaving, check_kickoff_inputs
from voxflow.flow.state import StateLike, stamp_id
from voxflow.flow.streaming import FrameSink, StreamSession

__all__ = ["Runs"]


class Runs(Engine):
    """Mixin with the kickoff and resume paths; :class:`voxflow.flow.Flow` provides the
    attributes."""

    stream: bool
    input_file_policy: ClassVar[InputFilePolicy]
    _state: StateLike
    _running: bool
    _input_files: dict[str, FileRef]
    _saving: StateSaving
    _human: HumanInput
    _parts: tuple[FlowPart, ...]

    # Provided by Flow.
    def _emit(self, event_type: type[Any], channel: str | None = None, **fields: Any) -> None:
        raise NotImplementedError

    def _attach_frames(self, sink: FrameSink | None) -> None:
        raise NotImplementedError

    # ------------------------------------------------------------------ kickoff

    def _check_kickoff_args(self, inputs: Any, from_checkpoint: Any, restore_from: Any) -> None:
        check_kickoff_inputs(inputs, from_checkpoint, restore_from)
        if self._running:
            raise FlowRuntimeError(
                f"{self._definition.name}: kickoff() is already running on this instance; "
                "wait for it or use another Flow instance"
            )

    def kickoff(
        self,
        inputs: Mapping[str, Any] | None = None,
        *,
        input_files: Mapping[str, Any] | None = None,
        from_checkpoint: CheckpointConfig | None = None,
        restore_from_state_id: str | None = None,
    ) -> Any:
        """Run the flow to completion from sync code and return its result.

        Args:
            inputs: merged into the state before any method runs; ``inputs["id"]`` selects
                the run (and restores its persisted snapshot when persistence is set).
            from_checkpoint: resume a checkpoint (``restore_from``) or enable checkpoints.
            restore_from_state_id: fork the persisted state of another run (new id).
            input_files: ``{name: path, bytes or binary file object}``, validated and
                stored before anything runs; methods read them from :attr:`input_files`
                (see :mod:`voxflow.files`; the turn APIs attach them to the user message).

        Raises:
            InputFileError: a file was refused (nothing ran); it names the file.

        Returns:
            The result (see module docs), a ``HumanFeedbackPending`` when a feedback step
            paused, or a :class:`StreamSession` when ``stream`` is true.
        """
        self._check_kickoff_args(inputs, from_checkpoint, restore_from_state_id)
        self._take_input_files(input_files)
        run = functools.partial(self._kickoff, inputs, from_checkpoint, restore_from_state_id)
        if self.stream:
            return StreamSession.run_sync(self._attach_frames, run)
        return run_blocking(lambda: run(True))

    async def kickoff_async(
        self,
        inputs: Mapping[str, Any] | None = None,
        *,
        input_files: Mapping[str, Any] | None = None,
        from_checkpoint: CheckpointConfig | None = None,
        restore_from_state_id: str | None = None,
    ) -> Any:
        """:meth:`kickoff` for async callers; sync methods run in the default executor."""
        self._check_kickoff_args(inputs, from_checkpoint, restore_from_state_id)
        if input_files is not None:  # reading them blocks: off the caller's loop
            refs = await asyncio.to_thread(prepare_input_files, input_files, self.input_file_policy)
            self._input_files = refs
        else:
            self._input_files = {}
        run = functools.partial(self._kickoff, inputs, from_checkpoint, restore_from_state_id)
        if self.stream:
            return StreamSession.run_async(self._attach_frames, run)
        return await run(False)

    def _take_input_files(self, input_files: Mapping[str, Any] | None) -> None:
        self._input_files = (
            {} if input_files is None else prepare_input_files(input_files, self.input_file_policy)
        )

    async def _kickoff(
        self,
        inputs: Mapping[str, Any] | None,
        from_checkpoint: CheckpointConfig | None,
        restore_from_state_id: str | None,
        private_loop: bool,
        prepare: Callable[[], Awaitable[None]] | None = None,
    ) -> Any:
        self._check_kickoff_args(inputs, from_checkpoint, restore_from_state_id)
        self._saving.check_store()
        self._running = True
        try:
            resuming = await self._saving.prepare_kickoff(
                inputs, from_checkpoint, restore_from_state_id, inline=self._inline
            )
            if not resuming:
                self._ex = Execution()
            self._inline = private_loop and self._plan.all_sync
            return await self._run(tuple(inputs or ()), resume=None, prepare=prepare)
        finally:
            self._running = False

    async def _run(
        self, input_keys: tuple[str, ...], resume: Any,
        prepare: Callable[[], Awaitable[None]] | None = None,
    ) -> Any:
        """Run starts (or continue a resumed step) and the dispatch loop; emit flow events
        (unless a part defers them). ``prepare`` runs after the restore and
        ``FlowStarted``, right before the starts (a turn appends its user message)."""
        parts = self._parts
        if all([part.emits_flow_started() for part in parts]):
            self._emit(FlowStarted, input_keys=input_keys)
        try:
            if resume is not None:
                await resume()
            else:
                if prepare is not None:
                    await prepare()
                await self._run_starts()
        except HumanFeedbackPending as pending:
            await self._human.save_pending(pending)
            self._emit(FlowPaused, method_name=pending.method_name, message=pending.message)
            return pending
        except BaseException as exc:
            if all([part.emits_flow_failed() for part in parts]):
                self._emit(FlowFailed, error_type=type(exc).__name__, error=str(exc))
            self._saving.checkpoint_failed_run()
            raise
        result = self._ex.result
        if all([part.emits_flow_finished() for part in parts]):
            self._emit(FlowFinished, result=result)
        return result

    async def _run_starts(self) -> None:
        starts = list(self._plan.starts)
        if not starts:
            raise FlowDefinitionError(
                f"{self._definition.name} has no @start() method to kick off",
                flow=self._definition.name,
            )
        order = None if len(starts) > 1 else starts
        for part in self._parts:  # a part may run them one at a time, in its order
            order = order or part.order_starts(starts)
        if order is not None:
            for name in order:
                await self._run_listener(name, None, 0)
            return
        await self._run_batch(starts, None, 0)

    # ------------------------------------------------------------------ resume

    async def resume_async(self, feedback: str, *, flow_id: str | None = None) -> Any:
        """Continue a run paused by a feedback provider with the person's ``feedback``.

        Args:
            feedback: the free text (collapsed to an outcome when the step declares ``emit``).
            flow_id: resume the run with this state id (e.g. in another process).

        Returns:
            The kickoff result, or another ``HumanFeedbackPending``.
        """
        if not isinstance(feedback, str):
            raise TypeError("feedback must be a string")
        if flow_id is not None:
            if not isinstance(flow_id, str) or not flow_id:
                raise ValueError("flow_id must be a non-empty string")
            stamp_id(self._state, flow_id)
        step = await self._human.resume(feedback)

        async def proceed() -> None:
            await step.clear()
            await self._commit(step.method_name, step.result, step.depth)
            await self._dispatch(step.method_name, step.result, step.depth)

        if self._running:
            raise FlowRuntimeError(f"{self._definition.name}: a run is already in progress")
        self._running = True
        self._inline = False
        try:
            return await self._run((), resume=proceed)
        finally:
            self._running = False

    resume = sync_twin(resume_async)
