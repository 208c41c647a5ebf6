"""``faults.py``'s store faults beyond the database (``--only disk clock``): the SQLite
store's disk full for a while, and the store's lease clock jumping an hour forward, then
two back.
"""

from __future__ import annotations

import asyncio
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from _faults_common import CallResult, OwnPostgres, asked_before, finish, serving

__all__ = ["clock_jump", "disk_full"]


def _fill(folder: Path) -> Path:
    filler = folder / "filler"
    with open(filler, "wb", buffering=0) as out:
        for block in (b"\0" * 65536, b"\0" * 512, b"\0"):
            try:
                while True:
                    out.write(block)
            except OSError:
                pass
    return filler


async def disk_full(engines: Any, full_for: float = 3.0) -> CallResult | str:
    """The call through a full disk; or why no small disk could be mounted."""
    from voxflow.flow.persistence import SQLiteFlowPersistence

    with tempfile.TemporaryDirectory(prefix="voxflow-faults-") as tmp:
        disk = Path(tmp) / "disk"
        disk.mkdir()
        mounted = await asyncio.to_thread(
            subprocess.run, ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(disk)],
            capture_output=True, text=True, check=False)
        if mounted.returncode != 0:
            why = (mounted.stderr or mounted.stdout).strip()
            return f"not run: mount -t tmpfs failed: {why}"
        store = SQLiteFlowPersistence(disk / "calls.db")
        result = CallResult()
        try:
            async with serving(engines, store, lease_seconds=1.5) as (server, calls):
                caller = await asked_before(engines, server, result)
                filler = await asyncio.to_thread(_fill, disk)
                full_at = time.monotonic()
                caller.ask()  # answered on the full disk
                if (ms := await caller.answered()) is not None:
                    result.during_ms.append(ms)
                await asyncio.sleep(max(0.0, full_for - (time.monotonic() - full_at)))
                await asyncio.to_thread(filler.unlink)
                return await finish(result, caller, server, store, calls[0])
        finally:
            store.close()
            await asyncio.to_thread(subprocess.run, ["umount", "-l", str(disk)], check=False)


def _jumping_sqlite(path: Path) -> Any:
    import sqlite3

    from voxflow.flow.persistence import SQLiteFlowPersistence

    class Jumping(SQLiteFlowPersistence):
        jump = 0.0

        def _connect(self, create: bool) -> sqlite3.Connection | None:
            fresh = self._conn is None
            conn = super()._connect(create)
            if conn is not None and fresh:
                conn.create_function("julianday", -1, lambda *_: (
                    time.time() + self.jump) / 86400.0 + 2440587.5)
            return conn

    return Jumping(path)


def _jumping_postgres(url: str) -> Any:
    from voxflow.flow.postgres import PostgresFlowPersistence

    class Jumping(PostgresFlowPersistence):
        _jump = 0.0

        @property
        def jump(self) -> float:
            return self._jump

        @jump.setter
        def jump(self, seconds: float) -> None:  # the leases' clock: the server's, moved
            self._jump = seconds
            self._now_sql = f"(extract(epoch FROM clock_timestamp())::float8 + {seconds!r})"

    return Jumping(url)


async def clock_jump(engines: Any, pg: OwnPostgres | None = None) -> CallResult:
    """The call through lease-clock jumps, its sessions on SQLite, or on ``pg``."""
    result = CallResult()
    with tempfile.TemporaryDirectory(prefix="voxflow-faults-") as tmp:
        store = (_jumping_sqlite(Path(tmp) / "calls.db") if pg is None
                 else _jumping_postgres(pg.url))
        try:
            async with serving(engines, store, lease_seconds=1.5) as (server, calls):
                caller = await asked_before(engines, server, result)
                for jump in (3600.0, -3600.0):
                    store.jump = jump
                    caller.ask()
                    if (ms := await caller.answered()) is not None:
                        result.during_ms.append(ms)
                    await asyncio.sleep(1.0)
                return await finish(result, caller, server, store, calls[0])
        finally:
            store.close()
