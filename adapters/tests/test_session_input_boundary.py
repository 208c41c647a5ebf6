"""A voice session drops what a third-party adapter should never have yielded, and goes on.

The adapter here is the simulated client with junk mixed into its microphone stream
(the far side of the boundary): a raw array, a string, a chunk at 1 Hz (which would ask
the resampler for 16,000 times the samples). The session drops each, counts it, and the
user's question is still heard and answered.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest
from voxflow_adapters.testkit.script import CallScript
from voxflow_adapters.testkit.simulated import SimulatedClient
from voxflow_voice.audio import AudioChunk
from voxflow_voice.engines import VoiceEngines
from voxflow_voice.session import VoiceSession
from voxflow_voice.session.voice_session import MAX_SUBMITTED_TEXT_CHARS

from voxflow.clock import VirtualClock
from voxflow.errors import UnstorableTextError
from voxflow.testing import Acknowledger
from voxflow.turns import TurnRunner

pytestmark = pytest.mark.models

JUNK: list[Any] = [np.zeros(320, np.float32), "frame", AudioChunk(b"\x00\x00" * 320, 1)]


class JunkClient(SimulatedClient):
    """Yields one junk item after every 25th real microphone chunk."""

    async def audio_input(self) -> AsyncIterator[AudioChunk]:
        count = 0
        async for chunk in super().audio_input():
            yield chunk
            count += 1
            if count % 25 == 0:
                yield JUNK[(count // 25) % len(JUNK)]


async def test_junk_from_an_adapter_is_dropped_counted_and_the_turn_still_answered(
    engines: VoiceEngines,
) -> None:
    clock = VirtualClock(autojump=True)
    script = CallScript().user_says(0.3, "Where is my order?").until(4.0)
    client = JunkClient(script, clock=clock, tail=0.5)
    await client.render(engines.tts)
    turns = TurnRunner(Acknowledger())
    session = VoiceSession(turns, client, engines, clock=clock)
    async with clock, client:
        await asyncio.wait_for(session.run(), timeout=120)
    stats = session.input_statistics()
    assert stats.dropped >= 6 and stats.zeroed == 0
    assert stats.frames == stats.dropped + client.input_statistics().frames
    contents = [m.content for m in turns.flow.state.messages]
    assert len(contents) == 2 and "order" in contents[0].lower()
    assert contents[1] == Acknowledger.reply


@pytest.mark.parametrize(("text", "problem"), [
    ("book\x00me", "contains a NUL character (U+0000) at index 4"),
    ("a \ud800 b", "contains a lone surrogate (U+D800) at index 2"),
    ("x" * (MAX_SUBMITTED_TEXT_CHARS + 1),
     f"has {MAX_SUBMITTED_TEXT_CHARS + 1:,} characters, over the limit of "
     f"{MAX_SUBMITTED_TEXT_CHARS:,}"),
])
async def test_text_no_store_can_keep_is_refused_naming_the_field(
    engines: VoiceEngines, text: str, problem: str,
) -> None:
    """submit_text's text becomes a user message of the stored session: a NUL, a lone
    surrogate or a text over the limit is refused before the turn starts (the rule of
    voxflow.storable, a typed error naming the field), and nothing is answered."""
    clock = VirtualClock(autojump=True)
    client = SimulatedClient(CallScript().until(20.0), clock=clock)
    turns = TurnRunner(Acknowledger())
    session = VoiceSession(turns, client, engines, clock=clock)
    async with clock, client:
        running = asyncio.create_task(session.run())
        with pytest.raises(UnstorableTextError) as refused:
            await session.submit_text(text)
        assert refused.value.field == "text" and refused.value.problem == problem
        assert turns.flow.state.messages == []
        await session.submit_text("x" * MAX_SUBMITTED_TEXT_CHARS)  # the limit is kept
        await asyncio.wait_for(running, timeout=120)
    assert [m.role for m in turns.flow.state.messages] == ["user", "assistant"]
