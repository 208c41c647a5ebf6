"""Session leases and fencing: one writer a session, and a zombie's writes refused.

A lease makes one owner (a worker) the writer of a session until ``expires_at``; taking
over a session from another owner (its lease expired or was released) bumps the
session's **epoch**. Every write of a session (full save, incremental save, delta,
paused feedback) calls :func:`fence` on its lease row in the write's own transaction,
which raises :class:`~voxflow.errors.FencedWriteError`, so the write stores nothing,
when:

* it is made through :class:`FencedPersistence` (``store.fenced(lease)``) and its epoch
  moved on (``"taken over"``), the lease was released (``"released"``) or it expired
  (``"expired"``, even if nobody took it yet): a paused ("zombie") worker can never
  write once its lease is gone;
* it is made without a lease (an unfenced store) while another owner holds a live lease
  on the session (``"unfenced"``): **a session with a live lease is written only through
  ``store.fenced(lease)``**. A session without a lease row, or whose lease expired or was
  released, takes unfenced writes (the revision still checks them).

Expiry is judged by the **database's clock**, never a worker's: ``expires_at`` is
stored, and compared, in the database server's Unix seconds (``now_sql``, an SQL
expression each backend supplies: SQLite's ``julianday('now')``, the machine of the
file; PostgreSQL's ``clock_timestamp()``, read after the session lock), so workers with
skewed clocks agree on who holds a session.

The functions here run inside a write transaction the backend opened, with the session
already locked (:class:`~voxflow.flow._row_store.RowStore` does both); they speak
DB-API with ``?`` placeholders (:class:`~voxflow.flow._item_rows.Conn`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from voxflow.errors import FencedWriteError, SessionLeaseError
from voxflow.flow._item_rows import Conn, StateChanges
from voxflow.ids import SessionId
from voxflow.storable import check_text

__all__ = [
    "EpochStore",
    "FencedPersistence",
    "SessionLease",
    "WritableCheck",
    "check_lease_args",
    "extend",
    "fence",
    "grant",
    "lease_now",
    "release",
]


@dataclasses.dataclass(frozen=True, slots=True)
class SessionLease:
    """A granted lease: ``owner`` writes ``session_id`` as ``epoch`` until ``expires_at``
    (Unix seconds of the database's clock, not this process's); ``taken_over``: granted
    over another owner's expired lease (not released: that owner died or went silent)."""

    session_id: SessionId
    owner: str
    epoch: int
    expires_at: float
    taken_over: bool = False


# -- the lease table, inside a backend's transaction -------------------------------------


def lease_now(
    conn: Conn, flow_uuid: str, now_sql: str
) -> tuple[tuple[str, int, float] | None, float]:
    """The session's lease row ``(owner, epoch, expires_at)`` (or None) and the
    database's clock, in one query when the row exists."""
    row = _lease_row(conn, flow_uuid, now_sql)
    if row is None:
        now = conn.execute(f"SELECT {now_sql}").fetchone()
        return None, float(now[0])
    return (str(row[0]), int(row[1]), float(row[2])), float(row[3])


def _lease_row(conn: Conn, flow_uuid: str, now_sql: str) -> tuple[Any, ...] | None:
    """``(owner, epoch, expires_at, database now)`` of the session's lease, or None."""
    row: tuple[Any, ...] | None = conn.execute(
        f"SELECT owner, epoch, expires_at, {now_sql} FROM session_leases WHERE flow_uuid = ?",
        (flow_uuid,),
    ).fetchone()
    return row


def fence(conn: Conn, flow_uuid: str, epoch: int | None, now_sql: str) -> None:
    """Raise :class:`FencedWriteError` unless this write may change ``flow_uuid``.

    ``epoch`` given (a fenced writer): it must be the session's epoch, the lease not
    released and unexpired at the database's clock. ``epoch`` None (unfenced): the
    session must have no live lease.
    """
    row = _lease_row(conn, flow_uuid, now_sql)
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


def grant(
    conn: Conn, flow_uuid: str, owner: str, ttl: float, now_sql: str, *,
    take_from: str | None = None,
) -> SessionLease:
    """Make ``owner`` the writer of ``flow_uuid`` for ``ttl`` seconds (see
    :meth:`~voxflow.flow._row_store.RowStore.acquire_lease`); ``take_from``: an owner
    known to be dead, whose lease is taken over even while it is live.

    Raises:
        SessionLeaseError: another owner (not ``take_from``) holds an unexpired lease.
    """
    row, now = lease_now(conn, flow_uuid, now_sql)
    if row is None:
        epoch = 1
        conn.execute(
            "INSERT INTO session_leases (flow_uuid, owner, epoch, expires_at) VALUES (?, ?, ?, ?)",
            (flow_uuid, owner, epoch, now + ttl),
        )
    else:
        holder, epoch, expires_at = row
        if holder not in ("", owner, take_from) and expires_at > now:
            raise SessionLeaseError(
                f"session {flow_uuid!r} is leased to {holder!r} for another "
                f"{expires_at - now:.1f} s (epoch {epoch})",
                session_id=flow_uuid,
                holder=holder,
            )
        if holder != owner:
            epoch += 1  # a takeover: every save of the previous owner is fenced
        conn.execute(
            "UPDATE session_leases SET owner = ?, epoch = ?, expires_at = ? WHERE flow_uuid = ?",
            (owner, epoch, now + ttl, flow_uuid),
        )
        return SessionLease(SessionId(flow_uuid), owner, epoch, now + ttl,
                            taken_over=holder not in ("", owner))
    return SessionLease(SessionId(flow_uuid), owner, epoch, now + ttl)


