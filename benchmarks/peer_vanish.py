"""How fast ``voxflow serve`` notices a caller that vanished mid-reply.

Run: ``uv run python benchmarks/peer_vanish.py [--runs 5]``

Each run starts a server (the example assistant on the real models, loopback ICE), and a
caller in its own process (``python -m voxflow_adapters.webrtc.client``) that says
"Hello there!" and waits until the reply is audible; then the caller is SIGKILLed, as a
crashed browser or a dropped laptop would vanish: no hang-up, no closed connection. The
figure is the time from the kill to the end of the call on the server, whose watchdog
ends a call when nothing at all (RTP, RTCP, DTLS) has arrived for ``peer_timeout`` (4 s;
before it, only the 20 s no-audio timeout caught this). Medians over ``--runs``; nothing
is asserted (the machine is shared: note the load average).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from _figures import figure

if TYPE_CHECKING:
    from voxflow_voice.engines import VoiceEngines


async def one_run(engines: VoiceEngines, wav: Path) -> tuple[float, str]:
    from voxflow_adapters.webrtc import (
        PeerSettings,
        ServerSettings,
        WebRtcServer,
        assistant_call_factory,
    )
    from voxflow_adapters.webrtc.client import CALLER_TOKEN_ENV

    settings = ServerSettings(port=0, peer=PeerSettings(ice_host_addresses=("127.0.0.1",)))
    async with WebRtcServer(assistant_call_factory(), engines, settings=settings) as server:
        child = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "voxflow_adapters.webrtc.client",
            f"http://127.0.0.1:{server.port}", str(wav), stdout=asyncio.subprocess.PIPE,
            env={**os.environ, CALLER_TOKEN_ENV: server.token},
        )
        try:
            assert child.stdout is not None
            async with asyncio.timeout(120):
                if await child.stdout.readline() != b"hearing\n":
                    raise RuntimeError("the caller did not hear the reply")
            peer = server.peers()[0]
            killed = time.monotonic()
            os.kill(child.pid, signal.SIGKILL)
            await peer.wait_closed()
            detected = time.monotonic() - killed
        finally:
            if child.returncode is None:
                child.kill()
            await child.wait()
        return detected, peer.close_reason or ""


async def main(runs: int) -> None:
    from voxflow_adapters.webrtc.server import ignore_closed_transport_errors
    from voxflow_voice.audio import AudioChunk, write_wav
    from voxflow_voice.engines import VoiceEngines

    ignore_closed_transport_errors(asyncio.get_running_loop())
    engines = await asyncio.to_thread(VoiceEngines.load, deterministic=True)
    speech = np.concatenate([np.asarray(s.samples, np.float32)
                             for s in engines.tts.synthesize("Hello there!")])
    with tempfile.TemporaryDirectory() as tmp:
        wav = Path(tmp) / "hello.wav"
        write_wav(wav, AudioChunk.from_float(speech, engines.tts.sample_rate))
        times = []
        for run in range(1, runs + 1):
            detected, reason = await one_run(engines, wav)
            times.append(detected)
            print(f"run {run}: detected after {detected:.2f} s ({reason})", flush=True)
    median = statistics.median(times)
    load = os.getloadavg()[0]
    print(f"\nvanished caller (SIGKILL mid-reply) → call ended: median {median:.2f} s, "
          f"min {min(times):.2f}, max {max(times):.2f} over {runs} runs "
          f"(load average {load:.2f})")
    figure("vanished caller detected", round(median, 2), "s", target="<= 5")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="kills to time (default: 5)")
    asyncio.run(main(parser.parse_args().runs))
