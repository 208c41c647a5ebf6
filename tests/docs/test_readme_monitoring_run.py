"""The README's "Monitoring" section, run: its shell block as written (a front door, a
call worker and a job worker, each with its metrics port, and Prometheus), its
``prometheus.yml`` as written, a real aiortc caller's call through the processes, and
the figures read back through Prometheus's HTTP API: the calls, the turns' voice to
voice bucket by bucket against the latencies the page was sent, the announcement, the
job the job worker ran, and ``/health``, ``/ready`` and the token on every process.

The test owns only what it must: the database (a fresh schema of the test server), the
page token, the ports (each of the block's ports mapped to a free one, in the commands
and in ``prometheus.yml`` alike) and Prometheus's storage folder and listen address.
It needs Debian's ``prometheus`` (``.ci/run`` installs it): skipped, saying so, without.
"""

from __future__ import annotations

import asyncio
import bisect
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from voxflow_adapters.hosting.metrics import LATENCY_BUCKETS
from voxflow_adapters.testkit import flows
from voxflow_adapters.testkit.flows import free_port
from voxflow_adapters.webrtc.client import LoopbackCaller
from voxflow_voice.audio import AudioChunk
from voxflow_voice.engines import VoiceEngines

pytestmark = pytest.mark.models

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PAGE_TOKEN = "monitoring-readme-token"
SHIPPED = "has shipped"
READY = {"--front-door": "front door is listening", "--worker": "is ready"}


def section() -> str:
    """The section's metrics part (its Traces and Logs have tests of their own)."""
    text = README.read_text()
    found = text[text.index("\n## Monitoring\n"):]
    return found[: found.index("\n### Traces\n", 1)]


def shell_block() -> list[str]:
    [block] = re.findall(r"^```bash\n(.*?)^```$", section(), flags=re.M | re.S)
    return [line for line in block.splitlines() if line.strip()]


def prometheus_yml() -> str:
    [block] = re.findall(r"^```yaml\n(.*?)^```$", section(), flags=re.M | re.S)
    return block


def test_the_block_monitors_every_role_with_the_configured_targets() -> None:
    lines = shell_block()
    starts = [shlex.split(line) for line in lines if line.startswith(("voxflow ", "prometheus "))]
    ports = [argv[argv.index("--metrics-port") + 1] for argv in starts if argv[0] == "voxflow"]
    assert len(ports) == 3 and len(set(ports)) == 3
    assert sum("--front-door" in argv for argv in starts) == 1
    assert sum("--worker" in argv for argv in starts) == 1
    assert any(argv[:3] == ["voxflow", "jobs", "worker"] for argv in starts)
    config = prometheus_yml()
    assert all(f"127.0.0.1:{port}" in config for port in ports)
    assert "credentials_file: voxflow-metrics-token" in config
    assert any("voxflow-metrics-token" in line and "VOXFLOW_METRICS_TOKEN" in line
               for line in lines)


def say(engines: VoiceEngines, text: str) -> AudioChunk:
    samples = np.concatenate([np.asarray(s.samples, np.float32)
                              for s in engines.tts.synthesize(text)])
    return AudioChunk.from_float(samples, engines.tts.sample_rate)


