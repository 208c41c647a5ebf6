"""The server's per-packet CPU in each layer of a WebRTC call's audio path, both ways.

Run: ``uv run python benchmarks/webrtc_layers.py [--pairs 5] [--seconds 20] [--skip-micro]``

Two measurements, with no session and no models (only the transport):

* **layers** (one process, warm, ``time.thread_time``): each layer run many times in a
  row on a connected loopback call (a :class:`~voxflow_adapters.webrtc.peer.WebRtcPeer`
  and an aiortc caller in this process): aiortc's ``RTCRtpSender._run_rtp`` and the
  :class:`~voxflow_adapters.webrtc.rtp_send.SendPath` that replaced it (each from the
  track's packet to the datagram transport's ``sendto``, which is stubbed out: the
  kernel's part is the same both ways), aiortc's receive chain (the datagram callback,
  aioice's queue, the DTLS task, SRTP, parsing, routing, the receiver's statistics, up to
  the jitter buffer, which is a stub), Opus encode and decode, ``take_frame`` and
  ``next_frame``, and what one wake-up of an idle asyncio loop costs the process
  (``time.process_time``, the kernel included);
* **in situ** (``--pairs``): the server peer in a child process, the caller (an aiortc
  peer sending a tone) in this one; the child writes reply audio all along and drains
  its input, and its whole CPU over ``--seconds`` is divided by the 20 ms ticks: with
  the send path, and with aiortc's loop (the child's ``install_send_path`` disabled),
  alternating. Warm figures understate what a layer costs in a call, where each tick
  wakes a loop whose caches others have used meanwhile.

Measured (Dec 5, 12:29-12:43 UTC, ``--pairs 5 --seconds 20``, 2 shared cores, load
1.5-2.6), warm, per packet or frame: aiortc's send loop 12.6 us, SendPath 4.9; aiortc's
receive chain 16.4; Opus encode 74.0, decode to 16 kHz 26.0; ``take_frame`` 11.2;
``next_frame`` 11.4; one wake-up of an idle loop 112 us of the process's CPU (59-112
in three runs at load 1-2.6: the kernel's timer and scheduler and a cold interpreter).
In situ: 790 us of CPU per tick with SendPath, 841 with aiortc's loop (medians of 5;
pairs -4 to -156, median -51 us: 0.26 points of a core). The warm parts add up to about
a third of the in-situ tick: a call's per-tick cost is mostly cold code and the loop's
wake-ups (two a tick: the pacing timer and the caller's packet, which arrives at its own
phase), not any one layer.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

N = 20_000  # packets per warm figure
FRAMES = 3_000  # frames per codec figure
WARMUP = 3.0  # s before an in-situ window


def _tone(seconds: float, hz: float) -> Any:
    t = np.arange(int(48_000 * seconds)) / 48_000
    noise = 0.05 * np.random.default_rng(1).standard_normal(t.size)
    return (0.3 * np.sin(2 * np.pi * hz * t) + noise).astype(np.float32)


async def _connected() -> tuple[Any, Any]:
    """A server peer and an aiortc caller (sending silence) connected on loopback."""
    from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription
    from voxflow_adapters.webrtc import PeerSettings
    from voxflow_adapters.webrtc._ice import host_addresses
    from voxflow_adapters.webrtc.client import _MicTrack
    from voxflow_adapters.webrtc.peer import WebRtcPeer

    caller = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    caller.createDataChannel("voxflow")
    caller.addTrack(_MicTrack())
    with host_addresses(("127.0.0.1",)):
        await caller.setLocalDescription(await caller.createOffer())
    peer = WebRtcPeer(settings=PeerSettings(ice_host_addresses=("127.0.0.1",)))
    answer = await peer.accept(caller.localDescription.sdp)
    await caller.setRemoteDescription(RTCSessionDescription(sdp=answer, type="answer"))
    async with asyncio.timeout(20):
        while peer.connection_state != "connected":  # noqa: ASYNC110
            await asyncio.sleep(0.05)
    await asyncio.sleep(0.5)
    return peer, caller


def _audio_transceiver(pc: Any) -> Any:
    (transceiver,) = [t for t in pc.getTransceivers() if t.kind == "audio"]
    return transceiver


async def _send_chain(peer: Any) -> dict[str, float]:
    """us per packet: aiortc's loop and SendPath, each fed packets at once by a track."""
    import fractions

    import av
    from aiortc.mediastreams import MediaStreamTrack
    from aiortc.rtcrtpsender import RTCRtpSender
    from voxflow_adapters.webrtc.rtp_send import SendPath

    payload, time_base = bytes(range(100)), fractions.Fraction(1, 48_000)

    class Instant(MediaStreamTrack):
        """Packets as fast as the sender takes them (one ``sleep(0)`` each, as pacing)."""

        kind = "audio"

        def __init__(self) -> None:
            super().__init__()
            self.i = 0
            self.encoder = object()
            self.done = asyncio.Event()

        def _count(self) -> int:
            self.i += 1
            if self.i == N:
                self.done.set()
            return self.i

        async def recv(self) -> Any:  # what ReplyTrack.recv returns once it encodes
            await asyncio.sleep(0)
            packet = av.Packet(payload)
            packet.pts = self._count() * 960
            packet.time_base = time_base
            return packet

        async def next_payload(self) -> tuple[bytes, int]:
            await asyncio.sleep(0)
            return payload, self._count() * 960

    transceiver = _audio_transceiver(peer._pc)
    dtls = transceiver.sender.transport
    pair = dtls.transport._connection._nominated[1]
    pair.protocol.transport.sendto = lambda data, addr: None  # (the kernel: excluded)
    parameters = peer._pc._RTCPeerConnection__localRtp(transceiver)
    runs: dict[str, list[float]] = {"aiortc": [], "send_path": [], "sleep0": []}
    for _ in range(3):
        for kind in ("aiortc", "send_path"):
            track = Instant()
            sender = RTCRtpSender(track, dtls)
            if kind == "send_path":
                sender._run_rtp = SendPath(sender, track).run  # type: ignore[arg-type]
            start = time.thread_time()
            await sender.send(parameters)
            await track.done.wait()
            runs[kind].append(1e6 * (time.thread_time() - start) / N)
            await sender.stop()
        start = time.thread_time()
        for _ in range(N):
            await asyncio.sleep(0)
        runs["sleep0"].append(1e6 * (time.thread_time() - start) / N)
    sleep0 = statistics.median(runs["sleep0"])
    return {k: statistics.median(v) - sleep0 for k, v in runs.items() if k != "sleep0"}


