"""Issue 15 item 2: text frames expose ``.content`` (the spec's streaming loop)."""

from __future__ import annotations

import pytest

from voxflow import LLM, ConversationConfig, ConversationState, Flow
from voxflow.flow import StreamFrame

pytestmark = pytest.mark.unit


@ConversationConfig(llm=LLM("openai/gpt-4o-mini", mock_response="Your order ships today."))
class Chat(Flow[ConversationState]):
    pass


def test_llm_stream_chunks_expose_their_text_as_content() -> None:
    flow = Chat()
    stream = flow.stream_turn("Where is my order?", session_id="s1")
    printed: list[str] = []
    with stream:
        for frame in stream.events:
            if frame.channel == "llm" and frame.type == "llm_stream_chunk":
                printed.append(frame.content or "")
    assert len(printed) > 1  # streamed in pieces, not one final message
    assert "".join(printed) == "Your order ships today."
    assert stream.result == "Your order ships today."


def test_message_frames_carry_content_and_others_none() -> None:
    flow = Chat()
    stream = flow.stream_turn("hello")
    with stream:
        frames = list(stream.events)
    added = [f for f in frames if f.type == "conversation_message_added"]
    assert [f.content for f in added] == ["hello", "Your order ships today."]
    started = next(f for f in frames if f.type == "conversation_turn_started")
    assert started.content is None
    assert StreamFrame(channel="x", type="y", data={"content": 3}).content is None
