"""Barge-in rules of a voice session on the real models, on deterministic virtual time.

* with interruptions disabled, speech over a reply never cuts it: it is heard whole and
  the user's words are answered after it;
* a barge-in while a *later* segment of a reply is being synthesized stops that
  synthesis (its TTS stream is closed before its end; later segments never start), not
  only its playback (synthesis paced by playback here: ``synthesis_ahead=0``);
* with synthesis ahead of playback (``synthesis_ahead=3``), a barge-in drops the audio made ahead
  unheard and the rest of the reply is never synthesized;
* at the defaults a cut reply has synthesized the sentences heard and at most one more,
  counted by its own Piper voice (60 s ahead, the contrast: all of them).

The story's timeline (bundled voice, noise-free): segment 1 "Once upon a time," plays
from about 2.1 s, segment 2 from about 2.7 s, segment 3 ("Every night ...") is handed to
TTS at about 6.4 s and plays until about 10.7 s, segment 4 would follow.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from voxflow_adapters.testkit.flows import ACKNOWLEDGEMENT, STORY, Teller, words
from voxflow_adapters.testkit.scenario import run_call
from voxflow_adapters.testkit.script import CallScript
from voxflow_voice.audio import ReplyChunk
from voxflow_voice.engines import TextToSpeech, VoiceEngines
from voxflow_voice.engines.tts import PiperTts, TtsSettings
from voxflow_voice.session import VoiceSettings
from voxflow_voice.speak.history import INTERRUPTED_MARK
from voxflow_voice.speak.segmenter import SegmenterSettings, TextSegmenter

from voxflow.ids import DeliveryId
from voxflow.turns import TurnRunner

pytestmark = pytest.mark.models


async def test_with_interruptions_disabled_speech_never_cuts_a_reply(
    engines: VoiceEngines,
) -> None:
    turns = TurnRunner(Teller())
    script = (
        CallScript().user_says(0.3, "Tell me a story.").user_says(8.0, "Stop, please.").until(17.0)
    )  # the story ends at about 15.3 s
    call = await run_call(turns, script, engines, settings=VoiceSettings(interruptions=False))
    story, okay = call.replies()
    kinds = [e.kind for e in call.events]
    assert "barge_in" not in kinds and "reply_interrupted" not in kinds
    assert call.tape.flushes == []  # nothing was fenced
    assert call.settled(story) == "completed"
    # Heard whole: every sample handed to the client was played.
    sent = sum(r.num_samples for r in call.tape.receipts if r.delivery_id == story)
    segments = [e for e in call.of_kind("reply_text") if e.delivery_id == story]
    assert [e.segment_id for e in segments] == [1, 2, 3, 4]
    assert sent > 0 and call.heard_seconds(story) > 10.0
    # The user did speak over it (recording), and was answered after the story ended.
    onsets = [e.onset_at for e in call.of_kind("speech_started")]
    finished = next(e.at for e in call.of_kind("reply_finished") if e.delivery_id == story)
    assert len(onsets) == 2 and onsets[1] < finished
    assert words(call.transcripts()[1])[:1] == ["stop"]
    committed = call.of_kind("turn_committed")[1]
    assert committed.at >= finished
    assert call.settled(okay) == "completed"
    messages = turns.flow.state.messages
    assert [m.content for m in messages if m.role == "assistant"] == [STORY, "Okay."]
    assert not any(m.metadata.get("interrupted") for m in messages)
    assert [m.interrupted for m in call.metrics()] == [False, False]
    assert call.session.summary().interrupted == 0


@dataclass(slots=True)
class StreamLog:
    """One TTS stream the session opened: for which segment, and how it ended."""

    delivery_id: DeliveryId
    segment_id: int
    chunks: int = 0
    finished: bool = False  # the voice produced all of the segment's audio
    closed_early: bool = False  # the session closed the stream before its end


class WatchedTts:
    """The real Piper voice, with a log of each stream's fate (a spy, not a fake)."""

    def __init__(self, inner: TextToSpeech) -> None:
        self.inner = inner
        self.streams: list[StreamLog] = []

    @property
    def sample_rate(self) -> int:
        return self.inner.sample_rate

    def synthesize(self, text: str) -> Iterator[Any]:
        return self.inner.synthesize(text)

    async def stream(
        self, text: str, *, delivery_id: DeliveryId, segment_id: int
    ) -> AsyncIterator[ReplyChunk]:
        log = StreamLog(delivery_id, segment_id)
        self.streams.append(log)
        inner = aiter(self.inner.stream(text, delivery_id=delivery_id, segment_id=segment_id))
        try:
            async for chunk in inner:
                log.chunks += 1
                yield chunk
            log.finished = True
        finally:
            log.closed_early = not log.finished
            close = getattr(inner, "aclose", None)
            if close is not None:
                await close()


