"""What the SQLite and PostgreSQL backends share: the item-row store, revisions, leases.

:class:`RowStore` holds every operation of a persistence backend written once against
a DB-API connection with ``?`` placeholders (:class:`~voxflow.flow._item_rows.Conn`);
a backend supplies the connection handling (``_write``, ``_read``, ``_lock_session``).
Both backends therefore store the same rows (see :mod:`voxflow.flow._item_rows`), check
the same **revision** (a per-session integer stored with the snapshot row, checked and
bumped in the save's transaction) and the same **lease epoch**.

**Leases and fencing.** :meth:`RowStore.acquire_lease` makes one owner (a worker) the
writer of a session until ``expires_at``; taking over a session from another owner
(its lease expired or was released) bumps the session's epoch. Every write of a session
(full save, incremental save, delta, paused feedback) checks its lease row in the
write's own transaction and raises :class:`~voxflow.errors.FencedWriteError`, writing
nothing, when:

* it is made through :meth:`RowStore.fenced` and its epoch moved on (``"taken over"``),
  the lease was released (``"released"``) or it expired (``"expired"``, even if nobody
  took it yet): a paused ("zombie") worker can never write once its lease is gone;
* it is made without a lease (an unfenced store) while another owner holds a live lease
  on the session (``"unfenced"``): **a session with a live lease is written only through
  ``store.fenced(lease)``**. A session without a lease row, or whose lease expired or was
  released, takes unfenced writes (the revision still checks them).

Expiry is judged by the **database's clock**, never a worker's: ``expires_at`` is
stored, and compared, in the database server's Unix seconds (SQLite's
``julianday('now')``, the machine of the file; PostgreSQL's ``clock_timestamp()``, read
after the session lock), so workers with skewed clocks agree on who holds a session.
"""

from __future__ import annotations

import dataclasses
import json
import logging
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
    """A granted lease: ``owner`` writes ``session_id`` as ``epoch`` until ``expires_at``
    (Unix seconds of the database's clock, not this process's)."""

    session_id: SessionId
    owner: str
    epoch: int
    expires_at: float


