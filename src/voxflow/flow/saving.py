"""Saving and restoring a Flow's state through its persistence (``@persist``).

A part of the Flow, like :mod:`voxflow.flow.checkpoint`: functions working on a
:class:`~voxflow.flow.host.FlowInternals`. The runtime's hooks (``_backend``, ``_load``,
``_write_state``, ``_writes_done``, ``_prepare_state_save``, ``_after_commit``) are thin
methods delegating here; layers built on the core (:class:`voxflow.Flow`) override those
hooks, so these functions always call back through the flow, never each other directly.

* **Kickoff** (:func:`check_kickoff_inputs`, then :func:`prepare_kickoff`): checkpoint
  restore (``from_checkpoint``) or fork (``restore_from_state_id``); ``inputs["id"]``
  stamps ``state.id`` and, when persistence is configured, reloads the latest snapshot
  for that id, unless a part of the flow holds that id's state live (``skips_restore``:
  tracked turns); other inputs are merged.
* **After a method** (:func:`after_commit`): a persisted method's state is snapshotted on
  the loop by ``_prepare_state_save(backend, method_name)`` (conversations save only what
  they appended) and written in a worker thread (inline on a private all-sync loop), then
  the checkpoint when one is configured.
* **Writes** (:func:`write_state`) outlive a cancelled caller (a thread cannot be
  stopped), so they are tracked until done and :func:`writes_done` waits for them: a
  later write is never overtaken by an older one.
* **Barrier** (:func:`set_write_barrier`): a layer built on the flow (the background
  jobs handed to a queue) makes every write wait until what its snapshot refers to
  exists outside the process: a stored state never names a queued job not queued.
* **Loads** (:func:`load`) tell the flow the revision they read
  (``_remember_revision(backend, flow_id, revision)``).
"""

from __future__ import annotations

import asyncio
import logging
import typing
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from voxflow.flow.checkpoint import CheckpointConfig, load_checkpoint, write_checkpoint
from voxflow.flow.persistence import FlowPersistence, default_persistence
from voxflow.flow.state import dump_state, load_state_like, merge_inputs, new_state_id, stamp_id

if TYPE_CHECKING:
    from voxflow.flow.definition import MethodDefinition
    from voxflow.flow.host import FlowInternals

__all__ = [
    "after_commit",
    "backend",
    "check_backend",
    "check_kickoff_inputs",
    "check_store",
    "checkpoint_failed_run",
    "full_state_save",
    "load",
    "persistence_configured",
    "prepare_kickoff",
    "save_now",
    "set_write_barrier",
    "write_state",
    "writes_done",
]

logger = logging.getLogger("voxflow.flow")


def check_backend(persistence: object) -> None:
    """Refuse a ``persistence=`` argument that is not a :class:`FlowPersistence`."""
    if persistence is not None:
        for attr in ("save_state", "load_state"):
            if not callable(getattr(persistence, attr, None)):
                raise TypeError(f"persistence must implement FlowPersistence ({attr} missing)")


def persistence_configured(flow: FlowInternals) -> bool:
    """True when the flow has a backend of its own or any ``@persist``."""
    d = flow._definition
    return (
        flow._persistence is not None
        or d.persist is not None
        or any(m.persist is not None for m in d.methods.values())
    )


def backend(flow: FlowInternals, method: MethodDefinition | None = None) -> FlowPersistence:
    """The backend a save of ``method`` (None: of the flow) goes to: the flow's own, else
    the method's or the class's ``@persist`` backend, else any method's, else the default."""
    if flow._persistence is not None:
        return flow._persistence
    for cfg in (getattr(method, "persist", None), flow._definition.persist):
        if cfg is not None and cfg.backend is not None:
            return typing.cast("FlowPersistence", cfg.backend)
    for m in flow._definition.methods.values():
        if m.persist is not None and m.persist.backend is not None:
            return typing.cast("FlowPersistence", m.persist.backend)
    return default_persistence()


def check_store(flow: FlowInternals) -> None:
    """Fail before any method runs when a persistence backend cannot be written
    (``check_writable``, e.g. an unwritable ``VOXFLOW_HOME``): a method's work would
    otherwise be lost at its save. Cached by the backend once it succeeds; a no-op
    without persistence."""
    if not flow.persistence_configured():
        return
    backends = [flow._backend()]
    if flow._persistence is None:
        backends += [flow._backend(m) for m in flow._definition.methods.values() if m.persist]
    for store in {id(b): b for b in backends}.values():
        check = getattr(store, "check_writable", None)
        if check is not None:
            check()


async def load(flow: FlowInternals, flow_uuid: str) -> dict[str, Any] | None:
    """The latest snapshot saved under ``flow_uuid`` (None: none), read off the loop."""
    store = flow._backend()
    load_revision = getattr(store, "load_state_revision", None)
    if load_revision is None:  # a backend without revisions: saves are not checked
        if flow._inline:
            return store.load_state(flow_uuid)
        return await asyncio.to_thread(store.load_state, flow_uuid)
    if flow._inline:
        found = load_revision(flow_uuid)
    else:
        found = await asyncio.to_thread(load_revision, flow_uuid)
    data, revision = (None, 0) if found is None else found
    flow._remember_revision(store, flow_uuid, revision)
    return typing.cast("dict[str, Any] | None", data)


