"""The 48 kHz → 16 kHz decimator the input path uses: each frame's output at once, the
same result however the stream is cut, speech band kept, aliases removed."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from voxflow_voice.audio import InputConverter
from voxflow_voice.decimator import Decimator


def _level_db(frequency: float) -> float:
    t = np.arange(48_000) / 48_000
    out = Decimator(48_000, 16_000).process(np.sin(2 * np.pi * frequency * t).astype(np.float32))
    rms = float(np.sqrt(np.mean(out[2000:] ** 2)))
    return 20 * np.log10(rms * np.sqrt(2) + 1e-12)


def test_every_20_ms_frame_comes_out_whole_and_at_once() -> None:
    """soxr's streaming filter returned 0 samples for one frame and 490 for the next."""
    decimator = Decimator(48_000, 16_000)
    sizes = [decimator.process(np.zeros(960, np.float32)).size for _ in range(10)]
    assert sizes == [320] * 10
    converter = InputConverter()
    chunks = [converter.convert_float(np.zeros(960, np.float32), 48_000) for _ in range(5)]
    assert [c.num_samples for c in chunks] == [320] * 5
    assert [c.start_sample for c in chunks] == [0, 320, 640, 960, 1280]


def test_an_impulse_comes_out_after_the_group_delay_only() -> None:
    decimator = Decimator(48_000, 16_000)
    frame = np.zeros(960, np.float32)
    frame[0] = 1.0
    out = decimator.process(frame)
    assert int(np.argmax(out)) == 21  # 63 input samples: 1.3 ms
    assert decimator.delay_seconds == pytest.approx(63 / 48_000)


@pytest.mark.parametrize(("frequency", "low", "high"), [
    (300, -0.1, 0.1), (1000, -0.1, 0.1), (3400, -0.1, 0.1), (6000, -0.5, 0.1),
    (9000, -200, -60), (12_000, -200, -60), (20_000, -200, -60),
])
def test_speech_band_passes_and_what_would_alias_is_removed(
    frequency: float, low: float, high: float
) -> None:
    assert low <= _level_db(frequency) <= high


@settings(max_examples=60, deadline=None)
@given(cuts=st.lists(st.integers(0, 2000), min_size=1, max_size=30))  # 0: an empty frame
def test_the_stream_gives_the_same_samples_however_it_is_cut(cuts: list[int]) -> None:
    signal = np.random.default_rng(7).standard_normal(sum(cuts)).astype(np.float32) * 0.1
    whole = Decimator(48_000, 16_000).process(signal)
    decimator = Decimator(48_000, 16_000)
    pieces, at = [], 0
    for cut in cuts:
        pieces.append(decimator.process(signal[at : at + cut]))
        at += cut
    streamed = np.concatenate(pieces)
    assert streamed.size == whole.size == -(-signal.size // 3)
    np.testing.assert_allclose(streamed, whole, atol=1e-6)


@pytest.mark.parametrize(("in_rate", "out_rate"), [
    (44_100, 16_000), (0, 16_000), (48_000, -1), (True, 16_000), (48_000.0, 16_000),
])
def test_bad_rates_are_value_errors(in_rate: Any, out_rate: Any) -> None:
    with pytest.raises(ValueError, match="rate"):
        Decimator(in_rate, out_rate)


def test_two_dimensional_input_is_refused() -> None:
    with pytest.raises(ValueError, match="1-D"):
        Decimator(48_000, 16_000).process(np.zeros((960, 2), np.float32))
