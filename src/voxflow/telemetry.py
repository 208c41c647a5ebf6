"""Traces with OpenTelemetry: spans of calls, turns, handlers, LLM and tool calls.

Off by default, and free when off: every helper here checks :func:`tracing_enabled`
(one attribute read) and does nothing else. Tracing is on when the OpenTelemetry SDK
(the ``voxflow[tracing]`` extra) is installed and a tracer provider is set, either

* by the application (``opentelemetry.trace.set_tracer_provider(TracerProvider(...))``,
  e.g. a test's in-memory exporter), or
* by :func:`configure_tracing`, which every ``voxflow`` command calls: it sets one up
  only when the standard variables ask for an exporter (``OTEL_TRACES_EXPORTER=otlp``
  or ``console``, or an ``OTEL_EXPORTER_OTLP_ENDPOINT`` /
  ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``); the exporter then reads the rest of the
  ``OTEL_*`` variables (endpoint, headers, protocol), ``OTEL_SERVICE_NAME`` and
  ``OTEL_RESOURCE_ATTRIBUTES`` name the process. Nothing leaves the machine otherwise.

LLM spans follow OpenTelemetry's GenAI semantic conventions (``chat {model}``,
``gen_ai.*`` attributes, ``execute_tool {name}`` for a tool). Message content (the
prompt, the answer, a tool's arguments and result, a turn's transcript) stays out of
every span unless :func:`set_capture_content` (``VOXFLOW_TRACE_CONTENT=true``, or
OpenTelemetry's ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``) opts in.

A trace crosses processes as a W3C ``traceparent``: :func:`inject_context` writes the
current one into a payload's mapping (a dispatched call, a queued job) and
:func:`extract_context` reads it on the far side.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import os
import time
from collections.abc import Iterator, Mapping, MutableMapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from opentelemetry.trace import Span

__all__ = [
    "CONTENT_VARIABLES",
    "WallClock",
    "capture_content",
    "configure_tracing",
    "current_trace_ids",
    "extract_context",
    "fail",
    "inject_context",
    "now_ns",
    "set_capture_content",
    "start_span",
    "trace_span",
    "tracing_enabled",
    "turn_span",
    "use_clock",
]

logger = logging.getLogger(__name__)

CONTENT_VARIABLES = ("VOXFLOW_TRACE_CONTENT", "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT")
"""Either, ``true``, puts message content in spans (read by :func:`configure_tracing`)."""

_TRACER_NAME = "voxflow"


class _State:
    """What the process decided; read on every span, so plain attributes."""

    __slots__ = ("content", "provider", "trace", "tracer")

    def __init__(self) -> None:
        self.provider: Any = None  # the provider the tracer came from
        self.tracer: Any = None  # None: tracing off
        self.trace: Any = None  # the opentelemetry.trace module once imported
        self.content = False


_state = _State()


def _sdk_provider(provider: Any) -> bool:
    """A provider that records spans (the SDK's, or any non-default one)."""
    name = type(provider).__name__
    return name not in ("ProxyTracerProvider", "NoOpTracerProvider")


def tracing_enabled() -> bool:
    """True when spans are recorded (the SDK installed and a tracer provider set)."""
    trace = _state.trace
    if trace is None:
        try:
            # here: the optional voxflow[tracing] extra (import voxflow stays light)
            import opentelemetry.trace as trace
        except ImportError:
            return False
        _state.trace = trace
    provider = trace.get_tracer_provider()
    if provider is not _state.provider:
        _state.provider = provider
        _state.tracer = (provider.get_tracer(_TRACER_NAME) if _sdk_provider(provider)
                         else None)
    return _state.tracer is not None


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def set_capture_content(enabled: bool) -> None:
    """Put message content in spans (``gen_ai.input.messages`` and the like) or not."""
    _state.content = bool(enabled)


def capture_content() -> bool:
    """Whether spans carry message content (off by default)."""
    return _state.content


def configure_tracing(
    environ: Mapping[str, str] | None = None, *, capture: bool | None = None
) -> bool:
    """Set up the OpenTelemetry SDK from the standard ``OTEL_*`` variables, if they ask
    for an exporter and the application set no tracer provider of its own; returns
    whether tracing is on.

    Args:
        environ: the variables (``os.environ`` if None).
        capture: message content in spans; None reads :data:`CONTENT_VARIABLES`.
    """
    env = os.environ if environ is None else environ
    set_capture_content(capture if capture is not None
                        else any(_truthy(env.get(v)) for v in CONTENT_VARIABLES))
    if _truthy(env.get("OTEL_SDK_DISABLED")):
        return False
    exporters = [e.strip().lower() for e in env.get("OTEL_TRACES_EXPORTER", "").split(",")
                 if e.strip()]
    if not exporters and (env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
                          or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")):
        exporters = ["otlp"]
    exporters = [e for e in exporters if e != "none"]
    if not exporters or tracing_enabled():
        return tracing_enabled()
    try:
        # here: the optional voxflow[tracing] extra (import voxflow stays light)
        from opentelemetry import trace
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter
    except ImportError:
        logger.warning("OTEL_TRACES_EXPORTER is set but the OpenTelemetry SDK is not "
                       "installed: pip install 'voxflow[tracing]'")
        return False
    resource = Resource.create(
        {} if env.get("OTEL_SERVICE_NAME") else {"service.name": "voxflow"})
    provider = TracerProvider(resource=resource)
    for name in exporters:
        if name == "console":
            provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
        elif name == "otlp":
            try:
                # here: the optional voxflow[tracing] extra (import voxflow stays light)
                from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
                    OTLPSpanExporter,
                )
            except ImportError:
                logger.warning("OTEL_TRACES_EXPORTER=otlp needs the OTLP exporter: "
                               "pip install 'voxflow[tracing]'")
                continue
            provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        else:
            logger.warning("OTEL_TRACES_EXPORTER=%s is not one voxflow sets up (otlp, "
                           "console); no spans go there", name)
    trace.set_tracer_provider(provider)
    return tracing_enabled()


class WallClock:
    """Unix nanoseconds (what spans take) for readings of a session's clock: the wall
    time when it was made plus the clock's time since, so a span lasts what the clock
    says (a VirtualClock's time in tests) and a wall-clock step never makes one negative.
    """

    __slots__ = ("_clock", "_origin")

    def __init__(self, clock: Any) -> None:
        self._clock = clock
        self._origin = (time.time(), clock.now())

    def ns(self, reading: float | None = None) -> int:
        """``reading`` (default: now) on the clock, in Unix nanoseconds."""
        wall, at = self._origin
        value = self._clock.now() if reading is None else reading
        return int((wall + (value - at)) * 1_000_000_000)


_span_clock: contextvars.ContextVar[WallClock | None] = contextvars.ContextVar(
    "voxflow_span_clock", default=None)


@contextlib.contextmanager
def use_clock(clock: WallClock) -> Iterator[None]:
    """Time the spans of the block (and of the tasks it starts) on ``clock``: a voice
    session's, so its flow's spans and LLM calls share its time (its VirtualClock's in a
    simulated call) instead of the machine's."""
    token = _span_clock.set(clock)
    try:
        yield
    finally:
        _span_clock.reset(token)


def now_ns() -> int | None:
    """Now on the span clock in force (:func:`use_clock`), or None: the SDK's own time."""
    clock = _span_clock.get()
    return None if clock is None else clock.ns()


def _clean(attributes: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in attributes.items():
        if value is None:
            continue
        if isinstance(value, str | bool | int | float):
            out[key] = value
        elif isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
            out[key] = list(value)
        else:
            out[key] = json.dumps(value, default=str)
    return out


def start_span(
    name: str,
    attributes: Mapping[str, Any] | None = None,
    *,
    kind: str = "internal",
    start_ns: int | None = None,
    parent: Span | None = None,
    context: Any = None,
) -> Span | None:
    """Start a span (not made current) under ``parent``, ``context`` or the current span;
    None when tracing is off. The caller ends it (``span.end(end_time=...)``)."""
    if not tracing_enabled():
        return None
    trace = _state.trace
    if parent is not None:
        context = trace.set_span_in_context(parent)
    return _state.tracer.start_span(  # type: ignore[no-any-return]
        name, context=context, kind=getattr(trace.SpanKind, kind.upper()),
        attributes=_clean(attributes or {}),
        start_time=start_ns if start_ns is not None else now_ns())


@contextlib.contextmanager
def trace_span(
    name: str,
    attributes: Mapping[str, Any] | None = None,
    *,
    kind: str = "internal",
    start_ns: int | None = None,
    end_ns: Any = None,
    context: Any = None,
) -> Iterator[Span | None]:
    """A span made current for the block (its tasks and LLM calls are its children);
    None, and no cost, when tracing is off. An exception marks it failed
    (``error.type``) and propagates. ``end_ns``: a callable giving its end time."""
    span = start_span(name, attributes, kind=kind, start_ns=start_ns, context=context)
    if span is None:
        yield None
        return
    trace = _state.trace
    token = _attach(trace.set_span_in_context(span))
    try:
        yield span
    except BaseException as exc:
        fail(span, exc)
        raise
    finally:
        _detach(token)
        span.end(end_time=end_ns() if end_ns is not None else now_ns())



@contextlib.contextmanager
def turn_span(
    session_id: str,
    turn_id: str,
    attributes: Mapping[str, Any] | None = None,
    *,
    start_ns: int | None = None,
    end_ns: Any = None,
) -> Iterator[Span | None]:
    """A turn's ``voxflow.turn`` span, made current while it is answered (the flow's
    ``voxflow.handler`` span and its LLM and tool calls are its children), for a text
    turn and a voice turn alike: its ids, then ``attributes``; ``start_ns``/``end_ns`` as
    :func:`trace_span` (a voice turn starts at the user's last speech sample)."""
    ids = {"voxflow.session_id": str(session_id), "voxflow.turn_id": str(turn_id)}
    with trace_span("voxflow.turn", {**ids, **(attributes or {})}, start_ns=start_ns,
                    end_ns=end_ns) as span:
        yield span

def fail(span: Span | None, exc: BaseException | str) -> None:
    """Mark ``span`` failed: ``error.type`` and an ERROR status (a cancel is not an error
    of ours, but is named so a cut turn reads as such)."""
    if span is None:
        return
    # here: the optional voxflow[tracing] extra (import voxflow stays light)
    from opentelemetry.trace import Status, StatusCode

    name = exc if isinstance(exc, str) else type(exc).__name__
    span.set_attribute("error.type", name)
    if name not in ("CancelledError", "GeneratorExit"):
        span.set_status(Status(StatusCode.ERROR, name))


def _attach(ctx: Any) -> Any:
    # here: the optional voxflow[tracing] extra (import voxflow stays light)
    from opentelemetry import context

    return context.attach(ctx)


def _detach(token: Any) -> None:
    # here: the optional voxflow[tracing] extra (import voxflow stays light)
    from opentelemetry import context

    context.detach(token)


def inject_context(carrier: MutableMapping[str, str]) -> MutableMapping[str, str]:
    """Write the current trace context (``traceparent``, ``tracestate``) into ``carrier``
    when tracing is on; returns it."""
    if tracing_enabled():
        # here: the optional voxflow[tracing] extra (import voxflow stays light)
        from opentelemetry.propagate import inject

        inject(carrier)
    return carrier


def extract_context(carrier: Mapping[str, Any] | None) -> Any:
    """The trace context a payload carries (for ``trace_span(context=...)``), or None."""
    if not carrier or not tracing_enabled() or "traceparent" not in carrier:
        return None
    # here: the optional voxflow[tracing] extra (import voxflow stays light)
    from opentelemetry.propagate import extract

    return extract({k: v for k, v in carrier.items() if isinstance(v, str)})


def current_trace_ids() -> tuple[str, str] | None:
    """(trace_id, span_id) of the current span, as hex, or None (off, or no span)."""
    trace = _state.trace
    if trace is None or _state.tracer is None:
        return None
    ctx = trace.get_current_span().get_span_context()
    if not ctx.is_valid:
        return None
    return f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}"
