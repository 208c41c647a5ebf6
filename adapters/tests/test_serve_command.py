"""``voxflow serve`` as an operator runs it: a subprocess, a favicon, and one structured
log line per call start and end (JSON with ``--log-format json``)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from voxflow_adapters.webrtc.client import LoopbackCaller
from voxflow_voice.engines.rates import WARM_UP_TEXT

pytestmark = pytest.mark.models

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "serve-test-token"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_listening(proc: subprocess.Popen[str], timeout: float = 120) -> str:
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if "listening" in line:
            return line
        if not line and proc.poll() is not None:
            raise AssertionError(f"serve exited {proc.returncode}: {proc.stderr.read()}")  # type: ignore[union-attr]
    raise AssertionError("serve did not start")


def test_serve_logs_each_call_as_json_and_serves_a_favicon() -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("VOXFLOW_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "voxflow.cli", "serve", "--port", str(port), "--token", TOKEN,
         "--ice-host", "127.0.0.1", "--log-format", "json"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        first = wait_for_listening(proc)
        assert f"http://127.0.0.1:{port}/" in first
        base = f"http://127.0.0.1:{port}"
        with urllib.request.urlopen(f"{base}/favicon.ico", timeout=10) as icon:
            assert icon.status == 200 and icon.headers["Content-Type"] == "image/svg+xml"
            assert icon.read().startswith(b"<svg")
        with urllib.request.urlopen(f"{base}/?token={TOKEN}", timeout=10) as page:
            assert b'rel="icon"' in page.read()

        async def one_call() -> str:
            caller = LoopbackCaller(base, TOKEN, send_audio=False)
            async with caller:
                await caller.wait_message("hello")
                caller.send({"v": 2, "type": "mute", "muted": True})  # refused: logged
                await caller.wait_message("error")
                caller.send({"v": 1, "type": "hangup"})
                await caller.wait_message("bye")
            assert caller.call_id is not None
            return caller.call_id

        call_id = asyncio.run(one_call())
        time.sleep(1.0)  # the server logs the end once the session has closed
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    records = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    assert all("time" in r and "level" in r and "logger" in r for r in records)
    assert "Traceback" not in err
    started = [r for r in records if r["message"] == "call started"]
    ended = [r for r in records if r["message"] == "call ended"]
    assert [r["call_id"] for r in started] == [call_id] == [r["call_id"] for r in ended]
    assert started[0]["session_id"] == ended[0]["session_id"]
    assert ended[0]["level"] == "INFO" and "hung up" in ended[0]["reason"]
    assert ended[0]["turns"] == 0 and ended[0]["duration_s"] >= 0
    # the peer logs without extra=: the call's id reaches it through the bound log context
    rejected = [r for r in records if r["message"].startswith("page message rejected")]
    assert [(r["level"], r.get("call_id")) for r in rejected] == [("WARNING", call_id)]
    info = [r for r in records if r["level"] == "INFO" and r.get("call_id") == call_id]
    assert info == started + ended  # one line at the start, one at the end


_MUTE_TTS = """
from voxflow_voice.engines.registry import EngineFactory


class Mute:
    sample_rate = 22050

    def synthesize(self, text, **options):
        return iter(())

    async def stream(self, text, **options):
        return
        yield


engine = EngineFactory(kind="tts", build=lambda options, context: Mute(), summary="mute")
"""


def test_serve_with_a_tts_that_fails_its_warm_up_says_so_in_one_line(tmp_path: Path) -> None:
    """The warm-up, before the first call, finds a TTS that says nothing: the operator
    reads one line naming it and the fix, not a traceback."""
    site = tmp_path / "site"
    info = site / "mute_tts-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: mute-tts\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[voxflow.tts]\nmute = mute_tts:engine\n")
    (site / "mute_tts.py").write_text(_MUTE_TTS)
    env = {k: v for k, v in os.environ.items() if not k.startswith("VOXFLOW_")}
    env.update(PYTHONPATH=str(site), VOXFLOW_HOME=str(tmp_path / "home"))
    done = subprocess.run(
        [sys.executable, "-m", "voxflow.cli", "serve", "--port", str(free_port()),
         "--token", TOKEN, "--ice-host", "127.0.0.1", "--tts", "mute"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert errors == [
        "error: the text-to-speech engine 'mute' (mute_tts:engine from mute-tts 0.1) said "
        f"nothing of the warm-up text {WARM_UP_TEXT!r}: it does not work here; check its "
        "voice and options (--tts, VOXFLOW_TTS; voxflow doctor lists the engines installed) "
        "or reinstall it: pip install --force-reinstall mute-tts"], done.stderr
    assert "listening" not in done.stdout


_NO_LIBOPUS = """
import ctypes.util, runpy, sys
from voxflow_adapters.webrtc import _libopus
_libopus._candidates = lambda: ["/opt/nowhere/libopus.so.0"]  # (none beside PyAV)
ctypes.util.find_library = lambda name: None  # (none on the system)
sys.argv = ["voxflow", *sys.argv[1:]]
runpy.run_module("voxflow.cli", run_name="__main__")
"""


def test_serve_without_libopus_exits_at_once_naming_the_fix(tmp_path: Path) -> None:
    """No libopus: ``voxflow serve`` says so in one line with the fix and exits 1 before
    it loads a model or listens (else every call would be refused)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("VOXFLOW_")}
    env["VOXFLOW_HOME"] = str(tmp_path / "home")
    done = subprocess.run(
        [sys.executable, "-c", _NO_LIBOPUS, "serve", "--port", str(free_port()),
         "--token", TOKEN, "--ice-host", "127.0.0.1"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    [error] = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert "libopus could not be loaded" in error and "uv sync --locked" in error
    assert "listening" not in done.stdout
