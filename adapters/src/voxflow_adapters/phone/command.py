"""``voxflow phone``: load the models once, answer the carrier's webhook and media streams
until Ctrl-C.

The auth token that signs the webhook comes from ``VOXFLOW_TWILIO_AUTH_TOKEN`` only
(never an option: every user of the machine can read a command line), and is never
printed. Without it the server refuses to start, unless ``--no-signature`` is given for
a loopback trial.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Callable

from aiohttp import web
from voxflow_voice.engines import VoiceEngines

from voxflow.errors import VoxflowError
from voxflow.llm import preload
from voxflow.loader import load_flow_class
from voxflow.settings import Settings

from ..hosting.calls import (
    CallFactory,
    assistant_call_factory,
    flow_call_factory,
    webrtc_voice_settings,
)
from .server import PhoneServer, PhoneSettings, SignatureCheck

__all__ = ["AUTH_TOKEN_ENV", "run_phone"]

AUTH_TOKEN_ENV = "VOXFLOW_TWILIO_AUTH_TOKEN"
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def _factory(flow: str | None, model: str | None, settings: Settings) -> CallFactory:
    voice_settings = webrtc_voice_settings(settings)  # (the carrier cancels the echo)
    if flow is None:
        return assistant_call_factory(model, settings=voice_settings)
    return flow_call_factory(load_flow_class(flow, model=model), settings=voice_settings)


def run_phone(
    *, flow: str | None, host: str, port: int, public_url: str | None, max_calls: int,
    model: str | None = None, settings: Settings | None = None, no_signature: bool = False,
    announce: Callable[[str], None] | None = None,
) -> int:
    """Serve phone calls until interrupted; returns the exit code."""
    settings = settings if settings is not None else Settings.from_env()
    say = announce if announce is not None else (lambda line: print(line, flush=True))
    secret = settings.twilio_auth_token
    token = (secret.get_secret_value() if secret is not None else None) or None
    if token is None and not no_signature:
        print(f"error: set {AUTH_TOKEN_ENV} to the carrier account's auth token (the "
              "webhook's signature is checked with it), or give --no-signature for a "
              "loopback trial", file=sys.stderr)
        return EXIT_USAGE
    try:
        factory = _factory(flow, model, settings)
    except (VoxflowError, TypeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    phone_settings = PhoneSettings(
        public_url=public_url, max_calls=max_calls,
        signature=None if token is None else SignatureCheck(token))
    logging.getLogger("faster_whisper").setLevel(logging.WARNING)
    try:
        asyncio.run(_serve(factory, phone_settings, settings, host, port, say))
    except KeyboardInterrupt:
        return EXIT_OK
    except VoxflowError as exc:  # a model or the voice is missing
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except OSError as exc:
        print(f"error: cannot listen on {host}:{port}: {exc.strerror or exc}",
              file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


async def _serve(factory: CallFactory, phone_settings: PhoneSettings, settings: Settings,
                 host: str, port: int, say: Callable[[str], None]) -> None:
    # litellm loads off the loop with the models: no call's first turn imports it
    engines, _ = await asyncio.gather(
        asyncio.to_thread(VoiceEngines.from_settings, settings), preload())
    server = PhoneServer(factory, engines, settings=phone_settings)
    runner = web.AppRunner(server.app(), access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
        base = phone_settings.public_url or f"http://{host}:{port}"
        say(f"voxflow phone: webhook {base}{phone_settings.webhook_path} (POST), media "
            f"stream {phone_settings.media_path}; "
            + ("signature checked" if phone_settings.signature is not None
               else "UNSIGNED webhooks accepted (--no-signature)"))
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()
