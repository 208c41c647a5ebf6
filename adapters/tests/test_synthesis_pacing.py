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
from voxflow_adapters.testkit.flows import Teller
from voxflow_adapters.testkit.scenario import run_call
from voxflow_adapters.testkit.script import CallScript
from voxflow_voice.audio import ReplyChunk
from voxflow_voice.engines import TextToSpeech, VoiceEngines
from voxflow_voice.engines.tts import DETERMINISTIC_TTS_SETTINGS
from voxflow_voice.events import SessionEvent, TurnCommitted
from voxflow_voice.scheduler import Work, current_work
from voxflow_voice.session import VoiceSettings
from voxflow_voice.speak.playback import HOLD_LIMIT_SECONDS
from voxflow_voice.speak.speaker import SYNTHESIS_MARGIN

from voxflow.ids import DeliveryId
from voxflow.turns import TurnRunner

pytestmark = pytest.mark.models

LEAD = 0.5  # s: the simulated client's buffer ahead of playout (SimulatedClient's lead)


class TicketedTts:
    """The real Piper voice, noting the scheduler ticket each segment is synthesized on
    (a spy, not a fake)."""

    def __init__(self, inner: TextToSpeech) -> None:
        self.inner = inner
        self.tickets: list[tuple[int | None, str, float]] = []
        self.works: list[Work] = []  # each segment's ticket, as it is now

    @property
    def sample_rate(self) -> int:
        return self.inner.sample_rate

    def synthesize(self, text: str) -> Iterator[Any]:
        return self.inner.synthesize(text)

    async def stream(
        self, text: str, *, delivery_id: DeliveryId, segment_id: int
    ) -> AsyncIterator[ReplyChunk]:
        work = current_work()
        assert work is not None
        self.tickets.append((segment_id, work.urgency, work.slack))
        self.works.append(work)
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
    # Paced by playback, each later sentence starts when playout is about to run dry, in
    # audio time: what is left is the client's own buffer (its lead, 0.5 s, and a chunk
    # it took) less the margin. On the wall clock the virtual call outran, the tickets
    # said 1 and 4 s of audio still queued; before the held audio was counted from the
    # verdict on, they said 0 (the client's buffer was missing).
    buffered = LEAD + DETERMINISTIC_TTS_SETTINGS.chunk_duration
    assert all(0.0 < slack <= buffered - SYNTHESIS_MARGIN + 1e-9
               for _, _, slack in first[2:]), first
    # Audio time only: a second run of the same call gives the very same tickets.
    assert await _story_tickets(engines) == first


@pytest.mark.parametrize("ahead", [0.0, 3.0])
async def test_the_verdict_makes_a_held_replys_later_sentence_due_not_urgent(
    engines: VoiceEngines, ahead: float
) -> None:
    """The turn is confirmed while a later sentence of its held (speculative) reply is
    being synthesized: from then on that sentence is due when the audio before it has
    played, as any later sentence is (the held audio counted: it goes out from the
    verdict), not urgent work that would take the urgent lane before other calls' turns
    and first clauses. (Before: urgent, slack 0.)"""
    tts = TicketedTts(engines.tts)
    watched = VoiceEngines(stt=engines.stt, tts=tts, make_vad=engines.make_vad)
    at_verdict: list[tuple[int, str, float]] = []

    def verdict(event: SessionEvent) -> None:
        if isinstance(event, TurnCommitted):  # emitted right after the speaker was told
            at_verdict.append((len(tts.works), tts.works[-1].urgency, tts.works[-1].slack))

    script = CallScript().user_says(0.3, "Tell me a story.").until(17.0)
    call = await run_call(TurnRunner(Teller()), script, watched, on_event=verdict,
                          settings=VoiceSettings(synthesis_ahead=ahead))
    (story,) = call.replies()
    assert call.settled(story) == "completed"
    ((segments, urgency, slack),) = at_verdict
    # The verdict came while the reply's last speculative segment was synthesized (the
    # clock stands still while the models run: the held reply got as far as it may).
    assert [u for _, u, _ in tts.tickets[:segments]] == ["speculative"] * segments
    assert segments < len(tts.tickets)
    assert urgency == "ahead"
    # The hold kept its limit of audio, and ``ahead`` s more waited for room: all of it
    # still to play when the verdict came.
    assert slack >= HOLD_LIMIT_SECONDS + ahead - SYNTHESIS_MARGIN, at_verdict