def check_kickoff_inputs(inputs: Any, from_checkpoint: Any, restore_from_state_id: Any) -> None:
    """Check what :func:`prepare_kickoff` takes, before anything runs (hostile input:
    ``TypeError`` or ``ValueError`` naming the argument)."""
    if from_checkpoint is not None and restore_from_state_id is not None:
        raise ValueError(
            "Cannot combine `from_checkpoint` and `restore_from_state_id`: they target "
            "different state systems (checkpointing and @persist) and cannot be used "
            "together."
        )
    if inputs is not None:
        if not isinstance(inputs, Mapping):
            raise TypeError(f"inputs must be a mapping, got {type(inputs).__name__}")
        if not all(isinstance(k, str) for k in inputs):
            raise TypeError("inputs keys must be strings")
        if "id" in inputs and (not isinstance(inputs["id"], str) or not inputs["id"]):
            raise ValueError("inputs['id'] must be a non-empty string")
    if from_checkpoint is not None and not isinstance(from_checkpoint, CheckpointConfig):
        raise TypeError("from_checkpoint must be a CheckpointConfig")
    if restore_from_state_id is not None and (
        not isinstance(restore_from_state_id, str) or not restore_from_state_id
    ):
        raise ValueError("restore_from_state_id must be a non-empty string")


async def prepare_kickoff(
    flow: FlowInternals,
    inputs: Mapping[str, Any] | None,
    from_checkpoint: CheckpointConfig | None,
    restore_from_state_id: str | None,
) -> bool:
    """Restore and hydrate the state before a kickoff; True when resuming a checkpoint
    (``from_checkpoint`` here, or the flow built by ``Flow.from_checkpoint``)."""
    resuming = False
    if from_checkpoint is not None:
        if from_checkpoint.restore_from is not None:
            load_checkpoint(flow, from_checkpoint)
            resuming = True
        flow.checkpoint = from_checkpoint
    if restore_from_state_id is not None:
        data = await flow._load(restore_from_state_id)
        if data is None:
            logger.warning("restore_from_state_id: no persisted state for that id")
        else:
            flow._state = load_state_like(flow._state, data)
        new_id = (inputs or {}).get("id") or new_state_id()
        stamp_id(flow._state, new_id)
    elif inputs and "id" in inputs:
        stamp_id(flow._state, inputs["id"])
        if flow.persistence_configured() and not flow._skips_restore(inputs["id"]):
            data = await flow._load(inputs["id"])
            if data is not None:
                flow._state = load_state_like(flow._state, data)
                stamp_id(flow._state, inputs["id"])
    if inputs:
        rest = {k: v for k, v in inputs.items() if k != "id"}
        flow._state = merge_inputs(flow._state, rest)
    resuming = resuming or flow._resume_checkpoint
    flow._resume_checkpoint = False
    return resuming


def full_state_save(flow: FlowInternals, store: Any, method_name: str) -> Callable[[], None]:
    """The core's ``_prepare_state_save``: snapshot the whole state now (on the loop);
    the returned blocking write saves it with ``save_state``."""
    flow_id, data = flow.flow_id, dump_state(flow._state)
    return lambda: store.save_state(flow_id, method_name, data)


def set_write_barrier(
    flow: FlowInternals, barrier: Callable[[], Awaitable[None]] | None
) -> None:
    """Await ``barrier()`` before each of ``flow``'s state writes (None: no barrier).

    The snapshot is already taken; the write waits, so the store never holds it before
    what it refers to exists (a job in its queue). An error raised by the barrier fails
    the save: nothing is written.
    """
    flow.__dict__["_write_barrier"] = barrier


async def write_state(flow: FlowInternals, write: Callable[[], None]) -> None:
    """Run a state write in a worker thread, tracked until done (see the module docs),
    after the flow's write barrier (:func:`set_write_barrier`) if any."""
    barrier: Callable[[], Awaitable[None]] | None = flow.__dict__.get("_write_barrier")
    if barrier is not None:
        await barrier()
    pending: set[asyncio.Future[None]] = flow.__dict__.setdefault("_state_writes", set())
    future = asyncio.ensure_future(asyncio.to_thread(write))
    pending.add(future)
    future.add_done_callback(pending.discard)
    await asyncio.shield(future)


async def writes_done(flow: FlowInternals) -> None:
    """Wait for state writes still running (e.g. of a turn cancelled mid-save)."""
    pending: set[asyncio.Future[None]] = flow.__dict__.get("_state_writes", set())
    if pending:
        await asyncio.wait(set(pending))


async def save_now(flow: FlowInternals, method_name: str) -> None:
    """``asave_state``: save after any write still in flight (no-op without persistence)."""
    if not flow.persistence_configured():
        return
    await flow._writes_done()
    await flow._write_state(flow._prepare_state_save(flow._backend(), method_name))


def checkpoint_failed_run(flow: FlowInternals) -> None:
    """When checkpoints are written, record the bookkeeping a failed run did since its last
    completion (e.g. pending ``and_`` events), so a resume continues exactly where it
    stopped."""
    checkpoint = flow.checkpoint
    if checkpoint is not None and checkpoint.directory is not None:
        write_checkpoint(flow, checkpoint)


async def after_commit(flow: FlowInternals, method: MethodDefinition) -> None:
    """After ``method`` completed: its ``@persist`` save, then the checkpoint if any."""
    cfg = method.persist or flow._definition.persist
    if cfg is not None:
        write = flow._prepare_state_save(flow._backend(method), method.name)
        if flow._inline:
            write()
        else:
            await flow._write_state(write)
        if cfg.verbose:
            logger.info("saved state of %s after %s", flow._definition.name, method.name)
    checkpoint = flow.checkpoint
    if checkpoint is not None and checkpoint.directory is not None:
        if flow._inline:
            write_checkpoint(flow, checkpoint)
        else:
            await asyncio.to_thread(write_checkpoint, flow, checkpoint)
