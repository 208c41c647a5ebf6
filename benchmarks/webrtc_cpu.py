"""The server's CPU per call over WebRTC and over the simulated transport, in one run.

Run: ``uv run python benchmarks/webrtc_cpu.py [--pairs 3] [--turns 3]``

Issue 36 item 3 asks a WebRTC call to cost the server no more than 3 points of a core
over the same call on the simulated transport. Both are measured here in one server
process (a child of this one), with the same models loaded once (tiny.en, Piper without
its speech cache, Silero: ``_capacity_calls.load_engines``), the same voice settings
(those of browser calls, :func:`~voxflow_adapters.hosting.calls.webrtc_voice_settings`:
the echo gate off) and ``capacity.py``'s dense workload: one caller asks
:data:`_capacity_calls.QUESTION`, hears the ~9 s :data:`_capacity_calls.REPLY` to its
end (until the session settled it: a pause between two sentences on a slow machine is
not its end, :func:`_replies_heard_whole`), waits :data:`_capacity_calls.GAP` s and asks
again, ``--turns`` times, then stays :data:`TAIL` s.

* **simulated**: the child runs the call with ``run_call`` (a
  :class:`~voxflow_adapters.testkit.simulated.SimulatedClient` on the real clock). Its
  caller lives in the server process and is counted (it pushes 20 ms frames and keeps
  the tape: a small part, so the figure slightly overstates the server's);
* **webrtc**: the child is a :class:`~voxflow_adapters.webrtc.WebRtcServer` on
  loopback; the caller is an aiortc :class:`~voxflow_adapters.webrtc.client.
  LoopbackCaller` in *this* process (its Opus, SRTP and Python are not counted).

* **phone** (``--kinds simulated,phone``): the child is also a
  :class:`~voxflow_adapters.phone.server.PhoneServer` on loopback (the phone call
  settings, :func:`~voxflow_adapters.hosting.calls.phone_voice_settings`); the caller
  is a :class:`~voxflow_adapters.testkit.phone_carrier.SimulatedCarrier` in *this*
  process (paced 8 kHz mu-law over the media WebSocket, marks echoed as played), asking
  again once the reply played and nothing came for GAP s (``phone_capacity.py``'s).

The figure is the child's CPU time (``time.process_time``: all its threads, the decoder
and executor threads included) from the call's start (the offer posted) to its end (the
session closed), per second of that window, in % of one core; each run prints it with its
kernel part, the reply audio played and the replies heard whole (the same work both ways)
and the stale samples (0). The kinds alternate
(``--pairs`` of each, the order swapped every pair) and the medians are printed with
every run and the load average, since the 2 cores are shared.

Measured (``--pairs 3 --turns 3``, one run each, back to back; medians, the CPU seconds
of each whole call in brackets):

==========================================  ================  =================  ======  =======
version                                     simulated         webrtc             gap     load
==========================================  ================  =================  ======  =======
ab222c9: aiortc's decoder thread, executor  16.1 % (6.7 s)    22.7 % (9.8 s)     +6.5    0.6-2.5
3e96f8a: decode and encode on the loop      15.8 % (6.5 s)    20.2 % (8.5 s)     +4.4    1.3-3.1
250f616: reply encoded mono (*)             14.3 % (6.3 s)    18.6 % (8.1 s)     +4.3    3.9-6.8
caller's audio decoded mono (*)             13.6 % (5.9 s)    17.0 % (8.1 s)     +3.3    3.5-6.6
99cfcc8 (the same code), a second run (*)   13.3 % (5.5 s)    18.5 % (7.6 s)     +5.2    1.3-3.6
4576868 (the same code), ``--pairs 4`` (*)  15.7 % (6.5 s)    20.7 % (8.5 s)     +5.0    0.1-0.6
6844021, another machine (****)             9.4 % (3.9 s)     12.3 % (5.0 s)     +2.9    0.4-1.9
libopus by ctypes, decoded at 16 kHz (**)   9.4 % (3.8 s)     11.7 % (4.8 s)     +2.4    0.3-0.6
e1f8105 + SendPath (***)                    9.7 % (3.9 s)     11.7 % (4.8 s)     +2.1    0.7-1.9
e1f8105 (the same hour, without it) (***)   9.3 % (3.8 s)     11.7 % (4.7 s)     +2.5    1.1-3.5
37787d4: both, review fixes (****)          10.1 % (4.1 s)    12.5 % (5.1 s)     +2.4    0.2-1.3
==========================================  ================  =================  ======  =======

(*) with the callers that hear every reply whole (the rows above them may hold cut
replies: then the two kinds did different work). Every run of both: 28.3-28.9 s of reply
audio played, 3/3 replies whole, 0.1-0.5 s of the CPU in the kernel. At load 3.5-6.8 on
2 cores the runs of one kind spread by 2-3 points (webrtc 15.8-19.0, simulated
12.7-15.2), and the gap of one run by as much (the last two rows, the same code): the
decoder's change is within that noise; the gap stands at 3-5 points, not yet <= 3.

(**) ``--pairs 4 --turns 3`` on Dec 5, 11:57-12:04 UTC: the server's Opus through
libopus by ctypes, the caller's packets decoded straight to 16 kHz mono (no decimator;
opus.py). Every run 28.3-28.9 s of reply audio, 3/3 replies whole, 0 stale samples;
webrtc 11.1-12.3, simulated 9.3-9.8. Both kinds cost far less than in the rows above at
the same load (simulated 9.4 against 15.7 %): the machine changed (row (****): 6844021
on this one), so this row's gap is to be read against that row's +2.9.
``benchmarks/opus_codec.py`` puts the change itself at ~0.25 points of a core per call
(encode 91.9 → 81.2 us a frame, decode and guard 80.7 → 38.8), about what perf had for
PyAV's glue (+0.37) and the decimator.

(***) ``--pairs 4 --turns 3`` on Dec 5, 12:16-12:25 and 12:29-12:35 UTC: the reply's
own RTP loop (:mod:`~voxflow_adapters.webrtc.rtp_send`: no ``av.Packet``, a header
template, SRTP and ``sendto`` without aiortc's awaited layers) against main without it.
Every call 28.3-28.9 s of reply audio, 3/3 replies whole, 0 stale samples; webrtc
11.4-12.7 with it, 11.5-12.2 without. Its gain, 0.26 points in ``webrtc_layers.py``'s
in-situ pairs (790 against 841 us of CPU per 20 ms tick), is below this benchmark's
resolution: the webrtc medians are the same. On 6844021 (before the libopus change)
with it: 9.6 % against 12.5 %, +2.9, load 0.5-1.6.

Per layer (``benchmarks/webrtc_layers.py``, Dec 5, load 1.5-2.6; warm, each run many
times in a row, us per 20 ms packet or frame): aiortc's send loop from the track's packet
to ``sendto`` 12.6 (SendPath 4.9), its receive chain from the datagram callback through
aioice's queue, the DTLS task, SRTP, parsing and the receiver's statistics 16.4, Opus
encode 74, decode 26, ``take_frame`` 11, ``next_frame`` 11: about 160 us a tick. A
server peer alone sending and receiving audio spends 790-840 us a tick in situ: the rest
is the same code run cold and the loop's wake-ups, 59-112 us of the process's CPU each
(the kernel included) and two a tick (the pacing timer and the caller's packet, at its
own phase). No single remaining layer pays 0.1 point
(20 us a tick) warm; merging the two wake-ups would (~0.3-0.5 points), but only by
sending on the caller's phase or reading its packets on ours (up to 20 ms later).

(****) ``--pairs 4 --turns 3`` on the machine of the (**) and (***) rows, Dec 5:
6844021 at 11:41-11:48 UTC (webrtc 12.2-12.7, simulated 9.3-9.7) and 37787d4 (the
libopus change, SendPath and their review fixes) at 12:55-13:01 (webrtc 12.2-13.5,
simulated 9.5-11.4); every call 28.3-28.8 s of reply audio, 3/3 replies whole, 0 stale
samples. On this machine the gap is within 3 points in every run since (+2.1 to +2.5,
four runs) and was +2.9 before; the WebRTC call's cost over the simulated one went from
31 % (12.3 / 9.4) to 24 % (12.5 / 10.1). On the machine of the first six rows
(simulated 15.7 %), 24 % would be about +3.8 points: an estimate from the ratio, not a
run there.

The phone call against the simulated one, ``--kinds simulated,phone --turns 3`` (Dec 5;
medians, the median CPU seconds and wall seconds of each whole call in brackets; the
phone column counts the replies that played and no ``clear`` cut, 3/3 in every call of
the last two rows, 28.3-29.0 s of reply audio each way):

================================  =====================  =====================  ======  ========
run                               simulated              phone                  gap     load
================================  =====================  =====================  ======  ========
faec9fc, ``--pairs 3``            14.3 % (n/a)           15.9 % (n/a)           +1.6    0.3-1.1
ae81e51, ``--pairs 4``            13.6 % (5.7 / 41.2 s)  14.5 % (6.0 / 41.5 s)  +0.8    1.7-7.6
ae81e51, ``--pairs 4``, again     13.6 % (5.5 / 40.6 s)  13.6 % (5.6 / 40.4 s)  +0.0    1.0-2.1
================================  =====================  =====================  ======  ========

The first run kept one range of CPU for both kinds (6.1-6.5 s), so its windows cannot
be told apart. In the two others the windows are the same length (medians within 0.3 s:
the phone's starts before the carrier connects and ends at its ``ended`` summary), and
the CPU difference over the simulated call's seconds gives about the gap: +0.6 (0.25 s /
41.2 s) against +0.8, and +0.25 (0.1 s / 40.6 s) against +0.0 points. Each kind's
calls spread by 1-3 points in a run (phone 12.5-15.5, simulated 12.6-15.2 at load up to
7.6), more than the gap: the median of the three runs' gaps, +0.8 points (their mean too), is what
:data:`~voxflow_adapters.hosting.call_cost.PHONE_CALLER` adds to the dense caller's
overhead (0.075 + 0.008), under the point that faec9fc had taken to set it apart.

A ``py-spy`` profile of one WebRTC call before 3e96f8a (all threads, 45 s): Piper
26 % of the samples; the executor thread that encoded each frame and aiortc's decoder
thread mostly waiting and waking (their hops, ``ThreadPoolExecutor.submit`` and the
loop's self-pipe, on the loop side); Opus itself, SRTP, resampling and the adapter's own
per-frame Python each 1-2 %. One at 250f616 (``--only webrtc``, 38 s, 200 Hz, load ~4;
py-spy samples wall time, so a thread waiting for a core counts where it waits): Piper
40 %, Silero 8 %, Smart Turn 5 % (both transports pay these); the RTP sender 12 % (its
UDP ``sendto`` 8 %, but the whole process spent only 0.3-0.5 s per call in the kernel:
mostly waiting for a core), ``MonoOpusEncoder`` 1.8 %; the receive path 4 % (the
``InputGuard`` 1.5 %, a third of it averaging the stereo decode, Opus decode 0.6 %);
reply chunks resampled to 48 kHz 1.4 %.

At 4576868, on an idle machine (load 0.1-0.6, the row above): webrtc 19.3-22.0, simulated
15.0-16.5, the gap of one pair +2.3 to +5.4. ``perf record -e cpu-clock`` (on-CPU time
only, unlike py-spy; 499 Hz, the child, 2 calls of each kind, a gap of +2.3 in that run)
puts the webrtc call's extra CPU, in points of a core, in: the Python interpreter +1.35,
libopus +0.62 (mostly the encode: ~105 us a frame against ~30 for a decode; libopus's
complexity 5 instead of 10 saves only a fifth of it, measured alone), PyAV/ffmpeg
glue +0.37, the kernel +0.28 (loopback ``sendto``: the receiving side of each datagram
runs in the sender's syscall; twice the time in task switches), SRTP +0.22, libc +0.11:
about 3.0 points; the models (onnxruntime -0.64) made up the difference in that run.
py-spy's split (same run, 100 Hz): the RTP sender's loop 1.1 (``sendto`` 0.35, Opus
encode 0.38, aiortc's packetizing, header extensions and SRTP and the track ~0.4); the
receive path 0.8 (``take_frame`` 0.53, of which the simulated call pays its own 16 kHz
chunk's checks and conversion too; the decimator ~0.12, ``to_ndarray`` ~0.14; Opus
decode 0.1; aiortc's parse, statistics and SRTP ~0.15). Besides its tick loop and 16 kHz
resampling the simulated call pays none of it: what is left is one UDP datagram each way
per 20 ms, its Opus, and aiortc's Python around each.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import sys
import time
from collections.abc import Iterator
from typing import Any

TAIL = 1.0  # s: the call goes on this long after the last reply has played
REPLY_WITHIN = 60.0  # s: a phone reply that has not played to its end by then fails the run


class CallTimedOut(Exception):
    """A call of the run did not get its reply in time: ``main`` prints it as one line."""


ALL_KINDS = ("simulated", "webrtc", "phone")


def _settings() -> Any:
    from voxflow_adapters.hosting.calls import webrtc_voice_settings

    return webrtc_voice_settings()


def _teller() -> type[Any]:
    from _capacity_calls import REPLY
    from voxflow_adapters.testkit.flows import Teller

    class CapacityTeller(Teller):
        """capacity.py's flow: every question answered with its ~9 s reply."""

        def __init__(self) -> None:
            super().__init__(story=REPLY, trigger=None)

    return CapacityTeller


