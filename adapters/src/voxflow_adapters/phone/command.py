"""``voxflow phone``: load the models once, answer the carrier's webhook and media streams
until Ctrl-C.

The auth token that signs the webhook comes from ``VOXFLOW_TWILIO_AUTH_TOKEN`` only
(never an option: every user of the machine can read a command line), and is never
printed. Without it the server refuses to start, unless ``--no-signature`` is given for
a loopback trial.

With ``--front-door`` or ``--worker`` (``VOXFLOW_DATABASE_URL``: PostgreSQL), the calls
are dispatched like browser calls: a front door answers the webhooks
(:class:`~voxflow_adapters.phone.front_door.PhoneFrontDoor`) and phone call workers
(:class:`~voxflow_adapters.phone.host.PhoneHost` under a
:class:`~voxflow_adapters.hosting.worker.CallWorker`) serve the media streams, the
sessions in the shared store; a stream that ends unfinished is reconnected to a live
worker that restores the session.

With ``--public-url``, every role asks its own ``GET /health`` through that address once
it listens (:func:`~voxflow_adapters.hosting.public_url.probe_public_url`) and warns
once, with the fix, when the answer is not its own (a front door: nor a sibling front
door's of the same deployment, behind the same load balancer).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import sys
from collections.abc import AsyncIterator, Callable

from aiohttp import web
from voxflow_voice.engines import VoiceEngines

from voxflow.errors import VoxflowError
from voxflow.flow.persistence import default_persistence
from voxflow.jobs import PostgresJobQueue, default_job_queue
from voxflow.llm import preload
from voxflow.loader import load_flow_class
from voxflow.settings import DATABASE_URL_VARIABLE, Settings

from ..hosting.calls import (
    CallFactory,
    assistant_call_factory,
    flow_call_factory,
    phone_voice_settings,
)
from ..hosting.dispatch import DispatchStore
from ..hosting.dispatch_tables import DispatchUnavailableError
from ..hosting.process import stop_on_signals, worker_resources
from ..hosting.public_url import probe_public_url
from ..hosting.worker import CallWorker
from ..settings import HostingSection, PhoneSection
from .front_door import PhoneFrontDoor
from .host import PhoneHost
from .server import PhoneServer, PhoneSettings, SignatureCheck

__all__ = ["AUTH_TOKEN_ENV", "run_phone"]

AUTH_TOKEN_ENV = "VOXFLOW_TWILIO_AUTH_TOKEN"
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2

logger = logging.getLogger(__name__)


def _factory(flow: str | None, model: str | None, settings: Settings,
             job_queue: PostgresJobQueue | None = None) -> CallFactory:
    voice_settings = phone_voice_settings(settings)  # (the carrier cancels the echo)
    if flow is None:
        return assistant_call_factory(model, settings=voice_settings, job_queue=job_queue)
    return flow_call_factory(load_flow_class(flow, model=model), settings=voice_settings,
                             job_queue=job_queue)


def run_phone(
    *, flow: str | None, host: str, port: int, public_url: str | None,
    max_calls: int | None,
    model: str | None = None, settings: Settings | None = None, no_signature: bool = False,
    announce: Callable[[str], None] | None = None, role: str = "all",
    offer_timeout: float = 10.0, drain_seconds: float = 60.0, stale_after: float = 5.0,
) -> int:
    """Serve phone calls until interrupted; returns the exit code. ``role``: ``all``
    (every call in this process), ``front-door`` or ``worker`` (dispatched through
    ``VOXFLOW_DATABASE_URL``)."""
    settings = settings if settings is not None else Settings.from_env()
    say = announce if announce is not None else (lambda line: print(line, flush=True))
    secret = settings.section(PhoneSection).twilio_auth_token
    token = (secret.get_secret_value() if secret is not None else None) or None
    if token is None and not no_signature and role != "worker":  # (a worker gets no webhook)
        print(f"error: set {AUTH_TOKEN_ENV} to the carrier account's auth token (the "
              "webhook's signature is checked with it), or give --no-signature for a "
              "loopback trial", file=sys.stderr)
        return EXIT_USAGE
    database_url = (settings.database_url.get_secret_value()
                    if settings.database_url is not None else None)
    if role != "all" and database_url is None:
        print(f"error: --{role} dispatches calls through PostgreSQL: set "
              f"{DATABASE_URL_VARIABLE}", file=sys.stderr)
        return EXIT_USAGE
    if role == "worker" and public_url is None and _wildcard(host):
        # (the worker tells the carrier where its media stream is: this host and port)
        print(f"error: a phone worker listening on every address ({host}) has no address "
              "to give the carrier for its media stream: give --public-url "
              "https://this-worker.example.com (how the carrier reaches this worker), or "
              "--host with the worker's own address", file=sys.stderr)
        return EXIT_USAGE
    signature = None if token is None else SignatureCheck(token)
    factory: CallFactory | None = None
    if role != "front-door":
        try:
            factory = _factory(flow, model, settings,
                               default_job_queue() if role == "worker" else None)
        except (VoxflowError, TypeError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_USAGE
    # (admitted by their measured cost, as serve's: max_calls only bounds it)
    target = settings.section(HostingSection).p95_target_ms
    phone_settings = PhoneSettings(public_url=public_url, max_calls=max_calls,
                                   p95_target_ms=target, signature=signature)
    logging.getLogger("faster_whisper").setLevel(logging.WARNING)
    try:
        if role == "front-door":
            assert database_url is not None
            asyncio.run(_front_door(DispatchStore(database_url, stale_after=stale_after,
                                                  kind="phone"),
                                    phone_settings, offer_timeout, host, port, say))
        elif role == "worker":
            assert factory is not None and database_url is not None
            asyncio.run(_worker(factory, phone_settings, settings,
                                DispatchStore(database_url, stale_after=stale_after,
                                              kind="phone"),
                                drain_seconds, host, port, say))
        else:
            assert factory is not None
            asyncio.run(_serve(factory, phone_settings, settings, host, port, say))
    except KeyboardInterrupt:
        return EXIT_OK
    except DispatchUnavailableError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILED
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
    await engines.warm_up()  # (admission's prior: this machine's real-time factors)
    server = PhoneServer(factory, engines, settings=phone_settings)
    runner = web.AppRunner(server.app(), access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
        _probe_soon(phone_settings.public_url, server.instance, host, port)
        base = phone_settings.public_url or f"http://{host}:{port}"
        say(f"voxflow phone: webhook {base}{phone_settings.webhook_path} (POST), media "
            f"stream {phone_settings.media_path}; {server.load().capacity()}; "
            + ("signature checked" if phone_settings.signature is not None
               else "UNSIGNED webhooks accepted (--no-signature)"))
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()


@contextlib.asynccontextmanager
async def _listening(app: web.Application, host: str, port: int) -> AsyncIterator[None]:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
        yield
    finally:
        await runner.cleanup()


async def _front_door(store: DispatchStore, phone_settings: PhoneSettings,
                      offer_timeout: float, host: str, port: int,
                      say: Callable[[str], None]) -> None:
    stop = stop_on_signals()
    door = PhoneFrontDoor(store, default_persistence(), signature=phone_settings.signature,
                          public_url=phone_settings.public_url, offer_timeout=offer_timeout,
                          webhook_path=phone_settings.webhook_path)
    await door.start()
    try:
        async with _listening(door.app(), host, port):
            _probe_soon(phone_settings.public_url, door.instance, host, port,
                        deployment=door.deployment)  # (any front door of it will do)
            base = phone_settings.public_url or f"http://{host}:{port}"
            say(f"voxflow phone front door is listening: webhook {base}"
                f"{phone_settings.webhook_path} (POST), action URL {door.action_path}; "
                + ("signature checked" if phone_settings.signature is not None
                   else "UNSIGNED webhooks accepted (--no-signature)"))
            await stop.wait()
    finally:
        await door.aclose()


async def _worker(factory: CallFactory, phone_settings: PhoneSettings, settings: Settings,
                  store: DispatchStore, drain_seconds: float, host: str, port: int,
                  say: Callable[[str], None]) -> None:
    stop = stop_on_signals()
    sessions, engines = await worker_resources(settings)
    base = phone_settings.public_url or f"http://{host}:{port}"
    media_url = _media_address(base, phone_settings.media_path)
    calls = PhoneHost(factory, engines, store=sessions, media_url=media_url,
                      settings=phone_settings)
    worker = CallWorker(calls, store, drain_seconds=drain_seconds)
    async with _listening(calls.app(), host, port):
        _probe_soon(phone_settings.public_url, calls.instance, host, port)
        await worker.start()
        try:
            say(f"voxflow phone call worker {worker.worker_id} is ready "
                f"({calls.load().capacity()}, media stream {media_url}); stop it with "
                "SIGTERM to drain")
            await stop.wait()
            say(f"draining: running calls move to other workers (within {drain_seconds:g} s)")
        finally:
            await worker.aclose()


_probes: set[asyncio.Task[None]] = set()


def _probe_soon(public_url: str | None, instance: str, host: str, port: int, *,
                deployment: str | None = None) -> None:
    """Probe ``public_url`` in the background (the server is listening) and warn once if
    it does not lead here (a front door's ``deployment``: or to a sibling front door of
    it); nothing without one."""
    if public_url is None:
        return

    async def probe() -> None:
        problem = await probe_public_url(public_url, instance, listening=f"{host}:{port}",
                                         deployment=deployment)
        if problem is not None:
            logger.warning("%s", problem)

    task = asyncio.get_running_loop().create_task(probe(), name="public-url.probe")
    _probes.add(task)  # (kept until done; asyncio.run cancels it at the end)
    task.add_done_callback(_probes.discard)


def _wildcard(host: str) -> bool:
    """``host`` is every address (``0.0.0.0``, ``::``, empty), not one a carrier can use."""
    try:
        return not host or ipaddress.ip_address(host.strip("[]")).is_unspecified
    except ValueError:  # a name
        return False


def _media_address(base: str, path: str) -> str:
    """``path`` at ``base`` (``https://host``) as a WebSocket URL (``wss://host/path``)."""
    scheme, _, rest = base.partition("://")
    return f"{'wss' if scheme == 'https' else 'ws'}://{rest.rstrip('/')}{path}"