async def _receive_chain(peer: Any, caller: Any) -> float:
    """us per packet from the datagram callback to the receiver's jitter buffer."""
    from aiortc.rtp import RtpPacket

    class Stub:
        capacity = 1
        count = 0

        def add(self, packet: Any) -> tuple[bool, None]:
            Stub.count += 1
            return False, None

    mine = _audio_transceiver(caller)
    mine.sender.replaceTrack(None)  # its numbers stop: this one goes on with them
    await asyncio.sleep(0.1)
    server = _audio_transceiver(peer._pc)
    server.receiver._RTCRtpReceiver__jitter_buffer = Stub()
    pair = server.sender.transport.transport._connection._nominated[1]
    history = mine.sender._RTCRtpSender__rtp_history
    last = max(history.values(), key=lambda p: p.timestamp)
    srtp = mine.sender.transport._tx_srtp
    extensions = mine.sender._RTCRtpSender__rtp_header_extensions_map

    def packet(i: int) -> bytes:
        p = RtpPacket(payload_type=last.payload_type, marker=1,
                      sequence_number=(last.sequence_number + 1 + i) & 0xFFFF,
                      timestamp=(last.timestamp + 960 * (1 + i)) & 0xFFFFFFFF,
                      ssrc=last.ssrc, payload=bytes(80))
        p.extensions.mid = mine.sender._RTCRtpSender__mid
        p.extensions.abs_send_time = 12345
        return bytes(srtp.protect(p.serialize(extensions)))

    datagrams = [packet(i) for i in range(3 * N)]
    figures = []
    for run in range(3):
        start, before = time.thread_time(), Stub.count
        for i in range(N):
            pair.protocol.datagram_received(datagrams[run * N + i], pair.remote_addr)
            await asyncio.sleep(0)
        await asyncio.sleep(0.01)
        if Stub.count - before != N:
            raise RuntimeError(f"{Stub.count - before} of {N} packets reached the receiver")
        figures.append(1e6 * (time.thread_time() - start) / N)
        start = time.thread_time()
        for _ in range(N):
            await asyncio.sleep(0)
        figures[-1] -= 1e6 * (time.thread_time() - start) / N
    return statistics.median(figures)