async def _serve_child(turns: int) -> None:
    import logging

    from _capacity_calls import load_engines, question_audio
    from aiohttp import web
    from voxflow_adapters.hosting.calls import flow_call_factory, phone_voice_settings
    from voxflow_adapters.phone.server import PhoneServer, PhoneSettings
    from voxflow_adapters.webrtc import PeerSettings, ServerSettings, WebRtcServer
    from voxflow_adapters.webrtc.server import ignore_closed_transport_errors

    logging.basicConfig(level=logging.ERROR)
    ignore_closed_transport_errors(asyncio.get_running_loop())
    engines, _ = await load_engines(scheduling=False)
    teller, settings = _teller(), _settings()
    server = WebRtcServer(flow_call_factory(teller, settings=settings), engines,
                          settings=ServerSettings(port=0, max_calls=4, peer=PeerSettings(
                              ice_host_addresses=("127.0.0.1",))))
    question = question_audio(engines)
    phone = PhoneServer(flow_call_factory(teller, settings=phone_voice_settings()), engines,
                        settings=PhoneSettings(max_calls=4))
    runner = web.AppRunner(phone.app(), access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        await _serve(turns, runner, server, phone, engines, question, teller, settings)
    finally:
        await runner.cleanup()


async def _serve(turns: int, runner: Any, server: Any, phone: Any, engines: Any,
                 question: Any, teller: Any, settings: Any) -> None:
    """The child's loop: one call of the kind each line of stdin names, its figures
    printed as a JSON line."""
    from _capacity_calls import caller_script
    from voxflow_adapters.testkit.scenario import run_call

    from voxflow.clock import MonotonicClock

    loop = asyncio.get_running_loop()
    phone_calls = 0
    phone_url = f"http://127.0.0.1:{runner.addresses[0][1]}/voice"
    async with server:
        print(json.dumps({"port": server.port, "token": server.token, "phone": phone_url}),
              flush=True)
        while line := (await loop.run_in_executor(None, sys.stdin.readline)).strip():
            cpu0, wall0, times0 = time.process_time(), time.monotonic(), os.times()
            if line == "simulated":
                settled: set[str] = set()
                finished: list[str] = []

                def record(event: Any, settled: set[str] = settled,
                           finished: list[str] = finished) -> None:
                    if event.kind in _SETTLED:
                        settled.add(event.delivery_id)
                    if event.kind == "reply_finished":
                        finished.append(event.delivery_id)

                with _replies_heard_whole(settled):
                    call = await run_call(teller(), caller_script(question, turns, 0.5),
                                          engines, clock=MonotonicClock(), tail=TAIL,
                                          settings=settings, on_event=record)
                stale = call.stale_samples()
                reply = sum(r.num_samples / r.sample_rate for r in call.tape.receipts)
                whole = len(finished)
            elif line == "phone":  # the carrier dials now; "ended" once it hung up
                await loop.run_in_executor(None, sys.stdin.readline)
                while len(phone.ended) < phone_calls + 1:  # noqa: ASYNC110  # (closed)
                    await asyncio.sleep(0.02)
                phone_calls += 1
                stale = 0  # (counted by the carrier: clears and audio after them)
                reply = phone.ended[-1]["frames_out"] * 0.02
                whole = None
            else:  # "webrtc": the caller posts its offer now; "ended" once it hung up
                await loop.run_in_executor(None, sys.stdin.readline)
                await server.wait_idle()
                ended = server.statistics().ended[-1]
                stale = ended.outbound.stale_samples
                reply = ended.outbound.reply_frames * 0.02
                whole = None  # (the caller counts its reply_done messages)
            cpu, wall, times = time.process_time() - cpu0, time.monotonic() - wall0, os.times()
            print(json.dumps({"cpu": cpu, "wall": wall, "stale": stale, "reply": reply,
                              "whole": whole, "system": times.system - times0.system}),
                  flush=True)


_SETTLED = ("reply_finished", "reply_interrupted")


@contextlib.contextmanager
def _replies_heard_whole(settled: set[str]) -> Iterator[None]:
    """The simulated caller hears each reply until it *settled* (played whole, or cut),
    as the WebRTC caller waits for ``reply_done``: the testkit's ``reply_end`` step
    fires GAP s after the playback ran dry, and on a slow machine the pause after
    "Sure." (the next sentence still being synthesized) ran dry for longer than GAP, so
    the caller asked again and cut the reply, and the call's tail could end it: the two
    transports then did different work. While the reply that played last is not in
    ``settled`` (the delivery ids of the session's reply_finished/reply_interrupted
    events), the client counts it as playing. Only this benchmark's child runs with it."""
    from voxflow_adapters.testkit import simulated

    play = simulated.SimulatedClient._play

    def play_until_settled(self: Any, now: float) -> Any:
        receipts = self.tape.receipts
        before = len(receipts)
        samples = play(self, now)
        if receipts and len(receipts) == before:  # nothing of a reply in this frame
            last = receipts[-1].delivery_id
            self._was_playing = None if last in settled else last
        return samples

    simulated.SimulatedClient._play = play_until_settled  # type: ignore[method-assign]
    try:
        yield
    finally:
        simulated.SimulatedClient._play = play  # type: ignore[method-assign]


def _question() -> Any:
    """_capacity_calls.question_audio's question, without loading every model."""
    import numpy as np
    from _capacity_calls import QUESTION
    from voxflow_voice.audio import STT_SAMPLE_RATE, AudioChunk, resample
    from voxflow_voice.engines.tts import PiperTts

    tts = PiperTts()
    audio = np.concatenate([np.asarray(x.samples, np.float32) for x in tts.synthesize(QUESTION)])
    return AudioChunk.from_float(resample(audio * 0.5, tts.sample_rate, STT_SAMPLE_RATE),
                                 STT_SAMPLE_RATE)


async def _webrtc_caller(base: str, token: str, turns: int, question: Any) -> int:
    """One call; returns the replies played whole (``reply_done`` messages)."""
    from _capacity_calls import GAP
    from voxflow_adapters.webrtc.client import LoopbackCaller

    caller = LoopbackCaller(base, token)

    def settled(since: float) -> bool:
        return any(m.get("type") in ("reply_done", "interrupted") and m["_at"] > since
                   for m in caller.messages)

    async def reply_ended(since: float) -> None:
        """As the simulated caller (:func:`_replies_heard_whole`): the reply to the
        question asked at ``since`` settled (``reply_done``, or cut: ``interrupted``),
        and then nothing audible came for GAP s. A pause between two sentences (the
        next one still being synthesized) is not the reply's end."""
        await caller.wait_for(lambda: settled(since), within=60.0, what="the reply's end")
        async with asyncio.timeout(60.0):
            while True:
                heard = [f.at for f in caller.frames[-100:] if f.audible and f.at > since]
                if heard and time.monotonic() - heard[-1] >= GAP:
                    return
                await asyncio.sleep(0.02)

    try:
        await caller.connect()
        await asyncio.sleep(0.5)
        for _ in range(turns):
            asked = time.monotonic()
            caller.say(question)
            await reply_ended(asked)
        await asyncio.sleep(max(0.0, TAIL - GAP))
        return len(caller.of_type("reply_done"))
    finally:
        await caller.aclose()


async def _phone_caller(url: str, turns: int, question: Any) -> int:
    """One phone call (a simulated Twilio carrier: paced 8 kHz mu-law both ways, marks
    echoed as played) asking ``turns`` times, each time once the reply played and then
    nothing came for GAP s (as ``phone_capacity.py``'s caller); returns the replies
    heard whole: those that played and no ``clear`` cut. A reply that does not play to
    its end within :data:`REPLY_WITHIN` s raises :class:`CallTimedOut`."""
    from _capacity_calls import GAP
    from voxflow_adapters.testkit.phone_carrier import SimulatedCarrier

    async with SimulatedCarrier(url) as carrier:
        await asyncio.sleep(0.5)
        for turn in range(1, turns + 1):
            carrier.say(question.samples(), rate=question.sample_rate)
            await carrier.said()
            spoke = carrier.speech_ends[-1]
            try:
                async with asyncio.timeout(REPLY_WITHIN):
                    while not [t for t in carrier.first_audio if t > spoke]:  # noqa: ASYNC110
                        await asyncio.sleep(0.02)
                    heard, still = carrier.received_samples, time.monotonic()
                    while time.monotonic() - still < GAP:
                        await asyncio.sleep(0.02)
                        if carrier.received_samples != heard:
                            heard, still = carrier.received_samples, time.monotonic()
            except TimeoutError:
                raise CallTimedOut(f"the phone call's reply to question {turn}/{turns} did "
                                   f"not play to its end within {REPLY_WITHIN:.0f} s (a "
                                   "machine too loaded for this benchmark?)") from None
        await asyncio.sleep(max(0.0, TAIL - GAP))
        cut = set(carrier.cleared())
        return len([d for d in carrier.deliveries() if d not in cut])


async def _main(pairs: int, turns: int, kinds: tuple[str, ...]) -> None:
    child = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--serve-child", "--turns", str(turns),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
    assert child.stdin is not None and child.stdout is not None
    runs: dict[str, list[float]] = {"simulated": [], "webrtc": [], "phone": []}
    question = _question()
    loads = [os.getloadavg()[0]]
    try:
        hello = json.loads(await child.stdout.readline())
        print(f"server process {child.pid}", flush=True)
        base = f"http://127.0.0.1:{hello['port']}"
        for pair in range(pairs):
            order = [k for k in ALL_KINDS if k in kinds]
            for kind in (order if pair % 2 == 0 else order[::-1]):
                child.stdin.write(f"{kind}\n".encode())
                await child.stdin.drain()
                whole = None
                if kind in ("webrtc", "phone"):
                    whole = (await _webrtc_caller(base, hello["token"], turns, question)
                             if kind == "webrtc" else
                             await _phone_caller(hello["phone"], turns, question))
                    child.stdin.write(b"ended\n")
                    await child.stdin.drain()
                report = json.loads(await child.stdout.readline())
                pct = 100.0 * report["cpu"] / report["wall"]
                runs[kind].append(pct)
                loads.append(os.getloadavg()[0])
                print(f"{kind:>9}: {pct:5.1f} % of a core ({report['cpu']:.1f} s CPU, "
                      f"{report['system']:.1f} s of it in the kernel, in "
                      f"{report['wall']:.1f} s, reply audio played {report['reply']:.1f} s, "
                      f"replies whole {report['whole'] if whole is None else whole}/{turns}, "
                      f"stale samples {report['stale']}, "
                      f"load {loads[-1]:.1f})", flush=True)
    finally:
        child.stdin.close()
        await child.wait()
    if "simulated" not in kinds or len(kinds) < 2:
        return
    from _figures import figure

    sim = statistics.median(runs["simulated"])
    figure("server CPU per call, simulated", sim, "% of a core")
    for kind in kinds:
        if kind == "simulated":
            continue
        other = statistics.median(runs[kind])
        print(f"median of {pairs}: simulated {sim:.1f} %, {kind} {other:.1f} % of a core per "
              f"call (difference {other - sim:+.1f} points); load average {min(loads):.1f}-"
              f"{max(loads):.1f} on {os.cpu_count()} CPUs")
        figure(f"server CPU per call, {kind}", other, "% of a core",
               target=f"<= {sim + 3:.1f}" if kind == "webrtc" else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--only", choices=ALL_KINDS,
                        help="run calls of one kind only (to profile the child)")
    parser.add_argument("--kinds", default="simulated,webrtc",
                        help="the kinds of call to compare, comma-separated, of "
                        f"{','.join(ALL_KINDS)} (default: %(default)s)")
    parser.add_argument("--serve-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.pairs < 1 or args.turns < 1:
        parser.error("--pairs and --turns must be >= 1")
    if args.serve_child:
        asyncio.run(_serve_child(args.turns))
        return
    kinds = (args.only,) if args.only else tuple(k.strip() for k in args.kinds.split(","))
    if not kinds or any(k not in ALL_KINDS for k in kinds):
        parser.error(f"--kinds takes some of {','.join(ALL_KINDS)}, got {args.kinds!r}")
    try:
        asyncio.run(_main(args.pairs, args.turns, kinds))
    except CallTimedOut as exc:
        sys.exit(f"webrtc_cpu.py: {exc}")


if __name__ == "__main__":
    main()
