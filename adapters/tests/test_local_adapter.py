"""LocalAudio against a fake audio driver: the other side of the PortAudio boundary.

``FakeDriver`` opens ``FakeStream`` s and plays PortAudio's part: the test calls
``pump()`` to run the callbacks the way the audio thread would (an input block of known
samples, an output buffer to fill), so every check is about the samples that crossed
the boundary: what the microphone gave, what the speaker got, and what was reported.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from voxflow_adapters.local import (
    LocalAudio,
    LocalAudioSettings,
    LocalAudioStatus,
    StreamCallback,
    StreamKind,
    load_sounddevice,
)
from voxflow_adapters.local.errors import AudioBackendError, AudioDeviceError
from voxflow_voice.audio import STT_SAMPLE_RATE, AudioChunk, ReplyChunk
from voxflow_voice.testing import CHECKS, TransportHarness, check_transport
from voxflow_voice.transport import (
    AudioTransport,
    ClientObservation,
    MuteChanged,
    PausableTransport,
    PlaybackDrained,
    PlaybackReceipt,
)

from voxflow.clock import VirtualClock
from voxflow.errors import ResourceClosedError
from voxflow.ids import DeliveryId
from voxflow.tasks import background


@dataclass
class FakeTime:
    """The ``time`` struct PortAudio passes to callbacks."""

    currentTime: float = 10.0
    outputBufferDacTime: float = 10.05
    inputBufferAdcTime: float = 9.99


@dataclass
class FakeStream:
    """One stream as the driver sees it."""

    kind: StreamKind
    device: Any
    samplerate: float
    blocksize: int
    callback: StreamCallback
    active: bool = False
    closed: bool = False

    def start(self) -> None:
        self.active = True

    def close(self, ignore_errors: bool = True) -> None:
        self.active = False
        self.closed = True


@dataclass
class FakeDriver:
    """Opens fake streams at fixed device rates; can refuse or lose devices."""

    input_rate: int = 48_000
    output_rate: int = 44_100
    missing: set[str] = field(default_factory=set)  # kinds with no device right now
    streams: list[FakeStream] = field(default_factory=list)
    refreshes: int = 0

    def open(self, kind: StreamKind, *, device: Any, samplerate: int | None, block: float,
             latency: Any, callback: StreamCallback) -> FakeStream:
        if kind in self.missing:
            raise AudioDeviceError(f"no {kind} device", device=device, kind=kind)
        rate = samplerate or (self.input_rate if kind == "input" else self.output_rate)
        stream = FakeStream(kind, device, float(rate), round(rate * block), callback)
        self.streams.append(stream)
        return stream

    def refresh(self) -> None:
        self.refreshes += 1

    def current(self, kind: StreamKind) -> FakeStream:
        return [s for s in self.streams if s.kind == kind][-1]

    def capture(self, samples: np.ndarray) -> None:
        """The microphone delivers ``samples`` (one callback per block)."""
        stream = self.current("input")
        for start in range(0, samples.size, stream.blocksize):
            block = samples[start : start + stream.blocksize].reshape(-1, 1).astype(np.float32)
            stream.callback(block, block.shape[0], FakeTime(), 0)

    def render(self, frames: int) -> np.ndarray:
        """The speaker asks for ``frames`` samples; returns what it got."""
        stream = self.current("output")
        out = np.full((frames, 1), np.nan, np.float32)  # the callback must fill every sample
        stream.callback(out, frames, FakeTime(), 0)
        return out[:, 0].copy()


def tone(seconds: float, rate: int, freq: float = 440.0, amp: float = 0.5) -> np.ndarray:
    t = np.arange(round(seconds * rate)) / rate
    return (amp * np.sin(2 * np.pi * freq * t)).astype(np.float32)


async def settle() -> None:
    """Let the callbacks' hand-offs (call_soon_threadsafe) run."""
    for _ in range(3):
        await asyncio.sleep(0)


def drain(queue_items: list[ClientObservation], audio: LocalAudio) -> None:
    queue = audio._observations
    while not queue.empty():
        item = queue.get_nowait()
        if item is not None:
            queue_items.append(item)


