"""The dispatch loop: runs methods, routers, listeners, ``and_``/``or_`` and races.

This is the internal half of :class:`voxflow.flow.Flow` (see ``runtime.py`` for the
documented behaviour). It is a mixin so the runtime module stays readable; nothing here
is public.

Order, after a method completes (``_dispatch``):

1. Routers triggered by the current label run one at a time; each return value (Enum
   unwrapped, stringified) becomes the next label, until no router fires or one returns
   ``None``/``""``. A router's own name is a trigger too (before its label).
2. For the original trigger, then each router name/label in order: fired multi-event
   ``or_`` listeners that mention a router label are re-armed; the listeners satisfied by
   the trigger run concurrently; conditional starts matching a router label run after.
3. Every listener completion feeds back into step 1.

``or_``/``and_`` bookkeeping happens synchronously on the loop, between awaits, so the
check-and-mark of a multi-event ``or_`` is atomic (the reference guards it with a lock).
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import enum
import inspect
import logging
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from voxflow.errors import FlowRuntimeError
from voxflow.flow.events import (
    MethodCancelled,
    MethodFailed,
    MethodFinished,
    MethodStarted,
)

if TYPE_CHECKING:
    from voxflow.flow.definition import FlowDefinition, MethodDefinition, Plan
    from voxflow.flow.events import FlowEvent

__all__: list[str] = []

logger = logging.getLogger("voxflow.flow")

current_method: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "voxflow_current_method", default=None
)
"""The flow method running in this context (for ``ask()`` history and tracing)."""


@dataclasses.dataclass(frozen=True, slots=True)
class _Failed:
    """The exception a concurrent listener or ``or_`` member raised, as its result."""

    error: Exception


async def _captured(job: Coroutine[Any, Any, Any]) -> Any:
    """``job``'s output, or its exception as :class:`_Failed`: in a task group, a failing
    listener must not cancel its siblings."""
    try:
        return await job
    except Exception as exc:
        return _Failed(exc)


def _failed(task: asyncio.Task[Any]) -> bool:
    return isinstance(task.result(), _Failed)


class Execution:
    """Per-execution tracking: what ran, with which output, and pending conditions."""

    __slots__ = (
        "calls",
        "completed",
        "fired_or",
        "has_result",
        "last_output",
        "outputs",
        "pending_and",
        "replay",
        "result",
        "result_key",
    )

    def __init__(self) -> None:
        self.completed: set[str] = set()
        self.outputs: list[tuple[str, Any]] = []
        self.last_output: dict[str, Any] = {}
        self.pending_and: dict[str, set[str]] = {}
        self.fired_or: set[str] = set()
        self.calls: dict[str, int] = {}
        self.replay: set[str] = set()
        self.result: Any = None
        self.result_key: tuple[int, int] = (-1, -1)
        self.has_result = False


class Engine:
    """Mixin with the dispatch loop; :class:`voxflow.flow.Flow` provides the attributes."""

    _definition: FlowDefinition
    _plan: Plan
    _methods: dict[str, MethodDefinition]
    _ex: Execution
    _inline: bool
    max_method_calls: int

    # Provided by Flow.
    def _emit_method_event(self, event_type: type[FlowEvent], **fields: Any) -> None:
        raise NotImplementedError

    async def _after_commit(self, method: MethodDefinition) -> None:
        raise NotImplementedError

    async def _feedback_step(self, method: MethodDefinition, output: Any, depth: int) -> Any:
        raise NotImplementedError

    # ----------------------------------------------------------------- one method

    async def _invoke(self, name: str, arg: Any, depth: int) -> Any:
        """Count, announce and execute one method (plus its feedback step); no commit."""
        method = self._methods[name]
        ex = self._ex
        calls = ex.calls.get(name, 0) + 1
        if calls > self.max_method_calls:
            raise RecursionError(
                f"{self._definition.name}.{name} ran more than max_method_calls="
                f"{self.max_method_calls} times in one execution: the graph cycles without "
                "settling (for example a @listen label that matches the method's own name, "
                "or a router that keeps emitting a label leading back to it)"
            )
        ex.calls[name] = calls
        if calls > 1:  # a cycle: re-arm multi-event or_ listeners waiting on this method
            ex.fired_or.difference_update(self._plan.multi_or_by_label.get(name, ()))
        self._emit_method_event(MethodStarted, method_name=name)
        func: Callable[..., Any] = getattr(self, name)
        args = (arg,) if method.takes_input else ()
        token = current_method.set(name)
        try:
            if method.is_async:
                output = await func(*args)
            elif self._inline:
                output = func(*args)
            else:
                output = await self._in_thread(name, func, args)
            if inspect.isawaitable(output):
                output = await output
            if method.feedback is not None:
                output = await self._feedback_step(method, output, depth)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if type(exc).__name__ != "HumanFeedbackPending":
                self._report_failure(name, exc)
            raise
        finally:
            current_method.reset(token)
        return output

    def _report_failure(self, name: str, exc: BaseException) -> None:
        self._emit_method_event(
            MethodFailed, method_name=name, error_type=type(exc).__name__, error=str(exc)
        )

    async def _in_thread(self, name: str, func: Callable[..., Any], args: tuple[Any, ...]) -> Any:
        loop = asyncio.get_running_loop()
        ctx = contextvars.copy_context()
        fut = loop.run_in_executor(None, ctx.run, func, *args)
        try:
            return await asyncio.shield(fut)
        except asyncio.CancelledError:
            # A thread cannot be interrupted: wait for it, so no sync method outlives the
            # run that owns it, and report how it ended.
            await asyncio.wait([fut])
            if not fut.cancelled() and fut.exception() is not None:
                exc = fut.exception()
                assert exc is not None
                self._report_failure(name, exc)
                logger.warning("cancelled method %s failed in its thread", name)
            raise

    async def _commit(self, name: str, output: Any, depth: int) -> None:
        method = self._methods[name]
        ex = self._ex
        ex.completed.add(name)
        ex.outputs.append((name, output))
        ex.last_output[name] = output
        key = (depth, method.index)
        if key >= ex.result_key:
            ex.result_key = key
            ex.result = output
            ex.has_result = True
        await self._after_commit(method)
        self._emit_method_event(MethodFinished, method_name=name, output=output)

    async def _run_method(self, name: str, arg: Any, depth: int) -> Any:
        ex = self._ex
        if name in ex.replay:  # resuming: completed before, do not re-run
            ex.replay.discard(name)
            return ex.last_output.get(name)
        output = await self._invoke(name, arg, depth)
        await self._commit(name, output, depth)
        return output

    async def _run_listener(self, name: str, arg: Any, depth: int) -> None:
        output = await self._run_method(name, arg, depth)
        await self._dispatch(name, output, depth)

    # ----------------------------------------------------------------- dispatch

    def _label(self, name: str, output: Any) -> str | None:
        value = getattr(output, "outcome", output) if self._is_feedback_result(output) else output
        if value is None:
            return None
        if isinstance(value, enum.Enum):
            value = value.value
        label = str(value)
        if not label:
            return None
        if label in self._methods:
            raise FlowRuntimeError(
                f"{self._definition.name}.{name} returned router label {label!r}, which is also "
                f"the name of method {label!r}; its listeners would fire twice. Rename one of "
                "them (declaring the labels with labels=[...] or a Literal return annotation "
                "catches this when the class is created)."
            )
        return label

    @staticmethod
    def _is_feedback_result(output: Any) -> bool:
        return type(output).__name__ == "HumanFeedbackResult" and hasattr(output, "outcome")

    def _triggered(self, label: str, *, routers: bool) -> list[str]:
        plan = self._plan
        names = (plan.routers_by_label if routers else plan.listeners_by_label).get(label)
        if not names:
            return []
        ex = self._ex
        methods = self._methods
        out: list[str] = []
        for name in names:
            method = methods[name]
            if method.shape == "single":
                out.append(name)
            elif method.shape == "multi_or":
                if name in ex.fired_or:
                    continue
                ex.fired_or.add(name)
                out.append(name)
            else:
                assert method.listen is not None
                seen = ex.pending_and.setdefault(name, set())
                seen.add(label)
                if method.listen.is_met(seen):
                    del ex.pending_and[name]
                    out.append(name)
        return out

    async def _dispatch(self, name: str, output: Any, depth: int) -> None:
        """Run everything triggered by method ``name`` completing with ``output``."""
        plan = self._plan
        triggers: list[tuple[str, Any, int, bool]] = [(name, output, depth, False)]
        current: str | None = name
        if name in plan.routers:
            current = self._label(name, output)
            if current is not None:
                triggers.append((current, self._label_value(current, output), depth, True))
        level = depth
        while current is not None:
            routers = self._triggered(current, routers=True)
            if not routers:
                break
            value = triggers[-1][1]
            current = None
            for router_name in routers:
                level += 1
                out = await self._run_method(router_name, value, level)
                triggers.append((router_name, out, level, False))
                current = self._label(router_name, out)
                if current is not None:
                    triggers.append((current, self._label_value(current, out), level, True))
        for label, value, level, is_label in triggers:
            if is_label:
                self._ex.fired_or.difference_update(plan.multi_or_by_label.get(label, ()))
            batch = self._triggered(label, routers=False)
            if batch:
                await self._run_batch(batch, value, level + 1)
            if is_label:
                for start_name in plan.cond_starts_by_label.get(label, ()):
                    await self._run_listener(start_name, value, level + 1)

    @classmethod
    def _label_value(cls, label: str, output: Any) -> Any:
        return output if cls._is_feedback_result(output) else label

    async def _run_batch(self, batch: list[str], value: Any, depth: int) -> None:
        owners: dict[str, list[str]] = {}
        race_owner = self._plan.race_owner
        for name in batch:
            owner = race_owner.get(name)
            if owner is not None:
                owners.setdefault(owner, []).append(name)
        raced = {n for members in owners.values() if len(members) >= 2 for n in members}
        jobs: list[Coroutine[Any, Any, None]] = [
            self._race(members, value, depth) for members in owners.values() if len(members) >= 2
        ]
        jobs += [self._run_listener(n, value, depth) for n in batch if n not in raced]
        if len(jobs) == 1:
            await jobs[0]
            return
        errors: list[BaseException] = []
        if self._inline:
            # Sync-only graph on a private loop: run in declaration order, no task hops.
            for job in jobs:
                try:
                    await job
                except Exception as exc:
                    errors.append(exc)
        else:
            # Every listener finishes (a failure does not cancel its siblings) and none
            # outlives the batch, even when the batch itself is cancelled.
            async with asyncio.TaskGroup() as group:
                tasks = [group.create_task(_captured(job)) for job in jobs]
            errors = [r.error for t in tasks if isinstance(r := t.result(), _Failed)]
        if errors:
            for extra in errors[1:]:
                logger.warning("another listener also failed: %s", type(extra).__name__)
            raise errors[0]

    async def _race(self, members: list[str], value: Any, depth: int) -> None:
        """Exclusive ``or_`` alternatives: first success wins, losers are cancelled and awaited."""
        failures: list[Exception] = []
        if self._inline:
            # Sync members cannot be interrupted: run them in declaration order, the first
            # success wins and the rest never start. No outcome depends on thread timing.
            for i, name in enumerate(members):
                try:
                    output = await self._invoke(name, value, depth)
                except Exception as exc:
                    failures.append(exc)
                    continue
                for loser in members[i + 1 :]:
                    self._emit_method_event(
                        MethodCancelled, method_name=loser, reason="not_started"
                    )
                await self._commit(name, output, depth)
                await self._dispatch(name, output, depth)
                return
            raise failures[0]
        winner: int | None = None
        # Losers are cancelled and awaited in the group: none outlives the race (nor a
        # cancelled race), and each failure is seen below.
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(_captured(self._invoke(n, value, depth))) for n in members]
            pending: set[asyncio.Task[Any]] = set(tasks)
            while pending and winner is None:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for i, task in enumerate(tasks):  # ties go to the earliest declared member
                    if task in done and not task.cancelled() and not _failed(task):
                        winner = i
                        break
            for task in pending:
                task.cancel()
        for i, task in enumerate(tasks):
            if i == winner:
                continue
            outcome = None if task.cancelled() else task.result()
            if not isinstance(outcome, _Failed):
                self._emit_method_event(MethodCancelled, method_name=members[i], reason="lost_race")
            else:
                failures.append(outcome.error)
                logger.warning("or_ racer %s failed: %s", members[i], type(outcome.error).__name__)
        if winner is None:
            raise failures[0]
        output = tasks[winner].result()
        await self._commit(members[winner], output, depth)
        await self._dispatch(members[winner], output, depth)