def get(url: str, token: str | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except (urllib.error.URLError, ConnectionError):
        return 0, ""


class PrometheusApi:
    """Instant queries to a Prometheus server's HTTP API."""

    def __init__(self, base: str) -> None:
        self.base = base

    def query(self, promql: str) -> list[dict[str, Any]]:
        status, body = get(f"{self.base}/api/v1/query?"
                           + urllib.parse.urlencode({"query": promql}))
        assert status == 200, body
        answer = json.loads(body)
        assert answer["status"] == "success", answer
        result: list[dict[str, Any]] = answer["data"]["result"]
        return result

    def value(self, promql: str) -> float | None:
        """The one sample of ``promql`` (None: no series)."""
        result = self.query(promql)
        assert len(result) <= 1, result
        return float(result[0]["value"][1]) if result else None

    def wait(self, promql: str, expected: float, within: float = 90.0) -> None:
        deadline = time.monotonic() + within
        while (got := self.value(promql)) != expected:
            assert time.monotonic() < deadline, f"{promql} = {got}, never {expected}"
            time.sleep(1.0)


def bucket_counts(seconds: list[float]) -> dict[str, float]:
    """The cumulative ``le`` counts the exported histogram gives ``seconds``."""
    edges = [*LATENCY_BUCKETS, float("inf")]
    counts = {("+Inf" if e == float("inf") else f"{e}"): 0.0 for e in edges}
    for value in seconds:
        for edge in edges[bisect.bisect_left(edges, value):]:
            counts["+Inf" if edge == float("inf") else f"{edge}"] += 1
    return counts


def test_the_monitoring_block_serves_a_call_prometheus_reads_back(
    voice_engines: VoiceEngines, pg_schema_url: str, tmp_path: Path
) -> None:
    prometheus = shutil.which("prometheus")
    if prometheus is None:
        pytest.skip("no prometheus binary (apt-get install prometheus; .ci/run does)")
    lines = shell_block()
    preamble = [line for line in lines if not line.startswith(("voxflow ", "prometheus "))]
    starts = [line for line in lines if line.startswith(("voxflow ", "prometheus "))]
    # the block's ports, each mapped to a free one (in the commands and the config alike)
    mapped = {port: str(free_port()) for port in re.findall(r"--metrics-port (\d+)", "\n".join(
        lines))}
    door_port, prometheus_port = free_port(), free_port()
    config = prometheus_yml()
    for old, new in mapped.items():
        config = config.replace(f"127.0.0.1:{old}", f"127.0.0.1:{new}")
    (tmp_path / "prometheus.yml").write_text(config)
    # the preamble as the shell runs it (the database URL is the test's own)
    bin_dir = str(Path(sys.executable).parent)  # this checkout's `voxflow`
    base_env = {**os.environ, "VOXFLOW_PAGE_TOKEN": PAGE_TOKEN,
                "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    script = "\n".join(line for line in preamble
                       if not line.startswith("export VOXFLOW_DATABASE_URL="))
    dumped = subprocess.run(["bash", "-c", f"set -e\n{script}\nenv -0"], cwd=tmp_path,
                            env=base_env, capture_output=True, check=True).stdout
    env = dict(item.split("=", 1) for item in dumped.decode().split("\0") if "=" in item)
    env["VOXFLOW_DATABASE_URL"] = pg_schema_url
    token = env["VOXFLOW_METRICS_TOKEN"]
    assert len(token) >= 16 and (tmp_path / "voxflow-metrics-token").read_text().strip() == token

    def own(line: str) -> str:
        line = re.sub(r"(--port )\d+\b", rf"\g<1>{door_port}", line)
        for old, new in mapped.items():
            line = line.replace(f"--metrics-port {old}", f"--metrics-port {new}")
        if line.startswith("prometheus "):
            line += (f" --storage.tsdb.path={tmp_path / 'tsdb'}"
                     f" --web.listen-address=127.0.0.1:{prometheus_port}")
        return line

    api = PrometheusApi(f"http://127.0.0.1:{prometheus_port}")
    instance = {}
    with ExitStack() as stack:
        servers: list[flows.ServeCommand] = []
        for n, line in enumerate(starts):
            argv = ["bash", "-c", f"exec {own(line)}"]  # the line, as the shell runs it
            role = next((r for r in READY if r in line), None)
            if role is None:  # the job worker and Prometheus print no ready line
                log = stack.enter_context((tmp_path / f"{n}.log").open("w"))
                proc = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=log, stderr=log,
                                        text=True)
                stack.callback(stop, proc)
            else:  # (started below, at once)
                servers.append(flows.ServeCommand(
                    argv, cwd=tmp_path, env=env, log=tmp_path / f"{n}.log",
                    ready=READY[role], stop=signal.SIGTERM, name=line))
            if line.startswith("voxflow "):
                port = mapped[re.search(r"--metrics-port (\d+)", line).group(1)]  # type: ignore[union-attr]
                instance[role or "jobs"] = f"127.0.0.1:{port}"
        stack.enter_context(flows.serve_processes(*servers))
        for where in instance.values():
            wait_until(lambda w=where: get(f"http://{w}/ready")[0] == 200, 120,  # type: ignore[misc]
                       f"{where}/ready")
        wait_until(lambda: get(f"{api.base}/-/ready")[0] == 200, 60, "prometheus")
        for where in instance.values():
            assert get(f"http://{where}/health") == (200, '{"status": "ok"}\n')
            assert get(f"http://{where}/metrics")[0] == 401  # the token guards it
            assert get(f"http://{where}/metrics", token)[0] == 200
        latencies, fleet = asyncio.run(call(voice_engines, door_port, env, tmp_path))
        # Prometheus scrapes every 5 s (the README's interval): the call's end shows
        worker, door, jobs = instance["--worker"], instance["--front-door"], instance["jobs"]
        api.wait(f'voxflow_calls_ended_total{{instance="{worker}"}}', 1)
        api.wait(f'voxflow_jobs{{instance="{jobs}",state="succeeded"}}', 1)
        for where in instance.values():
            assert api.value(f'up{{instance="{where}"}}') == 1
            assert (api.value(f'voxflow_event_loop_lag_seconds_count{{instance="{where}"}}')
                    or 0) > 0
        assert {r["metric"]["role"] for r in api.query("voxflow_process_info")} == {
            "front-door", "call-worker", "jobs-worker"}
        assert api.value(f'voxflow_calls_admitted_total{{instance="{door}"}}') == 1
        assert api.value(f'voxflow_calls_admitted_total{{instance="{worker}"}}') == 1
        assert api.value(f'voxflow_calls_active{{instance="{worker}"}}') == 0
        # at most --max-calls 4: below it, the measured cost and the machine's other work
        slots = api.value(f'voxflow_call_slots{{instance="{worker}"}}')
        assert slots is not None and 1 <= slots <= 4
        assert api.value(f'voxflow_stale_samples_total{{instance="{worker}"}}') == 0
        assert api.value(f'voxflow_announcements_queued_total{{instance="{worker}"}}') == 1
        assert api.value(f'voxflow_announcements_settled_total{{instance="{worker}",'
                         'status="completed"}') == 1
        assert api.value(f'voxflow_job_queue_up{{instance="{jobs}"}}') == 1
        # the worker's page for a person says the same
        status, page = get(f"http://{worker}/status", token)
        assert status == 200 and "<th>calls admitted</th><td>1</td>" in page
        assert "<th>stale samples (must stay 0)</th><td>0</td>" in page
        # the turns' voice to voice: bucket by bucket, the latencies the page was sent
        exported = {r["metric"]["le"]: float(r["value"][1]) for r in api.query(
            f'voxflow_voice_to_voice_seconds_bucket{{instance="{worker}"}}')}
        assert exported == bucket_counts([ms / 1000.0 for ms in latencies])
        assert api.value(f'voxflow_turns_total{{instance="{worker}"}}') == len(latencies)
        median = api.value("histogram_quantile(0.5, sum by (le) "
                           f'(voxflow_voice_to_voice_seconds_bucket{{instance="{worker}"}}))')
        assert median is not None and 0 < median <= LATENCY_BUCKETS[-1]
    # `voxflow status` during the call: the worker, its one call, the job worker, the job
    during, after = fleet
    [row] = during["workers"]
    assert (row["slots"], row["used"], row["draining"]) == (4, 1, False)
    assert row["heartbeat_age"] < 5
    [live] = during["calls"]
    assert live["worker_id"] == row["worker_id"] and live["call_id"] == during["caller"]
    assert len(during["job_workers"]) == 1
    assert after["jobs"]["jobs"]["succeeded"] == 1 and after["pending_jobs"] == []


