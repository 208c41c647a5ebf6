"""A hosting process's lifetime: how it stops, and what a call worker loads before it works.

A front door (``voxflow serve``, ``voxflow phone``) or a call worker (``--worker``) stops
when :func:`stop_on_signals`' event is set, by SIGTERM or SIGINT (a worker drains first:
:meth:`~voxflow_adapters.hosting.worker.CallWorker.drain`). Before a worker claims its
first call it holds :func:`worker_resources`: the session store every worker shares and
the engines its calls share, the same for every transport's worker.
"""

from __future__ import annotations

import asyncio
import signal
from typing import Any

from voxflow_voice.engines import VoiceEngines

from voxflow.flow.persistence import default_persistence
from voxflow.llm import preload
from voxflow.settings import Settings

__all__ = ["stop_on_signals", "worker_resources"]


def stop_on_signals() -> asyncio.Event:
    """An event set by SIGTERM or SIGINT (handlers on the running loop): a front door's or
    a worker's process stops (a worker drains first) when it is set."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    return stop


async def worker_resources(settings: Settings) -> tuple[Any, VoiceEngines]:
    """What a call worker needs before it claims a call: the session store every worker
    shares (``VOXFLOW_DATABASE_URL``), checked writable, and the engines, loaded off the
    loop with litellm (so no call's first turn imports it) and warmed up (their
    real-time factors measured: admission's prior)."""
    sessions = default_persistence()
    await asyncio.to_thread(sessions.check_writable)
    engines, _ = await asyncio.gather(
        asyncio.to_thread(VoiceEngines.from_settings, settings), preload())
    await engines.warm_up()  # (admission's prior: this machine's real-time factors)
    return sessions, engines
