"""Clocks: every timing in voxflow goes through one, so tests control time.

* :class:`MonotonicClock` is the wall clock for real adapters.
* :class:`VirtualClock` is deterministic: time moves only when :meth:`VirtualClock.advance`
  is awaited or, with ``autojump=True``, when nothing is runnable and nobody holds the
  clock (work running in a thread should be wrapped in :meth:`VirtualClock.hold`, so
  virtual time never runs ahead of a busy machine: results never depend on its speed).
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import time
from collections.abc import Iterator
from typing import Protocol, runtime_checkable

__all__ = ["Clock", "MonotonicClock", "VirtualClock"]


@runtime_checkable
class Clock(Protocol):
    """What voxflow needs of time: a reading and a sleep."""

    def now(self) -> float:
        """Seconds on this clock's monotonic scale."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` of this clock's time."""
        ...


class MonotonicClock:
    """The process's monotonic clock (``time.monotonic``) and ``asyncio.sleep``."""

    def now(self) -> float:
        """Seconds from ``time.monotonic()``."""
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        """``asyncio.sleep(seconds)``."""
        await asyncio.sleep(max(0.0, seconds))

    def __repr__(self) -> str:
        return "MonotonicClock()"


class VirtualClock:
    """A deterministic clock whose time moves only when told to.

    Args:
        start: the initial reading.
        autojump: when true, :meth:`run_autojump` (or ``async with clock``) jumps to the
            next sleeper's deadline whenever the event loop has nothing else to do and
            no :meth:`hold` is active.
    """

    # How many loop iterations without activity count as "idle". Each ``sleep(0)`` lets
    # every ready callback run once; a few rounds let chains of awaits settle.
    _IDLE_ROUNDS = 8

    def __init__(self, start: float = 0.0, *, autojump: bool = False) -> None:
        if not isinstance(start, int | float):
            raise TypeError("start must be a number")
        self._now = float(start)
        self._autojump = autojump
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._order = itertools.count()
        self._holds = 0
        self._activity = 0
        self._jumper: asyncio.Task[None] | None = None

    def now(self) -> float:
        """The current virtual time."""
        return self._now

    async def sleep(self, seconds: float) -> None:
        """Wait until virtual time reaches ``now() + seconds``."""
        self._activity += 1
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self._now + seconds, next(self._order), fut))
        await fut

    async def advance(self, seconds: float) -> None:
        """Move time forward by ``seconds``, waking each sleeper at its own deadline."""
        if seconds < 0:
            raise ValueError("seconds must be >= 0")
        target = self._now + seconds
        while self._sleepers and self._sleepers[0][0] <= target:
            deadline, _, fut = heapq.heappop(self._sleepers)
            self._now = max(self._now, deadline)
            if not fut.done():
                fut.set_result(None)
            await self._settle()
        self._now = target

    @contextlib.contextmanager
    def hold(self) -> Iterator[None]:
        """Keep autojump from moving time while the block runs (e.g. inference in a thread)."""
        self._holds += 1
        self._activity += 1
        try:
            yield
        finally:
            self._holds -= 1
            self._activity += 1

    def touch(self) -> None:
        """Record activity, so autojump waits one more idle period before jumping."""
        self._activity += 1

    async def _settle(self) -> None:
        for _ in range(self._IDLE_ROUNDS):
            await asyncio.sleep(0)

    async def run_autojump(self) -> None:
        """Jump to the next deadline whenever the loop is idle; run until cancelled."""
        while True:
            seen = self._activity
            await self._settle()
            if self._holds or seen != self._activity:
                if self._holds:
                    await asyncio.sleep(0.001)  # real time passes while a thread works
                continue
            self._sleepers = [s for s in self._sleepers if not s[2].done()]
            heapq.heapify(self._sleepers)
            if not self._sleepers:
                await asyncio.sleep(0.001)
                continue
            deadline, _, fut = heapq.heappop(self._sleepers)
            self._now = max(self._now, deadline)
            fut.set_result(None)

    async def __aenter__(self) -> VirtualClock:
        if self._autojump and self._jumper is None:
            self._jumper = asyncio.create_task(self.run_autojump(), name="VirtualClock.autojump")
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._jumper is not None:
            self._jumper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._jumper
            self._jumper = None

    def __repr__(self) -> str:
        return (
            f"VirtualClock(now={self._now:.6f}, sleepers={len(self._sleepers)}, "
            f"holds={self._holds}, autojump={self._autojump})"
        )
