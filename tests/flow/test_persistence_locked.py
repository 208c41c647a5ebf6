"""A SQLite session store locked by another writer past its busy timeout (issue 29).

Another connection (or process) holding the file's write lock made a save fail with a
raw ``sqlite3.OperationalError: database is locked``, which no caller took for the store
being unavailable. It is a :class:`~voxflow.errors.StoreLockedError` (a
``PersistenceUnavailableError``) naming the file and the fix, and the same save goes
through once the lock is released. Real SQLite, a real second connection.
"""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

import pytest

from voxflow import SQLiteFlowPersistence
from voxflow.errors import PersistenceUnavailableError, StoreLockedError

pytestmark = pytest.mark.unit


def test_a_store_locked_by_another_writer_is_unavailable_and_saves_once_released(
    tmp_path: Path,
) -> None:
    path = tmp_path / "states.db"
    store = SQLiteFlowPersistence(path, busy_timeout=0.2)
    store.save_state("s1", "first", {"id": "s1", "n": 1})
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as other:
        other.execute("BEGIN IMMEDIATE")  # the other writer holds the write lock
        with pytest.raises(StoreLockedError) as caught:
            store.save_state("s1", "second", {"id": "s1", "n": 2})
        assert isinstance(caught.value, PersistenceUnavailableError)
        assert caught.value.path == str(path)
        message = str(caught.value)
        assert str(path) in message and "locked by another writer" in message
        assert "0.2 s busy timeout" in message and "lock is released" in caught.value.fix
        assert store.load_state("s1") == {"id": "s1", "n": 1}  # nothing half-written
        other.execute("COMMIT")
    store.save_state("s1", "second", {"id": "s1", "n": 2})
    assert store.load_state("s1") == {"id": "s1", "n": 2}
    store.close()


def test_a_store_opened_while_another_writer_holds_the_lock_says_so(tmp_path: Path) -> None:
    path = tmp_path / "states.db"
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as other:
        other.execute("BEGIN IMMEDIATE")  # (another process creating the file, in a write)
        store = SQLiteFlowPersistence(path, busy_timeout=0.2)
        with pytest.raises(StoreLockedError) as caught:
            store.check_writable()
        assert str(caught.value).count(str(path)) == 1  # (not wrapped twice)
        other.execute("COMMIT")
    store.check_writable()
    store.save_state("s1", "first", {"id": "s1"})
    assert store.load_state("s1") == {"id": "s1"}
    store.close()


def test_a_busy_timeout_must_be_a_positive_number(tmp_path: Path) -> None:
    for bad, error in ((0, ValueError), (-1.0, ValueError), (float("nan"), ValueError),
                       (True, TypeError), ("1", TypeError)):
        with pytest.raises(error, match="busy_timeout"):
            SQLiteFlowPersistence(tmp_path / "x.db", busy_timeout=bad)  # type: ignore[arg-type]