async def test_barge_in_during_synthesis_of_a_later_segment_stops_the_synthesis(
    engines: VoiceEngines,
) -> None:
    tts = WatchedTts(engines.tts)
    watched = VoiceEngines(stt=engines.stt, tts=tts, make_vad=engines.make_vad)
    turns = TurnRunner(Teller())
    # The barge-in lands at about 8.8 s: segment 3 is half played, half still to come.
    script = CallScript().user_says(0.3, "Tell me a story.").user_says(8.0, "Stop, please.")
    # Each sentence synthesized once the one before was handed over: at the barge-in,
    # segment 3's synthesis is under way (with synthesis ahead it would be done).
    call = await run_call(turns, script, watched,
                          settings=VoiceSettings(synthesis_ahead=0.0))
    story = call.replies()[0]
    barge_in = call.of_kind("barge_in")[0]
    assert barge_in.delivery_id == story
    streamed = [e for e in call.of_kind("reply_text") if e.delivery_id == story]
    assert [e.segment_id for e in streamed] == [1, 2, 3]  # segment 4 was never synthesized
    assert all(e.at < barge_in.at for e in streamed)
    logs = {log.segment_id: log for log in tts.streams if log.delivery_id == story}
    assert sorted(logs) == [1, 2, 3]
    assert logs[1].finished and logs[2].finished
    assert logs[3].closed_early and logs[3].chunks > 0  # cut mid-segment: synthesis stopped
    # The fence: nothing of the story after it, and its queued audio was dropped at once.
    assert call.stale_samples() == 0
    (flush,) = [f for f in call.tape.flushes if f[1] == story]
    assert flush[2] > 0
    assert all(r.at <= flush[0] for r in call.tape.receipts if r.delivery_id == story)
    # Heard: segments 1 and 2 whole, then the words of segment 3 played before the cut.
    interrupted = call.of_kind("reply_interrupted")[0]
    heard = interrupted.heard_text
    first_two = STORY.split(" Every night")[0]
    assert first_two.endswith("named Ada.") and heard.startswith(first_two + " Every")
    assert STORY.startswith(heard)
    assert interrupted.full_text == STORY.rsplit(" One stormy", 1)[0]  # segments 1 to 3
    assistant = next(m for m in turns.flow.state.messages if m.role == "assistant")
    assert assistant.content == f"{heard} {INTERRUPTED_MARK}"
    assert assistant.metadata["generated_text"] == STORY
    # The stop latency is measured from the barge-in speech onset to the last sample.
    assert interrupted.stop_latency_ms is not None and interrupted.stop_latency_ms > 0
    summary = call.summary()
    assert summary.interrupted == 1 and summary.barge_in_stop.count == 1
    assert summary.fenced_chunks == call.metrics()[0].fenced_chunks
    assert call.settled(call.replies()[1]) == "completed"  # "Stop, please." was answered


