"""One trace from the front door to the call worker and the job worker: ``voxflow serve
--front-door``, ``--worker`` and ``voxflow jobs worker`` processes, each exporting by
OTLP (the OTEL_* variables) to a collector on loopback, a real aiortc caller. The front
door's ``voxflow.dispatch`` span is the parent of the worker's ``voxflow.offer`` (the W3C
traceparent travels in the offer's row), which is the parent of the ``voxflow.call``;
the job the caller's spoken turn starts runs in the job worker as a ``voxflow.job``
span under that turn's handler (the traceparent travels in the job's row). Real
PostgreSQL (skipped with its reason when none answers), the real models."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import re
import shlex
import signal
import subprocess
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from voxflow_adapters.testkit.flows import serve_processes
from voxflow_adapters.webrtc.client import LoopbackCaller
from voxflow_voice.engines import VoiceEngines


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
free_port, process, say = _processes.free_port, _processes.process, _processes.say

pytestmark = pytest.mark.models


def job_worker(flow_arg: str, env: dict[str, str], log: Path) -> subprocess.Popen[str]:
    """``voxflow jobs worker FLOW``, beating twice a second."""
    with log.open("a") as out:
        return subprocess.Popen([_processes.VOXFLOW, "jobs", "worker", flow_arg,
                                 "--heartbeat", "0.5", "--stalled-after", "5"],
                                cwd=_processes.ROOT, env=env, stdout=out, stderr=out,
                                text=True)


def readme_block() -> tuple[dict[str, str], dict[str, tuple[str, list[str]]]]:
    """The README's Traces block: its exported variables, and per ``serve`` role the
    service name and the options it gives."""
    text = (_HERE.parents[2] / "README.md").read_text()
    section = text[text.index("\n### Traces\n"):]
    [block] = re.findall(r"^```bash\n(.*?)^```$", section[: section.index("\n### ", 1)],
                         flags=re.M | re.S)
    exported: dict[str, str] = {}
    roles: dict[str, tuple[str, list[str]]] = {}
    for line in block.splitlines():
        words = shlex.split(line.replace('"$VOXFLOW_PAGE_TOKEN"', TOKEN))
        if words[0] == "export":
            exported.update(w.split("=", 1) for w in words[1:])
        else:
            service = words[0].split("=", 1)[1]
            assert words[1:3] == ["voxflow", "serve"], line
            roles[words[3]] = (service, words[4:])
    return exported, roles


async def test_a_dispatched_call_and_its_job_are_one_trace_across_the_processes(
    engines: VoiceEngines, pg_schema_url: str, tmp_path: Path
) -> None:
    """The README's configuration (its collector's address replaced by the test's)."""
    collector = Collector()
    exported, roles = readme_block()
    assert exported["OTEL_TRACES_EXPORTER"] == "otlp"
    exported["OTEL_EXPORTER_OTLP_ENDPOINT"] = collector.endpoint.removesuffix("/v1/traces")
    env = {**os.environ, **exported, "VOXFLOW_DATABASE_URL": pg_schema_url,
           "VOXFLOW_LOG_LEVEL": "INFO"}
    door_name, door_args = roles["--front-door"]
    worker_name, worker_args = roles["--worker"]
    port = free_port()
    door_args = [str(port) if a == "8080" else a for a in door_args]
    try:
        with ExitStack() as stack:
            worker, door = stack.enter_context(serve_processes(
                process(["--worker", *worker_args, "--ice-host", "127.0.0.1",
                         "--stale-after", str(STALE), "--drain-seconds", "5"], "is ready",
                        {**env, "OTEL_SERVICE_NAME": worker_name}, tmp_path / "worker.log"),
                process(["--front-door", *door_args, "--offer-timeout", "10",
                         "--stale-after", str(STALE)], "front door is listening",
                        {**env, "OTEL_SERVICE_NAME": door_name}, tmp_path / "door.log")))
            jobs = job_worker(  # the example assistant's, as the call worker
                "voxflow.examples.assistant:Assistant",
                {**env, "OTEL_SERVICE_NAME": "voxflow-jobs"}, tmp_path / "jobs.log")
            stack.callback(lambda: jobs.poll() is None and jobs.kill())
            caller = LoopbackCaller(f"http://127.0.0.1:{port}", TOKEN)
            await caller.connect()
            await caller.wait_message("hello", within=30)
            caller.say(say(engines, "Where is my order?"))  # its lookup: a queued job
            await caller.wait_for(
                lambda: any(_processes.SHIPPED in m["text"]
                            for m in caller.of_type("reply_text")),
                within=90, what="the lookup's result announced")
            await caller.aclose()
            for proc in (worker, door, jobs):  # a graceful stop flushes the spans
                os.kill(proc.pid, signal.SIGTERM)
                assert await asyncio.to_thread(proc.wait, 60) == 0
    finally:
        collector.close()
    found = collector.spans()
    (dispatch,) = [s for service, s in found if s.name == "voxflow.dispatch"
                   and service == door_name]
    (offer,) = [s for service, s in found if s.name == "voxflow.offer"
                and service == worker_name]
    (call,) = [s for service, s in found if s.name == "voxflow.call"
               and service == worker_name]
    assert offer.trace_id == dispatch.trace_id == call.trace_id
    assert offer.parent_span_id == dispatch.span_id
    assert call.parent_span_id == offer.span_id
    # the job: in the job worker, under the handler of the turn that started it
    (job,) = [s for service, s in found if s.name == "voxflow.job order_lookup"
              and service == "voxflow-jobs"]
    by_id = {s.span_id: s for _, s in found}
    handler = by_id[job.parent_span_id]
    turn = by_id[handler.parent_span_id]
    assert (handler.name, turn.name) == ("voxflow.handler", "voxflow.turn")
    assert turn.parent_span_id == call.span_id
    assert job.trace_id == call.trace_id
    attributes = {a.key: a.value.string_value for a in call.attributes}
    assert attributes["voxflow.call_id"] == caller.call_id
