"""What the SQLite and PostgreSQL backends share: the item-row store, revisions, leases.

:class:`RowStore` holds every operation of a persistence backend written once against
a DB-API connection with ``?`` placeholders (:class:`~voxflow.flow._item_rows.Conn`);
a backend supplies the connection handling (``_write``, ``_read``, ``_lock_session``).
Both backends therefore store the same rows (see :mod:`voxflow.flow._item_rows`), check
the same **revision** (a per-session integer stored with the snapshot row, checked and
bumped in the save's transaction) and the same **lease epoch**.

**Leases and fencing** (:mod:`voxflow.flow._leases`): every write of a session checks
its lease row in the write's own transaction; :meth:`RowStore.acquire_lease` and its
siblings run the lease operations in the backend's transactions, and
:meth:`RowStore.fenced` is the store seen through one lease.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

from voxflow.errors import PersistenceConflictError
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
from voxflow.flow._leases import (
    FencedPersistence,
    SessionLease,
    check_lease_args,
    extend,
    fence,
    grant,
    lease_now,
    release,
)
from voxflow.ids import SessionId
from voxflow.storable import check_text

__all__ = ["RowStore"]

logger = logging.getLogger("voxflow.flow.persistence")

T = TypeVar("T")


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

    def check_writable(self) -> None:
        """Raise :class:`~voxflow.errors.PersistenceUnavailableError` (naming the store
        and the fix) unless the database can be written."""
        raise NotImplementedError

    def _lock_session(self, conn: Conn, flow_uuid: str) -> None:
        """Serialise this transaction with other writers of ``flow_uuid`` (if needed)."""

    def _note_revision(self, flow_uuid: str, revision: int) -> None:
        """The running write transaction stores ``revision`` of ``flow_uuid`` (a backend
        whose commit can be left unknown keeps it, see :meth:`_own_revision`)."""

    def _own_revision(self, conn: Conn, flow_uuid: str, stored: int) -> bool:
        """Whether the stored revision ``stored`` of ``flow_uuid`` is this store's own
        write whose commit was left unknown (its connection broke during it) and that
        was made: a save that expected the revision before it is not in conflict."""
        return False

    def _checked_revision(self, conn: Conn, flow_uuid: str, row: tuple[Any, ...] | None,
                          expected: int | None) -> None:
        """:func:`_check_revision`, where the stored revision may also be this store's
        own uncertain write on top of ``expected`` (:meth:`_own_revision`)."""
        stored = 0 if row is None else int(row[0])
        if (expected is not None and stored == expected + 1
                and self._own_revision(conn, flow_uuid, stored)):
            logger.info("%s: revision %d was this store's own write (its commit was "
                        "unknown)", flow_uuid, stored)
            return
        _check_revision(flow_uuid, row, expected)

    def close(self) -> None:
        """Release the backend's connections (idempotent; the next call reopens them)."""

    # -- saves -----------------------------------------------------------------------

    @staticmethod
    def _check_uuid(flow_uuid: object) -> None:
        """A session id every backend can store (UnstorableTextError: a NUL, a lone
        surrogate; PostgreSQL refused them mid-write, SQLite kept them)."""
        if not isinstance(flow_uuid, str) or not flow_uuid:
            raise ValueError("flow_uuid must be a non-empty string")
        check_text(flow_uuid, "the session id")

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
        _check_method(method_name)
        _check_count("expected_revision", expected_revision)
        _check_count("epoch", epoch)
        if not isinstance(state_data, dict):
            raise TypeError("state_data must be a dict")
        snapshot, lists, records = split_full(state_data)
        for field, values in records.items():
            for key in values:
                check_text(key, f"a record key of {field}")
        payload = json.dumps(snapshot)
        now = datetime.now(UTC).isoformat()
        version = 0

        def write(conn: Conn) -> None:
            nonlocal version
            self._lock_session(conn, flow_uuid)
            fence(conn, flow_uuid, epoch, self._now_sql)
            row = self._latest_row(conn, flow_uuid)
            self._checked_revision(conn, flow_uuid, row, expected_revision)
            write_full_rows(conn, flow_uuid, lists, records)
            version = self._replace_snapshot(conn, flow_uuid, method_name, now, payload, row)
            self._note_revision(flow_uuid, version)

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
        _check_method(method_name)
        check_changes(changes)
        _check_count("epoch", epoch)
        now = datetime.now(UTC).isoformat()
        version: int | None = None

        def write(conn: Conn) -> None:
            nonlocal version
            self._lock_session(conn, flow_uuid)
            fence(conn, flow_uuid, epoch, self._now_sql)
            row = self._latest_row(conn, flow_uuid)
            if changes.base_version is not None:
                _check_revision(flow_uuid, row, changes.base_version)
            reason = stale_reason(None if row is None else (row[0], row[3]), changes)
            if reason is not None:
                logger.debug("%s: incremental save refused, %s", flow_uuid, reason)
                return
            payload = write_change_rows(conn, flow_uuid, changes)
            version = self._replace_snapshot(conn, flow_uuid, method_name, now, payload, row)
            self._note_revision(flow_uuid, version)

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
            fence(conn, flow_uuid, epoch, self._now_sql)
            conn.execute(sql, params)

        return run

    # -- leases (see voxflow.flow._leases) -------------------------------------------

    def acquire_lease(
        self, flow_uuid: str, owner: str, *, ttl: float = 30.0, take_from: str | None = None
    ) -> SessionLease:
        """Make ``owner`` the writer of ``flow_uuid`` for ``ttl`` seconds.

        Free, expired or released: granted, with the next epoch (the same epoch when
        ``owner`` already holds it, which renews it).

        ``take_from``: an owner the caller knows to be dead (a call worker whose heartbeat
        stopped): its lease is taken over even while it is live, with the next epoch, so
        that every write it might still make is refused (the fence). A lease held by any
        other owner is not.

        Raises:
            SessionLeaseError: another owner holds an unexpired lease (named, with its
                expiry).
        """
        self._check_uuid(flow_uuid)
        check_lease_args(owner, ttl, take_from)
        return self._leased(
            flow_uuid,
            lambda conn: grant(conn, flow_uuid, owner, ttl, self._now_sql, take_from=take_from),
        )

    def renew_lease(
        self, lease: SessionLease, *, ttl: float = 30.0, reclaim: bool = False
    ) -> SessionLease:
        """Extend ``lease`` by ``ttl`` seconds from now (the database's clock).

        Args:
            reclaim: extend it even if it expired, as long as nobody took the session
                since (its row still names this owner at this epoch): what an owner that
                could not reach the database for longer than its lease does.

        Raises:
            FencedWriteError: the lease was taken over (its epoch moved on), released, or
                (without ``reclaim``) expired (acquire it again: the same epoch if nobody
                took it since).
        """
        if not isinstance(lease, SessionLease):
            raise TypeError("lease must be a SessionLease")
        check_lease_args(lease.owner, ttl)
        return self._leased(lease.session_id, lambda conn: extend(
            conn, lease, ttl, self._now_sql, reclaim=reclaim))

    def _leased(self, flow_uuid: str, fn: Callable[[Conn], SessionLease]) -> SessionLease:
        """``fn``'s lease, written in one transaction with ``flow_uuid`` locked."""
        leases: list[SessionLease] = []

        def write(conn: Conn) -> None:
            self._lock_session(conn, flow_uuid)
            leases.append(fn(conn))

        self._write(write)
        return leases[0]

    def release_lease(self, lease: SessionLease) -> None:
        """Give ``lease`` up (idempotent; a lease already taken over is left alone)."""
        if not isinstance(lease, SessionLease):
            raise TypeError("lease must be a SessionLease")
        self._write(lambda conn: release(conn, lease))

    def lease_of(self, flow_uuid: str) -> SessionLease | None:
        """The session's current lease row (owner ``""`` once released), or None."""
        self._check_uuid(flow_uuid)
        row = self._read(lambda c: lease_now(c, flow_uuid, self._now_sql)[0])
        if row is None:
            return None
        return SessionLease(SessionId(flow_uuid), row[0], row[1], row[2])

    def fenced(self, lease: SessionLease) -> FencedPersistence:
        """This backend, every save of ``lease.session_id`` checked against its epoch."""
        if not isinstance(lease, SessionLease):
            raise TypeError("lease must be a SessionLease")
        return FencedPersistence(self, lease)


def _check_method(method_name: object) -> None:
    if not isinstance(method_name, str):
        raise TypeError(f"method_name must be a str, got {type(method_name).__name__}")
    check_text(method_name, "the method name")


def _check_count(name: str, value: object) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise ValueError(f"{name} must be a non-negative int or None")


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
