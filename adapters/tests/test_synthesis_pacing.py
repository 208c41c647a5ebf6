"""Synthesis ahead of playout is paced on the session clock, never the wall clock.

A later sentence of a reply is due (its scheduler ticket's slack) when the audio
already handed over has played. On a deterministic :class:`~voxflow.clock.VirtualClock`
that is audio time: the same call gives the same slacks however fast the machine runs
the models (wall-clock pacing made them depend on it, and a virtual run outpaces the
wall, so the ticket said seconds of audio were still queued when playout had run dry).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from voxflow_adapters.scenario import run_call
from voxflow_adapters.script import CallScript
from voxflow_adapters.testing import Teller
from voxflow_voice.audio import AudioChunk
from voxflow_voice.engines import TextToSpeech, VoiceEngines
from voxflow_voice.scheduler import current_work
from voxflow_voice.session import VoiceSettings

from voxflow.ids import DeliveryId
from voxflow.turns import TurnRunner

pytestmark = pytest.mark.models


class TicketedTts:
    """The real Piper voice, noting the scheduler ticket each segment is synthesized on
    (a spy, not a fake)."""

    def __init__(self, inner: TextToSpeech) -> None:
        self.inner = inner
        self.tickets: list[tuple[int | None, str, float]] = []

    @property
    def sample_rate(self) -> int:
        return self.inner.sample_rate

    def synthesize(self, text: str) -> Iterator[Any]:
        return self.inner.synthesize(text)

    async def stream(
        self, text: str, *, delivery_id: DeliveryId | None = None, segment_id: int | None = None
    ) -> AsyncIterator[AudioChunk]:
        work = current_work()
        assert work is not None
        self.tickets.append((segment_id, work.urgency, work.slack))
        inner = aiter(self.inner.stream(text, delivery_id=delivery_id, segment_id=segment_id))
        try:
            async for chunk in inner:
                yield chunk
        finally:
            close = getattr(inner, "aclose", None)
            if close is not None:
                await close()


async def _story_tickets(engines: VoiceEngines) -> list[tuple[int | None, str, float]]:
    tts = TicketedTts(engines.tts)
    watched = VoiceEngines(stt=engines.stt, tts=tts, make_vad=engines.make_vad)
    script = CallScript().user_says(0.3, "Tell me a story.").until(17.0)
    # Each sentence is synthesized once the one before was handed over (no audio made
    # ahead): its ticket's slack is what is left of the handed-over audio to play.
    call = await run_call(TurnRunner(Teller()), script, watched,
                          settings=VoiceSettings(synthesis_ahead=0.0))
    (story,) = call.replies()
    assert call.settled(story) == "completed"
    return tts.tickets


async def test_later_sentences_are_due_when_the_audio_before_them_has_played(
    engines: VoiceEngines,
) -> None:
    first = await _story_tickets(engines)
    # Segments 1 and 2 were synthesized while the reply was speculative (held until the
    # turn was confirmed); 3 and 4 once the audio before them was handed over.
    assert [(segment, urgency) for segment, urgency, _ in first] == [
        (1, "speculative"), (2, "speculative"), (3, "ahead"), (4, "ahead")]
    # Paced by playback, each later sentence starts when playout is about to run dry
    # (within the transport's own buffer), in audio time: no slack left. On the wall
    # clock the virtual call outran, the tickets said 1 and 4 s of audio still queued.
    assert [slack for _, _, slack in first[2:]] == [0.0, 0.0], first
    # Audio time only: a second run of the same call gives the very same tickets.
    assert await _story_tickets(engines) == first
