"""The echo gate on speakers: self-interruptions, barge-in detection, and its CPU cost.

Run: ``uv run python benchmarks/echo_gate.py [--runs 3]``

Scripted calls on the real models (Whisper tiny.en, Piper, Silero) in deterministic
virtual time: the user asks for a story, the simulated client feeds the assistant's
played audio back into the microphone (``CallScript.with_echo(gain, delay)``), and in
the "barge-in" scenario the user says "Stop, please." at 8.0 s, over the story and its
echo. Each configuration is run with the gate (the default) and without it (what
``--headphones`` does), the latter bounded to 12 s of call since it loops on its echo.

Printed per configuration:

* **self-interruptions/pauses**: barge-ins (or, with barge-in arbitration, pauses)
  whose onset is not the user's speech (target 0);
* **barge-in**: whether the user's barge-in was detected and interrupted the story, and
  the detection delay: the user's first speech sample (from the client's tape) → the
  session's ``barge_in`` event, beside the same call with no echo at all;
* **transcripts**: the turns committed (the echo must never become a turn);
* **path**: the delay and gain the gate estimated, and the share of frames it gated;
* **room**: the gate alone on a synthetic reverberant echo (RT60 0 / 0.2 / 0.4 s) of
  real TTS audio, a Silero turn detector on its output: false speech starts on the echo,
  and whether the user's barge-in is still detected;
* **cost**: median wall time of ``EchoGate.process`` per 20 ms frame with an echo path
  active (median of ``--runs`` runs of 3 s of audio).

Deterministic calls give the same events on every run; only the CPU figure varies.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

import numpy as np
from voxflow_adapters.testkit.flows import STORY, Teller, gate_frames
from voxflow_adapters.testkit.scenario import CallResult
from voxflow_adapters.testkit.script import CallScript
from voxflow_adapters.testkit.simulated import SimulatedClient
from voxflow_voice.audio import STT_SAMPLE_RATE, AudioChunk, ReplyChunk
from voxflow_voice.engines import VoiceEngines
from voxflow_voice.listen.echo import EchoGate
from voxflow_voice.session import VoiceSession, VoiceSettings
from voxflow_voice.transport import PlaybackReceipt

from voxflow.clock import VirtualClock
from voxflow.ids import DeliveryId
from voxflow.turns import TurnRunner

BARGE_IN_AT = 8.0


async def bounded_call(
    script: CallScript, engines: VoiceEngines, settings: VoiceSettings, max_duration: float
) -> CallResult | None:
    """A scripted call on virtual time that ends by ``max_duration`` whatever happens
    (None, with the error printed, if the session failed)."""
    clock = VirtualClock(autojump=True)
    client = SimulatedClient(script, clock=clock, tail=1.0, max_duration=max_duration)
    await client.render(engines.tts)
    session = VoiceSession(TurnRunner(Teller()), client, engines, settings=settings, clock=clock)
    try:
        async with clock, client:
            await session.run()
    except Exception as exc:  # a figure script reports a failed scenario and goes on
        print(f"  the call failed: {exc!r}")
        return None
    return CallResult(session=session, client=client)


def user_onsets(call: CallResult) -> list[float]:
    """Clock times where the user's clean speech starts (above -40 dBFS after >= 0.3 s quiet)."""
    user = call.tape.track("user")
    loud = np.flatnonzero(np.abs(user) > 0.01)
    onsets: list[float] = []
    last = -(10**9)
    for index in loud:
        if index - last > 0.3 * STT_SAMPLE_RATE:
            onsets.append(call.tape.start + index / STT_SAMPLE_RATE)
        last = index
    return onsets