def _per_frame(work: Callable[[int], object]) -> float:
    start = time.thread_time()
    for i in range(FRAMES):
        work(i)
    return 1e6 * (time.thread_time() - start) / FRAMES


async def _codec_and_frames() -> dict[str, float]:
    from aiortc.jitterbuffer import JitterFrame
    from voxflow_adapters.webrtc.opus import MonoOpusDecoder, MonoOpusEncoder
    from voxflow_adapters.webrtc.outbound import OutboundAudio
    from voxflow_adapters.webrtc.receive import InboundAudio
    from voxflow_voice.audio import ReplyChunk, float_to_pcm16

    from voxflow.clock import MonotonicClock
    from voxflow.ids import DeliveryId

    tone = _tone(FRAMES * 0.02 + 1, 220)
    pcm = [float_to_pcm16(tone[i * 960:(i + 1) * 960]) for i in range(FRAMES)]
    encoder, decoder = MonoOpusEncoder(), MonoOpusDecoder()
    packets: list[bytes] = []
    frames: list[Any] = []
    out: dict[str, float] = {}
    out["Opus encode"] = _per_frame(lambda i: packets.append(encoder.encode(pcm[i])))
    out["Opus decode (to 16 kHz mono)"] = _per_frame(lambda i: frames.extend(
        decoder.decode(JitterFrame(data=packets[i], timestamp=i * 960))))
    inbound = InboundAudio()
    out["take_frame (the decoded frame to the InputGuard)"] = _per_frame(
        lambda i: inbound.take_frame(frames[i]))
    outbound = OutboundAudio(clock=MonotonicClock(), on_observation=lambda o: None, lead=1e9)
    for k in range(FRAMES // 5 + 1):
        outbound.write_nowait(ReplyChunk.from_float(
            tone[k * 4800:(k + 1) * 4800], 48_000, delivery_id=DeliveryId("d"),
            segment_id=1, start_sample=k * 4800))
    out["next_frame (playout pull, receipts, pcm16)"] = _per_frame(
        lambda i: outbound.next_frame())
    wakes = 200
    start = time.process_time()
    for _ in range(wakes):
        await asyncio.sleep(0.02)
    out["an idle loop's wake-up (process CPU, kernel included)"] = \
        1e6 * (time.process_time() - start) / wakes
    return out


async def _layers() -> None:
    peer, caller = await _connected()
    try:
        send = await _send_chain(peer)
        receive = await _receive_chain(peer, caller)
    finally:
        await peer.aclose()
        await caller.close()
    rows = {"send: aiortc's _run_rtp (to sendto)": send["aiortc"],
            "send: SendPath (to sendto)": send["send_path"],
            "receive: datagram to the receiver's buffer": receive,
            **await _codec_and_frames()}
    print(f"warm, us per packet or frame (load {os.getloadavg()[0]:.1f}):")
    for name, value in rows.items():
        print(f"  {name:<58} {value:6.1f} us")


async def _child(aiortc_loop: bool, seconds: float) -> None:
    import voxflow_adapters.webrtc.peer as peer_module
    from voxflow_adapters.webrtc import PeerSettings
    from voxflow_voice.audio import ReplyChunk

    from voxflow.ids import DeliveryId

    if aiortc_loop:
        peer_module.install_send_path = lambda *args: None  # type: ignore[assignment,return-value]
    loop = asyncio.get_running_loop()
    offer = json.loads(await loop.run_in_executor(None, sys.stdin.readline))
    peer = peer_module.WebRtcPeer(settings=PeerSettings(ice_host_addresses=("127.0.0.1",)))
    print(json.dumps({"sdp": await peer.accept(offer["sdp"])}), flush=True)
    tone = _tone(2.0, 220)

    async def feed() -> None:
        n = 0
        while True:
            await peer.wait_writable()
            at = (n * 4800) % (tone.size - 4800)
            peer.write_nowait(ReplyChunk.from_float(tone[at:at + 4800], 48_000,
                                                    delivery_id=DeliveryId("d1"),
                                                    segment_id=1, start_sample=n * 4800))
            n += 1

    async def drain(source: Any) -> None:
        async for _ in source:
            pass

    tasks = [asyncio.create_task(c) for c in (feed(), drain(peer.audio_input()),
                                              drain(peer.observations()))]
    await asyncio.sleep(WARMUP)
    frames, cpu = peer.outbound.frame_index, time.process_time()
    await asyncio.sleep(seconds)
    cpu, frames = time.process_time() - cpu, peer.outbound.frame_index - frames
    print(json.dumps({"us_per_tick": 1e6 * cpu / max(frames, 1), "frames": frames,
                      "frames_in": peer.inbound.frames_in,
                      "send_path": peer.send_path is not None}), flush=True)
    for task in tasks:
        task.cancel()
    await peer.aclose()


async def _in_situ_call(aiortc_loop: bool, seconds: float) -> dict[str, Any]:
    from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription
    from voxflow_adapters.webrtc._ice import host_addresses
    from voxflow_adapters.webrtc.client import _MicTrack
    from voxflow_adapters.webrtc.receive import install_receive_path

    child = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--child", "aiortc" if aiortc_loop else "send_path",
        "--seconds", str(seconds), stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE)
    assert child.stdin is not None and child.stdout is not None
    caller = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    caller.createDataChannel("voxflow")
    mic = _MicTrack()
    mic.feed(_tone(seconds + WARMUP + 30, 300))
    caller.addTrack(mic)
    readers: list[asyncio.Task[None]] = []

    async def drain(track: Any) -> None:
        while True:
            await track.recv()

    caller.on("track", lambda track: readers.append(asyncio.create_task(drain(track))))
    for transceiver in caller.getTransceivers():
        install_receive_path(transceiver.receiver, hold=3)
    with host_addresses(("127.0.0.1",)):
        await caller.setLocalDescription(await caller.createOffer())
    child.stdin.write((json.dumps({"sdp": caller.localDescription.sdp}) + "\n").encode())
    await child.stdin.drain()
    answer = json.loads(await child.stdout.readline())["sdp"]
    await caller.setRemoteDescription(RTCSessionDescription(sdp=answer, type="answer"))
    report: dict[str, Any] = json.loads(await child.stdout.readline())
    await caller.close()
    for task in readers:
        task.cancel()
    child.stdin.close()
    await child.wait()
    return report