def quiet_settings(**kw: Any) -> LocalAudioSettings:
    return LocalAudioSettings(stall_timeout=60.0, **kw)


async def test_opens_both_streams_at_the_device_rates() -> None:
    driver = FakeDriver()
    audio = LocalAudio(quiet_settings(input_device=3, output_device="Speakers"), backend=driver)
    assert isinstance(audio, AudioTransport)
    assert isinstance(audio, PausableTransport)  # the session's arbiter may pause replies
    async with audio:
        stats = audio.statistics()
        assert (stats.input_rate, stats.output_rate) == (48_000, 44_100)
        assert [(s.kind, s.device, s.active) for s in driver.streams] == [
            ("input", 3, True), ("output", "Speakers", True)]
        assert driver.current("input").blocksize == 960  # 20 ms
    assert all(s.closed for s in driver.streams)


async def test_microphone_audio_is_converted_to_16k_in_order() -> None:
    driver = FakeDriver(input_rate=48_000)
    async with LocalAudio(quiet_settings(), backend=driver) as audio:
        source = tone(0.5, 48_000, freq=300.0)
        driver.capture(source)
        await settle()
        await audio.aclose()
        chunks = [chunk async for chunk in audio.audio_input()]
    assert all(isinstance(c, AudioChunk) and c.sample_rate == STT_SAMPLE_RATE for c in chunks)
    starts = [c.start_sample for c in chunks]
    assert None not in starts
    positions = [int(x or 0) for x in starts]
    assert positions == sorted(positions) and positions[0] == 0
    got = np.concatenate([c.samples() for c in chunks])
    expected = tone(0.5, STT_SAMPLE_RATE, freq=300.0)
    # The resampler's look-ahead keeps back a few ms; what came out is the same tone.
    n = min(got.size, expected.size) - 400
    assert got.size > 0.45 * STT_SAMPLE_RATE
    lag = int(np.argmax(np.correlate(got[:2000], expected[:2000], "full"))) - 1999
    aligned = got[max(0, lag) : max(0, lag) + n - 2000]
    assert np.max(np.abs(aligned - expected[: aligned.size])) < 0.02


async def test_playback_plays_exactly_the_written_samples_and_receipts_match() -> None:
    driver = FakeDriver(output_rate=22_050)  # same rate as the chunks: sample-exact
    delivery = DeliveryId("d-1")
    reply = tone(0.1, 22_050, freq=500.0, amp=0.25)
    chunks = [
        ReplyChunk.from_float(reply[:1000], 22_050, delivery_id=delivery, segment_id=1,
                              start_sample=0),
        ReplyChunk.from_float(reply[1000:], 22_050, delivery_id=delivery, segment_id=1,
                              start_sample=1000),
    ]
    seen: list[ClientObservation] = []
    async with LocalAudio(quiet_settings(), backend=driver, clock=VirtualClock()) as audio:
        for chunk in chunks:
            await audio.wait_writable()
            audio.write_nowait(chunk)
        played = np.concatenate([driver.render(441) for _ in range(6)])
        await settle()
        drain(seen, audio)
    expected = np.concatenate([c.samples() for c in chunks])
    assert np.array_equal(played[: expected.size], expected)  # bit-exact through the device
    assert np.all(played[expected.size :] == 0.0)  # then silence, never stale data
    receipts = [o for o in seen if isinstance(o, PlaybackReceipt)]
    assert sum(r.num_samples for r in receipts) == expected.size
    assert [(r.start_sample, r.num_samples) for r in receipts][:3] == [
        (0, 441), (441, 441), (882, 118)]
    assert all(r.delivery_id == delivery and r.segment_id == 1 for r in receipts)
    # Receipts are stamped when the buffer reaches the speaker (DAC time - now = 50 ms).
    assert receipts[0].at == pytest.approx(0.05)
    drained = [o for o in seen if isinstance(o, PlaybackDrained)]
    assert len(drained) == 1 and drained[0].delivery_id == delivery
    assert seen.index(drained[0]) > seen.index(receipts[-1])


