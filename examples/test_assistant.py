"""Tests for the example assistant (``voxflow.examples.assistant``, shipped in the package):
copy this file and import your own assistant instead.

Run with plain ``pytest`` once ``voxflow[voice]`` is installed: its pytest plugin gives
the ``voice_call`` fixture (scripted calls on the bundled models, loaded once per test
session, on virtual audio time; ``pytest --voxflow-realtime`` runs the same calls on the
wall clock). No conftest needed.
"""

from voxflow_adapters.testkit import CallScript
from voxflow_adapters.testkit.assertions import (
    assert_completed,
    assert_history_is_heard,
    assert_interrupted,
    assert_no_stale_audio,
    assert_turn_committed,
)

from voxflow import ConversationConfig
from voxflow.examples.assistant import STORY, SYSTEM_PROMPT, Assistant
from voxflow.testing import ScriptedLLM, reply


def test_the_user_cuts_the_story_short(voice_call):
    script = (
        CallScript()
        .user_says(0.5, "Tell me a story.")
        .then_says("Stop, please.", after="reply_start", gap=2.0)  # 2 s into the story
    )
    call = voice_call(Assistant(), script)

    assert_turn_committed(call, "Tell me a story.")
    story, okay = call.replies()
    # Cut where the user spoke: some words heard, the story not finished.
    assert_interrupted(call, story, heard_at_least="Once upon a time", heard_at_most=STORY)
    assert_no_stale_audio(call)  # not one sample of the story after the barge-in
    assert_completed(call, okay)  # "Okay." was played whole
    assert_history_is_heard(call)  # the history keeps only the words the user heard


def test_open_questions_go_to_the_llm(voice_call):
    llm = ScriptedLLM(reply("It is sunny and warm today.", tokens_per_second=20))

    @ConversationConfig(system_prompt=SYSTEM_PROMPT, llm=llm)
    class AssistantWithLLM(Assistant):
        pass

    call = voice_call(AssistantWithLLM(), CallScript().user_says(0.5, "How is the weather?"))

    turn = assert_turn_committed(call, "How is the weather?")
    assert llm.calls[0].messages[-1] == {"role": "user", "content": turn.text}
    assert_completed(call)
    assert_history_is_heard(call)