def report(name: str, call: CallResult | None, *, barge_in: bool) -> dict[str, float]:
    if call is None:
        print(f"{name:<34} no figures (the call failed)")
        return {}
    onsets = user_onsets(call)
    barges = call.of_kind("barge_in")
    # A cut (barge_in) or, with barge-in arbitration, a pause (barge_in_paused) whose
    # onset is not the user's: the assistant reacting to its own voice.
    reactions = [e for e in call.events if e.kind in ("barge_in", "barge_in_paused")]
    own = [b for b in reactions if not any(u - 0.2 <= b.onset_at <= u + 1.0 for u in onsets)]
    figures: dict[str, float] = {"self_interruptions": float(len(own))}
    line = f"{name:<34} self-interruptions/pauses {len(own):>3}"
    if barge_in:
        user_at = next((u for u in onsets if u >= BARGE_IN_AT - 0.1), None)
        hit = [b for b in barges if user_at is not None and b.onset_at >= user_at - 0.2]
        paused = [e for e in call.events if e.kind == "barge_in_paused"
                  and user_at is not None and e.onset_at >= user_at - 0.2]
        if paused and user_at is not None:
            figures["pause_ms"] = (paused[0].at - user_at) * 1000
            line += f" · reply paused {figures['pause_ms']:.0f} ms"
        if hit and user_at is not None:
            delay = (hit[0].at - user_at) * 1000
            figures["detect_ms"] = delay
            line += f" · barge-in (cut) {delay:.0f} ms after the user's first sample"
        else:
            line += " · barge-in NOT detected"
    gate = call.session.echo_gate
    if gate is not None:
        s = gate.statistics()
        path = "none" if s.delay is None else f"{s.delay * 1000:.0f} ms x {s.gain:.2f}"
        share = s.frames_gated / s.frames if s.frames else 0.0
        line += f" · path {path} · gated {share:.0%} of {s.frames} frames"
    print(line)
    print(f"{'':<34} turns: {call.transcripts()}")
    return figures


def room_impulse(delay: float, gain: float, rt60: float, seed: int = 0) -> np.ndarray:
    """A direct path of ``gain`` after ``delay`` plus a diffuse tail decaying 60 dB in
    ``rt60`` seconds, with as much energy as the direct path (a small, live room)."""
    rate = STT_SAMPLE_RATE
    start = round(delay * rate)
    if rt60 <= 0:
        ir = np.zeros(start + 1, np.float32)
        ir[start] = gain
        return ir
    n = round(rt60 * rate)
    t = np.arange(n) / rate
    tail = np.random.default_rng(seed).standard_normal(n) * 10 ** (-3 * t / rt60)
    tail *= gain / np.sqrt(np.sum(tail**2))  # tail energy == direct energy
    ir = np.zeros(start + n, np.float32)
    ir[start] += gain
    ir[start + 1 :] += tail[: n - 1].astype(np.float32)
    return ir


async def room_echo(engines: VoiceEngines) -> None:
    """The gate on a reverberant echo (beyond the simulated client's pure delay): the
    assistant's real TTS audio through a synthetic room, the user's real TTS voice from
    4.0 s. A fresh Silero turn detector runs on the gate's output, as in a session."""
    from voxflow_voice.listen.turn_detector import BargeInDetected, TurnDetector
    from voxflow_voice.listen.turn_detector import SpeechStarted as DetectorSpeechStarted

    rate = STT_SAMPLE_RATE
    played = (await CallScript().user_says(0.0, STORY).render(engines.tts)).user[: 8 * rate]
    user = (await CallScript().user_says(4.0, "Stop, please.").until(8.0)
            .render(engines.tts)).user[: played.size]
    user_onset = int(np.flatnonzero(np.abs(user) > 0.01)[0])
    for rt60 in (0.0, 0.2, 0.4):
        echo = np.convolve(played, room_impulse(0.06, 0.3, rt60))[: played.size]
        mic = np.clip(echo + user, -1, 1).astype(np.float32)
        gate = EchoGate()
        detector = TurnDetector(engines.make_vad())
        false_starts, barge_in_ms = 0, None
        for out in gate_frames(gate, played, mic):
            for event in detector.push(out):
                if isinstance(event, DetectorSpeechStarted) and event.onset_sample < user_onset:
                    false_starts += 1
                if (isinstance(event, BargeInDetected) and barge_in_ms is None
                        and event.onset_sample >= user_onset - 0.2 * rate):
                    barge_in_ms = (event.at_sample - user_onset) / rate * 1000
        s = gate.statistics()
        found = "none" if s.delay is None else f"{s.delay * 1000:.0f} ms x {s.gain:.2f}"
        detected = "NOT detected" if barge_in_ms is None else f"{barge_in_ms:.0f} ms after onset"
        print(f"  RT60 {rt60:.1f} s: echo heard as speech {false_starts} times before the user; "
              f"barge-in {detected}; path {found} (corr {s.correlation:.2f})")


