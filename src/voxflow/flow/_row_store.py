"""What the SQLite and PostgreSQL backends share: the item-row store, revisions, leases.

:class:`RowStore` holds every operation of a persistence backend written once against
a DB-API connection with ``?`` placeholders (:class:`~voxflow.flow._item_rows.Conn`);
a backend supplies the connection handling (``_write``, ``_read``, ``_lock_session``).
Both backends therefore store the same rows (see :mod:`voxflow.flow._item_rows`), check
the same **revision** (a per-session integer stored with the snapshot row, checked and
bumped in the save's transaction) and the same **lease epoch**.

**Leases and fencing.** :meth:`RowStore.acquire_lease` makes one owner (a worker) the
writer of a session until ``expires_at``; taking over a session from another owner
(its lease expired or was released) bumps the session's epoch. A save made through
:meth:`RowStore.fenced` carries the epoch it was granted and is refused with
:class:`~voxflow.errors.FencedWriteError` once the epoch moved on, in the save's own
transaction: a paused ("zombie") worker whose lease was taken over can never overwrite
the new owner's state. Expiry uses the workers' wall clocks (``time.time()``).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

from voxflow.errors import FencedWriteError, PersistenceConflictError, SessionLeaseError
from voxflow.flow._item_rows import (
    Conn,
    StateChanges,
    assemble,
    check_changes,
    split_full,
    stale_reason,
    write_change_rows,
    write_full_rows,
)
from voxflow.ids import SessionId

__all__ = ["FencedPersistence", "RowStore", "SessionLease"]

logger = logging.getLogger("voxflow.flow.persistence")

T = TypeVar("T")


@dataclasses.dataclass(frozen=True, slots=True)
class SessionLease:
    """A granted lease: ``owner`` writes ``session_id`` as ``epoch`` until ``expires_at``."""

    session_id: SessionId
    owner: str
    epoch: int
    expires_at: float


class RowStore:
    """The backend operations, over ``_write``/``_read`` transactions a subclass provides."""

    history_limit: int = 10

    # -- what a backend provides -----------------------------------------------------

    def _write(self, fn: Callable[[Conn], None]) -> None:
        """Run ``fn`` in one write transaction (committed, or rolled back if it raises)."""
        raise NotImplementedError

    def _read(self, fn: Callable[[Conn], T]) -> T | None:
        """``fn`` on a connection (None when there is no database to read yet)."""
        raise NotImplementedError

    def _read_consistent(self, fn: Callable[[Conn], T]) -> T | None:
        """``fn`` inside one read transaction: the snapshot and its rows agree."""
        raise NotImplementedError

    def _lock_session(self, conn: Conn, flow_uuid: str) -> None:
        """Serialise this transaction with other writers of ``flow_uuid`` (if needed)."""

    def close(self) -> None:
        """Release the backend's connections (idempotent; the next call reopens them)."""

    # -- saves -----------------------------------------------------------------------

    @staticmethod
    def _check_uuid(flow_uuid: object) -> None:
        if not isinstance(flow_uuid, str) or not flow_uuid:
            raise ValueError("flow_uuid must be a non-empty string")

    def save_state(self, flow_uuid: str, method_name: str, state_data: dict[str, Any]) -> None:
        """Store ``state_data`` as the latest snapshot; the previous one joins the history.

        The item-stored lists and record dicts are (re)written one row per element, the
        rest as the snapshot row, in one transaction. Not revision-checked (last writer
        wins): the runtime saves with :meth:`save_full_state` and a revision.
        """
        self.save_full_state(flow_uuid, method_name, state_data)

    def save_full_state(
        self,
        flow_uuid: str,
        method_name: str,
        state_data: dict[str, Any],
        *,
        expected_revision: int | None = None,
        epoch: int | None = None,
    ) -> int:
        """:meth:`save_state`, returning the stored revision (a base for later changes).

        Args:
            expected_revision: the revision this writer loaded or last wrote (0: it never
                saw the session); checked and bumped in the save's transaction. None
                skips the check (last writer wins, as :meth:`save_state`).
            epoch: the lease epoch this writer holds (see :meth:`fenced`); None: unfenced.

        Raises:
            PersistenceConflictError: the stored revision is not ``expected_revision``
                (another writer saved the session since); nothing was written.
            FencedWriteError: ``epoch`` is no longer the session's lease epoch.
        """
        self._check_uuid(flow_uuid)
        _check_count("expected_revision", expected_revision)
        _check_count("epoch", epoch)
        if not isinstance(state_data, dict):
            raise TypeError("state_data must be a dict")
        snapshot, lists, records = split_full(state_data)
        payload = json.dumps(snapshot)
        now = datetime.now(UTC).isoformat()
        version = 0

        def write(conn: Conn) -> None:
            nonlocal version
            self._lock_session(conn, flow_uuid)
            _check_epoch(conn, flow_uuid, epoch)
            row = self._latest_row(conn, flow_uuid)
            _check_revision(flow_uuid, row, expected_revision)
            write_full_rows(conn, flow_uuid, lists, records)
            version = self._replace_snapshot(conn, flow_uuid, method_name, now, payload, row)

        self._write(write)
        return version

    def save_state_changes(
        self,
        flow_uuid: str,
        method_name: str,
        changes: StateChanges,
        *,
        epoch: int | None = None,
    ) -> int | None:
        """Apply one incremental save (new list items, changed records, the small snapshot).

        One transaction: a crash leaves the previous snapshot and its rows intact.
        Returns the stored revision, or None, writing nothing, when the stored list or
        record counts are not the ones ``changes`` builds on (save the full state then,
        with ``expected_revision``).

        Raises:
            PersistenceConflictError: ``changes.base_version`` is set and the stored
                revision differs (another writer saved the session since); nothing was
                written.
            FencedWriteError: ``epoch`` is no longer the session's lease epoch.
            ValueError: ``flow_uuid`` is empty or ``changes`` is inconsistent (named).
            TypeError: ``changes`` is not a :class:`StateChanges` (or holds a bad part).
        """
        self._check_uuid(flow_uuid)
        check_changes(changes)
        _check_count("epoch", epoch)
        now = datetime.now(UTC).isoformat()
        version: int | None = None

        def write(conn: Conn) -> None:
            nonlocal version
            self._lock_session(conn, flow_uuid)
            _check_epoch(conn, flow_uuid, epoch)
            row = self._latest_row(conn, flow_uuid)
            if changes.base_version is not None:
                _check_revision(flow_uuid, row, changes.base_version)
            reason = stale_reason(None if row is None else (row[0], row[3]), changes)
            if reason is not None:
                logger.debug("%s: incremental save refused, %s", flow_uuid, reason)
                return
            payload = write_change_rows(conn, flow_uuid, changes)
            version = self._replace_snapshot(conn, flow_uuid, method_name, now, payload, row)

        self._write(write)
        return version

    def save_state_delta(
        self,
        flow_uuid: str,
        method_name: str,
        snapshot: dict[str, Any],
        appended: Mapping[str, Sequence[Any]],
        counts: Mapping[str, int],
    ) -> bool:
        """Append ``appended[field]`` after ``counts[field]`` stored items; save ``snapshot``.

        The list-only form of :meth:`save_state_changes` (stored counts checked, not the
        revision). Returns False, writing nothing, when the latest stored snapshot does
        not hold exactly ``counts`` items: save the full state then.

        Raises:
            ValueError: ``flow_uuid`` is empty; ``appended`` and ``counts`` name different
                fields or a count is negative.
        """
        if not isinstance(snapshot, dict):
            raise TypeError("snapshot must be a dict")
        changes = StateChanges(snapshot=snapshot, appended=appended, counts=counts)
        return self.save_state_changes(flow_uuid, method_name, changes) is not None

    @staticmethod
    def _latest_row(conn: Conn, flow_uuid: str) -> tuple[Any, ...] | None:
        """``(version, method_name, saved_at, state_json)`` of the latest snapshot, or None."""
        row: tuple[Any, ...] | None = conn.execute(
            "SELECT version, method_name, saved_at, state_json FROM flow_states "
            "WHERE flow_uuid = ?",
            (flow_uuid,),
        ).fetchone()
        return row

    def _replace_snapshot(
        self,
        conn: Conn,
        flow_uuid: str,
        method_name: str,
        now: str,
        payload: str,
        row: tuple[Any, ...] | None,
    ) -> int:
        """Upsert the latest snapshot; move the previous one to the bounded history.

        ``row`` is the previous snapshot (:meth:`_latest_row`, read in this transaction).
        Returns the new snapshot's revision.
        """
        limit = self.history_limit
        version = 1
        if row is not None:
            version = int(row[0]) + 1
            if limit:
                conn.execute(
                    "INSERT INTO flow_state_history "
                    "(flow_uuid, version, method_name, saved_at, state_json) "
                    "VALUES (?, ?, ?, ?, ?)",
                    (flow_uuid, row[0], row[1], row[2], row[3]),
                )
                conn.execute(
                    "DELETE FROM flow_state_history WHERE flow_uuid = ? AND version <= ?",
                    (flow_uuid, int(row[0]) - limit),
                )
        conn.execute(
            "INSERT INTO flow_states (flow_uuid, method_name, saved_at, version, state_json) "
            "VALUES (?, ?, ?, ?, ?) ON CONFLICT(flow_uuid) DO UPDATE SET "
            "method_name = excluded.method_name, saved_at = excluded.saved_at, "
            "version = excluded.version, state_json = excluded.state_json",
            (flow_uuid, method_name, now, version, payload),
        )
        return version

    # -- loads -----------------------------------------------------------------------

    def load_state(self, flow_uuid: str) -> dict[str, Any] | None:
        """The latest state of ``flow_uuid`` (lists reassembled) or None; creates nothing."""
        found = self.load_state_revision(flow_uuid)
        return None if found is None else found[0]

    def load_state_revision(self, flow_uuid: str) -> tuple[dict[str, Any], int] | None:
        """``(state, revision)`` of ``flow_uuid``, read in one transaction, or None.

        The revision is what a writer passes back as ``expected_revision``.
        """
        self._check_uuid(flow_uuid)

        def read(conn: Conn) -> tuple[dict[str, Any], int] | None:
            row = conn.execute(
                "SELECT state_json, version FROM flow_states WHERE flow_uuid = ?", (flow_uuid,)
            ).fetchone()
            return None if row is None else (assemble(conn, flow_uuid, row[0]), int(row[1]))

        return self._read_consistent(read)

    def revision(self, flow_uuid: str) -> int:
        """The stored revision of ``flow_uuid`` (0: never saved)."""
        self._check_uuid(flow_uuid)
        row = self._read(
            lambda c: c.execute(
                "SELECT version FROM flow_states WHERE flow_uuid = ?", (flow_uuid,)
            ).fetchone()
        )
        return 0 if row is None else int(row[0])

    def history(self, flow_uuid: str) -> list[tuple[int, str, dict[str, Any]]]:
        """``(revision, method, state)`` of the kept snapshots, oldest first, latest last.

        Item-stored lists and records are reassembled from the current rows: lists are
        exact while they were only appended to (after a rewrite, e.g. a trimmed history,
        older versions show the rewritten items); records always show their current
        stored content.
        """
        self._check_uuid(flow_uuid)

        def read(c: Conn) -> list[tuple[int, str, dict[str, Any]]]:
            rows = c.execute(
                "SELECT version, method_name, state_json FROM flow_state_history "
                "WHERE flow_uuid = ? ORDER BY version",
                (flow_uuid,),
            ).fetchall()
            rows += c.execute(
                "SELECT version, method_name, state_json FROM flow_states WHERE flow_uuid = ?",
                (flow_uuid,),
            ).fetchall()
            return [(int(v), m, assemble(c, flow_uuid, s, latest=False)) for v, m, s in rows]

        return self._read_consistent(read) or []

    # -- paused feedback -------------------------------------------------------------

    def save_pending_feedback(
        self, flow_uuid: str, context: dict[str, Any], state_data: dict[str, Any]
    ) -> None:
        """Store (replace) the paused feedback step of ``flow_uuid``."""
        self._check_uuid(flow_uuid)
        ctx, state = json.dumps(context), json.dumps(state_data)
        now = datetime.now(UTC).isoformat()
        self._write(
            _exec(
                "INSERT INTO pending_feedback (flow_uuid, context_json, state_json, created_at) "
                "VALUES (?, ?, ?, ?) ON CONFLICT (flow_uuid) DO UPDATE SET "
                "context_json = excluded.context_json, state_json = excluded.state_json, "
                "created_at = excluded.created_at",
                (flow_uuid, ctx, state, now),
            )
        )

    def load_pending_feedback(self, flow_uuid: str) -> tuple[dict[str, Any], dict[str, Any]] | None:
        """``(context, state)`` of the paused step, or None."""
        self._check_uuid(flow_uuid)
        row = self._read(
            lambda c: c.execute(
                "SELECT context_json, state_json FROM pending_feedback WHERE flow_uuid = ?",
                (flow_uuid,),
            ).fetchone()
        )
        if row is None:
            return None
        return json.loads(row[0]), json.loads(row[1])

    def clear_pending_feedback(self, flow_uuid: str) -> None:
        """Forget the paused step of ``flow_uuid`` (idempotent)."""
        self._check_uuid(flow_uuid)
        self._write(_exec("DELETE FROM pending_feedback WHERE flow_uuid = ?", (flow_uuid,)))

    # -- leases ----------------------------------------------------------------------

    def acquire_lease(self, flow_uuid: str, owner: str, *, ttl: float = 30.0) -> SessionLease:
        """Make ``owner`` the writer of ``flow_uuid`` for ``ttl`` seconds.

        Free, expired or released: granted, with the next epoch (the same epoch when
        ``owner`` already holds it, which renews it).

        Raises:
            SessionLeaseError: another owner holds an unexpired lease (named, with its
                expiry).
        """
        self._check_uuid(flow_uuid)
        _check_lease_args(owner, ttl)
        granted: SessionLease | None = None

        def write(conn: Conn) -> None:
            nonlocal granted
            self._lock_session(conn, flow_uuid)
            now = time.time()
            row = _lease_row(conn, flow_uuid)
            if row is None:
                epoch = 1
                conn.execute(
                    "INSERT INTO session_leases (flow_uuid, owner, epoch, expires_at) "
                    "VALUES (?, ?, ?, ?)",
                    (flow_uuid, owner, epoch, now + ttl),
                )
            else:
                holder, epoch, expires_at = row
                if holder not in ("", owner) and expires_at > now:
                    raise SessionLeaseError(
                        f"session {flow_uuid!r} is leased to {holder!r} for another "
                        f"{expires_at - now:.1f} s (epoch {epoch})",
                        session_id=flow_uuid,
                        holder=holder,
                    )
                if holder != owner:
                    epoch += 1  # a takeover: every save of the previous owner is fenced
                conn.execute(
                    "UPDATE session_leases SET owner = ?, epoch = ?, expires_at = ? "
                    "WHERE flow_uuid = ?",
                    (owner, epoch, now + ttl, flow_uuid),
                )
            granted = SessionLease(SessionId(flow_uuid), owner, epoch, now + ttl)

        self._write(write)
        assert granted is not None
        return granted

    def renew_lease(self, lease: SessionLease, *, ttl: float = 30.0) -> SessionLease:
        """Extend ``lease`` by ``ttl`` seconds from now.

        Raises:
            FencedWriteError: the lease was taken over (its epoch moved on).
        """
        if not isinstance(lease, SessionLease):
            raise TypeError("lease must be a SessionLease")
        _check_lease_args(lease.owner, ttl)
        renewed: SessionLease | None = None

        def write(conn: Conn) -> None:
            nonlocal renewed
            self._lock_session(conn, lease.session_id)
            _check_epoch(conn, lease.session_id, lease.epoch, owner=lease.owner)
            expires_at = time.time() + ttl
            conn.execute(
                "UPDATE session_leases SET expires_at = ? WHERE flow_uuid = ?",
                (expires_at, lease.session_id),
            )
            renewed = dataclasses.replace(lease, expires_at=expires_at)

        self._write(write)
        assert renewed is not None
        return renewed

    def release_lease(self, lease: SessionLease) -> None:
        """Give ``lease`` up (idempotent; a lease already taken over is left alone)."""
        if not isinstance(lease, SessionLease):
            raise TypeError("lease must be a SessionLease")
        self._write(
            _exec(
                "UPDATE session_leases SET owner = '', expires_at = 0 "
                "WHERE flow_uuid = ? AND owner = ? AND epoch = ?",
                (lease.session_id, lease.owner, lease.epoch),
            )
        )

    def lease_of(self, flow_uuid: str) -> SessionLease | None:
        """The session's current lease row (owner ``""`` once released), or None."""
        self._check_uuid(flow_uuid)
        row = self._read(lambda c: _lease_row(c, flow_uuid))
        if row is None:
            return None
        return SessionLease(SessionId(flow_uuid), row[0], row[1], row[2])

    def fenced(self, lease: SessionLease) -> FencedPersistence:
        """This backend, every save of ``lease.session_id`` checked against its epoch."""
        if not isinstance(lease, SessionLease):
            raise TypeError("lease must be a SessionLease")
        return FencedPersistence(self, lease)


