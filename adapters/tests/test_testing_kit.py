"""The testing kit on real calls: the assertions pass on what happened, and a failing one
shows the call's timeline (who spoke when, what was heard), not a bare assert False."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from voxflow_adapters.testkit.assertions import (
    CallAssertionError,
    assert_completed,
    assert_history_is_heard,
    assert_interrupted,
    assert_no_stale_audio,
    assert_turn_committed,
    word_error_rate,
)
from voxflow_adapters.testkit.call_runner import CallRunner
from voxflow_adapters.testkit.flows import SHORT_STORY, STORY, Teller, words
from voxflow_adapters.testkit.result import CallReply
from voxflow_adapters.testkit.scenario import CallResult
from voxflow_adapters.testkit.script import CallScript
from voxflow_adapters.testkit.timeline import call_timeline
from voxflow_voice.engines import VoiceEngines

from voxflow.conversation import ConversationMessage

pytestmark = pytest.mark.models


@pytest.fixture(scope="module")
def barge_in(voice_engines: VoiceEngines) -> CallResult:
    """Teller's story, cut two seconds into its audio by "Stop, please." (virtual time)."""
    runner = CallRunner(voice_engines)
    script = (CallScript().user_says(0.3, "Tell me a story.")
              .then_says("Stop, please.", after="reply_start", gap=2.0))
    return runner.run(Teller(), script)


def test_the_assertions_pass_on_a_barge_in(barge_in: CallResult) -> None:
    call = barge_in
    story, okay = call.replies()
    first = assert_turn_committed(call, "Tell me a story.", max_wer=0.0)
    assert first.text.lower().startswith("tell me a story")
    assert_turn_committed(call, "Stop please")
    cut = assert_interrupted(call, story, heard_at_least="Once upon a time",
                             heard_at_most=SHORT_STORY)
    assert cut.heard_text and STORY.startswith(cut.heard_text.rstrip(".,"))
    assert assert_interrupted(call) == cut  # default: the first reply cut
    assert_no_stale_audio(call)
    assert assert_completed(call, okay).text == "Okay."
    assert_history_is_heard(call)


def test_a_reply_reads_as_what_it_said_and_what_was_heard(barge_in: CallResult) -> None:
    call = barge_in
    story, okay = call.replies()  # delivery ids, in order of start
    cut, whole = call.reply(story), call.reply(okay)
    interrupted = call.of_kind("reply_interrupted")[0]
    assert cut == CallReply(
        delivery_id=story, turn_id=call.of_kind("turn_committed")[0].turn_id, kind="answer",
        text=interrupted.full_text, heard_text=interrupted.heard_text, outcome="interrupted")
    assert STORY.startswith(cut.text) and cut.text.startswith(cut.heard_text.rstrip(".,"))
    assert len(cut.heard_text) < len(cut.text)  # cut mid-sentence
    assert (whole.text, whole.heard_text, whole.outcome) == ("Okay.", "Okay.", "completed")
    assert [call.reply(d).text for d in call.replies()] == [cut.text, "Okay."]
    with pytest.raises(ValueError, match="not a reply of this call"):
        call.reply("nope")  # type: ignore[arg-type]


def test_a_failed_assertion_shows_the_call_timeline(barge_in: CallResult) -> None:
    call = barge_in
    story = call.replies()[0]
    cut = call.of_kind("reply_interrupted")[0]
    with pytest.raises(CallAssertionError) as failed:
        assert_completed(call, story)
    message = str(failed.value)
    assert failed.value.reason == "expected reply 1 to be played whole, but reply 1 was interrupted"
    timeline = failed.value.timeline
    assert message.endswith(timeline)
    lines = timeline.splitlines()
    assert lines[0] == "call timeline (s since the call started):"
    # Who spoke when, what was said and what was heard, in time order.
    expected = [
        "user       starts speaking",
        'user       turn 1 committed: "Tell me a story."',
        "assistant  reply 1 starts (answer to turn 1)",
        'assistant  reply 1 says: "Once upon a time,"',
        "assistant  reply 1 audio starts",
        "user       barges in on reply 1",
        f'assistant  reply 1 interrupted after {cut.heard_seconds:.2f} s; '
        f'heard: "{cut.heard_text}"',
        "client     reply 1 flushed",
        'user       turn 2 committed: "Stop, please."',
        'assistant  reply 2 says: "Okay."',
        "assistant  reply 2 played whole",
        "call       ends",
    ]
    found = [next(i for i, line in enumerate(lines) if want in line) for want in expected]
    assert found == sorted(found), found
    times = [float(line.split()[0]) for line in lines[1:]]
    assert times == sorted(times) and times[0] > 0.3
    assert call_timeline(call) == timeline


