"""The OpenTelemetry SDK's in-memory span exporter as the process's tracer provider, for
one test (the global provider can be set once per process: the test swaps it in and out)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import opentelemetry.trace as ot
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

__all__ = ["by_name", "children", "spans"]


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
