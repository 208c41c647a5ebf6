"""The server's Opus (libopus through ctypes). The reply track's: the packets PyAV's
libopus codec gave for the same frames, byte for byte; mono packets decode to the audio
aiortc's stereo encoder sent, and silence, once settled, is sent without encoding it,
the packets unchanged. The receive path's: the caller's packets decode straight to
16 kHz mono, what the 48 kHz decode and the 48 → 16 kHz decimator gave (a mono stream:
one channel; a stereo one: their mean) within the codec's resampling, and Whisper hears
the same words."""

from __future__ import annotations

import fractions
import re
from typing import Any

import av
import numpy as np
import pytest
from aiortc.codecs.opus import OpusDecoder, OpusEncoder
from aiortc.jitterbuffer import JitterFrame
from numpy.typing import NDArray
from voxflow_adapters.webrtc.opus import (
    DECODED_RATE,
    SILENT_REPEATS,
    DecodedFrame,
    MonoOpusDecoder,
    MonoOpusEncoder,
)
from voxflow_adapters.webrtc.outbound import FRAME_SAMPLES, OutboundAudio, ReplyTrack
from voxflow_voice.audio import AudioChunk, ReplyChunk, resample
from voxflow_voice.engines import VoiceEngines
from voxflow_voice.listen.input_guard import InputGuard

from voxflow.clock import VirtualClock
from voxflow.ids import DeliveryId

_TIME_BASE = fractions.Fraction(1, 48_000)
_SILENCE = bytes(2 * FRAME_SAMPLES)


def _decoded(packets: list[bytes]) -> np.ndarray:
    """What a receiver hears (aiortc's decoder: stereo s16), as (samples, 2) floats."""
    decoder = OpusDecoder()
    out = []
    for i, payload in enumerate(packets):
        for frame in decoder.decode(JitterFrame(data=payload, timestamp=i * FRAME_SAMPLES)):
            assert isinstance(frame, av.AudioFrame)
            out.append(frame.to_ndarray().reshape(-1, 2))
    return np.concatenate(out).astype(np.float64) / 32768.0


def _stereo_packets(frames: list[bytes]) -> list[bytes]:
    """The packets aiortc's own encoder (mono → stereo, then a stereo encode) gives."""
    encoder = OpusEncoder()
    packets = []
    for i, pcm in enumerate(frames):
        frame = av.AudioFrame(format="s16", layout="mono", samples=FRAME_SAMPLES)
        frame.planes[0].update(pcm)
        frame.sample_rate, frame.pts, frame.time_base = 48_000, i * FRAME_SAMPLES, _TIME_BASE
        (payload,), _ = encoder.encode(frame)
        packets.append(payload)
    return packets


def _reply(seconds: float) -> np.ndarray:
    """Speech-like test audio: a 220 Hz tone with harmonics, its level varying."""
    t = np.arange(int(48_000 * seconds)) / 48_000
    tone = sum(np.sin(2 * np.pi * 220 * k * t) / k for k in (1, 2, 3, 5))
    return (0.5 * tone * (0.6 + 0.4 * np.sin(2 * np.pi * 2 * t)) / 1.6).astype(np.float32)


def _recorded_track() -> tuple[OutboundAudio, ReplyTrack, list[bytes]]:
    """A reply track encoding here (as in a call) over an outbound queue on a virtual
    clock, and the PCM frames the track takes from it, in order."""
    outbound = OutboundAudio(clock=VirtualClock(), on_observation=lambda _: None, lead=5.0)
    track = ReplyTrack(outbound)
    track.encode_here()
    frames: list[bytes] = []
    take = outbound.next_frame

    def recorded(*, late: bool = False) -> bytes:
        frames.append(take(late=late))
        return frames[-1]

    outbound.next_frame = recorded  # type: ignore[method-assign]
    return outbound, track, frames


