"""The human-in-the-loop half of :class:`voxflow.Flow`: ``resume``, ``ask`` and the hooks
the dispatch loop calls for ``@human_feedback`` steps (see :mod:`voxflow.flow.feedback`).

A mixin, so the runtime module stays one concept; nothing here is public on its own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from voxflow.flow._loops import run_blocking
from voxflow.flow.state import stamp_id

if TYPE_CHECKING:
    from voxflow.flow.definition import MethodDefinition
    from voxflow.flow.runtime import Flow
    from voxflow.flow.state import StateLike

__all__: list[str] = []


class HumanInput:
    """Mixin: resuming paused feedback steps and asking questions inside steps."""

    if TYPE_CHECKING:
        _state: StateLike
        input_provider: Callable[[str], Any] | None
        input_history: list[Any]

        async def _run_resumed(self, proceed: Callable[[], Any]) -> Any: ...

    def _as_flow(self) -> Flow[Any]:
        return cast("Flow[Any]", self)

    def resume(self, feedback: str, *, flow_id: str | None = None) -> Any:
        """Continue a run paused by a feedback provider with the person's ``feedback``.

        Args:
            feedback: the free text (collapsed to an outcome when the step declares ``emit``).
            flow_id: resume the run with this state id (e.g. in another process).

        Returns:
            The kickoff result, or another ``HumanFeedbackPending``.
        """
        return run_blocking(lambda: self.resume_async(feedback, flow_id=flow_id))

    async def resume_async(self, feedback: str, *, flow_id: str | None = None) -> Any:
        """:meth:`resume` for async callers."""
        from voxflow.flow.feedback import resume_flow

        if not isinstance(feedback, str):
            raise TypeError("feedback must be a string")
        if flow_id is not None:
            if not isinstance(flow_id, str) or not flow_id:
                raise ValueError("flow_id must be a non-empty string")
            stamp_id(self._state, flow_id)
        return await resume_flow(self._as_flow(), feedback)

    def ask(self, prompt: str) -> str | None:
        """Ask a question from inside a sync step; recorded in :attr:`input_history`.

        Blocks the step until ``input_provider`` (default ``input``) answers; use
        :meth:`ask_async` from async steps.
        """
        from voxflow.flow._engine import current_method
        from voxflow.flow.feedback import InputHistoryEntry

        if not isinstance(prompt, str) or not prompt:
            raise ValueError("prompt must be a non-empty string")
        provider = self.input_provider or input
        response = provider(prompt)
        if asyncio.iscoroutine(response):
            response.close()
            raise TypeError("input_provider is async: call `await self.ask_async(prompt)`")
        if response is not None and not isinstance(response, str):
            raise TypeError("input_provider must return a str or None")
        self.input_history.append(
            InputHistoryEntry(method_name=current_method.get(), prompt=prompt, response=response)
        )
        return response

    async def ask_async(self, prompt: str) -> str | None:
        """:meth:`ask` for async steps (a sync provider runs in a worker thread)."""
        from voxflow.flow.feedback import ask_async

        return await ask_async(self._as_flow(), prompt)

    async def _feedback_step(self, method: MethodDefinition, output: Any, depth: int) -> Any:
        from voxflow.flow.feedback import run_feedback_step

        return await run_feedback_step(self._as_flow(), method, output, depth)

    async def _save_pending(self, pending: Any) -> None:
        from voxflow.flow.feedback import save_pending

        await save_pending(self._as_flow(), pending)
