"""The OpenTelemetry export of a trace batch keeps to the batch's own clock.

An exporter has no clock: a batch exported before it was finished (its ``finished_at``
unset) ends its root span at the last time it records, not at the wall time of the
export (which, for a batch timed on a VirtualClock, stretched the root span by hours).
The ``opentelemetry`` API is stood in for by a small recording package on ``sys.path``
(the far side of the boundary: opentelemetry is not a dependency of voxflow).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from voxflow.conversation import TraceBatch, opentelemetry_exporter
from voxflow.conversation.tracing import TraceSpan

pytestmark = pytest.mark.unit

_TRACE_API = '''
SPANS = []

class Span:
    def __init__(self, name, start_time):
        self.name, self.start_time, self.end_time, self.attributes = name, start_time, None, {}
        SPANS.append(self)

    def set_attribute(self, key, value):
        self.attributes[key] = value

    def end(self, end_time=None):
        self.end_time = end_time

class Tracer:
    def start_span(self, name, context=None, start_time=None):
        return Span(name, start_time)

def get_tracer(name):
    return Tracer()

def set_span_in_context(span):
    return span
'''


@pytest.fixture
def recording_otel(tmp_path: Path) -> Iterator[Any]:
    package = tmp_path / "opentelemetry"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "trace.py").write_text(_TRACE_API)
    sys.path.insert(0, str(tmp_path))
    try:
        import opentelemetry.trace as trace

        yield trace
    finally:
        sys.path.remove(str(tmp_path))
        for name in [m for m in sys.modules if m.split(".")[0] == "opentelemetry"]:
            del sys.modules[name]


def test_an_unfinished_batch_ends_at_its_last_recorded_time(recording_otel: Any) -> None:
    exporter = opentelemetry_exporter()
    assert exporter is not None
    batch = TraceBatch(flow_name="Teller", started_at=100.0, spans=[
        TraceSpan(span_id=1, name="turn 1", kind="turn", start=100.5, end=102.0),
        TraceSpan(span_id=2, name="turn 2", kind="turn", start=103.0),  # still running
    ])
    exporter.export(batch)
    ns = 1_000_000_000
    root, first, second = recording_otel.SPANS
    assert root.name == "Teller session"
    assert (root.start_time, root.end_time) == (100 * ns, 103 * ns)
    assert (first.start_time, first.end_time) == (int(100.5 * ns), 102 * ns)
    assert second.end_time == 103 * ns  # an open span ends with the batch


def test_a_finished_batch_ends_when_it_finished(recording_otel: Any) -> None:
    exporter = opentelemetry_exporter()
    assert exporter is not None
    exporter.export(TraceBatch(flow_name="Teller", started_at=10.0, finished_at=12.5))
    (root,) = recording_otel.SPANS
    assert root.end_time == int(12.5 * 1_000_000_000)
