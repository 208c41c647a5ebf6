"""LocalAudio on real PortAudio streams: ALSA's user-space ``file`` PCM as the sound card.

An ``.asoundrc`` in a temporary HOME makes ALSA's default device a pair of ``file``
plugins: capture reads a known raw file (a 16 kHz S16_LE chirp), playback writes what
was played to another raw file. PortAudio opens them like any sound card, so the real
:class:`~voxflow_adapters.local.SoundDeviceBackend` and sounddevice callbacks carry the
audio. (ALSA's ``null`` slave is not paced by a clock, so the streams run faster than
real time; nothing here depends on time.)

Each case runs in a subprocess, because ALSA and PortAudio read the configuration once
per process (and HOME must point at it before they do).
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from voxflow_voice.audio import STT_SAMPLE_RATE
from voxflow_voice.testing import CHECKS

pytestmark = pytest.mark.device

RATE = 48_000

ASOUNDRC = """
pcm.!default {{
    type asym
    playback.pcm "voxout"
    capture.pcm "voxin"
}}
pcm.voxout {{
    type plug
    slave {{ pcm "voxoutfile" format S16_LE rate {rate} channels 1 }}
}}
pcm.voxoutfile {{
    type file
    slave.pcm "null"
    file "{out}"
    format "raw"
}}
pcm.voxin {{
    type plug
    slave {{ pcm "voxinfile" format S16_LE rate 16000 channels 1 }}
}}
pcm.voxinfile {{
    type file
    slave.pcm "null"
    file "/dev/null"
    infile "{inp}"
    format "raw"
}}
"""

CALL = textwrap.dedent("""
    import asyncio, json, sys
    import numpy as np
    from voxflow_adapters.local import LocalAudio, LocalAudioSettings
    from voxflow_voice.audio import ReplyChunk
    from voxflow_voice.transport import PlaybackReceipt, PlaybackDrained
    from voxflow.ids import DeliveryId

    async def main(workdir):
        reply = np.load(workdir + "/reply.npy")
        settings = LocalAudioSettings(input_rate=16000, output_rate=48000, stall_timeout=30)
        async with LocalAudio(settings) as audio:
            stats = audio.statistics()
            delivery = DeliveryId("d-1")
            # One chunk: the file PCM is unpaced and its callback runs on PortAudio's
            # thread, so between two writes (an await, or only a GIL switch) it could play
            # the first and then a period of silence (seen twice in CI). The receipts
            # still come one per callback period, so their order and coverage are checked.
            await audio.wait_writable()
            audio.write_nowait(ReplyChunk.from_float(
                reply, 48000, delivery_id=delivery, segment_id=1, start_sample=0))
            receipts, drained = [], False
            async for obs in audio.observations():
                if isinstance(obs, PlaybackReceipt):
                    receipts.append([obs.start_sample, obs.num_samples, obs.sample_rate])
                elif isinstance(obs, PlaybackDrained):
                    drained = obs.delivery_id == delivery
                    break
            mic, count = [], 0
            async for chunk in audio.audio_input():
                mic.append(chunk.samples())
                count += chunk.num_samples
                if count >= 8000:
                    break
        np.save(workdir + "/mic.npy", np.concatenate(mic))
        json.dump({"receipts": receipts, "drained": drained,
                   "rates": [stats.input_rate, stats.output_rate]},
                  open(workdir + "/result.json", "w"))

    asyncio.run(main(sys.argv[1]))
""")


CONFORMANCE = textwrap.dedent("""
    import asyncio, contextlib, json, sys
    from voxflow_adapters.local import LocalAudio, LocalAudioSettings
    from voxflow_voice.testing import TransportHarness, check_transport

    @contextlib.asynccontextmanager
    async def local():
        settings = LocalAudioSettings(input_rate=16000, output_rate=48000, stall_timeout=30)
        async with LocalAudio(settings) as audio:
            async def mute(muted):
                audio.set_muted(muted)
            yield TransportHarness(audio, sleep=asyncio.sleep, close=audio.aclose, mute=mute)

    report = asyncio.run(check_transport(local))
    json.dump(report, open(sys.argv[1] + "/result.json", "w"))