def test_interrupted_where_and_transcripts_are_checked(barge_in: CallResult) -> None:
    call = barge_in
    okay = call.replies()[1]
    with pytest.raises(CallAssertionError, match="interrupted too late: the user heard"):
        assert_interrupted(call, heard_at_most="Once upon")
    with pytest.raises(CallAssertionError, match="interrupted too early"):
        assert_interrupted(call, heard_at_least=SHORT_STORY)
    with pytest.raises(CallAssertionError) as not_cut:
        assert_interrupted(call, okay)
    assert not_cut.value.reason == "expected reply 2 to be interrupted by the user, but " \
        "reply 2 was completed"
    with pytest.raises(CallAssertionError) as far:
        assert_turn_committed(call, "Where is my order?")
    assert far.value.reason.startswith(
        'expected a turn committed as "Where is my order?" (word error rate <= 0.25); '
        "the closest was turn "
    )
    assert "at word error rate" in far.value.reason
    with pytest.raises(ValueError, match="not a reply of this call"):
        assert_interrupted(call, "no-such-delivery")
    with pytest.raises(ValueError, match="max_wer"):
        assert_turn_committed(call, "x", max_wer=-1)


def test_a_history_keeping_unheard_words_is_caught(barge_in: CallResult) -> None:
    call = barge_in
    messages = call.session.turns.flow.state.messages
    index = next(i for i, m in enumerate(messages) if m.metadata.get("interrupted"))
    original = messages[index]
    # As if the flow had kept the whole story although the user heard only its start.
    messages[index] = ConversationMessage(
        role="assistant", content=STORY, metadata=original.metadata
    )
    try:
        with pytest.raises(CallAssertionError) as failed:
            assert_history_is_heard(call)
    finally:
        messages[index] = original
    reason = failed.value.reason
    assert reason.startswith("the history differs from what was heard for reply 1:")
    assert f"history:  \"{STORY[:40]}" in reason
    cut = call.of_kind("reply_interrupted")[0]
    assert f'heard:    "{cut.heard_text} [interrupted by the user]"' in reason
    assert_history_is_heard(call)


def test_an_unheard_answer_replaced_by_its_continued_turn_is_not_expected(
    barge_in: CallResult,
) -> None:
    """An answer cut before a word was heard is kept as "[interrupted by the user]";
    when its turn was then continued (committed again with all its words), the continued
    turn's answer replaces it and the history need not hold it."""
    call = barge_in
    events, messages = call.session.events, call.session.turns.flow.state.messages
    at = next(i for i, e in enumerate(events) if e.kind == "reply_interrupted")
    index = next(i for i, m in enumerate(messages) if m.metadata.get("interrupted"))
    cut, message = events[at], messages[index]
    first = next(e for e in events if e.kind == "turn_committed")
    # as if nothing of the story had been heard, and no message kept for it
    events[at] = cut.model_copy(update={"heard_text": ""})
    del messages[index]
    try:
        with pytest.raises(CallAssertionError, match="has no message for reply 1"):
            assert_history_is_heard(call)
        events.append(first.model_copy(update={"input_revision": 2}))  # continued
        assert_history_is_heard(call)
    finally:
        if events[-1].kind == "turn_committed" and events[-1].input_revision == 2:
            events.pop()
        events[at] = cut
        messages.insert(index, message)
    assert_history_is_heard(call)


def test_stale_audio_after_a_fence_is_caught(barge_in: CallResult) -> None:
    call = barge_in
    story = call.replies()[0]
    call.tape.played_after_flush[story] = 160  # as if a frame had leaked past the fence
    try:
        with pytest.raises(CallAssertionError) as failed:
            assert_no_stale_audio(call)
    finally:
        del call.tape.played_after_flush[story]
    assert failed.value.reason == "stale audio after a fence: 160 samples of reply 1"
    assert "STALE AUDIO: 160 samples of reply 1 played after its flush" in failed.value.timeline
    assert_no_stale_audio(call)


@pytest.mark.parametrize(
    ("reference", "hypothesis", "rate"),
    [
        ("Tell me a story.", "tell me a story", 0.0),
        ("Tell me a story.", "Tell me the story!", 0.25),
        ("Tell me a story.", "Tell me a long story", 0.25),
        ("Tell me a story.", "", 1.0),
        ("", "", 0.0),
        ("", "words", 1.0),
        ("stop", "please stop now", 2.0),
    ],
)
def test_word_error_rate(reference: str, hypothesis: str, rate: float) -> None:
    assert word_error_rate(reference, hypothesis) == rate


WORDS = st.lists(st.sampled_from(["tell", "me", "a", "story", "stop", "please", "Okay."]),
                 max_size=8).map(" ".join)


@settings(max_examples=200, derandomize=True, deadline=None)
@given(reference=WORDS, hypothesis_text=WORDS)
def test_word_error_rate_is_an_edit_distance(reference: str, hypothesis_text: str) -> None:
    rate = word_error_rate(reference, hypothesis_text)
    ref, hyp = words(reference), words(hypothesis_text)
    assert word_error_rate(reference, reference) == 0.0
    assert (rate == 0.0) == (ref == hyp)
    if ref:
        assert 0.0 <= rate <= max(len(ref), len(hyp)) / len(ref)
        assert abs(rate * len(ref) - round(rate * len(ref))) < 1e-9  # whole edits
