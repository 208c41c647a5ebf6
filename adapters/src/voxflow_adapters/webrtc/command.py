"""``voxflow serve``: validate the options, load the models once, serve until Ctrl-C.

The core CLI (``voxflow.cli``) imports this module by name only when ``serve`` runs, so
``import voxflow`` never pulls in aiortc or the models.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path

from pydantic import ValidationError
from voxflow_voice.engines import VoiceEngines

from voxflow.errors import VoxflowError
from voxflow.flow.persistence import default_data_dir, default_persistence
from voxflow.jobs import PostgresJobQueue, default_job_queue
from voxflow.llm import preload
from voxflow.loader import load_flow_class
from voxflow.monitoring import Monitor, MonitoringError
from voxflow.settings import DATABASE_URL_VARIABLE, Settings

from ..hosting.calls import (
    CallFactory,
    assistant_call_factory,
    flow_call_factory,
    webrtc_voice_settings,
)
from ..hosting.dispatch import DispatchStore
from ..hosting.dispatch_tables import DispatchUnavailableError
from ..hosting.metrics import CallMetrics, HostCounts, watch_host
from ..hosting.process import stop_on_signals, worker_resources
from ..hosting.tls import TlsError, certificate_names, self_signed_certificate, ssl_context
from ..hosting.worker import CallWorker
from ..settings import HostingSection, WebRtcSection
from ._ice_url import IceUrlError, check_ice_url, shown_ice_url
from ._libopus import OpusLibraryError, library_version
from .front_door import FrontDoor
from .peer import DEFAULT_RECEIVE_HOLD, IceServer, PeerSettings
from .server import ServerSettings, WebRtcServer, ignore_closed_transport_errors, serve

__all__ = [
    "ROLES",
    "TURN_CREDENTIAL_ENV",
    "TURN_USERNAME_ENV",
    "ServeOptionError",
    "build_call_factory",
    "build_settings",
    "ice_servers_from",
    "run_serve",
    "tls_files",
]

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
ROLES = ("all", "front-door", "worker")


TURN_USERNAME_ENV, TURN_CREDENTIAL_ENV = "VOXFLOW_TURN_USERNAME", "VOXFLOW_TURN_CREDENTIAL"


class ServeOptionError(ValueError):
    """A ``serve`` option cannot be used; the message says the fix (exit code 2)."""


def ice_servers_from(
    urls: Sequence[str], *, username: str | None = None, credential: str | None = None,
) -> tuple[IceServer, ...]:
    """``--ice-server`` URLs as ICE servers; TURN ones get ``username``/``credential``
    (``VOXFLOW_TURN_USERNAME``/``VOXFLOW_TURN_CREDENTIAL``: never from the command line,
    where every user of the machine can read them).

    Raises:
        ServeOptionError: a URL aiortc would refuse or ignore (malformed, carrying
            credentials: :func:`~voxflow_adapters.webrtc._ice_url.check_ice_url`, the
            message never showing them), or a TURN URL given without credentials.
    """
    servers = []
    for url in urls:
        try:
            check_ice_url(url)
        except IceUrlError as exc:
            if exc.credentials:
                raise ServeOptionError(
                    f"--ice-server {shown_ice_url(url)!r} carries credentials or a query "
                    f"other than ?transport=: put TURN credentials in {TURN_USERNAME_ENV} "
                    f"and {TURN_CREDENTIAL_ENV}, not in the URL (see voxflow serve --help)"
                ) from None
            raise ServeOptionError(f"--ice-server {exc} (see voxflow serve --help)") from None
        if url.startswith(("turn:", "turns:")):
            if not username or not credential:
                raise ServeOptionError(
                    f"--ice-server {shown_ice_url(url)}: a TURN server needs "
                    f"{TURN_USERNAME_ENV} and {TURN_CREDENTIAL_ENV} set in the environment")
            servers.append(IceServer(urls=(url,), username=username, credential=credential))
        else:
            servers.append(IceServer(urls=(url,)))
    return tuple(servers)


# The option (or variable) behind each settings field a bad value can come from.
_OPTIONS = {
    "host": "--host", "port": "--port", "token": "--token", "max_calls": "--max-calls",
    "urls": "--ice-server", "ice_servers": "--ice-server", "ice_host_addresses": "--ice-host",
    "tls_cert": "--tls-cert", "tls_key": "--tls-key",
}


def build_settings(
    *, host: str, port: int, token: str | None, ice_servers: Sequence[str] = (),
    ice_host_addresses: Sequence[str] | None = None, max_calls: int | None = None,
    max_call_seconds: float = 1800.0, tls_cert: Path | None = None, tls_key: Path | None = None,
    trust_forwarded: bool = False, turn_username: str | None = None,
    turn_credential: str | None = None, receive_hold: int | None = DEFAULT_RECEIVE_HOLD,
    p95_target_ms: float = 1000.0,
) -> ServerSettings:
    """Server settings from command-line values (and the TURN credentials).

    Raises:
        pydantic.ValidationError: a value is out of range (the message names it).
        ServeOptionError: an ICE server option cannot be used.
    """
    peer = PeerSettings(
        ice_servers=ice_servers_from(ice_servers, username=turn_username,
                                     credential=turn_credential),
        ice_host_addresses=tuple(ice_host_addresses) if ice_host_addresses else None,
        max_call_seconds=max_call_seconds, receive_hold=receive_hold,
    )
    return ServerSettings(host=host, port=port, token=token, max_calls=max_calls, peer=peer,
                          tls_cert=tls_cert, tls_key=tls_key, trust_forwarded=trust_forwarded,
                          p95_target_ms=p95_target_ms)


def tls_files(
    *, host: str, tls_cert: str | None, tls_key: str | None, self_signed: bool,
    settings: Settings, announce: Callable[[str], object],
) -> tuple[Path | None, Path | None]:
    """The certificate and key to serve with: given, generated (``self_signed``, under
    ``VOXFLOW_HOME``/tls) or none; each checked by loading it.

    Raises:
        ServeOptionError: options that do not go together.
        TlsError: a file is missing, unreadable or not a matching PEM pair.
    """
    if self_signed and (tls_cert or tls_key):
        raise ServeOptionError("--self-signed makes its own certificate: drop --tls-cert/"
                               "--tls-key, or drop --self-signed to use yours")
    if (tls_cert is None) != (tls_key is None):
        raise ServeOptionError("--tls-cert and --tls-key go together: give the certificate "
                               "and its private key (PEM files)")
    if self_signed:
        home = settings.home if settings.home is not None else default_data_dir()
        made = self_signed_certificate(certificate_names(host), home / "tls")
        announce(made.how_to_trust())
        return made.cert, made.key
    if tls_cert is None or tls_key is None:
        return None, None
    cert, key = Path(tls_cert).expanduser(), Path(tls_key).expanduser()
    ssl_context(cert, key)
    return cert, key


def build_call_factory(
    *, flow: str | None, model: str | None = None, settings: Settings | None = None,
    job_queue: PostgresJobQueue | None = None,
) -> CallFactory:
    """The calls ``voxflow serve`` answers: ``flow`` (``path.py:Class`` or ``module:Class``)
    or the example assistant if None, with the voice settings of
    :func:`~voxflow_adapters.hosting.calls.webrtc_voice_settings` (``settings``);
    ``job_queue``: their background jobs run in job-worker processes.

    Raises:
        TypeError: ``settings`` is not a :class:`~voxflow.settings.Settings`, or ``flow``
            names no class.
        voxflow.errors.VoxflowError: ``flow`` cannot be loaded.
    """
    voice_settings = webrtc_voice_settings(settings)
    if flow is None:
        return assistant_call_factory(model, settings=voice_settings, job_queue=job_queue)

    return flow_call_factory(load_flow_class(flow, model=model), settings=voice_settings,
                             job_queue=job_queue)


def run_serve(
    *, flow: str | None, host: str, port: int, token: str | None, model: str | None = None,
    ice_servers: Sequence[str] = (), ice_host_addresses: Sequence[str] | None = None,
    max_calls: int | None = None, max_call_seconds: float = 1800.0,
    settings: Settings | None = None,
    tls_cert: str | None = None, tls_key: str | None = None, self_signed: bool = False,
    trust_forwarded: bool = False, role: str = "all", offer_timeout: float = 10.0,
    drain_seconds: float = 60.0, stale_after: float = 5.0,
) -> int:
    """Run the server until interrupted; returns the exit code (2 for bad options).

    ``settings`` (``VOXFLOW_*``, see :mod:`voxflow.settings`; the environment's if None)
    supplies the STT model, the voice, the turn-taking times and speculative replies.

    ``role``: ``all`` (the page and the calls in this process), ``front-door`` (the page
    and ``POST /offer``, calls dispatched to workers) or ``worker`` (calls only, no HTTP
    port), the last two through ``VOXFLOW_DATABASE_URL`` (:mod:`.dispatch`).
    """
    if role not in ROLES:
        raise ValueError(f"role must be one of {', '.join(ROLES)}, got {role!r}")
    settings = settings if settings is not None else Settings.from_env()
    if not isinstance(settings, Settings):
        raise TypeError(f"settings must be voxflow Settings, got {type(settings).__name__}")
    webrtc = settings.section(WebRtcSection)
    try:
        cert, key = tls_files(host=host, tls_cert=tls_cert, tls_key=tls_key,
                              self_signed=self_signed, settings=settings, announce=_announce)
        server_settings = build_settings(
            host=host, port=port, token=token, ice_servers=ice_servers,
            ice_host_addresses=ice_host_addresses, max_calls=max_calls,
            max_call_seconds=max_call_seconds, tls_cert=cert, tls_key=key,
            trust_forwarded=trust_forwarded, turn_username=webrtc.turn_username,
            p95_target_ms=settings.section(HostingSection).p95_target_ms,
            turn_credential=(webrtc.turn_credential.get_secret_value()
                             if webrtc.turn_credential is not None else None),
            receive_hold=webrtc.webrtc_receive_hold,
        )
    except (ServeOptionError, TlsError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except ValidationError as exc:
        for err in exc.errors():
            field = str(err["loc"][0]) if err["loc"] else ""
            where = _OPTIONS.get(field, ".".join(str(p) for p in err["loc"]))
            print(f"error: {where}: {err['msg']} (see voxflow serve --help)", file=sys.stderr)
        return EXIT_USAGE
    database_url = (settings.database_url.get_secret_value()
                    if settings.database_url is not None else None)
    if role != "all" and database_url is None:
        print(f"error: --{role} dispatches calls through PostgreSQL: set "
              f"{DATABASE_URL_VARIABLE}=postgresql://user@host:5432/database", file=sys.stderr)
        return EXIT_USAGE
    factory: CallFactory | None = None
    if role != "front-door":
        try:
            # a call worker's jobs go to the job workers (voxflow jobs worker)
            job_queue = default_job_queue() if role == "worker" else None
            factory = build_call_factory(flow=flow, model=model, settings=settings,
                                         job_queue=job_queue)
        except (VoxflowError, TypeError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_USAGE
    try:
        monitor = monitor_for(settings, {"all": "serve", "front-door": "front-door",
                                         "worker": "call-worker"}[role])
    except MonitoringError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if role != "front-door":
        try:
            library_version()  # every call's audio goes through it: say so now, not per call
        except OpusLibraryError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_FAILED
    for noisy in ("aioice", "aiortc", "faster_whisper"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        if role == "all":
            assert factory is not None
            asyncio.run(_serve(factory, server_settings, settings, monitor))
        else:
            assert database_url is not None
            store = DispatchStore(database_url, stale_after=stale_after)
            if role == "front-door":
                asyncio.run(_front_door(store, server_settings, offer_timeout, monitor))
            else:
                assert factory is not None
                asyncio.run(_worker(factory, server_settings, settings, store, drain_seconds,
                                    monitor))
    except KeyboardInterrupt:
        return EXIT_OK
    except DispatchUnavailableError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except VoxflowError as exc:  # a model or the voice is missing
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except OSError as exc:  # the port is taken, the address is not ours
        print(f"error: cannot listen on {host}:{port}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


def monitor_for(settings: Settings, role: str) -> Monitor | None:
    """The process's :class:`~voxflow.monitoring.Monitor` when ``--metrics-port`` (or
    ``VOXFLOW_METRICS_PORT``) is given, else None.

    Raises:
        MonitoringError: ``prometheus_client`` is missing, or the metrics port would be
            reachable beyond loopback without ``VOXFLOW_METRICS_TOKEN``.
    """
    if settings.metrics_port is None:
        return None
    token = settings.metrics_token
    return Monitor(role, host=settings.metrics_host, port=settings.metrics_port,
                   token=None if token is None else token.get_secret_value())


@contextlib.asynccontextmanager
async def _monitoring(monitor: Monitor | None) -> AsyncIterator[None]:
    """The monitor's endpoints for the process's life (nothing without a monitor)."""
    if monitor is None:
        yield
        return
    async with monitor:
        _announce(f"metrics at {monitor.url}/metrics (/health, /ready)")
        yield


async def _serve(factory: CallFactory, server_settings: ServerSettings,
                 settings: Settings, monitor: Monitor | None = None) -> None:
    async with _monitoring(monitor):
        store = default_persistence()  # VOXFLOW_DATABASE_URL, else SQLite under VOXFLOW_HOME
        await asyncio.to_thread(store.check_writable)  # an unwritable one fails now, naming the fix
        # litellm loads off the loop with the models: no call's first turn imports it
        engines, _ = await asyncio.gather(
            asyncio.to_thread(VoiceEngines.from_settings, settings), preload())
        await serve(factory, settings=server_settings, engines=engines, announce=_announce,
                    store=store,
                    metrics=None if monitor is None else CallMetrics(monitor.registry),
                    listening=None if monitor is None else lambda _: monitor.set_ready())


async def _front_door(store: DispatchStore, server_settings: ServerSettings,
                      offer_timeout: float, monitor: Monitor | None = None) -> None:
    ignore_closed_transport_errors(asyncio.get_running_loop())
    stop = stop_on_signals()
    door = FrontDoor(store, settings=server_settings, offer_timeout=offer_timeout)
    async with _monitoring(monitor):
        if monitor is not None:
            watch_host(monitor.registry, lambda: HostCounts(admitted=door.dispatched,
                                                            refused=door.refusals()))
        async with door:
            _announce(f"voxflow front door is listening: open {door.url}")
            if monitor is not None:
                monitor.set_ready()
            await stop.wait()


async def _worker(factory: CallFactory, server_settings: ServerSettings, settings: Settings,
                  store: DispatchStore, drain_seconds: float,
                  monitor: Monitor | None = None) -> None:
    ignore_closed_transport_errors(asyncio.get_running_loop())
    stop = stop_on_signals()
    async with _monitoring(monitor):
        sessions, engines = await worker_resources(settings)
        host = WebRtcServer(factory, engines, settings=server_settings, store=sessions,
                            metrics=None if monitor is None else CallMetrics(monitor.registry))
        worker = CallWorker(host, store, drain_seconds=drain_seconds)
        await worker.start()
        try:
            if monitor is not None:
                monitor.add_readiness(lambda: _worker_not_ready(worker))
                monitor.set_ready()
            _announce(f"voxflow call worker {worker.worker_id} is ready "
                      f"({host.load().capacity()}); stop it with SIGTERM to drain")
            await stop.wait()
            if monitor is not None:
                monitor.set_unready("draining")
            _announce(f"draining: running calls may go on for {drain_seconds:g} s")
        finally:
            await worker.aclose()


def _worker_not_ready(worker: CallWorker) -> str | None:
    """Why a call worker takes no call now (None: it does)."""
    if worker.draining:
        return "draining"
    if worker.heartbeat.failing:
        return "its heartbeat cannot be written (the database is unreachable)"
    return None


def _announce(line: str) -> None:
    print(line, flush=True)