""")


def chirp(seconds: float, rate: int) -> np.ndarray:
    t = np.arange(round(seconds * rate)) / rate
    return (0.4 * np.sin(2 * np.pi * (200 * t + 300 * t * t))).astype(np.float32)


def to_s16(x: np.ndarray) -> np.ndarray:
    return np.clip(np.round(x * 32768.0), -32768, 32767).astype("<i2")


@pytest.fixture
def alsa_home(tmp_path: Path) -> Path:
    try:
        import sounddevice  # noqa: F401 - PortAudio loads here
    except OSError as exc:  # CI installs libportaudio2 (.ci/run); say so if it is missing
        pytest.skip(f"PortAudio is missing ({exc}): apt-get install libportaudio2")
    (tmp_path / ".asoundrc").write_text(ASOUNDRC.format(
        rate=RATE, out=tmp_path / "out.raw", inp=tmp_path / "in.raw"))
    to_s16(chirp(4.0, STT_SAMPLE_RATE)).tofile(tmp_path / "in.raw")
    return tmp_path


def run_call(home: Path, code: str = CALL) -> dict[str, object]:
    env = {**os.environ, "HOME": str(home)}
    env.pop("ALSA_CONFIG_PATH", None)
    done = subprocess.run([sys.executable, "-c", code, str(home)], env=env, timeout=120,
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, object] = json.loads((home / "result.json").read_text())
    return result


def test_real_streams_carry_the_samples_both_ways(alsa_home: Path) -> None:
    # Exactly representable in s16, so the file must hold the very same numbers.
    reply = to_s16(chirp(0.3, RATE) * 0.5).astype(np.float32) / 32768.0
    np.save(alsa_home / "reply.npy", reply)
    result = run_call(alsa_home)
    # Playback: the file holds the reply, sample for sample, after the device's priming
    # silence; receipts cover exactly the samples written, in order.
    out = np.fromfile(alsa_home / "out.raw", dtype="<i2")
    expected = to_s16(reply)
    start = int(np.flatnonzero(out)[0])
    first = int(np.flatnonzero(expected)[0])
    assert np.array_equal(out[start - first : start - first + expected.size], expected)
    receipts = result["receipts"]
    assert isinstance(receipts, list)
    assert sum(r[1] for r in receipts) == reply.size and len(receipts) > 1  # (per period)
    assert receipts[0][0] == 0 and all(r[2] == RATE for r in receipts)
    assert all(a[0] + a[1] == b[0] for a, b in itertools.pairwise(receipts))
    assert result["drained"] is True
    # Capture: every 20 ms block the microphone gave is the known file, bit for bit, in
    # file order. (The unpaced `file` PCM skips whole periods of its input file now and
    # then, so the blocks are matched in order rather than at fixed offsets.)
    mic = np.load(alsa_home / "mic.npy")
    known = chirp(4.0, STT_SAMPLE_RATE)
    known = to_s16(known).astype(np.float32) / 32768.0
    assert result["rates"] == [STT_SAMPLE_RATE, RATE] and mic.size >= 8000
    offsets = []
    position = 0
    for start in range(0, 8000, 320):
        block = mic[start : start + 320]
        found = next((o for o in range(position, known.size - 320 + 1)
                      if np.array_equal(known[o : o + 320], block)), None)
        assert found is not None, f"block at {start} is not in the file after {position}"
        offsets.append(found)
        position = found + 320
    assert offsets[0] == 0
    assert sum(b - a == 320 for a, b in itertools.pairwise(offsets)) >= 12


def test_real_streams_keep_the_transport_contract(alsa_home: Path) -> None:
    # voxflow_voice.testing's suite (fencing, pause/resume, receipts, drain, mute, close)
    # on the real PortAudio callback cadence, as for the simulated and WebRTC adapters.
    report = run_call(alsa_home, CONFORMANCE)
    assert report == {name: "passed" for name in CHECKS}


def test_voice_chat_names_a_missing_device_before_loading_models(alsa_home: Path) -> None:
    env = {**os.environ, "HOME": str(alsa_home)}
    code = "from voxflow.cli import main; raise SystemExit(main(sys.argv[1:]))"
    done = subprocess.run(
        [sys.executable, "-c", f"import sys; {code}", "chat", "--voice", "--input-device", "99"],
        env=env, timeout=60, capture_output=True, text=True, check=False)
    assert done.returncode == 1
    assert "no input device 99 found" in done.stderr and "voxflow doctor" in done.stderr


def test_voice_chat_says_a_flow_constructor_failure_in_one_line(alsa_home: Path) -> None:
    (alsa_home / "broken.py").write_text(
        "from voxflow import Flow\n"
        "from voxflow.turns import TurnState\n"
        "class Broken(Flow[TurnState]):\n"
        "    conversational = True\n"
        "    def __init__(self) -> None:\n"
        "        raise RuntimeError('no config file')\n"
    )
    env = {**os.environ, "HOME": str(alsa_home)}
    env.pop("ALSA_CONFIG_PATH", None)
    done = subprocess.run(
        [sys.executable, "-m", "voxflow.cli", "chat", "--voice", "broken.py:Broken"],
        cwd=alsa_home, env=env, timeout=60, capture_output=True, text=True, check=False)
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [
        "error: creating broken.py:Broken failed: RuntimeError: no config file (the command "
        "line builds the flow with no arguments: give every __init__ parameter a default)"]


def _read_until(fd: int, needle: bytes, seen: bytearray, timeout: float) -> None:
    import select
    import time

    deadline = time.monotonic() + timeout
    while needle not in seen:
        left = deadline - time.monotonic()
        assert left > 0, f"no {needle!r} in {bytes(seen[-2000:])!r}"
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # the child closed the terminal
                assert needle in seen, f"no {needle!r} in {bytes(seen[-2000:])!r}"
                return
            if not chunk:
                return
            seen += chunk


def test_voice_chat_keys_in_a_terminal_mute_and_quit(alsa_home: Path) -> None:
    import pty

    env = {k: v for k, v in os.environ.items() if not k.startswith("VOXFLOW_")}
    env.update(HOME=str(alsa_home), COLUMNS="120", LINES="40", TERM="xterm")
    env.pop("ALSA_CONFIG_PATH", None)
    pid, fd = pty.fork()
    if pid == 0:  # a person at a terminal runs `voxflow chat --voice`
        os.execve(sys.executable, [sys.executable, "-m", "voxflow.cli", "chat", "--voice"], env)
    seen = bytearray()
    try:
        _read_until(fd, b"[q] quit", seen, timeout=180)  # models loaded, the call is live
        assert b"listening" in seen
        os.write(fd, b"m")
        _read_until(fd, b"muted", seen, timeout=30)
        os.write(fd, b"q")
        _read_until(fd, b"call ended", seen, timeout=60)
        _, status = os.waitpid(pid, 0)
    finally:
        os.close(fd)
    assert os.waitstatus_to_exitcode(status) == 0
    assert b"Traceback" not in seen
