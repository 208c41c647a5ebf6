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
from voxflow_voice.engines import VoiceEngines

from voxflow.errors import VoxflowError
from voxflow.settings import Settings

from .calls import CallFactory, assistant_call_factory, flow_call_factory, webrtc_voice_settings
from .peer import IceServer, PeerSettings
from .server import ServerSettings, serve

__all__ = ["build_call_factory", "build_settings", "run_serve"]

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


def build_call_factory(
    *, flow: str | None, model: str | None = None, settings: Settings | None = None
) -> CallFactory:
    """The calls ``voxflow serve`` answers: ``flow`` (``path.py:Class`` or ``module:Class``)
    or the example assistant if None, with the voice settings of
    :func:`~voxflow_adapters.webrtc.calls.webrtc_voice_settings` (``settings``).

    Raises:
        TypeError: ``settings`` is not a :class:`~voxflow.settings.Settings`, or ``flow``
            names no class.
        voxflow.errors.VoxflowError: ``flow`` cannot be loaded.
    """
    voice_settings = webrtc_voice_settings(settings)
    if flow is None:
        return assistant_call_factory(model, settings=voice_settings)
    from voxflow._loader import load_flow_class

    return flow_call_factory(load_flow_class(flow), settings=voice_settings)


def run_serve(
    *, flow: str | None, host: str, port: int, token: str | None, model: str | None = None,
    ice_servers: Sequence[str] = (), ice_host_addresses: Sequence[str] | None = None,
    max_calls: int = 8, max_call_seconds: float = 1800.0, settings: Settings | None = None,
) -> int:
    """Run the server until interrupted; returns the exit code (2 for bad options).

    ``settings`` (``VOXFLOW_*``, see :mod:`voxflow.settings`; defaults if None) supplies
    the STT model, the voice, the turn-taking times and speculative replies.
    """
    settings = settings if settings is not None else Settings()
    if not isinstance(settings, Settings):
        raise TypeError(f"settings must be voxflow Settings, got {type(settings).__name__}")
    try:
        server_settings = build_settings(
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
        factory = build_call_factory(flow=flow, model=model, settings=settings)
    except (VoxflowError, TypeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    for noisy in ("aioice", "aiortc", "faster_whisper"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        asyncio.run(_serve(factory, server_settings, settings))
    except KeyboardInterrupt:
        return EXIT_OK
    except VoxflowError as exc:  # a model or the voice is missing
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except OSError as exc:  # the port is taken, the address is not ours
        print(f"error: cannot listen on {host}:{port}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


async def _serve(factory: CallFactory, server_settings: ServerSettings,
                 settings: Settings) -> None:
    engines = await asyncio.to_thread(VoiceEngines.from_settings, settings)
    await serve(factory, settings=server_settings, engines=engines, announce=_announce)


def _announce(line: str) -> None:
    print(line, flush=True)
