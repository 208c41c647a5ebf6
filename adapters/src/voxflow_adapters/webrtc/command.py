"""``voxflow serve``: validate the options, load the models once, serve until Ctrl-C.

The core CLI (``voxflow.cli``) imports this module by name only when ``serve`` runs, so
``import voxflow`` never pulls in aiortc or the models.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Sequence

from pydantic import ValidationError

from voxflow.errors import VoxflowError

from .calls import CallFactory, assistant_call_factory, flow_call_factory
from .peer import IceServer, PeerSettings
from .server import ServerSettings, serve

__all__ = ["build_settings", "run_serve"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def build_settings(
    *, host: str, port: int, token: str | None, ice_servers: Sequence[str] = (),
    ice_host_addresses: Sequence[str] | None = None, max_calls: int = 8,
    max_call_seconds: float = 1800.0,
) -> ServerSettings:
    """Server settings from command-line values.

    Raises:
        pydantic.ValidationError: a value is out of range (the message names it).
    """
    peer = PeerSettings(
        ice_servers=tuple(IceServer(urls=(url,)) for url in ice_servers),
        ice_host_addresses=tuple(ice_host_addresses) if ice_host_addresses else None,
        max_call_seconds=max_call_seconds,
    )
    return ServerSettings(host=host, port=port, token=token, max_calls=max_calls, peer=peer)


def _factory(flow: str | None, model: str | None) -> CallFactory:
    if flow is None:
        return assistant_call_factory(model)
    from voxflow._loader import load_flow_class

    return flow_call_factory(load_flow_class(flow))


def run_serve(
    *, flow: str | None, host: str, port: int, token: str | None, model: str | None = None,
    ice_servers: Sequence[str] = (), ice_host_addresses: Sequence[str] | None = None,
    max_calls: int = 8, max_call_seconds: float = 1800.0,
) -> int:
    """Run the server until interrupted; returns the exit code (2 for bad options)."""
    try:
        settings = build_settings(
            host=host, port=port, token=token, ice_servers=ice_servers,
            ice_host_addresses=ice_host_addresses, max_calls=max_calls,
            max_call_seconds=max_call_seconds,
        )
    except ValidationError as exc:
        for err in exc.errors():
            where = ".".join(str(p) for p in err["loc"])
            print(f"error: {where}: {err['msg']}", file=sys.stderr)
        return EXIT_USAGE
    try:
        factory = _factory(flow, model)
    except (VoxflowError, TypeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    for noisy in ("aioice", "aiortc", "faster_whisper"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        asyncio.run(serve(factory, settings=settings, announce=_announce))
    except KeyboardInterrupt:
        return EXIT_OK
    except OSError as exc:  # the port is taken, the address is not ours
        print(f"error: cannot listen on {host}:{port}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


def _announce(line: str) -> None:
    print(line, flush=True)
