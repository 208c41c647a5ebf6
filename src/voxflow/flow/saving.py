"""Saving and restoring a Flow's state through its persistence (``@persist``).

:class:`StateSaving` is a part of the Flow core (the runtime holds one per Flow): it
owns the flow's own backend, the writes in flight and the resume-from-checkpoint mark,
and reaches the Flow through its :class:`~voxflow.flow.host.FlowHost`. The Flow's
parts (:mod:`voxflow.flow.parts`) hear every revision read and may write a save their
own way (:class:`voxflow.Flow` saves only what changed).

* **Kickoff** (:func:`check_kickoff_inputs`, then :meth:`StateSaving.prepare_kickoff`): checkpoint
  restore (``from_checkpoint``) or fork (``restore_from_state_id``); ``inputs["id"]``
  stamps ``state.id`` and, when persistence is configured, reloads the latest snapshot
  for that id, unless a part of the flow holds that id's state live (``skips_restore``:
  tracked turns); other inputs are merged.
* **After a method** (:meth:`StateSaving.after_commit`): a persisted method's state is
  snapshotted on the loop (:meth:`StateSaving.prepare_save`: a part's
  ``prepare_state_save``, else the whole state) and written in a worker thread (inline
  on a private all-sync loop), then the checkpoint when one is configured.
* **Writes** (:meth:`StateSaving.write`) outlive a cancelled caller (a thread cannot be
  stopped), so they are tracked until done and :meth:`StateSaving.writes_done` waits for
  them: a later write is never overtaken by an older one.
* **Barrier** (:func:`set_write_barrier`): a layer built on the flow (the background
  jobs handed to a queue) makes every write wait until what its snapshot refers to
  exists outside the process: a stored state never names a queued job not queued.
* **Deferral** (:func:`set_save_deferral`): a layer that keeps the session going while
  its store is unreachable (a call: it keeps talking) takes over the saves that fail
  with :class:`~voxflow.errors.PersistenceUnavailableError` instead of failing the
  turn, and saves the state again once the store is back: a failed write leaves the
  known revision and no incremental marks, so that save writes everything.
* **Loads** (:meth:`StateSaving.load`) tell the parts the revision they read
  (``revision_read(backend, flow_id, revision)``).
"""

from __future__ import annotations

import asyncio
import logging
import typing
import weakref
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from voxflow.errors import PersistenceUnavailableError
from voxflow.flow.checkpoint import CheckpointConfig, load_checkpoint, write_checkpoint
from voxflow.flow.persistence import FlowPersistence, WritableCheck, default_persistence
from voxflow.flow.state import dump_state, load_state_like, merge_inputs, new_state_id, stamp_id

if TYPE_CHECKING:
    from voxflow.flow.definition import FlowDefinition, MethodDefinition
    from voxflow.flow.host import FlowHost
    from voxflow.flow.parts import FlowPart

__all__ = [
    "SaveDeferral",
    "StateSaving",
    "check_backend",
    "check_kickoff_inputs",
    "set_save_deferral",
    "set_write_barrier",
]

Barrier = Callable[[], Awaitable[None]]
SaveDeferral = Callable[[str, PersistenceUnavailableError], bool]
"""``(method_name, error) -> taken``: see :func:`set_save_deferral`."""

_BARRIERS: weakref.WeakKeyDictionary[Any, Barrier] = weakref.WeakKeyDictionary()
_DEFERRALS: weakref.WeakKeyDictionary[Any, SaveDeferral] = weakref.WeakKeyDictionary()

logger = logging.getLogger("voxflow.flow")


def check_backend(persistence: object) -> None:
    """Refuse a ``persistence=`` argument that is not a :class:`FlowPersistence`."""
    if persistence is not None:
        for attr in ("save_state", "load_state"):
            if not callable(getattr(persistence, attr, None)):
                raise TypeError(f"persistence must implement FlowPersistence ({attr} missing)")


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


def set_write_barrier(flow: Any, barrier: Barrier | None) -> None:
    """Await ``barrier()`` before each of ``flow``'s state writes (None: no barrier).

    The snapshot is already taken; the write waits, so the store never holds it before
    what it refers to exists (a job in its queue). An error raised by the barrier fails
    the save: nothing is written.
    """
    if barrier is None:
        _BARRIERS.pop(flow, None)
    else:
        _BARRIERS[flow] = barrier


