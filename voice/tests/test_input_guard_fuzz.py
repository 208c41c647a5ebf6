"""Fuzzing audio frames at the transport boundary (hypothesis, bounded, derandomized).

Whatever a device, decoder or peer hands over (any dtype, shape, rate, channel count or
value), the guard either drops it (counted) or passes on a finite 16 kHz mono chunk: it
never raises into the audio path, and what it passes never holds a NaN.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from voxflow_voice import STT_SAMPLE_RATE, InputGuard, VadStream
from voxflow_voice.engines.vad import EnergyVad

pytestmark = pytest.mark.unit

DTYPES = st.sampled_from(
    [np.int16, np.float32, np.float64, np.int32, np.uint8, np.float16, np.complex64, np.bool_,
     np.dtype(">i2"), np.dtype("<i2")]
)
SHAPES = hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=700)
ARRAYS = DTYPES.flatmap(lambda dtype: hnp.arrays(dtype, SHAPES))
FRAMES = st.one_of(
    ARRAYS,
    st.binary(max_size=2000),
    st.none(),
    st.lists(st.floats(), max_size=10),
    st.text(max_size=5),
)
RATES = st.one_of(
    st.sampled_from([8000, 16000, 22050, 44100, 48000, 192000]),
    st.integers(-10, 400_000),
    st.booleans(),
    st.floats(allow_nan=True),
    st.none(),
    st.just(np.int64(48000)),
)
CHANNELS = st.one_of(st.integers(-1, 10), st.booleans(), st.none(), st.just(2.0))


@settings(max_examples=300, derandomize=True, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(frames=st.lists(st.tuples(FRAMES, RATES, CHANNELS, st.booleans()), min_size=1,
                       max_size=6))
def test_any_frame_is_dropped_or_passed_on_finite(frames: list[tuple[Any, Any, Any, bool]]) -> None:
    guard = InputGuard()
    vad = VadStream(EnergyVad())
    passed = 0
    for samples, rate, channels, muted in frames:
        chunk = guard.convert(samples, rate, channels, muted=muted)
        if chunk is None:
            continue
        passed += 1
        assert chunk.sample_rate == STT_SAMPLE_RATE
        audio = chunk.samples()
        assert np.isfinite(audio).all()
        vad.push(audio)  # what the session does next: never raises on what passed
    stats = guard.statistics()
    assert stats.frames == len(frames)
    assert stats.dropped == len(frames) - passed
    assert 0 <= stats.zeroed <= passed
