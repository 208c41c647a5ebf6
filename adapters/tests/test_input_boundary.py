"""The simulated transport validates its microphone frames like a real device."""

from __future__ import annotations

import math

import numpy as np
import pytest
from voxflow_adapters.testkit.script import CallScript
from voxflow_adapters.testkit.simulated import SimulatedClient

from voxflow.clock import VirtualClock

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("bad", [math.nan, math.inf, -1.0])
def test_a_script_cannot_carry_non_finite_noise_or_echo(bad: float) -> None:
    with pytest.raises(ValueError, match="finite"):
        CallScript().with_noise(bad)
    with pytest.raises(ValueError, match="finite"):
        CallScript().with_echo(bad)
    with pytest.raises(ValueError, match="finite"):
        CallScript().with_echo(0.5, delay=bad)


async def test_simulated_microphone_frames_pass_the_boundary_and_are_counted() -> None:
    clock = VirtualClock(autojump=True)
    script = CallScript().with_noise(0.02, seed=5).until(0.5)
    client = SimulatedClient(script, clock=clock, tail=0.0)
    async with clock, client:
        chunks = [chunk async for chunk in client.audio_input()]
    stats = client.input_statistics()
    assert stats.frames == len(chunks) == 25
    assert (stats.dropped, stats.zeroed) == (0, 0)
    assert [c.start_sample for c in chunks] == [320 * i for i in range(25)]
    assert all(np.isfinite(c.samples()).all() and np.any(c.samples()) for c in chunks)