async def test_the_tracks_mono_packets_decode_to_what_the_stereo_encoder_sent() -> None:
    """The track's packets (through recv(), as aiortc's sender takes them) decode, on
    both channels, to the audio aiortc's stereo encoder gave for the same frames: the same
    level (its upmix's -3 dB) and the same signal within the codec's error."""
    outbound, track, frames = _recorded_track()
    outbound.write_nowait(ReplyChunk.from_float(
        _reply(1.2), 48_000, delivery_id=DeliveryId("d1"), segment_id=1, start_sample=0))
    packets: list[Any] = [await track.recv() for _ in range(70)]  # 1.2 s reply + silence
    assert [p.pts for p in packets] == [i * FRAME_SAMPLES for i in range(70)]
    mono = _decoded([bytes(p) for p in packets])
    stereo = _decoded(_stereo_packets(frames))
    assert np.array_equal(mono[:, 0], mono[:, 1])  # a mono packet plays on both channels
    heard, before = mono[2400:57_600, 0], stereo[2400:57_600, 0]  # the reply, past onset
    level = 20 * np.log10(np.sqrt(np.mean(heard**2)) / np.sqrt(np.mean(before**2)))
    assert abs(level) < 0.2  # dB
    error = 10 * np.log10(np.mean(before**2) / np.mean((heard - before) ** 2))
    assert error > 25  # dB of signal over the difference
    assert np.sqrt(np.mean(heard**2)) > 0.1  # (the reply, not silence)


def test_settled_silence_is_sent_without_encoding_and_the_packets_do_not_change() -> None:
    """Silence before, between and after replies (a long gap, a 5-frame one): every packet
    is the one encoding every frame gives, the replies' packets after a gap included, and
    past SILENT_REPEATS identical silent packets libopus is no longer called."""
    rng = np.random.default_rng(7)
    reply = (np.clip(_reply(0.8), -1, 1) * 32767).astype(np.int16)
    noise = (rng.normal(0, 0.1, 48_000) * 32767).astype(np.int16)

    def frames_of(x: np.ndarray) -> list[bytes]:
        return [x[i:i + FRAME_SAMPLES].tobytes() for i in range(0, len(x), FRAME_SAMPLES)]

    script = ([_SILENCE] * 80 + frames_of(reply) + [_SILENCE] * 150 + frames_of(noise)
              + [_SILENCE] * 5 + frames_of(reply) + [_SILENCE] * 60)
    every = MonoOpusEncoder()
    reference = [every.encode(pcm) for pcm in script]  # (silent not said: all encoded)
    assert every.reused == 0
    settled = MonoOpusEncoder()
    packets = [settled.encode(pcm, silent=pcm is _SILENCE) for pcm in script]
    assert packets == reference
    silent_runs = (80, 150, 60)
    assert settled.reused >= sum(run - SILENT_REPEATS - 10 for run in silent_runs)
    assert settled.encoded + settled.reused == len(script)


async def test_the_track_reuses_settled_silence_and_encodes_a_reply_at_once() -> None:
    """Through recv(), as aiortc's sender takes the packets: 60 idle frames (more than
    SILENT_REPEATS) leave the encoder reusing the packet silence settled on (the track
    marks the outbound queue's own silence frame, not any all-zero frame), then a reply
    written meanwhile goes out in the very next packet, encoded, with the timestamps
    running on; every packet is the one encoding every frame gives."""
    outbound, track, frames = _recorded_track()
    encoder = track.encoder
    assert encoder is not None
    idle = SILENT_REPEATS + 10
    packets: list[Any] = [await track.recv() for _ in range(idle)]
    assert encoder.reused > 0  # (0: every silent frame went through libopus)
    assert encoder.encoded + encoder.reused == idle
    skipped = encoder.reused
    outbound.write_nowait(ReplyChunk.from_float(
        _reply(0.2), 48_000, delivery_id=DeliveryId("d1"), segment_id=1, start_sample=0))
    packets += [await track.recv() for _ in range(10)]  # 0.2 s: the reply's 10 frames
    assert all(any(pcm) for pcm in frames[idle:])  # the reply's audio, at once
    assert encoder.reused == skipped  # each of its frames encoded
    assert encoder.encoded + encoder.reused == idle + 10
    assert [p.pts for p in packets] == [i * FRAME_SAMPLES for i in range(idle + 10)]
    every = MonoOpusEncoder()
    assert [bytes(p) for p in packets] == [every.encode(pcm) for pcm in frames]


