"""Monitoring a long-running process: ``/metrics`` for Prometheus, ``/health`` and
``/ready`` for probes, on a port of their own.

Every long-running voxflow process (``voxflow serve``, ``serve --front-door``,
``serve --worker``, ``voxflow jobs worker``) takes ``--metrics-port PORT``
(``VOXFLOW_METRICS_PORT``; off by default): a :class:`Monitor` then serves, on
``--metrics-host`` (``VOXFLOW_METRICS_HOST``, loopback by default),

* ``GET /metrics``: the process's metrics in Prometheus's text format (OpenMetrics when
  the scraper asks for it), written by ``prometheus_client`` (the ``voxflow[metrics]``
  extra): what the process registered on :attr:`Monitor.registry`, its event-loop lag
  (``voxflow_event_loop_lag_seconds``), and the process's CPU and memory
  (``process_*``). With ``VOXFLOW_METRICS_TOKEN`` set it needs
  ``Authorization: Bearer <token>`` (401 otherwise); a metrics port bound beyond
  loopback needs the token (:func:`check_metrics_bind`);
* ``GET /health`` (liveness): 200 ``{"status": "ok"}`` while the event loop turns; 503
  with the reason when it has not run for ``stall_seconds`` (a call or a job blocking
  it): a supervisor restarts the process;
* ``GET /ready`` (readiness): 200 once the process serves (its models loaded, its
  database reached, listening or registered) and until it stops or drains; 503 with the
  reason otherwise, so a load balancer sends it nothing;
* ``GET /status``: the same figures as ``/metrics`` as a page for a person
  (:mod:`voxflow.status_page`), behind the same token.

The endpoints answer from a thread of their own, not the event loop: a scrape never
waits behind a call's work, and a blocked loop is reported rather than hanging the probe.
The metrics of the calls are read from what the processes already report (session
events, the admission controller, the job queue's tables), never measured anew in the
audio path.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import ipaddress
import json
import logging
import socket
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib.metadata import PackageNotFoundError, version
from types import TracebackType
from typing import TYPE_CHECKING, Any

from .errors import VoxflowError
from .status_page import render_status

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

__all__ = [
    "METRICS_TOKEN_VARIABLE",
    "Monitor",
    "MonitoringError",
    "Readiness",
    "check_metrics_bind",
    "require_prometheus_client",
]

logger = logging.getLogger(__name__)

METRICS_TOKEN_VARIABLE = "VOXFLOW_METRICS_TOKEN"
_FIX = "pip install 'voxflow[metrics]'"

Readiness = Callable[[], str | None]
"""A readiness check: None when ready, else why not (``/ready`` answers 503 with it)."""

LAG_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
"""Buckets (s) of ``voxflow_event_loop_lag_seconds``: a 20 ms audio frame late by a
frame or more shows from the 0.025 bucket on."""


class MonitoringError(VoxflowError):
    """The metrics port cannot be served as asked (the message says the fix)."""


def require_prometheus_client() -> None:
    """Check the ``voxflow[metrics]`` extra is installed.

    Raises:
        MonitoringError: ``prometheus_client`` cannot be imported (the fix: the extra).
    """
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        raise MonitoringError(f"--metrics-port needs prometheus_client: {_FIX}") from None


def check_metrics_bind(host: str, token: str | None) -> None:
    """Refuse a metrics port reachable from other machines without a token.

    Raises:
        MonitoringError: ``host`` is not a loopback address and ``token`` is None.
    """
    if token is None and not _is_loopback(host):
        raise MonitoringError(
            f"--metrics-host {host} serves /metrics beyond this machine: set "
            f"{METRICS_TOKEN_VARIABLE} (a random token of 16+ characters; Prometheus sends "
            "it as a bearer token), or keep the default --metrics-host 127.0.0.1")


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class Monitor:
    """One process's metrics registry and its ``/metrics``, ``/health``, ``/ready``.

    Use it as an async context manager around the process's life: it starts the
    endpoints' thread and the event-loop watch on entry, stops both on exit. The
    process is not ready until :meth:`set_ready` (then every check added with
    :meth:`add_readiness` must pass too).

    Args:
        role: what the process is (``serve``, ``front-door``, ``call-worker``,
            ``jobs-worker``): the ``role`` label of ``voxflow_process_info``.
        host: bind address of the endpoints.
        port: their TCP port (0: any free port; :attr:`port` says which).
        token: the bearer token ``/metrics`` requires (None: none).
        stall_seconds: ``/health`` fails once the event loop has not turned this long.
        lag_interval: seconds between two looks at the event loop's lag.

    Raises:
        MonitoringError: ``prometheus_client`` is missing, or ``host`` is beyond
            loopback without a token.
    """

    def __init__(
        self, role: str, *, host: str = "127.0.0.1", port: int = 0, token: str | None = None,
        stall_seconds: float = 10.0, lag_interval: float = 0.25,
    ) -> None:
        require_prometheus_client()
        check_metrics_bind(host, token)
        if not 0 < lag_interval < stall_seconds:
            raise ValueError("lag_interval must be > 0 and shorter than stall_seconds")
        # here: the optional voxflow[metrics] extra (checked just above)
        from prometheus_client import (
            CollectorRegistry,
            Histogram,
            Info,
            ProcessCollector,
        )

        self.role = role
        self.host = host
        self.stall_seconds = float(stall_seconds)
        self.lag_interval = float(lag_interval)
        self._requested_port = port
        self._token = token
        self.registry: CollectorRegistry = CollectorRegistry(auto_describe=True)
        """Where the process's metrics are registered (scraped at ``/metrics``)."""
        ProcessCollector(registry=self.registry)
        Info("voxflow_process", "what this process is", registry=self.registry).info(
            {"role": role, "version": _version()})
        self._lag = Histogram(
            "voxflow_event_loop_lag_seconds", "how late the event loop ran a timer (a "
            "blocked loop delays every call's audio)", buckets=LAG_BUCKETS,
            registry=self.registry)
        self._readiness: list[Readiness] = []
        self._not_ready: str | None = "starting"
        self._turned_at = time.monotonic()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._watch: asyncio.Task[None] | None = None

    # -- readiness ----------------------------------------------------------------------

    def add_readiness(self, check: Readiness) -> None:
        """Add a check ``/ready`` runs (on the endpoints' thread: it must be thread-safe
        and quick, e.g. reading a flag or a counter)."""
        self._readiness.append(check)

    def set_ready(self) -> None:
        """The process serves from now on (subject to the readiness checks)."""
        self._not_ready = None

    def set_unready(self, reason: str) -> None:
        """The process takes nothing new from now on (stopping, draining)."""
        self._not_ready = reason

    def not_ready(self) -> str | None:
        """Why ``/ready`` fails now (None: ready)."""
        if self._not_ready is not None:
            return self._not_ready
        for check in self._readiness:
            try:
                reason = check()
            except Exception as exc:  # a broken check says so, never a traceback
                return f"the readiness check failed ({type(exc).__name__})"
            if reason is not None:
                return reason
        return None

    def not_live(self) -> str | None:
        """Why ``/health`` fails now: the event loop has not turned for ``stall_seconds``
        (None: it turns)."""
        if self._watch is None:
            return None  # not started: nothing to watch
        idle = time.monotonic() - self._turned_at
        if idle >= self.stall_seconds:
            return f"the event loop has not run for {idle:.1f} s"
        return None

    # -- lifetime ----------------------------------------------------------------------

    @property
    def port(self) -> int:
        """The bound port (once started)."""
        if self._server is None:
            return self._requested_port
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        """``http://host:port`` of the endpoints (once started)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    async def __aenter__(self) -> Monitor:
        self.start()
        self._turned_at = time.monotonic()
        self._watch = asyncio.get_running_loop().create_task(
            self._watch_loop(), name="voxflow.monitor.loop-lag")
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    def start(self) -> None:
        """Listen (idempotent).

        Raises:
            MonitoringError: the address cannot be bound (taken, not this machine's).
        """
        if self._server is not None:
            return
        try:
            server = _Server((self.host, self._requested_port), _handler_for(self))
        except (OSError, UnicodeError) as exc:
            raise MonitoringError(
                f"cannot serve the metrics on {self.host}:{self._requested_port} "
                f"({getattr(exc, 'strerror', None) or exc}): choose another --metrics-port, "
                "or a --metrics-host of this machine") from None
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, kwargs={
            "poll_interval": 0.2}, name="voxflow-monitor", daemon=True)
        self._thread.start()
        logger.info("metrics, health and readiness at %s (/metrics, /health, /ready)",
                    self.url, extra={"role": self.role})

    async def aclose(self) -> None:
        """Stop the loop watch and the endpoints (idempotent)."""
        self.set_unready("stopping")
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch
            self._watch = None
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is not None:
            await asyncio.to_thread(server.shutdown)
            server.server_close()
        if thread is not None:
            thread.join()

    async def _watch_loop(self) -> None:
        """Sleep ``lag_interval``, record how late the wake-up came, again."""
        loop = asyncio.get_running_loop()
        while True:
            began = loop.time()
            await asyncio.sleep(self.lag_interval)
            self._turned_at = time.monotonic()
            self._lag.observe(max(0.0, loop.time() - began - self.lag_interval))

    # -- the endpoints (on the server's threads) ------------------------------------------

    def _metrics(self, accept: str | None, authorization: str | None) -> tuple[int, str, bytes]:
        if self._token is not None and not _bearer_matches(authorization, self._token):
            return 401, "application/json", _json(
                {"error": "/metrics needs the metrics token: Authorization: Bearer <token>"})
        from prometheus_client.exposition import choose_encoder  # the voxflow[metrics] extra

        encoder, content_type = choose_encoder(accept or "")
        return 200, content_type, encoder(self.registry)

    def _status(self, authorization: str | None) -> tuple[int, str, bytes]:
        if self._token is not None and not _bearer_matches(authorization, self._token):
            return 401, "application/json", _json(
                {"error": "/status needs the metrics token: Authorization: Bearer <token>"})
        page = render_status(self.registry.collect(), ready=self.not_ready(),
                             live=self.not_live())
        return 200, "text/html; charset=utf-8", page.encode()

    def __repr__(self) -> str:
        return (f"Monitor({self.role!r}, {self.url}, ready={self.not_ready() is None}, "
                f"live={self.not_live() is None})")


def _bearer_matches(authorization: str | None, token: str) -> bool:
    scheme, _, given = (authorization or "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(),
                                                              token.encode())


def _json(body: dict[str, Any]) -> bytes:
    return (json.dumps(body) + "\n").encode()


def _version() -> str:
    try:
        return version("voxflow")
    except PackageNotFoundError:  # a checkout run without installing
        return "unknown"


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler]) -> None:
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, handler)


def _handler_for(monitor: Monitor) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "voxflow-monitor"
        sys_version = ""

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                status, kind, body = monitor._metrics(self.headers.get("Accept"),
                                                      self.headers.get("Authorization"))
            elif path == "/status":
                status, kind, body = monitor._status(self.headers.get("Authorization"))
            elif path in ("/health", "/ready"):
                reason = monitor.not_live() if path == "/health" else monitor.not_ready()
                status, kind = (200 if reason is None else 503), "application/json"
                body = _json({"status": "ok"} if reason is None
                             else {"status": "unavailable", "reason": reason})
            else:
                status, kind = 404, "application/json"
                body = _json({"error": "not found: GET /metrics, /status, /health or "
                                       "/ready"})
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            logger.debug("monitor: " + format, *args)

    return Handler
