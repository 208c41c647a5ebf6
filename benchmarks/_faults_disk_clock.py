"""``faults.py``'s store faults beyond the database (``--only disk clock``): the SQLite
store's disk full for a while, and the store's lease clock jumping an hour forward, then
two back.
"""

from __future__ import annotations

import asyncio
import os
import shutil
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


async def disk_full(engines: Any, full_for: float = 3.0, pg_bin: Path | None = None
                    ) -> CallResult | str:
    """The call through a full disk, its sessions on SQLite, or (``pg_bin``: the
    directory of ``initdb``/``pg_ctl``) on a PostgreSQL of its own whose data directory is
    on the small disk (64 MB: its cluster takes ~40); or why no small disk could be
    mounted, or the server could not start there."""
    from voxflow.flow.persistence import SQLiteFlowPersistence
    from voxflow.flow.postgres import PostgresFlowPersistence

    with tempfile.TemporaryDirectory(prefix="voxflow-faults-") as tmp:
        disk = Path(tmp) / "disk"
        disk.mkdir()
        size = "4m" if pg_bin is None else "64m"
        mounted = await asyncio.to_thread(
            subprocess.run, ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs",
                             str(disk)], capture_output=True, text=True, check=False)
        if mounted.returncode != 0:
            why = (mounted.stderr or mounted.stdout).strip()
            return f"not run: mount -t tmpfs failed: {why}"
        pg: OwnPostgres | None = None
        if pg_bin is not None:
            pg = OwnPostgres(Path(tmp), pg_bin)  # (its socket and log off the small disk)
            pg.data = disk / "data"
            if os.geteuid() == 0:
                shutil.chown(disk, "postgres")
            try:
                await asyncio.to_thread(pg.init)
            except subprocess.CalledProcessError as exc:
                await asyncio.to_thread(subprocess.run, ["umount", "-l", str(disk)],
                                        check=False)
                return f"not run: PostgreSQL did not start on the small disk: {exc.stderr}"
        store = (SQLiteFlowPersistence(disk / "calls.db") if pg is None
                 else PostgresFlowPersistence(pg.url))
        result = CallResult()
        try:
            async with serving(engines, store, lease_seconds=1.5) as (server, calls):
                caller = await asked_before(engines, server, result)
                filler = await asyncio.to_thread(_fill, disk)
                full_at = time.monotonic()
                if pg is not None:  # its next WAL record needs a new segment: the disk
                    await asyncio.to_thread(_switch_wal, pg.url)  # (a busy server's case)
                caller.ask()  # answered on the full disk
                if (ms := await caller.answered()) is not None:
                    result.during_ms.append(ms)
                await asyncio.sleep(max(0.0, full_for - (time.monotonic() - full_at)))
                await asyncio.to_thread(filler.unlink)
                if pg is not None and not await asyncio.to_thread(_answers, pg.url, 5.0):
                    # (it stopped on the full disk: an operator starts it again)
                    await asyncio.to_thread(pg.start)
                    result.server_log = "; started again by the script"
                return await finish(result, caller, server, store, calls[0])
        finally:
            store.close()
            if pg is not None:
                await asyncio.to_thread(pg.close)
                result.server_log = _disk_errors(Path(tmp) / "log") + result.server_log
            await asyncio.to_thread(subprocess.run, ["umount", "-l", str(disk)], check=False)


def _answers(url: str, within: float) -> bool:
    """Whether the server at ``url`` answers (again) within ``within`` seconds."""
    import psycopg

    deadline = time.monotonic() + within
    while True:
        try:
            with psycopg.connect(url, connect_timeout=1) as conn:
                conn.execute("SELECT 1")
            return True
        except psycopg.Error:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.2)


def _switch_wal(url: str) -> None:
    """Close the server's current WAL segment: its next write needs a new 16 MB one (on a
    busy server the segment fills; here the call's few writes fit the current one, and a
    3 s full disk would go unfelt)."""
    import psycopg

    with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
        conn.execute("SELECT pg_switch_wal()")


def _disk_errors(log: Path) -> str:
    """What the server said of the full disk (its first such line, and whether it
    crashed: a PANIC), from its log."""
    lines = [line for line in log.read_text(errors="replace").splitlines()
             if "No space left" in line or "PANIC" in line or "terminated by signal" in line]
    if not lines:
        return "the server logged no error"
    panics = sum("PANIC" in line for line in lines)
    first = " ".join(lines[0].split()[3:])[:160]
    return f"{len(lines)} server line(s) on the full disk, {panics} PANIC; first: {first}"


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