class RowStore:
    """The backend operations, over ``_write``/``_read`` transactions a subclass provides."""

    history_limit: int = 10
    #: an SQL expression of the database's clock in Unix seconds (a float): lease
    #: expiry is judged by it (each backend sets it).
    _now_sql: str

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
            FencedWriteError: ``epoch`` does not hold the session's live lease, or
                ``epoch`` is None and another owner holds a live lease on it.
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
            self._fence(conn, flow_uuid, epoch)
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
            FencedWriteError: ``epoch`` does not hold the session's live lease, or
                ``epoch`` is None and another owner holds a live lease on it.
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
            self._fence(conn, flow_uuid, epoch)
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
        *,
        epoch: int | None = None,
    ) -> bool:
        """Append ``appended[field]`` after ``counts[field]`` stored items; save ``snapshot``.

        The list-only form of :meth:`save_state_changes` (stored counts checked, not the
        revision). Returns False, writing nothing, when the latest stored snapshot does
        not hold exactly ``counts`` items: save the full state then.

        Raises:
            ValueError: ``flow_uuid`` is empty; ``appended`` and ``counts`` name different
                fields or a count is negative.
            FencedWriteError: as :meth:`save_state_changes` (``epoch``: the lease's).
        """
        if not isinstance(snapshot, dict):
            raise TypeError("snapshot must be a dict")
        changes = StateChanges(snapshot=snapshot, appended=appended, counts=counts)
        return self.save_state_changes(flow_uuid, method_name, changes, epoch=epoch) is not None

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
        self,
        flow_uuid: str,
        context: dict[str, Any],
        state_data: dict[str, Any],
        *,
        epoch: int | None = None,
    ) -> None:
        """Store (replace) the paused feedback step of ``flow_uuid`` (fenced as saves are)."""
        self._check_uuid(flow_uuid)
        _check_count("epoch", epoch)
        ctx, state = json.dumps(context), json.dumps(state_data)
        now = datetime.now(UTC).isoformat()
        self._write(
            self._fenced_exec(
                flow_uuid,
                epoch,
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

    def clear_pending_feedback(self, flow_uuid: str, *, epoch: int | None = None) -> None:
        """Forget the paused step of ``flow_uuid`` (idempotent; fenced as saves are)."""
        self._check_uuid(flow_uuid)
        _check_count("epoch", epoch)
        self._write(
            self._fenced_exec(
                flow_uuid, epoch, "DELETE FROM pending_feedback WHERE flow_uuid = ?", (flow_uuid,)
            )
        )

    def _fenced_exec(
        self, flow_uuid: str, epoch: int | None, sql: str, params: Sequence[Any]
    ) -> Callable[[Conn], None]:
        """A write transaction body: the session locked and fenced, then one statement."""

        def run(conn: Conn) -> None:
            self._lock_session(conn, flow_uuid)
            self._fence(conn, flow_uuid, epoch)
            conn.execute(sql, params)

        return run

    def _lease_now(self, conn: Conn, flow_uuid: str) -> tuple[tuple[str, int, float] | None, float]:
        """The session's lease row ``(owner, epoch, expires_at)`` (or None) and the
        database's clock, in one query when the row exists."""
        row = self._lease_row(conn, flow_uuid)
        if row is None:
            now = conn.execute(f"SELECT {self._now_sql}").fetchone()
            return None, float(now[0])
        return (str(row[0]), int(row[1]), float(row[2])), float(row[3])

    def _lease_row(self, conn: Conn, flow_uuid: str) -> tuple[Any, ...] | None:
        """``(owner, epoch, expires_at, database now)`` of the session's lease, or None."""
        row: tuple[Any, ...] | None = conn.execute(
            f"SELECT owner, epoch, expires_at, {self._now_sql} FROM session_leases "
            "WHERE flow_uuid = ?",
            (flow_uuid,),
        ).fetchone()
        return row

    def _fence(self, conn: Conn, flow_uuid: str, epoch: int | None) -> None:
        """Raise :class:`FencedWriteError` unless this write may change ``flow_uuid``.

        ``epoch`` given (a fenced writer): it must be the session's epoch, the lease not
        released and unexpired at the database's clock. ``epoch`` None (unfenced): the
        session must have no live lease.
        """
        row = self._lease_row(conn, flow_uuid)
        if row is None:
            if epoch is not None:  # a lease of another database, or its row was deleted
                raise FencedWriteError(flow_uuid, epoch=epoch, current=0)
            return
        holder, current, expires_at, now = str(row[0]), int(row[1]), float(row[2]), float(row[3])
        if epoch is None:
            if holder and expires_at > now:
                raise FencedWriteError(
                    flow_uuid,
                    epoch=None,
                    current=current,
                    reason="unfenced",
                    detail=f" by {holder!r} for another {expires_at - now:.1f} s",
                )
            return
        if current != epoch:
            raise FencedWriteError(flow_uuid, epoch=epoch, current=current)
        if not holder:
            raise FencedWriteError(flow_uuid, epoch=epoch, current=current, reason="released")
        if expires_at <= now:
            raise FencedWriteError(
                flow_uuid,
                epoch=epoch,
                current=current,
                reason="expired",
                detail=f" {now - expires_at:.1f} s ago (database clock)",
            )

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
            row, now = self._lease_now(conn, flow_uuid)
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
        """Extend ``lease`` by ``ttl`` seconds from now (the database's clock).

        Raises:
            FencedWriteError: the lease was taken over (its epoch moved on), released, or
                expired (acquire it again: the same epoch if nobody took it since).
        """
        if not isinstance(lease, SessionLease):
            raise TypeError("lease must be a SessionLease")
        _check_lease_args(lease.owner, ttl)
        renewed: SessionLease | None = None

        def write(conn: Conn) -> None:
            nonlocal renewed
            self._lock_session(conn, lease.session_id)
            self._fence(conn, lease.session_id, lease.epoch)
            expires_at = self._lease_now(conn, lease.session_id)[1] + ttl
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
        row = self._read(lambda c: self._lease_now(c, flow_uuid)[0])
        if row is None:
            return None
        return SessionLease(SessionId(flow_uuid), row[0], row[1], row[2])

    def fenced(self, lease: SessionLease) -> FencedPersistence:
        """This backend, every save of ``lease.session_id`` checked against its epoch."""
        if not isinstance(lease, SessionLease):
            raise TypeError("lease must be a SessionLease")
        return FencedPersistence(self, lease)


class FencedPersistence:
    """A complete :class:`~voxflow.flow.persistence.FlowPersistence` whose every write of
    the leased session carries the lease's epoch.

    Give it to the flow of a leased session (``MyFlow(persistence=store.fenced(lease))``):
    once the lease is taken over, released or expired (the database's clock), each write
    of that session (full, incremental and delta saves, paused feedback) raises
    :class:`~voxflow.errors.FencedWriteError` and writes nothing. Other sessions are
    written unfenced (refused while another owner leases them). Reads (``load_state``,
    ``load_state_revision``, ``revision``, ``history``, paused feedback) and ``close``
    go straight to the backend.
    """

    def __init__(self, store: RowStore, lease: SessionLease) -> None:
        self.store = store
        self.lease = lease

    def _epoch(self, flow_uuid: str) -> int | None:
        return self.lease.epoch if flow_uuid == self.lease.session_id else None

    # -- writes: fenced ----------------------------------------------------------------

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

    def save_state_delta(
        self,
        flow_uuid: str,
        method_name: str,
        snapshot: dict[str, Any],
        appended: Mapping[str, Sequence[Any]],
        counts: Mapping[str, int],
    ) -> bool:
        return self.store.save_state_delta(
            flow_uuid, method_name, snapshot, appended, counts, epoch=self._epoch(flow_uuid)
        )

    def save_pending_feedback(
        self, flow_uuid: str, context: dict[str, Any], state_data: dict[str, Any]
    ) -> None:
        self.store.save_pending_feedback(
            flow_uuid, context, state_data, epoch=self._epoch(flow_uuid)
        )

    def clear_pending_feedback(self, flow_uuid: str) -> None:
        self.store.clear_pending_feedback(flow_uuid, epoch=self._epoch(flow_uuid))

    # -- reads and the rest: the backend's ---------------------------------------------

    def load_state(self, flow_uuid: str) -> dict[str, Any] | None:
        return self.store.load_state(flow_uuid)

    def load_state_revision(self, flow_uuid: str) -> tuple[dict[str, Any], int] | None:
        return self.store.load_state_revision(flow_uuid)

    def revision(self, flow_uuid: str) -> int:
        return self.store.revision(flow_uuid)

    def history(self, flow_uuid: str) -> list[tuple[int, str, dict[str, Any]]]:
        return self.store.history(flow_uuid)

    def load_pending_feedback(self, flow_uuid: str) -> tuple[dict[str, Any], dict[str, Any]] | None:
        return self.store.load_pending_feedback(flow_uuid)

    def check_writable(self) -> None:
        check = getattr(self.store, "check_writable", None)
        if check is not None:
            check()

    def close(self) -> None:
        """Close the backend's connections (idempotent; the next call reopens them)."""
        self.store.close()

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
