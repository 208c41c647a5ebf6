"""``faults.py``'s store faults beyond the database (``--only disk clock``): the SQLite
store's disk full for a while, and the store's lease clock jumping an hour forward, then
two back; on a WebRTC call, or (``simulated_*``) one through the simulated transport.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from _faults_common import CallResult, OwnPostgres, asked_before, finish, serving

__all__ = ["clock_jump", "disk_full", "simulated_clock_jump", "simulated_disk_full"]


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


class _SmallDisk:
    """A store on a small tmpfs (SQLite, or a PostgreSQL of its own whose data directory
    is there), filled to the last byte and freed again."""

    def __init__(self, folder: Path, pg: OwnPostgres | None) -> None:
        self.folder = folder
        self.pg = pg
        self.store: Any = None
        self.server_log = ""
        self._filler: Path | None = None
        self._full_at = 0.0

    async def fill(self) -> None:
        self._filler = await asyncio.to_thread(_fill, self.folder)
        self._full_at = time.monotonic()
        if self.pg is not None:  # its next WAL record needs a new segment: the disk
            await asyncio.to_thread(_switch_wal, self.pg.url)  # (a busy server's case)

    async def free(self, full_for: float) -> None:
        """Free the disk ``full_for`` s after it filled (started again if the server
        stopped on the full disk, as an operator would)."""
        await asyncio.sleep(max(0.0, full_for - (time.monotonic() - self._full_at)))
        if self._filler is not None:
            await asyncio.to_thread(self._filler.unlink)
        if self.pg is not None and not await asyncio.to_thread(_answers, self.pg.url, 5.0):
            await asyncio.to_thread(self.pg.start)
            self.server_log = "; started again by the script"

    async def full_for(self, seconds: float) -> None:
        await self.fill()
        await self.free(seconds)


class _NotRun(Exception):
    """Why no small disk could be mounted, or the server could not start there."""


@contextlib.asynccontextmanager
async def _small_disk(pg_bin: Path | None) -> AsyncIterator[_SmallDisk]:
    """A small disk (tmpfs: 4 MB, or 64 MB for a PostgreSQL, whose cluster takes ~40) and
    the store on it, unmounted afterwards; :class:`_NotRun` when it cannot be had."""
    from voxflow.flow.persistence import SQLiteFlowPersistence
    from voxflow.flow.postgres import PostgresFlowPersistence

    with tempfile.TemporaryDirectory(prefix="voxflow-faults-") as tmp:
        folder = Path(tmp) / "disk"
        folder.mkdir()
        size = "4m" if pg_bin is None else "64m"
        mounted = await asyncio.to_thread(
            subprocess.run, ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs",
                             str(folder)], capture_output=True, text=True, check=False)
        if mounted.returncode != 0:
            why = (mounted.stderr or mounted.stdout).strip()
            raise _NotRun(f"not run: mount -t tmpfs failed: {why}")
        pg: OwnPostgres | None = None
        if pg_bin is not None:
            pg = OwnPostgres(Path(tmp), pg_bin)  # (its socket and log off the small disk)
            pg.data = folder / "data"
            if os.geteuid() == 0:
                shutil.chown(folder, "postgres")
            try:
                await asyncio.to_thread(pg.init)
            except subprocess.CalledProcessError as exc:
                await asyncio.to_thread(subprocess.run, ["umount", "-l", str(folder)],
                                        check=False)
                raise _NotRun("not run: PostgreSQL did not start on the small disk: "
                              f"{exc.stderr}") from None
        disk = _SmallDisk(folder, pg)
        disk.store = (SQLiteFlowPersistence(folder / "calls.db") if pg is None
                      else PostgresFlowPersistence(pg.url))
        try:
            yield disk
        finally:
            disk.store.close()
            if pg is not None:
                await asyncio.to_thread(pg.close)
                disk.server_log = _disk_errors(Path(tmp) / "log") + disk.server_log
            await asyncio.to_thread(subprocess.run, ["umount", "-l", str(folder)],
                                    check=False)


async def disk_full(engines: Any, full_for: float = 3.0, pg_bin: Path | None = None
                    ) -> CallResult | str:
    """The call through a full disk, its sessions on SQLite, or (``pg_bin``: the
    directory of ``initdb``/``pg_ctl``) on a PostgreSQL of its own whose data directory is
    on the small disk; or why the small disk could not be had."""
    result = CallResult()
    try:
        async with _small_disk(pg_bin) as disk, serving(
                engines, disk.store, lease_seconds=1.5) as (server, calls):
            caller = await asked_before(engines, server, result)
            await disk.fill()
            caller.ask()  # answered on the full disk
            if (ms := await caller.answered()) is not None:
                result.during_ms.append(ms)
            await disk.free(full_for)
            await finish(result, caller, server, disk.store, calls[0])
    except _NotRun as exc:
        return str(exc)
    result.server_log = disk.server_log
    return result


async def simulated_disk_full(engines: Any, full_for: float = 3.0,
                              pg_bin: Path | None = None) -> CallResult | str:
    """The same through the simulated transport (``run_call``, the example assistant):
    two clean questions, the disk filled as the third begins and freed ``full_for`` s
    later, a fourth after."""
    from _faults_simulated import simulated_call

    from voxflow.examples.assistant import assistant_class

    try:
        async with _small_disk(pg_bin) as disk:
            flow = assistant_class(None)(persistence=disk.store)
            result, _ = await simulated_call(
                engines, flow, disk.store, 4,
                lambda n: disk.full_for(full_for) if n == 3 else None, (3,))
    except _NotRun as exc:
        return str(exc)
    result.server_log = disk.server_log
    return result


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


_JUMPS = (3600.0, -3600.0)  # s: an hour forward, then (from there) two back


def _jumping(tmp: Path, pg: OwnPostgres | None) -> Any:
    return _jumping_sqlite(tmp / "calls.db") if pg is None else _jumping_postgres(pg.url)


async def clock_jump(engines: Any, pg: OwnPostgres | None = None) -> CallResult:
    """The call through lease-clock jumps, its sessions on SQLite, or on ``pg``."""
    result = CallResult()
    with tempfile.TemporaryDirectory(prefix="voxflow-faults-") as tmp:
        store = _jumping(Path(tmp), pg)
        try:
            async with serving(engines, store, lease_seconds=1.5) as (server, calls):
                caller = await asked_before(engines, server, result)
                for jump in _JUMPS:
                    store.jump = jump
                    caller.ask()
                    if (ms := await caller.answered()) is not None:
                        result.during_ms.append(ms)
                    await asyncio.sleep(1.0)
                return await finish(result, caller, server, store, calls[0])
        finally:
            store.close()


async def simulated_clock_jump(engines: Any, pg: OwnPostgres | None = None) -> CallResult:
    """The same through the simulated transport (``run_call``, the example assistant):
    two clean questions, the jumps as the third and the fourth begin, a fifth after."""
    from _faults_simulated import simulated_call

    from voxflow.examples.assistant import assistant_class

    def at_question(n: int) -> None:
        if n in (3, 4):
            store.jump = _JUMPS[n - 3]

    with tempfile.TemporaryDirectory(prefix="voxflow-faults-") as tmp:
        store = _jumping(Path(tmp), pg)
        try:
            flow = assistant_class(None)(persistence=store)
            result, _ = await simulated_call(engines, flow, store, 5, at_question, (3, 4))
            return result
        finally:
            store.close()