async def _in_situ(pairs: int, seconds: float) -> None:
    runs: dict[bool, list[float]] = {True: [], False: []}
    for pair in range(pairs):
        for aiortc_loop in ((False, True) if pair % 2 == 0 else (True, False)):
            report = await _in_situ_call(aiortc_loop, seconds)
            runs[aiortc_loop].append(report["us_per_tick"])
            print(f"{'aiortc _run_rtp' if aiortc_loop else 'SendPath':>15}: "
                  f"{report['us_per_tick']:6.0f} us of CPU per 20 ms tick "
                  f"({report['frames']} frames; load {os.getloadavg()[0]:.1f})", flush=True)
    diffs = [a - b for a, b in zip(runs[False], runs[True], strict=True)]
    print(f"median of {pairs}: SendPath {statistics.median(runs[False]):.0f}, aiortc "
          f"{statistics.median(runs[True]):.0f} us per tick; pairwise difference median "
          f"{statistics.median(diffs):+.0f} us ({statistics.median(diffs) / 200:+.2f} points "
          "of a core)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--skip-micro", action="store_true")
    parser.add_argument("--child", choices=("aiortc", "send_path"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.pairs < 0 or args.seconds <= 0:
        parser.error("--pairs must be >= 0 and --seconds > 0")
    if args.child:
        asyncio.run(_child(args.child == "aiortc", args.seconds))
        return
    if not args.skip_micro:
        asyncio.run(_layers())
    if args.pairs:
        asyncio.run(_in_situ(args.pairs, args.seconds))


if __name__ == "__main__":
    main()