def gate_cost(runs: int) -> float:
    """Median wall seconds of ``EchoGate.process`` per 20 ms frame with a live echo path."""
    rng = np.random.default_rng(0)
    n = 3 * STT_SAMPLE_RATE
    played = (0.1 * rng.standard_normal(n)).astype(np.float32)
    mic = np.zeros(n, np.float32)
    mic[1120:] = 0.3 * played[:-1120]
    per_frame: list[float] = []
    for run in range(runs + 1):  # run 0 warms up (numpy's lazy imports, caches)
        gate = EchoGate()
        delivery = DeliveryId("bench")
        spent = 0.0
        frames = 0
        for start in range(0, n, 320):
            piece = played[start : start + 320]
            gate.sent(ReplyChunk.from_float(piece, STT_SAMPLE_RATE, start_sample=start,
                                            delivery_id=delivery, segment_id=1))
            gate.played(PlaybackReceipt(delivery, 1, start, piece.size, STT_SAMPLE_RATE,
                                        at=start / STT_SAMPLE_RATE))
            chunk = AudioChunk.from_float(mic[start : start + 320], STT_SAMPLE_RATE)
            t = time.perf_counter()
            gate.process(chunk, start / STT_SAMPLE_RATE)
            spent += time.perf_counter() - t
            frames += 1
        if run:
            per_frame.append(spent / frames)
    return statistics.median(per_frame)


async def main(runs: int) -> None:
    engines = VoiceEngines.load(deterministic=True)
    gated = VoiceSettings()
    headphones = VoiceSettings(echo_gate=False)
    def story() -> CallScript:
        return CallScript().user_says(0.3, "Tell me a story.")  # a builder: fresh each time

    def talk() -> CallScript:
        return story().user_says(BARGE_IN_AT, "Stop, please.")

    print("no echo (reference for the detection delay)")
    report("  no echo, gate on", await bounded_call(talk(), engines, gated, 30), barge_in=True)
    report("  no echo, gate off", await bounded_call(talk(), engines, headphones, 30),
           barge_in=True)
    for gain in (0.3, 0.5):
        for delay in (0.04, 0.06, 0.08):
            print(f"echo gain {gain} ({20 * np.log10(gain):.0f} dB), delay {delay * 1000:.0f} ms")
            report("  story only, gate on",
                   await bounded_call(story().with_echo(gain, delay), engines, gated, 30),
                   barge_in=False)
            report("  barge-in, gate on",
                   await bounded_call(talk().with_echo(gain, delay), engines, gated, 30),
                   barge_in=True)
            if gain == 0.3 and delay == 0.06:
                report("  story only, gate off (12 s)",
                       await bounded_call(story().with_echo(gain, delay), engines, headphones,
                                          12), barge_in=False)
    print("reverberant room (gain 0.3, 60 ms, diffuse tail as loud as the direct path)")
    await room_echo(engines)
    cost = gate_cost(runs)
    print(f"gate cost: {cost * 1e6:.0f} us per 20 ms frame (median of {runs} runs), "
          f"{cost / 0.02:.1%} of real time")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="runs of the CPU cost measurement")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be >= 1")
    asyncio.run(main(args.runs))