async def test_a_barge_in_drops_the_audio_synthesized_ahead_and_stops_the_synthesis(
    engines: VoiceEngines,
) -> None:
    tts = WatchedTts(engines.tts)
    watched = VoiceEngines(stt=engines.stt, tts=tts, make_vad=engines.make_vad,
                           scheduler=engines.scheduler)
    turns = TurnRunner(Teller())
    # The barge-in lands at about 8.8 s, in segment 3; 3 s ahead reaches into segment 4.
    script = CallScript().user_says(0.3, "Tell me a story.").user_says(8.0, "Stop, please.")
    call = await run_call(turns, script, watched,
                          settings=VoiceSettings(synthesis_ahead=3.0))  # 3 s ahead
    story = call.replies()[0]
    barge_in = call.of_kind("barge_in")[0]
    assert barge_in.delivery_id == story
    logs = [log for log in tts.streams if log.delivery_id == story]
    streamed = [e.segment_id for e in call.of_kind("reply_text") if e.delivery_id == story]
    # Segment 4 was being synthesized ahead when the barge-in came: its stream was closed
    # before its end, and none of it was ever handed to playback (no reply_text).
    assert [log.segment_id for log in logs] == [1, 2, 3, 4]
    assert logs[2].finished and logs[3].closed_early and logs[3].chunks > 0
    assert streamed == [1, 2, 3]
    assert call.stale_samples() == 0  # nothing of it played after the fence
    (flush,) = [f for f in call.tape.flushes if f[1] == story]
    assert all(r.at <= flush[0] for r in call.tape.receipts if r.delivery_id == story)
    interrupted = call.of_kind("reply_interrupted")[0]
    assert STORY.startswith(interrupted.heard_text)
    assert len(interrupted.heard_text) < len(STORY)
    assert call.settled(call.replies()[1]) == "completed"  # "Stop, please." was answered


def _story_segments() -> list[str]:
    """The story as the speaker hands it to the voice: the segmenter's segments."""
    segmenter = TextSegmenter(SegmenterSettings())
    return [s.text for s in [*segmenter.push(STORY), *segmenter.flush()]]


async def _cut_story(engines: VoiceEngines, stop_at: float,
                     settings: VoiceSettings) -> tuple[int, int]:
    """The story cut by "Stop, please." at ``stop_at`` s, said by a Piper voice of its
    own (uncached, so each sentence it says is synthesized): (sentences of the story
    Piper synthesized, sentences of it whose first word was heard)."""
    tts = PiperTts(settings=TtsSettings(cache_mb=0, noise_scale=0.0, noise_w_scale=0.0))
    counted = VoiceEngines(stt=engines.stt, tts=tts, make_vad=engines.make_vad)
    script = CallScript().user_says(0.3, "Tell me a story.").user_says(stop_at, "Stop, please.")
    call = await run_call(TurnRunner(Teller()), script, counted, settings=settings)
    (interrupted,) = call.of_kind("reply_interrupted")
    assert interrupted.delivery_id == call.replies()[0] and call.stale_samples() == 0
    # The same voice said the caller's two lines (the script's audio) and the answer.
    others = sum(len(tts.sentences(t))
                 for t in ("Tell me a story.", "Stop, please.", ACKNOWLEDGEMENT))
    segments = _story_segments()
    assert [len(tts.sentences(s)) for s in segments] == [1, 1, 1, 1]  # a sentence each
    heard = len(interrupted.heard_text.split())
    starts = itertools.accumulate([len(s.split()) for s in segments[:-1]], initial=0)
    return tts.statistics().sentences - others, sum(start < heard for start in starts)


@pytest.mark.parametrize("stop_at", [4.0, 8.0])
async def test_a_cut_reply_never_synthesizes_more_than_a_sentence_past_the_one_heard(
    engines: VoiceEngines, stop_at: float,
) -> None:
    """At the defaults a sentence is synthesized once the one before was handed to the
    transport, so a reply cut by a barge-in has paid for the sentence being heard and
    at most the next one: never for its unheard end (issue 36, item 2)."""
    synthesized, begun = await _cut_story(engines, stop_at, VoiceSettings())
    assert begun <= synthesized <= begun + 1
    assert synthesized < len(_story_segments())


async def test_without_the_bound_a_cut_reply_pays_for_every_sentence(
    engines: VoiceEngines,
) -> None:
    """The contrast: synthesized 60 s ahead of the transport, the story cut in its second
    sentence has been synthesized whole."""
    synthesized, begun = await _cut_story(engines, 4.0, VoiceSettings(synthesis_ahead=60.0))
    assert begun == 2 and synthesized == len(_story_segments()) == 4