async def call(engines: VoiceEngines, port: int, env: dict[str, str], cwd: Path
               ) -> tuple[list[float], tuple[dict[str, Any], dict[str, Any]]]:
    """One call through the front door: the order question, its answer and the job
    worker's announcement, a hang-up; the voice to voice (ms) of each answered turn, as
    the page's latency messages said, and ``voxflow status --json`` during the call and
    once the job is done."""
    async with LoopbackCaller(f"http://127.0.0.1:{port}", PAGE_TOKEN) as caller:
        await caller.wait_message("hello", within=60)
        during = await asyncio.to_thread(status, env, cwd)
        during["caller"] = caller.call_id
        caller.say(say(engines, "Where is my order?"))
        await caller.wait_message("reply_done", within=120)
        await caller.wait_for(
            lambda: any(SHIPPED in m.get("text", "") for m in caller.of_type("reply_text")),
            within=120, what="the job worker's result, announced")
        announcement = next(m["delivery_id"] for m in caller.of_type("reply_text")
                            if SHIPPED in m["text"])
        await caller.wait_message("reply_done", within=120, delivery_id=announcement)
        await caller.wait_message("latency", within=30)
        after = await asyncio.to_thread(status, env, cwd)
        caller.send({"v": 1, "type": "hangup"})
        await caller.wait_message("bye", within=30)
        return [m["first_audio_ms"] for m in caller.of_type("latency")
                if m["first_audio_ms"] is not None], (during, after)


def status(env: dict[str, str], cwd: Path) -> dict[str, Any]:
    """``voxflow status --json`` of the deployment."""
    done = subprocess.run(["voxflow", "status", "--json"], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    found: dict[str, Any] = json.loads(done.stdout)
    return found


def wait_until(ready: Any, within: float, what: str) -> None:
    deadline = time.monotonic() + within
    while not ready():
        assert time.monotonic() < deadline, f"{what} not ready within {within:g} s"
        time.sleep(0.5)


def stop(proc: subprocess.Popen[str]) -> None:
    """SIGTERM (a job worker lets its running jobs finish), then kill if it lingers."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=30)
