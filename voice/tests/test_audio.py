"""Audio chunks, sample conversions, resampling and WAV files (no models)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from voxflow_voice import (
    AudioChunk,
    InputConverter,
    ReplyChunk,
    Resampler,
    float_to_pcm16,
    pcm16_to_float,
    read_wav,
    resample,
    to_mono,
    write_wav,
)

from voxflow.ids import DeliveryId


def sine(freq: float, rate: int, seconds: float, amp: float = 0.5) -> np.ndarray:
    t = np.arange(round(rate * seconds)) / rate
    return (amp * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def peak_frequency(samples: np.ndarray, rate: int) -> float:
    spectrum = np.abs(np.fft.rfft(samples * np.hanning(samples.size)))
    return float(np.fft.rfftfreq(samples.size, 1 / rate)[np.argmax(spectrum)])


def test_reply_chunk_reports_length_and_identity() -> None:
    chunk = ReplyChunk(b"\x00\x00" * 1600, 16000, delivery_id=DeliveryId("d1"), segment_id=2,
                       start_sample=0)
    assert chunk.num_samples == 1600
    assert chunk.duration == pytest.approx(0.1)
    assert chunk.delivery_id == "d1" and chunk.segment_id == 2
    with pytest.raises(AttributeError):
        chunk.pcm = b""  # type: ignore[misc]


def test_input_chunk_has_no_reply_identity() -> None:
    chunk = AudioChunk.from_float(np.zeros(160, np.float32), 16000, start_sample=320)
    assert chunk.num_samples == 160 and chunk.start_sample == 320
    assert not hasattr(chunk, "delivery_id") and not hasattr(chunk, "segment_id")


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"pcm": b"\x00", "sample_rate": 16000}, "whole 16-bit"),
        ({"pcm": b"", "sample_rate": 0}, "sample_rate"),
        ({"pcm": b"", "sample_rate": 16000, "start_sample": -1}, "start_sample"),
    ],
)
def test_chunk_rejects_bad_fields(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        AudioChunk(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"segment_id": 0}, "segment_id"),
        ({"start_sample": -1}, "start_sample"),
        ({"delivery_id": ""}, "delivery_id"),
        ({"delivery_id": None}, "delivery_id"),
    ],
)
def test_reply_chunk_rejects_bad_identity(changes: dict[str, object], match: str) -> None:
    fields: dict[str, object] = {"pcm": b"", "sample_rate": 16000,
                                 "delivery_id": DeliveryId("d1"), "segment_id": 1,
                                 "start_sample": 0}
    with pytest.raises(ValueError, match=match):
        ReplyChunk(**(fields | changes))  # type: ignore[arg-type]


def test_chunk_rejects_non_bytes() -> None:
    with pytest.raises(TypeError, match="pcm"):
        AudioChunk(bytearray(4), 16000)  # type: ignore[arg-type]


def test_pcm_float_round_trip_and_clipping() -> None:
    values = np.array([0.0, 0.5, -0.5, 0.999, -1.0], dtype=np.float32)
    back = pcm16_to_float(float_to_pcm16(values))
    assert np.allclose(back, values, atol=1 / 32768)
    clipped = pcm16_to_float(float_to_pcm16(np.array([2.0, -3.0], dtype=np.float32)))
    assert clipped[0] == pytest.approx(32767 / 32768) and clipped[1] == -1.0


def test_to_mono_averages_interleaved_channels() -> None:
    stereo = np.array([1.0, 0.0, 0.5, 0.5, -1.0, 1.0], dtype=np.float32)
    assert np.allclose(to_mono(stereo, 2), [0.5, 0.5, 0.0])
    with pytest.raises(ValueError, match="channels"):
        to_mono(stereo, 4)
    with pytest.raises(ValueError, match="channels"):
        to_mono(stereo, 0)


@pytest.mark.parametrize(("in_rate", "out_rate"), [(48000, 16000), (44100, 16000), (8000, 16000)])
def test_resample_keeps_length_ratio_and_frequency(in_rate: int, out_rate: int) -> None:
    signal = sine(440.0, in_rate, 1.0)
    out = resample(signal, in_rate, out_rate)
    assert out.size == pytest.approx(out_rate, abs=2)
    assert peak_frequency(out, out_rate) == pytest.approx(440.0, abs=2.0)
    assert float(np.max(np.abs(out[200:-200]))) == pytest.approx(0.5, abs=0.02)


def test_resample_removes_content_above_the_new_nyquist() -> None:
    tone = sine(12000.0, 48000, 1.0)  # above 8 kHz: must not alias into the output
    out = resample(tone, 48000, 16000)
    assert float(np.sqrt(np.mean(out[500:-500] ** 2))) < 0.01


def test_streaming_resampler_matches_one_shot() -> None:
    signal = sine(300.0, 44100, 1.0) + sine(1234.0, 44100, 1.0, amp=0.2)
    stream = Resampler(44100, 16000)
    pieces = [stream.process(signal[i : i + 441]) for i in range(0, signal.size, 441)]
    streamed = np.concatenate([*pieces, stream.flush()])
    whole = resample(signal, 44100, 16000)
    assert streamed.size == pytest.approx(whole.size, abs=2)
    n = min(streamed.size, whole.size)
    assert np.max(np.abs(streamed[1000 : n - 1000] - whole[1000 : n - 1000])) < 1e-3


def test_input_converter_turns_stereo_48k_into_16k_mono_positions() -> None:
    left = sine(500.0, 48000, 0.5)
    stereo = np.stack([left, left], axis=1).reshape(-1)
    pcm = float_to_pcm16(stereo)
    converter = InputConverter()
    chunks = [
        converter.convert(pcm[i : i + 3840], 48000, channels=2) for i in range(0, len(pcm), 3840)
    ]
    chunks.append(converter.flush())
    assert all(c.sample_rate == 16000 for c in chunks)
    starts = [c.start_sample for c in chunks]
    assert starts == sorted(starts) and starts[0] == 0
    total = sum(c.num_samples for c in chunks)
    assert total == converter.position == pytest.approx(8000, abs=2)
    joined = np.concatenate([c.samples() for c in chunks])
    assert peak_frequency(joined, 16000) == pytest.approx(500.0, abs=3.0)


def test_wav_round_trip(tmp_path: Path) -> None:
    chunk = AudioChunk.from_float(sine(220.0, 22050, 0.25), 22050)
    path = tmp_path / "a.wav"
    write_wav(path, chunk)
    assert read_wav(path) == chunk
    at16k = read_wav(path, sample_rate=16000)
    assert at16k.sample_rate == 16000 and at16k.num_samples == pytest.approx(4000, abs=2)
    with pytest.raises(TypeError, match="audio"):
        write_wav(path, b"")  # type: ignore[arg-type]