def set_save_deferral(flow: Any, deferral: SaveDeferral | None) -> None:
    """Hand ``flow``'s saves that fail because the store is unreachable to ``deferral``
    (None: they raise, the default).

    ``deferral(method_name, error)`` is called on the loop with the save's method name
    and its :class:`~voxflow.errors.PersistenceUnavailableError`; True means it took the
    save over (the save returns, nothing raised): it must save the state again once the
    store is back (``flow.asave_state``), which then writes the whole state the failed
    write left unsaved. False: the error is raised, as without a deferral (a save whose
    caller acts on its being stored, e.g. one after which job updates are acknowledged,
    must not be deferred). Only the write is deferred: a write barrier's failure, a
    conflict or a fenced write still raise.
    """
    if deferral is None:
        _DEFERRALS.pop(flow, None)
    else:
        _DEFERRALS[flow] = deferral


class StateSaving:
    """A Flow's saves and restores (see the module docs).

    Args:
        host: the Flow, as its parts see it.
        definition: the Flow class's definition (its ``@persist`` marks).
        persistence: the backend given to the constructor (None: ``@persist``'s).
    """

    __slots__ = ("_definition", "_host", "_writes", "parts", "persistence", "resume_next")

    def __init__(
        self, host: FlowHost, definition: FlowDefinition, persistence: FlowPersistence | None
    ) -> None:
        self._host = host
        self._definition = definition
        self.persistence = persistence
        self.parts: tuple[FlowPart, ...] = ()
        """The Flow's parts: they hear the revisions read and may write the saves."""
        self.resume_next = False
        """The next kickoff resumes the checkpoint loaded into the flow."""
        self._writes: set[asyncio.Future[None]] = set()

    def configured(self) -> bool:
        """True when the flow has a backend of its own or any ``@persist``."""
        d = self._definition
        return (
            self.persistence is not None
            or d.persist is not None
            or any(m.persist is not None for m in d.methods.values())
        )

    def backend(self, method: MethodDefinition | None = None) -> FlowPersistence:
        """The backend a save of ``method`` (None: of the flow) goes to: the flow's own,
        else the method's or the class's ``@persist`` backend, else any method's, else
        the default."""
        if self.persistence is not None:
            return self.persistence
        for cfg in (getattr(method, "persist", None), self._definition.persist):
            if cfg is not None and cfg.backend is not None:
                return typing.cast("FlowPersistence", cfg.backend)
        for m in self._definition.methods.values():
            if m.persist is not None and m.persist.backend is not None:
                return typing.cast("FlowPersistence", m.persist.backend)
        return default_persistence()

    def check_store(self) -> None:
        """Fail before any method runs when a persistence backend cannot be written
        (``check_writable``, e.g. an unwritable ``VOXFLOW_HOME``): a method's work would
        otherwise be lost at its save. Cached by the backend once it succeeds; a no-op
        without persistence."""
        if not self.configured():
            return
        backends = [self.backend()]
        if self.persistence is None:
            backends += [self.backend(m) for m in self._definition.methods.values() if m.persist]
        for store in {id(b): b for b in backends}.values():
            if isinstance(store, WritableCheck):  # else nothing to prove: its first save tells
                store.check_writable()

    async def load(self, flow_uuid: str, *, inline: bool) -> dict[str, Any] | None:
        """The latest snapshot saved under ``flow_uuid`` (None: none), read on this thread
        when ``inline``, else off the loop; the parts hear the revision read."""
        store = self.backend()
        load_revision = getattr(store, "load_state_revision", None)
        if load_revision is None:  # a backend without revisions: saves are not checked
            if inline:
                return store.load_state(flow_uuid)
            return await asyncio.to_thread(store.load_state, flow_uuid)
        found = load_revision(flow_uuid) if inline else await asyncio.to_thread(
            load_revision, flow_uuid
        )
        data, revision = (None, 0) if found is None else found
        for part in self.parts:
            part.revision_read(store, flow_uuid, revision)
        return typing.cast("dict[str, Any] | None", data)

    async def prepare_kickoff(
        self,
        inputs: Mapping[str, Any] | None,
        from_checkpoint: CheckpointConfig | None,
        restore_from_state_id: str | None,
        *,
        inline: bool,
    ) -> bool:
        """Restore and hydrate the state before a kickoff; True when resuming a checkpoint
        (``from_checkpoint`` here, or the flow built by ``Flow.from_checkpoint``)."""
        host = self._host
        resuming = False
        if from_checkpoint is not None:
            if from_checkpoint.restore_from is not None:
                load_checkpoint(host, from_checkpoint)
                resuming = True
            host.flow.checkpoint = from_checkpoint
        if restore_from_state_id is not None:
            data = await self.load(restore_from_state_id, inline=inline)
            if data is None:
                logger.warning("restore_from_state_id: no persisted state for that id")
            else:
                host.state = load_state_like(host.state, data)
            new_id = (inputs or {}).get("id") or new_state_id()
            stamp_id(host.state, new_id)
        elif inputs and "id" in inputs:
            flow_id = inputs["id"]
            stamp_id(host.state, flow_id)
            if self.configured() and not any([p.skips_restore(flow_id) for p in self.parts]):
                data = await self.load(flow_id, inline=inline)
                if data is not None:
                    host.state = load_state_like(host.state, data)
                    stamp_id(host.state, flow_id)
        if inputs:
            rest = {k: v for k, v in inputs.items() if k != "id"}
            host.state = merge_inputs(host.state, rest)
        resuming = resuming or self.resume_next
        self.resume_next = False
        return resuming

    def prepare_save(self, store: Any, method_name: str) -> Callable[[], None]:
        """Snapshot the state now (on the loop) and return the blocking write to
        ``store``: a part's (the conversation saves what changed), else ``save_state``
        with the whole state."""
        for part in self.parts:
            write = part.prepare_state_save(store, method_name)
            if write is not None:
                return write
        host = self._host
        flow_id, data = host.flow.flow_id, dump_state(host.state)
        return lambda: store.save_state(flow_id, method_name, data)

    async def write(self, write: Callable[[], None], method_name: str = "") -> None:
        """Run a state write (of ``method_name``) in a worker thread, tracked until done
        (see the module docs), after the flow's write barrier (:func:`set_write_barrier`)
        if any; a store that is unreachable goes to the flow's deferral
        (:func:`set_save_deferral`) if any."""
        barrier = _BARRIERS.get(self._host.flow)
        if barrier is not None:
            await barrier()
        future = asyncio.ensure_future(asyncio.to_thread(write))
        self._writes.add(future)
        future.add_done_callback(self._writes.discard)
        try:
            await asyncio.shield(future)
        except PersistenceUnavailableError as exc:
            deferral = _DEFERRALS.get(self._host.flow)
            if deferral is None or not deferral(method_name, exc):
                raise

    async def writes_done(self) -> None:
        """Wait for state writes still running (e.g. of a turn cancelled mid-save)."""
        if self._writes:
            await asyncio.wait(set(self._writes))

    async def save(self, method_name: str, *, inline: bool) -> None:
        """Save the state now to the flow's backend: inline on a private all-sync loop,
        else in a tracked worker thread."""
        write = self.prepare_save(self.backend(), method_name)
        if inline:
            write()
        else:
            await self.write(write, method_name)

    async def save_now(self, method_name: str) -> None:
        """``asave_state``: save after any write still in flight (no-op without
        persistence)."""
        if not self.configured():
            return
        await self.writes_done()
        await self.write(self.prepare_save(self.backend(), method_name), method_name)

    def checkpoint_failed_run(self) -> None:
        """When checkpoints are written, record the bookkeeping a failed run did since its
        last completion (e.g. pending ``and_`` events), so a resume continues exactly
        where it stopped."""
        checkpoint = self._host.flow.checkpoint
        if checkpoint is not None and checkpoint.directory is not None:
            write_checkpoint(self._host, checkpoint)

    async def after_commit(self, method: MethodDefinition, *, inline: bool) -> None:
        """After ``method`` completed: its ``@persist`` save, then the checkpoint if any."""
        cfg = method.persist or self._definition.persist
        if cfg is not None:
            write = self.prepare_save(self.backend(method), method.name)
            if inline:
                write()
            else:
                await self.write(write, method.name)
            if cfg.verbose:
                logger.info("saved state of %s after %s", self._definition.name, method.name)
        checkpoint = self._host.flow.checkpoint
        if checkpoint is not None and checkpoint.directory is not None:
            if inline:
                write_checkpoint(self._host, checkpoint)
            else:
                await asyncio.to_thread(write_checkpoint, self._host, checkpoint)
