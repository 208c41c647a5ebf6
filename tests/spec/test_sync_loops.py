"""Issue 15 item 6: sync LLM entry points reuse the thread's cached loop.

``classify_intent`` / ``receive_user_message`` (and ``LLM.call``) used to build a new event
loop per call: litellm's logging worker then warned "event loop changed" on every call,
and tasks it parked on the abandoned loops were destroyed (or crashed the final garbage
collection) at interpreter exit. The script runs in a fresh interpreter so its exit is
observed too.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.unit

SCRIPT = textwrap.dedent(
    """
    from voxflow import LLM, ConversationConfig, Flow
    from voxflow.conversation import ConversationState, classify_intent, receive_user_message

    llm = LLM("openai/gpt-4o-mini", mock_response="ORDER")

    @ConversationConfig(llm=LLM("openai/gpt-4o-mini", mock_response="On its way."))
    class Chat(Flow[ConversationState]):
        pass

    flow = Chat()
    for _ in range(3):
        print(flow.classify_intent("where is my order?", ("GREETING", "ORDER"), llm=llm))
        print(flow.receive_user_message("hello", outcomes=("GREETING", "ORDER"), llm=llm))
        print(classify_intent("my order", ["GREETING", "ORDER"], llm=llm))
        print(receive_user_message(flow, "again", outcomes=["GREETING", "ORDER"], llm=llm))
        print(llm.call("hi").content)
        print(flow.handle_turn("and now?"))
        stream = flow.stream_turn("streamed?")
        with stream:
            chunks = [f.content for f in stream.events if f.type == "llm_stream_chunk"]
        print("".join(chunks))
    print("messages", len(flow.state.messages))
    """
)


def test_sync_llm_helpers_leave_no_loop_warnings_at_exit() -> None:
    proc = subprocess.run(
        [sys.executable, "-X", "faulthandler", "-c", SCRIPT],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.split()
    assert lines.count("ORDER") == 15  # every call answered
    assert lines.count("way.") == 6  # "On its way." from handle_turn and stream_turn
    # two received messages and two user + assistant pairs per round, three rounds
    assert proc.stdout.strip().endswith("messages 18")
    assert "event loop changed" not in proc.stderr, proc.stderr[-3000:]
    assert "Task was destroyed" not in proc.stderr, proc.stderr[-3000:]
    assert "was never awaited" not in proc.stderr, proc.stderr[-3000:]
    assert "Fatal Python error" not in proc.stderr, proc.stderr[-3000:]
