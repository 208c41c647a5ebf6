"""``get_conversation_messages`` converts each message once and stays exact as history changes.

The conversion is cached on the flow; these tests change the history every way the
project does (append, replace by index as the voice layer does after an interruption,
trim, reassign, a new session) and compare with a from-scratch ``to_llm()`` each time.
Real flows, real litellm ``mock_response`` for the LLM turn.
"""

from __future__ import annotations

from typing import Any

import pytest

from voxflow import ChatState, ConversationState, Flow, listen
from voxflow.conversation import ConversationConfig, ConversationMessage, get_conversation_messages
from voxflow.llm import LLM, normalize_messages

pytestmark = pytest.mark.unit


class Plain(Flow[ConversationState]):
    conversational = True

    def route_turn(self, context: Any) -> str | None:
        return "reply"

    @listen("reply")
    def handle_reply(self) -> str:
        return f"echo {self.state.current_user_message}"


def fresh(flow: Flow[Any]) -> list[dict[str, Any]]:
    """The expected answer, computed without any cache."""
    return [m.to_llm() for m in flow.state.messages]


def test_appends_replacements_trims_and_reassignments_stay_exact() -> None:
    flow = Plain()
    flow.handle_turn("one")
    flow.handle_turn("two")
    assert get_conversation_messages(flow) == fresh(flow)
    # Replaced by index, as voxflow_voice.speak.history.record_heard does.
    flow.state.messages[1] = ConversationMessage(role="assistant", content="ec [interrupted]")
    flow.handle_turn("three")
    got = get_conversation_messages(flow)
    assert got == fresh(flow)
    assert got[1]["content"] == "ec [interrupted]"
    flow.state.messages[-1] = ConversationMessage(role="assistant", content="last", name="bot")
    assert get_conversation_messages(flow)[-1] == {
        "role": "assistant",
        "content": "last",
        "name": "bot",
    }
    del flow.state.messages[2:]  # trimmed in place
    assert get_conversation_messages(flow) == fresh(flow)
    flow.state.messages = [ConversationMessage(role="system", content="reset")]  # reassigned
    assert get_conversation_messages(flow) == [{"role": "system", "content": "reset"}]
    flow.handle_turn("other session", session_id="another")  # a fresh state
    assert [m["content"] for m in get_conversation_messages(flow)] == [
        "other session",
        "echo other session",
    ]


def test_copies_are_independent_and_shared_dicts_are_not_changed() -> None:
    flow = Plain()
    flow.handle_turn("hello")
    copied = get_conversation_messages(flow)
    copied[0]["content"] = "changed by the caller"
    shared = get_conversation_messages(flow, copy=False)
    assert shared[0]["content"] == "hello"
    assert get_conversation_messages(flow, copy=False)[0] is shared[0]  # converted once
    assert get_conversation_messages(flow)[0] is not shared[0]


def test_dict_histories_are_converted_every_time() -> None:
    class Legacy(Flow[ChatState]):
        pass

    flow = Legacy()
    flow.state.messages.append({"role": "user", "content": "hi", "metadata": {"x": 1}})
    assert get_conversation_messages(flow) == [{"role": "user", "content": "hi"}]
    flow.state.messages[0]["content"] = "edited in place"  # dicts are mutable: no cache
    assert get_conversation_messages(flow) == [{"role": "user", "content": "edited in place"}]
    flow.state.messages.append(ConversationMessage(role="assistant", content="mixed"))
    assert get_conversation_messages(flow)[-1] == {"role": "assistant", "content": "mixed"}


def test_the_llm_gets_copies_of_the_whole_history_every_turn() -> None:
    seen: list[list[dict[str, Any]]] = []

    class Spy(LLM):
        async def acall(self, messages: Any, **kwargs: Any) -> Any:
            seen.append(normalize_messages(messages))
            seen[-1][-1]["content"] = "mutated by the model client"  # must not leak back
            return await super().acall(messages, **kwargs)

    @ConversationConfig(llm=Spy("openai/gpt-4o-mini", mock_response="ok"))
    class Talk(Flow[ConversationState]):
        pass

    flow = Talk()
    for text in ("a", "b", "c"):
        flow.handle_turn(text)
    assert [len(m) for m in seen] == [2, 4, 6]  # the system prompt + the whole history
    assert [m["content"] for m in seen[-1][1:-1]] == ["a", "ok", "b", "ok"]
    assert get_conversation_messages(flow) == fresh(flow)


def test_normalize_messages_fast_path_keeps_its_checks() -> None:
    history = [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]
    out = normalize_messages(history)
    assert out == history and out[0] is not history[0]
    with pytest.raises(ValueError, match=r"messages\[1\] has no 'role'"):
        normalize_messages([{"role": "user", "content": "x"}, {"content": "y"}])
    with pytest.raises(ValueError, match="empty"):
        normalize_messages([])