def _speech_frames(seconds: float) -> list[bytes]:
    """Speech-like frames with silence around them, as s16 mono bytes."""
    audio = np.concatenate([np.zeros(9600, np.float32), _reply(seconds),
                            np.zeros(9600, np.float32)])
    pcm = (np.clip(audio, -1, 1) * 32767).astype(np.int16)
    return [pcm[i:i + FRAME_SAMPLES].tobytes() for i in range(0, pcm.size, FRAME_SAMPLES)]


def _pyav_packets(frames: list[bytes]) -> list[bytes]:
    """What the encoder was before it called libopus itself: PyAV's ``libopus`` codec,
    mono, 96 kb/s, ``voip``, after the same -3 dB."""
    codec = av.CodecContext.create("libopus", "w")
    codec.bit_rate, codec.format, codec.layout = 96_000, "s16", "mono"
    codec.options = {"application": "voip"}
    codec.sample_rate, codec.time_base = 48_000, _TIME_BASE
    packets = []
    for i, pcm in enumerate(frames):
        gained = np.rint(np.frombuffer(pcm, np.int16) * np.sqrt(0.5)).astype(np.int16)
        frame = av.AudioFrame(format="s16", layout="mono", samples=FRAME_SAMPLES)
        frame.planes[0].update(gained.tobytes())
        frame.sample_rate, frame.pts, frame.time_base = 48_000, i * FRAME_SAMPLES, _TIME_BASE
        (packet,) = codec.encode(frame)
        packets.append(bytes(packet))
    return packets


def test_the_encoder_gives_the_packets_pyavs_libopus_codec_gave() -> None:
    """libopus called directly (the copy PyAV bundles, FFmpeg's settings: unconstrained
    VBR) encodes speech-like audio, noise and silence to the very bytes PyAV's codec
    gave."""
    rng = np.random.default_rng(3)
    noise = (rng.normal(0, 0.1, 48_000) * 32767).astype(np.int16)
    frames = _speech_frames(1.0) + [noise[i:i + FRAME_SAMPLES].tobytes()
                                    for i in range(0, noise.size, FRAME_SAMPLES)]
    encoder = MonoOpusEncoder()
    assert [encoder.encode(pcm) for pcm in frames] == _pyav_packets(frames)


def test_the_encoder_takes_any_contiguous_buffer_of_a_frame_and_names_what_it_refuses(
) -> None:
    pcm = (8000 * np.sin(np.arange(FRAME_SAMPLES) / 7)).astype(np.int16).tobytes()
    reference = MonoOpusEncoder().encode(pcm)
    for buffer in (bytearray(pcm), memoryview(pcm), np.frombuffer(pcm, np.int16)):
        assert MonoOpusEncoder().encode(buffer) == reference
    encoder = MonoOpusEncoder()
    for bad, said in (([0] * FRAME_SAMPLES, "got list"), (pcm[:-2], "got 1918"),
                      (memoryview(pcm * 2)[::2], "got a strided buffer")):
        with pytest.raises(ValueError, match=f"^a frame is 1920 .*{said}$"):
            encoder.encode(bad)  # type: ignore[arg-type]


def _spoken(engines: VoiceEngines, text: str) -> NDArray[np.float32]:
    """``text`` in the bundled voice at 48 kHz, with silence around it."""
    speech = np.concatenate([np.asarray(s.samples, np.float32)
                             for s in engines.tts.synthesize(text)])
    speech = resample(speech, engines.tts.sample_rate, 48_000)
    return np.concatenate([np.zeros(4800, np.float32), speech, np.zeros(9600, np.float32)])


def _frames_of(audio: NDArray[np.float32]) -> list[bytes]:
    pcm = (np.clip(audio, -1, 1) * 32767).astype(np.int16)
    usable = pcm.size - pcm.size % FRAME_SAMPLES
    return [pcm[i:i + FRAME_SAMPLES].tobytes() for i in range(0, usable, FRAME_SAMPLES)]