async def test_playback_resamples_to_the_device_and_receipts_stay_in_chunk_samples() -> None:
    driver = FakeDriver(output_rate=48_000)
    delivery = DeliveryId("d-2")
    chunk = ReplyChunk.from_float(tone(0.2, 22_050, freq=400.0, amp=0.3), 22_050,
                                  delivery_id=delivery, segment_id=2, start_sample=500)
    seen: list[ClientObservation] = []
    async with LocalAudio(quiet_settings(), backend=driver) as audio:
        audio.write_nowait(chunk)
        played = np.concatenate([driver.render(960) for _ in range(12)])
        await settle()
        drain(seen, audio)
    receipts = [o for o in seen if isinstance(o, PlaybackReceipt)]
    assert sum(r.num_samples for r in receipts) == chunk.num_samples  # played whole
    assert receipts[0].start_sample == 500 and receipts[0].sample_rate == 22_050
    assert all(a.start_sample + a.num_samples == b.start_sample
               for a, b in itertools.pairwise(receipts))
    sound = played[np.abs(played) > 0]
    assert 0.19 * 48_000 < sound.size <= 0.2 * 48_000 + 2
    spectrum = np.abs(np.fft.rfft(played[: round(0.2 * 48_000)]))
    assert abs(np.argmax(spectrum) * 48_000 / (2 * (spectrum.size - 1)) - 400.0) < 10


async def test_flush_drops_only_that_delivery_at_once() -> None:
    driver = FakeDriver(output_rate=16_000)
    old, new = DeliveryId("old"), DeliveryId("new")
    seen: list[ClientObservation] = []
    async with LocalAudio(quiet_settings(lead=5.0), backend=driver) as audio:
        audio.write_nowait(ReplyChunk.from_float(np.full(1600, 0.1, np.float32), 16_000,
                                                 delivery_id=old, segment_id=1, start_sample=0))
        audio.write_nowait(ReplyChunk.from_float(np.full(1600, 0.2, np.float32), 16_000,
                                                 delivery_id=new, segment_id=1, start_sample=0))
        first = driver.render(600)  # 600 samples of `old` played
        dropped = audio.flush(old)
        rest = np.concatenate([driver.render(800) for _ in range(3)])
        await settle()
        drain(seen, audio)
        assert audio.flush(old) == 0  # idempotent
    assert dropped == 1000
    assert np.allclose(first, 0.1, atol=1e-4)
    assert np.allclose(rest[:1600], 0.2, atol=1e-4)  # `new` follows at once, whole
    assert np.all(rest[1600:] == 0.0)
    played_old = sum(o.num_samples for o in seen
                     if isinstance(o, PlaybackReceipt) and o.delivery_id == old)
    assert played_old == 600
    assert audio.statistics().samples_flushed == 1000


async def test_wait_writable_applies_back_pressure_until_the_device_consumes() -> None:
    driver = FakeDriver(output_rate=16_000)
    delivery = DeliveryId("d")
    async with LocalAudio(quiet_settings(lead=0.1), backend=driver) as audio:
        audio.write_nowait(ReplyChunk.from_float(np.zeros(3200, np.float32), 16_000,
                                                 delivery_id=delivery, segment_id=1,
                                                 start_sample=0))
        waiter = asyncio.create_task(audio.wait_writable())
        await settle()
        assert not waiter.done()  # 0.2 s queued >= lead of 0.1 s
        driver.render(2000)  # 0.075 s left
        await settle()
        assert waiter.done()


async def test_mute_sends_silence_and_reports_the_change() -> None:
    driver = FakeDriver(input_rate=16_000)
    seen: list[ClientObservation] = []
    async with LocalAudio(quiet_settings(), backend=driver) as audio:
        audio.set_muted(True)
        audio.set_muted(True)  # no change, no report
        driver.capture(tone(0.1, 16_000))
        await settle()
        drain(seen, audio)
        await audio.aclose()
        chunks = [c async for c in audio.audio_input()]
    assert [o.muted for o in seen if isinstance(o, MuteChanged)] == [True]
    assert chunks and all(not np.any(c.samples()) for c in chunks)
    with pytest.raises(TypeError, match="muted"):
        audio.set_muted(1)  # type: ignore[arg-type]