def extend(
    conn: Conn, lease: SessionLease, ttl: float, now_sql: str, *, reclaim: bool = False
) -> SessionLease:
    """``lease`` extended by ``ttl`` seconds from the database's now.

    ``reclaim``: an expired lease whose row still names this owner at this epoch (nobody
    took the session since, so nobody else wrote it) is extended too: an owner cut off
    from the database for longer than its lease goes on where it was.

    Raises:
        FencedWriteError: the lease was taken over, released or (without ``reclaim``)
            expired.
    """
    row = _lease_row(conn, lease.session_id, now_sql) if reclaim else None
    if row is None or (str(row[0]), int(row[1])) != (lease.owner, lease.epoch):
        fence(conn, lease.session_id, lease.epoch, now_sql)
    expires_at = lease_now(conn, lease.session_id, now_sql)[1] + ttl
    conn.execute(
        "UPDATE session_leases SET expires_at = ? WHERE flow_uuid = ?",
        (expires_at, lease.session_id),
    )
    return dataclasses.replace(lease, expires_at=expires_at)


def release(conn: Conn, lease: SessionLease) -> None:
    """Give ``lease`` up (a lease already taken over is left alone)."""
    conn.execute(
        "UPDATE session_leases SET owner = '', expires_at = 0 "
        "WHERE flow_uuid = ? AND owner = ? AND epoch = ?",
        (lease.session_id, lease.owner, lease.epoch),
    )


def check_lease_args(owner: object, ttl: object, take_from: object = None) -> None:
    if not isinstance(owner, str) or not owner:
        raise ValueError("owner must be a non-empty string")
    check_text(owner, "the lease owner")
    if take_from is not None and (not isinstance(take_from, str) or not take_from):
        raise ValueError("take_from must be None or a non-empty string (an owner)")
    if isinstance(ttl, bool) or not isinstance(ttl, int | float) or not 0 < ttl <= 86400:
        raise ValueError("ttl must be a number of seconds in (0, 86400]")


# -- the fenced view of a backend --------------------------------------------------------


@runtime_checkable
class WritableCheck(Protocol):
    """A backend that proves it can be written before a flow's first save (SQLite,
    PostgreSQL: every :class:`~voxflow.flow._row_store.RowStore`, and a fenced view of
    one). A backend without it has nothing to prove beforehand: its first save tells."""

    def check_writable(self) -> None:
        """Raise :class:`~voxflow.errors.PersistenceUnavailableError` (naming the store
        and the fix) unless it can be written."""
        ...


class EpochStore(Protocol):
    """A backend whose writes take the lease ``epoch`` they are fenced by (None: unfenced):
    what :class:`FencedPersistence` wraps (:class:`~voxflow.flow._row_store.RowStore`)."""

    def save_full_state(
        self,
        flow_uuid: str,
        method_name: str,
        state_data: dict[str, Any],
        *,
        expected_revision: int | None = None,
        epoch: int | None = None,
    ) -> int: ...

    def save_state_changes(
        self, flow_uuid: str, method_name: str, changes: StateChanges, *, epoch: int | None = None
    ) -> int | None: ...

    def save_state_delta(
        self,
        flow_uuid: str,
        method_name: str,
        snapshot: dict[str, Any],
        appended: Mapping[str, Sequence[Any]],
        counts: Mapping[str, int],
        *,
        epoch: int | None = None,
    ) -> bool: ...

    def save_pending_feedback(
        self,
        flow_uuid: str,
        context: dict[str, Any],
        state_data: dict[str, Any],
        *,
        epoch: int | None = None,
    ) -> None: ...

    def clear_pending_feedback(self, flow_uuid: str, *, epoch: int | None = None) -> None: ...

    def load_state(self, flow_uuid: str) -> dict[str, Any] | None: ...

    def load_state_revision(self, flow_uuid: str) -> tuple[dict[str, Any], int] | None: ...

    def revision(self, flow_uuid: str) -> int: ...

    def history(self, flow_uuid: str) -> list[tuple[int, str, dict[str, Any]]]: ...

    def load_pending_feedback(
        self, flow_uuid: str
    ) -> tuple[dict[str, Any], dict[str, Any]] | None: ...

    def close(self) -> None: ...


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

    def __init__(self, store: EpochStore, lease: SessionLease) -> None:
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
        if isinstance(self.store, WritableCheck):  # else nothing to prove (see there)
            self.store.check_writable()

    def close(self) -> None:
        """Close the backend's connections (idempotent; the next call reopens them)."""
        self.store.close()

    def __repr__(self) -> str:
        return f"FencedPersistence({self.store!r}, epoch={self.lease.epoch})"
