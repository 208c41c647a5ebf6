"""A mute acts: muting while a reply or an announcement plays cuts it by identity (settled
``interrupted``, history = what was heard, 0 stale samples). Simulated calls on the real
models and a virtual clock, against the example assistant wired as every entry point
wires it (``run_call`` given a flow)."""

from __future__ import annotations

import pytest
from voxflow_adapters.testkit.scenario import run_call
from voxflow_adapters.testkit.script import CallScript
from voxflow_voice.engines import VoiceEngines
from voxflow_voice.events import DeliverySettled, MuteObserved, ReplyInterrupted

from voxflow.examples.assistant import STORY, assistant_class
from voxflow.replies import INTERRUPTED_MARK

pytestmark = pytest.mark.models


async def test_a_mute_cuts_the_reply_playing_and_history_keeps_what_was_heard(
    engines: VoiceEngines,
) -> None:
    script = (CallScript().user_says(0.3, "Tell me a story.")
              .then_mutes(2.0, after="reply_start", gap=1.5))
    flow = assistant_class()()
    call = await run_call(flow, script, engines)
    [story] = call.replies()
    [muted_at] = [e.at for e in call.events if isinstance(e, MuteObserved) and e.muted]
    [cut] = [e for e in call.events if isinstance(e, ReplyInterrupted)]
    assert cut.delivery_id == story and call.settled(story) == "interrupted"
    assert cut.at >= muted_at
    # heard: the 1.5 s before the mute (a frame of slack), then nothing more
    assert 1.4 <= call.heard_seconds(story) <= 1.6
    assert call.stale_samples() == 0
    said = flow.state.messages[-1]
    assert said.role == "assistant" and said.content.endswith(INTERRUPTED_MARK)
    assert said.content == f"{cut.heard_text} {INTERRUPTED_MARK}"
    heard = cut.heard_text
    assert heard and STORY.startswith(heard.rstrip(".,")) and len(heard) < len(STORY) / 3


async def test_a_mute_cuts_the_announcement_playing_and_it_is_not_replayed(
    engines: VoiceEngines,
) -> None:
    # "Where is my order?" → "I'm checking" (played whole) → a short mute while nothing
    # plays → the lookup's result is announced → muted 1 s into it.
    script = (CallScript().user_says(0.3, "Where is my order?")
              .then_mutes(0.3, after="reply_end", gap=0.2)
              .then_mutes(2.0, after="reply_start", gap=1.0))
    flow = assistant_class(lookup_seconds=4.0)()
    call = await run_call(flow, script, engines)
    checking, announcement = call.replies()
    assert call.settled(checking) == "completed"
    mutes = [e.at for e in call.events if isinstance(e, MuteObserved) and e.muted]
    settled = [e for e in call.events if isinstance(e, DeliverySettled)]
    assert [(s.delivery_id, s.status) for s in settled] == [(announcement, "interrupted")]
    assert settled[0].at >= mutes[1]
    assert 0.9 <= call.heard_seconds(announcement) <= 1.1
    assert call.stale_samples() == 0
    [job] = flow.state.jobs.values()
    said = flow.state.messages[-1]  # what was heard of it, marked as an announcement
    assert said.metadata["announcement"] and said.metadata["interrupted"]
    assert said.metadata["job_ids"] == [job.job_id]
    assert said.metadata["delivery_id"] == announcement
    heard = said.metadata["heard_text"]
    assert job.announcement.startswith(heard.rstrip(".,")) and heard != job.announcement
    assert said.content == f"{heard} {INTERRUPTED_MARK}"
    # covered or not, a cut announcement is never replayed after the unmute
    assert len(call.replies()) == 2