async def test_a_stalled_stream_is_reopened_and_the_queue_survives() -> None:
    driver = FakeDriver(output_rate=16_000)
    statuses: list[LocalAudioStatus] = []
    clock = VirtualClock(autojump=True)
    delivery = DeliveryId("d")
    async with clock:
        audio = LocalAudio(LocalAudioSettings(stall_timeout=1.0), backend=driver, clock=clock,
                           on_status=statuses.append)
        async with audio:
            audio.write_nowait(ReplyChunk.from_float(np.full(800, 0.3, np.float32), 16_000,
                                                     delivery_id=delivery, segment_id=1,
                                                 start_sample=0))
            first = driver.streams[:2]
            await clock.sleep(1.5)  # no callbacks at all: the watchdog sees a stall
            assert [s.state for s in statuses] == ["open", "stalled", "reopened"]
            assert all(s.closed for s in first) and len(driver.streams) == 4
            assert driver.refreshes == 1
            played = driver.render(800)  # the new output stream plays what was queued
            assert np.allclose(played, 0.3, atol=1e-4)
            assert audio.statistics().reopens == 1 and audio.error is None


async def test_a_lost_device_that_never_returns_ends_the_input_cleanly() -> None:
    driver = FakeDriver()
    statuses: list[LocalAudioStatus] = []
    clock = VirtualClock(autojump=True)
    async with clock:
        audio = LocalAudio(LocalAudioSettings(stall_timeout=1.0, reopen_attempts=2),
                           backend=driver, clock=clock, on_status=statuses.append)
        async with audio:
            driver.missing = {"input"}  # unplugged
            driver.current("input").active = False
            chunks = [c async for c in audio.audio_input()]  # ends instead of hanging
            assert chunks == []
            assert [s.state for s in statuses] == [
                "open", "stalled", "reopen_failed", "reopen_failed", "broken"]
            assert audio.error is not None and "conversation is kept" in str(audio.error)
            assert isinstance(audio.error.__cause__, AudioDeviceError)
            with pytest.raises(ResourceClosedError):
                audio.write_nowait(ReplyChunk.from_float(np.zeros(10, np.float32), 16_000,
                                                         delivery_id=DeliveryId("x"), segment_id=1,
                                                         start_sample=0))
            await audio.wait_writable()  # never blocks on a device that is gone


async def test_no_device_is_a_clear_error_and_nothing_stays_open() -> None:
    driver = FakeDriver(missing={"output"})
    audio = LocalAudio(quiet_settings(output_device=7), backend=driver)
    with pytest.raises(AudioDeviceError, match="no output device") as info:
        await audio.open()
    assert info.value.kind == "output"
    assert driver.streams[0].kind == "input" and driver.streams[0].closed


async def test_bad_arguments_are_named() -> None:
    with pytest.raises(TypeError, match="settings"):
        LocalAudio({"input_device": 1})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="lead"):
        LocalAudioSettings(lead=0)
    driver = FakeDriver()
    async with LocalAudio(quiet_settings(), backend=driver) as audio:
        with pytest.raises(TypeError, match="ReplyChunk"):  # microphone audio is not a reply
            audio.write_nowait(AudioChunk.from_float(  # type: ignore[arg-type]
                np.zeros(10, np.float32), 16_000))
        with pytest.raises(TypeError, match="chunk"):
            audio.write_nowait(b"\x00\x00")  # type: ignore[arg-type]
    with pytest.raises(ResourceClosedError):
        await audio.open()


