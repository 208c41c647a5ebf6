"""The audio boundary without models: strict AudioChunk/resample/to_mono, InputGuard."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import pytest
from voxflow_voice import (
    STT_SAMPLE_RATE,
    AudioChunk,
    InputGuard,
    Resampler,
    float_to_pcm16,
    resample,
    to_mono,
)
from voxflow_voice.audio import ReplyChunk
from voxflow_voice.listen.input_guard import MAX_INPUT_RATE, MIN_INPUT_RATE

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "kwargs",
    [
        {"sample_rate": True},
        {"sample_rate": 16000.0},
        {"start_sample": -1},
        {"start_sample": False},
    ],
)
def test_audio_chunk_refuses_bools_and_wrong_types(kwargs: dict[str, Any]) -> None:
    fields: dict[str, Any] = {"sample_rate": 16000, **kwargs}
    with pytest.raises(ValueError):
        AudioChunk(b"\x00\x00", **fields)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"sample_rate": True},
        {"segment_id": True},
        {"segment_id": 0},
        {"start_sample": False},
        {"delivery_id": ""},
    ],
)
def test_reply_chunk_refuses_bools_and_wrong_types(kwargs: dict[str, Any]) -> None:
    fields: dict[str, Any] = {"sample_rate": 22050, "delivery_id": "d-1", "segment_id": 1,
                              "start_sample": 0, **kwargs}
    with pytest.raises(ValueError):
        ReplyChunk(b"\x00\x00", **fields)


def test_resample_refuses_2d_input_instead_of_flattening_it() -> None:
    stereo = np.zeros((1600, 2), np.float32)
    with pytest.raises(ValueError, match="to_mono"):
        resample(stereo, 16000, 8000)
    with pytest.raises(ValueError, match="to_mono"):
        resample(stereo, 16000, 16000)
    with pytest.raises(ValueError, match="to_mono"):
        Resampler(48000, 16000).process(stereo)
    mono = to_mono(stereo, 2)  # the documented way
    assert resample(mono, 16000, 8000).shape == (800,)


def test_to_mono_refuses_a_layout_that_does_not_match_the_channels() -> None:
    with pytest.raises(ValueError, match=r"\(frames, 2\)"):
        to_mono(np.zeros((2, 480), np.float32), 2)  # planar (channels, frames)
    with pytest.raises(ValueError, match="channels"):
        to_mono(np.zeros(4, np.float32), True)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_float_conversions_refuse_non_finite_samples(bad: float) -> None:
    samples = np.zeros(320, np.float32)
    samples[7] = bad
    for convert in (
        float_to_pcm16,
        lambda s: AudioChunk.from_float(s, 16000),
        lambda s: resample(s, 48000, 16000),
        lambda s: Resampler(48000, 16000).process(s),
    ):
        with pytest.raises(ValueError, match="finite"):
            convert(samples)


def test_the_guard_zeroes_and_counts_a_nan_frame_and_keeps_the_timeline() -> None:
    guard = InputGuard()
    rng = np.random.default_rng(3)
    frames = [(rng.standard_normal(320) * 0.1).astype(np.float32) for _ in range(3)]
    frames[1][100] = np.nan
    chunks = [guard.convert(f, STT_SAMPLE_RATE) for f in frames]
    assert all(c is not None for c in chunks)
    assert [c.start_sample for c in chunks if c] == [0, 320, 640]  # nothing shifted
    assert chunks[1] is not None and not np.any(chunks[1].samples())  # silence
    assert chunks[0] is not None and np.any(chunks[0].samples())
    stats = guard.statistics()
    assert (stats.frames, stats.dropped, stats.zeroed, stats.rejected) == (3, 0, 1, 1)
    assert stats.last_problem is not None and "NaN" in stats.last_problem


@pytest.mark.parametrize(
    ("samples", "rate", "channels", "problem"),
    [
        (np.zeros(320, np.float32), True, 1, "sample_rate must be an int"),
        (np.zeros(320, np.float32), 16000.0, 1, "sample_rate must be an int"),
        (np.zeros(320, np.float32), MIN_INPUT_RATE - 1, 1, "outside"),
        (np.zeros(320, np.float32), MAX_INPUT_RATE + 1, 1, "outside"),
        (np.zeros(320, np.float32), 16000, 0, "channels"),
        (np.zeros(320, np.float32), 16000, True, "channels must be an int"),
        (np.zeros(321, np.float32), 16000, 2, "do not divide"),
        (np.zeros((2, 160), np.float32), 16000, 2, "shape"),  # planar: ambiguous
        (np.zeros((1, 2, 160), np.float32), 16000, 2, "shape"),
        (np.zeros(320, np.int32), 16000, 1, "int16, float32 or float64"),
        (np.zeros(320, np.complex64), 16000, 1, "int16, float32 or float64"),
        (np.array(["a"] * 320), 16000, 1, "int16, float32 or float64"),
        ([0.0] * 320, 16000, 1, "numpy array or bytes"),
        (None, 16000, 1, "numpy array or bytes"),
        (b"\x00" * 321, 16000, 1, "whole samples"),
        (b"\x00" * 4, 8000, 3, "do not divide"),  # found by the fuzz test
        (np.zeros(3 * 16000, np.float32), 16000, 1, "too long"),
    ],
)
def test_the_guard_drops_and_counts_malformed_frames(
    samples: Any, rate: Any, channels: Any, problem: str
) -> None:
    guard = InputGuard()
    assert guard.convert(samples, rate, channels) is None
    stats = guard.statistics()
    assert (stats.frames, stats.dropped, stats.zeroed) == (1, 1, 0)
    assert stats.last_problem is not None and problem in stats.last_problem
    assert guard.position == 0  # nothing was passed on


def test_the_guard_accepts_every_real_device_layout() -> None:
    t = np.arange(4800) / 48000
    tone = (0.5 * np.sin(2 * np.pi * 300 * t)).astype(np.float32)
    stereo = np.stack([tone, tone], axis=1)  # (frames, channels)
    s16 = np.round(tone * 32767).astype(np.int16)
    variants: list[tuple[Any, int]] = [
        (tone, 1),
        (stereo, 2),
        (stereo.reshape(-1), 2),  # interleaved
        (s16, 1),
        (s16.astype("<i2").tobytes(), 1),
    ]
    outs = []
    for samples, channels in variants:
        guard = InputGuard()
        chunk = guard.convert(samples, 48000, channels)
        assert chunk is not None and chunk.sample_rate == STT_SAMPLE_RATE
        outs.append(np.concatenate([chunk.samples(), guard.flush().samples()]))
        assert guard.statistics().rejected == 0
    assert outs[0].size == 1600
    for other in outs[1:]:
        assert np.max(np.abs(other - outs[0])) < 1e-3
    loud = InputGuard()
    assert loud.convert(tone.astype(np.float64) * 3, 48000) is not None  # clipped, not refused
    assert loud.statistics().rejected == 0


def test_muted_frames_pass_as_silence_of_the_same_length() -> None:
    guard = InputGuard()
    chunk = guard.convert(np.full(320, 0.3, np.float32), 16000, muted=True)
    assert chunk is not None and chunk.num_samples == 320 and not np.any(chunk.samples())
    assert guard.statistics().rejected == 0


def test_convert_chunk_passes_16k_chunks_and_drops_what_is_not_a_chunk() -> None:
    guard = InputGuard()
    chunk = AudioChunk(b"\x01\x00" * 320, 16000, start_sample=0)
    assert guard.convert_chunk(chunk) is chunk
    converted = guard.convert_chunk(AudioChunk(b"\x01\x00" * 960, 48000))
    assert converted is not None and converted.sample_rate == 16000
    assert guard.convert_chunk(AudioChunk(b"\x01\x00" * 960, 1)) is None  # rate 1 Hz
    assert guard.convert_chunk(np.zeros(320, np.float32)) is None
    stats = guard.statistics()
    assert (stats.frames, stats.dropped) == (4, 2)


def test_each_kind_of_bad_frame_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    # Once per kind of problem: a too-long frame must not silence the NaN warning.
    guard = InputGuard()
    with caplog.at_level(logging.WARNING, logger="voxflow_voice.listen.input_guard"):
        for _ in range(2):
            guard.convert(np.zeros(3 * 16_000, dtype=np.float32), 16_000)  # too long
            guard.convert(np.full(320, np.nan, dtype=np.float32), 16_000)  # zeroed
            guard.convert(np.zeros(320, dtype=np.float32), 1)  # a bad rate
    problems = [r.getMessage() for r in caplog.records]
    assert len(problems) == 3, problems
    assert any("too long" in p for p in problems)
    assert any("NaN" in p for p in problems)
    assert any("sample_rate" in p for p in problems)