def _through_the_guard(packets: list[bytes]) -> NDArray[np.float32]:
    """What the session hears now: libopus at 16 kHz mono, then the input guard (which
    resamples nothing at 16 kHz)."""
    decoder, guard = MonoOpusDecoder(), InputGuard()
    out = []
    for i, payload in enumerate(packets):
        (frame,) = decoder.decode(JitterFrame(data=payload, timestamp=i * FRAME_SAMPLES))
        assert isinstance(frame, DecodedFrame)
        assert frame.sample_rate == DECODED_RATE and frame.samples.dtype == np.int16
        assert frame.samples.shape == (320,)  # 20 ms, mono
        assert frame.rtp_timestamp == i * FRAME_SAMPLES  # (48 kHz RTP units, as aiortc's)
        chunk = guard.convert(frame.samples, frame.sample_rate, 1)
        assert chunk is not None
        out.append(chunk.samples())
    return np.concatenate(out)


def _through_48khz(packets: list[bytes], *, mean: bool) -> NDArray[np.float32]:
    """What the session heard before: a 48 kHz decode (aiortc's stereo decoder: one
    channel of a mono stream, the mean of a stereo one's), then the guard's 48 → 16 kHz
    decimator."""
    guard = InputGuard()
    stereo = _decoded(packets)
    mono = stereo.mean(axis=1) if mean else stereo[:, 0]
    out = []
    for i in range(0, mono.size, FRAME_SAMPLES):
        chunk = guard.convert(mono[i:i + FRAME_SAMPLES].astype(np.float32), 48_000, 1)
        assert chunk is not None
        out.append(chunk.samples())
    return np.concatenate(out)


def _aligned_snr(before: NDArray[np.float32], now: NDArray[np.float32]) -> tuple[int, float]:
    """The lag (16 kHz samples the old path's decimator delayed it by) that best aligns
    the two, and the SNR (dB) of ``before`` over their difference there."""
    best = (0, -np.inf)
    for lag in range(0, 41):
        a, b = before[lag:], now[:now.size - lag]
        snr = 10 * np.log10(np.sum(a.astype(np.float64) ** 2)
                            / np.sum((a.astype(np.float64) - b) ** 2))
        if snr > best[1]:
            best = (lag, float(snr))
    return best


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9']+", text.lower())


_SENTENCE = "Please book a table for four at seven thirty tomorrow evening."


@pytest.mark.models
async def test_a_mono_stream_decodes_at_16_khz_to_what_48_khz_and_the_decimator_gave(
    engines: VoiceEngines,
) -> None:
    """A browser's microphone stream is mono: libopus decoding it at 16 kHz (its own
    rate for SILK, CELT's bands above 8 kHz left out) gives the speech the 48 kHz decode
    and the decimator gave, 21 samples (1.3 ms, the decimator's delay) sooner, within
    the codec's resampling (39 dB measured: 39.1, the stereo test's 39.2), and Whisper
    hears the same words."""
    encoder = MonoOpusEncoder()
    packets = [encoder.encode(pcm) for pcm in _frames_of(_spoken(engines, _SENTENCE))]
    now, before = _through_the_guard(packets), _through_48khz(packets, mean=False)
    assert now.size == before.size
    lag, snr = _aligned_snr(before, now)
    assert 15 <= lag <= 30 and snr > 30
    heard_now = await engines.stt.transcribe(AudioChunk.from_float(now, DECODED_RATE))
    heard_before = await engines.stt.transcribe(AudioChunk.from_float(before, DECODED_RATE))
    assert heard_now is not None and heard_before is not None
    assert _words(heard_now.text) == _words(heard_before.text)
    assert "table" in _words(heard_now.text)


@pytest.mark.models
def test_a_stereo_stream_decodes_at_16_khz_to_the_mean_of_its_channels(
    engines: VoiceEngines,
) -> None:
    """A stereo stream (aiortc's encoder, as the loopback caller sends): libopus's own
    downmix at 16 kHz is the mean of the stereo decoder's two channels after the
    decimator, within the codec's resampling (the same signal on both channels here:
    opus.py's docstring says where a true stereo stream's decode clipped a channel)."""
    packets = _stereo_packets(_frames_of(_spoken(engines, _SENTENCE)))
    now, before = _through_the_guard(packets), _through_48khz(packets, mean=True)
    assert np.sqrt(np.mean(now**2)) > 0.02  # (the speech, not silence)
    lag, snr = _aligned_snr(before, now)
    assert 15 <= lag <= 30 and snr > 30
