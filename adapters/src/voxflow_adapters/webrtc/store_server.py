"""The example assistant's WebRTC server on a given session store, as a process: what
the failover tests start twice on one database, kill (-9) or pause (SIGSTOP) mid-reply,
and resume the call on the other.

``python -m voxflow_adapters.webrtc.store_server PORT TOKEN WHERE``; ``WHERE`` is a SQLite file,
or ``postgresql://…#SCHEMA`` (a PostgreSQL URL and the schema of the sessions). It loads
the bundled models, serves on ``127.0.0.1:PORT`` (offers need ``TOKEN``; a loopback ICE
candidate is added), prints ``listening`` once it accepts offers and runs until killed.
Its log goes to stderr at WARNING. Start it with :func:`command` and
:func:`~voxflow_adapters.testkit.flows.serve_process`.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Sequence
from typing import Any

__all__ = ["command", "main", "open_store"]


def command(port: int, token: str, where: str) -> list[str]:
    """The command line of a store server (see the module)."""
    return [sys.executable, "-m", "voxflow_adapters.webrtc.store_server", str(port), token, where]


def open_store(where: str) -> Any:
    """The session store ``where`` names: ``postgresql://…#SCHEMA`` or a SQLite file."""
    if where.startswith("postgresql://"):
        # the optional voxflow[postgres] extra
        from voxflow.flow.postgres import PostgresFlowPersistence

        url, schema = where.rsplit("#", 1)
        return PostgresFlowPersistence(url, schema=schema)
    # the server process only: command() stays light for the tests that start it
    from voxflow.flow.persistence import SQLiteFlowPersistence

    return SQLiteFlowPersistence(where)


async def _serve(port: int, token: str, store: Any) -> None:
    # the server process only: command() stays light for the tests that start it
    from voxflow_voice.engines import VoiceEngines

    # (aiortc and the server: the same)
    from . import PeerSettings, ServerSettings, WebRtcServer, assistant_call_factory
    from .server import ignore_closed_transport_errors

    ignore_closed_transport_errors(asyncio.get_running_loop())
    engines = await asyncio.to_thread(VoiceEngines.from_environment)
    await engines.warm_up()
    settings = ServerSettings(port=port, token=token,
                              peer=PeerSettings(ice_host_addresses=("127.0.0.1",)))
    async with WebRtcServer(assistant_call_factory(), engines, settings=settings,
                            store=store, worker_id=f"worker-{port}"):
        print("listening", flush=True)
        await asyncio.Event().wait()


def main(argv: Sequence[str] | None = None) -> None:
    """Run a store server (see the module)."""
    parser = argparse.ArgumentParser(prog="python -m voxflow_adapters.webrtc.store_server")
    parser.add_argument("port", type=int)
    parser.add_argument("token")
    parser.add_argument("where", help="a SQLite file, or postgresql://...#SCHEMA")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    asyncio.run(_serve(args.port, args.token, open_store(args.where)))


if __name__ == "__main__":
    main()