class FencedPersistence:
    """A backend view whose saves of the leased session carry the lease's epoch.

    Give it to the flow of a leased session (``MyFlow(persistence=store.fenced(lease))``):
    once another owner takes the session over, this flow's saves raise
    :class:`~voxflow.errors.FencedWriteError` and write nothing. Other sessions are
    saved unfenced. Reads go straight to the backend.
    """

    def __init__(self, store: RowStore, lease: SessionLease) -> None:
        self.store = store
        self.lease = lease

    def _epoch(self, flow_uuid: str) -> int | None:
        return self.lease.epoch if flow_uuid == self.lease.session_id else None

    def save_state(self, flow_uuid: str, method_name: str, state_data: dict[str, Any]) -> None:
        self.store.save_full_state(flow_uuid, method_name, state_data, epoch=self._epoch(flow_uuid))

    def save_full_state(
        self,
        flow_uuid: str,
        method_name: str,
        state_data: dict[str, Any],
        *,
        expected_revision: int | None = None,
    ) -> int:
        return self.store.save_full_state(
            flow_uuid,
            method_name,
            state_data,
            expected_revision=expected_revision,
            epoch=self._epoch(flow_uuid),
        )

    def save_state_changes(
        self, flow_uuid: str, method_name: str, changes: StateChanges
    ) -> int | None:
        return self.store.save_state_changes(
            flow_uuid, method_name, changes, epoch=self._epoch(flow_uuid)
        )

    def load_state(self, flow_uuid: str) -> dict[str, Any] | None:
        return self.store.load_state(flow_uuid)

    def load_state_revision(self, flow_uuid: str) -> tuple[dict[str, Any], int] | None:
        return self.store.load_state_revision(flow_uuid)

    def save_pending_feedback(
        self, flow_uuid: str, context: dict[str, Any], state_data: dict[str, Any]
    ) -> None:
        self.store.save_pending_feedback(flow_uuid, context, state_data)

    def load_pending_feedback(self, flow_uuid: str) -> tuple[dict[str, Any], dict[str, Any]] | None:
        return self.store.load_pending_feedback(flow_uuid)

    def clear_pending_feedback(self, flow_uuid: str) -> None:
        self.store.clear_pending_feedback(flow_uuid)

    def check_writable(self) -> None:
        check = getattr(self.store, "check_writable", None)
        if check is not None:
            check()

    def __repr__(self) -> str:
        return f"FencedPersistence({self.store!r}, epoch={self.lease.epoch})"


