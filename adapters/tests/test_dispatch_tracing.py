"""One trace from the front door to the call worker: ``voxflow serve --front-door`` and
``--worker`` processes, each exporting by OTLP (the OTEL_* variables) to a collector on
loopback, a real aiortc caller. The front door's ``voxflow.dispatch`` span is the
parent of the worker's ``voxflow.offer`` (the W3C traceparent travels in the offer's
row), which is the parent of the ``voxflow.call``. Real PostgreSQL (skipped with its
reason when none answers), the real models."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import signal
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from voxflow_adapters.webrtc.client import LoopbackCaller


def _load(path: Path, name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_HERE = Path(__file__).resolve()
Collector = _load(_HERE.parents[2] / "tests" / "otel.py", "_voxflow_tests_otel").Collector
_processes = _load(_HERE.with_name("test_call_dispatch_processes.py"), "_dispatch_processes")
STALE, TOKEN = _processes.STALE, _processes.TOKEN
free_port, process = _processes.free_port, _processes.process

pytestmark = pytest.mark.models


async def test_a_dispatched_call_is_one_trace_across_front_door_and_worker(
    pg_schema_url: str, tmp_path: Path
) -> None:
    collector = Collector()
    env = {**os.environ, "VOXFLOW_DATABASE_URL": pg_schema_url, "VOXFLOW_LOG_LEVEL": "INFO"}
    port = free_port()
    try:
        with ExitStack() as stack:
            worker = stack.enter_context(process(
                ["--worker", "--max-calls", "1", "--ice-host", "127.0.0.1",
                 "--stale-after", str(STALE), "--drain-seconds", "5"], "is ready",
                {**env, **collector.env("worker")}, tmp_path / "worker.log"))
            door = stack.enter_context(process(
                ["--front-door", "--port", str(port), "--token", TOKEN,
                 "--offer-timeout", "10", "--stale-after", str(STALE)],
                "front door is listening", {**env, **collector.env("door")},
                tmp_path / "door.log"))
            caller = LoopbackCaller(f"http://127.0.0.1:{port}", TOKEN)
            await caller.connect()
            await caller.wait_message("hello", within=30)
            await caller.aclose()
            for proc in (worker, door):  # a graceful stop flushes the spans
                os.kill(proc.pid, signal.SIGTERM)
                assert await asyncio.to_thread(proc.wait, 60) == 0
    finally:
        collector.close()
    found = collector.spans()
    (dispatch,) = [s for service, s in found if s.name == "voxflow.dispatch"
                   and service == "door"]
    (offer,) = [s for service, s in found if s.name == "voxflow.offer"
                and service == "worker"]
    (call,) = [s for service, s in found if s.name == "voxflow.call" and service == "worker"]
    assert offer.trace_id == dispatch.trace_id == call.trace_id
    assert offer.parent_span_id == dispatch.span_id
    assert call.parent_span_id == offer.span_id
    attributes = {a.key: a.value.string_value for a in call.attributes}
    assert attributes["voxflow.call_id"] == caller.call_id