def test_load_sounddevice_names_the_package_when_portaudio_is_missing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # What sounddevice raises without PortAudio: an OSError from its import.
    import builtins
    import sys

    real_import = builtins.__import__

    def no_portaudio(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "sounddevice":
            raise OSError("PortAudio library not found")
        return real_import(name, *args, **kwargs)

    monkeypatch.delitem(sys.modules, "sounddevice", raising=False)
    monkeypatch.setattr(builtins, "__import__", no_portaudio)
    with pytest.raises(AudioBackendError, match="apt-get install libportaudio2") as info:
        load_sounddevice()
    assert info.value.install == "apt-get install libportaudio2"
    assert isinstance(info.value.__cause__, OSError)


async def test_pause_holds_playout_and_resume_goes_on_from_the_same_sample() -> None:
    driver = FakeDriver(output_rate=16_000)
    delivery = DeliveryId("d")
    ramp = (np.arange(3200, dtype=np.float32) - 1600) / 4000
    chunk = ReplyChunk.from_float(ramp, 16_000, delivery_id=delivery, segment_id=1,
                                  start_sample=0)
    seen: list[ClientObservation] = []
    async with LocalAudio(quiet_settings(lead=5.0), backend=driver) as audio:
        audio.write_nowait(chunk)
        first = driver.render(1000)
        assert audio.pause(delivery) and not audio.pause(delivery)
        held = np.concatenate([driver.render(320) for _ in range(5)])
        await settle()
        drain(seen, audio)
        assert not any(isinstance(o, PlaybackDrained) for o in seen)  # the floor stays held
        assert audio.statistics().queued_seconds == pytest.approx(2200 / 16_000)
        assert audio.resume(delivery) and not audio.resume(delivery)
        rest = np.concatenate([driver.render(1100), driver.render(1100), driver.render(320)])
        await settle()
        drain(seen, audio)
        assert audio.pause(delivery)
        assert audio.flush(delivery) == 0 and not audio.pause(delivery)  # flushed: no pause
    samples = chunk.samples()
    assert np.array_equal(first, samples[:1000])
    assert np.all(held == 0.0)
    assert np.array_equal(rest[:2200], samples[1000:])  # no gap, no repeat
    receipts = [(o.start_sample, o.num_samples) for o in seen if isinstance(o, PlaybackReceipt)]
    assert receipts == [(0, 1000), (1000, 1100), (2100, 1100)]
    assert isinstance(seen[-1], PlaybackDrained)


def test_importing_the_adapter_never_loads_portaudio() -> None:
    import subprocess
    import sys

    code = ("import sys, voxflow_adapters.local, voxflow_adapters.local.chat; "
            "print('sounddevice' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=True)
    assert done.stdout.strip() == "False"


async def test_a_nan_block_from_the_driver_is_passed_on_as_counted_silence() -> None:
    driver = FakeDriver(input_rate=16_000)
    async with LocalAudio(quiet_settings(), backend=driver) as audio:
        source = tone(0.2, 16_000, freq=300.0)
        source[960:1000] = np.nan  # a driver glitch inside the 4th 20 ms block
        source[2000] = np.inf
        driver.capture(source)
        await settle()
        stats = audio.statistics()
        await audio.aclose()
        chunks = [chunk async for chunk in audio.audio_input()]
    assert (stats.input_frames_zeroed, stats.input_frames_dropped) == (2, 0)
    got = np.concatenate([c.samples() for c in chunks])
    assert got.size == source.size  # the timeline is kept
    assert not np.any(got[960:1280]) and not np.any(got[1920:2240])  # those blocks: silence
    assert np.any(got[:960]) and np.any(got[1280:1920])  # the rest: the tone


@contextlib.asynccontextmanager
async def fake_sound_card() -> AsyncIterator[TransportHarness]:
    """LocalAudio on the fake driver, its output callback run every 20 ms of a virtual
    clock (the cadence PortAudio's audio thread gives the real one)."""
    clock = VirtualClock(autojump=True)
    driver = FakeDriver(output_rate=48_000)
    async with clock, LocalAudio(quiet_settings(), backend=driver, clock=clock) as audio:

        async def cadence() -> None:
            block = driver.current("output").blocksize
            while True:
                driver.render(block)
                await clock.sleep(block / 48_000)

        async def mute(muted: bool) -> None:
            audio.set_muted(muted)

        async with background(cadence(), name="fake-device"):
            yield TransportHarness(audio, sleep=clock.sleep, close=audio.aclose, mute=mute)


async def test_the_transport_contract_on_the_fake_driver() -> None:
    # voxflow_voice.testing's suite, as run for the simulated and WebRTC adapters (and on
    # a real sound card in test_local_device.py), in every run: no PortAudio needed.
    report = await check_transport(fake_sound_card)
    assert report == {name: "passed" for name in CHECKS}