def _exec(sql: str, params: Sequence[Any]) -> Callable[[Conn], None]:
    """A write transaction body running one statement."""

    def run(conn: Conn) -> None:
        conn.execute(sql, params)

    return run


def _check_count(name: str, value: object) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise ValueError(f"{name} must be a non-negative int or None")


def _check_lease_args(owner: object, ttl: object) -> None:
    if not isinstance(owner, str) or not owner:
        raise ValueError("owner must be a non-empty string")
    if isinstance(ttl, bool) or not isinstance(ttl, int | float) or not 0 < ttl <= 86400:
        raise ValueError("ttl must be a number of seconds in (0, 86400]")


def _lease_row(conn: Conn, flow_uuid: str) -> tuple[str, int, float] | None:
    row = conn.execute(
        "SELECT owner, epoch, expires_at FROM session_leases WHERE flow_uuid = ?", (flow_uuid,)
    ).fetchone()
    return None if row is None else (str(row[0]), int(row[1]), float(row[2]))


def _check_epoch(conn: Conn, flow_uuid: str, epoch: int | None, owner: str | None = None) -> None:
    """Raise :class:`FencedWriteError` unless ``epoch`` is the session's lease epoch."""
    if epoch is None:
        return
    row = _lease_row(conn, flow_uuid)
    current = 0 if row is None else row[1]
    if current != epoch or (owner is not None and row is not None and row[0] != owner):
        raise FencedWriteError(flow_uuid, epoch=epoch, current=current)


def _check_revision(flow_uuid: str, row: tuple[Any, ...] | None, expected: int | None) -> None:
    """Raise :class:`PersistenceConflictError` unless the stored revision is ``expected``.

    ``row`` is the latest snapshot row (revision first) read in the save's transaction,
    None when the session was never saved (revision 0).
    """
    if expected is None:
        return
    stored = 0 if row is None else int(row[0])
    if stored != expected:
        raise PersistenceConflictError(flow_uuid, expected=expected, stored=stored)
