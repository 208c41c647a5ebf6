"""The OpenTelemetry SDK's in-memory span exporter as the process's tracer provider, for
one test (the global provider can be set once per process: the test swaps it in and out)."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import opentelemetry.trace as ot
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

__all__ = ["Collector", "by_name", "children", "spans"]


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    before = ot._TRACER_PROVIDER
    ot._TRACER_PROVIDER = provider
    try:
        yield exporter
    finally:
        ot._TRACER_PROVIDER = before
        provider.shutdown()


def by_name(finished: Sequence[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [s for s in finished if s.name == name]


def children(finished: Sequence[ReadableSpan], parent: ReadableSpan) -> list[ReadableSpan]:
    return sorted((s for s in finished
                   if s.parent is not None and s.parent.span_id == parent.context.span_id),
                  key=lambda s: s.start_time or 0)


class Collector:
    """An OTLP/HTTP trace collector on loopback (a thread): what a process configured by
    ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=<collector.endpoint>`` exports, decoded."""

    def __init__(self) -> None:
        received = self.received = []  # type: list[bytes]

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                received.append(self.rfile.read(int(self.headers["Content-Length"])))
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        self.endpoint = f"http://127.0.0.1:{self._server.server_port}/v1/traces"

    def env(self, service: str) -> dict[str, str]:
        """The variables that send a voxflow process's spans here."""
        return {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_SERVICE_NAME": service,
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": self.endpoint}

    def spans(self) -> list[tuple[str, Any]]:
        """(service.name, span) of every span received (protobuf ``Span`` messages)."""
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
        )

        out = []
        for body in self.received:
            for resource in ExportTraceServiceRequest.FromString(body).resource_spans:
                service = next((a.value.string_value for a in resource.resource.attributes
                                if a.key == "service.name"), "")
                out += [(service, s) for scope in resource.scope_spans for s in scope.spans]
        return out

    def close(self) -> None:
        self._server.shutdown()
