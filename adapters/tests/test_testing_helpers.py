"""``voxflow_adapters.testkit.flows``: the shared Teller flow's routes and options, and ``words``.

Text-only turns through a real :class:`~voxflow.turns.TurnRunner` (no models, no audio);
the voice tests that use the Teller over the simulated adapter cover the rest.
"""

from __future__ import annotations

from typing import Any

import pytest
from voxflow_adapters.testkit.flows import ACKNOWLEDGEMENT, SHORT_STORY, STORY, Teller, words

from voxflow.ids import new_turn_id
from voxflow.turns import TurnRunner


async def replies(teller: Teller, *said: str) -> list[str]:
    """What ``teller`` answered to each of ``said``, one turn each."""
    turns = TurnRunner(teller)
    for text in said:
        async for _ in turns.astream_turn(text, turn_id=new_turn_id()):
            pass
    messages = turns.flow.state.messages
    assert [m.content for m in messages if m.role == "user"] == list(said)
    return [str(m.content) for m in messages if m.role == "assistant"]


async def test_the_story_on_request_and_an_acknowledgement_otherwise() -> None:
    said = ("Tell me a STORY, please.", "Stop, please.", "What a story!")
    assert await replies(Teller(), *said) == [STORY, ACKNOWLEDGEMENT, STORY]


async def test_the_story_acknowledgement_and_trigger_are_options() -> None:
    teller = Teller(story=SHORT_STORY, acknowledgement="Sure.", trigger="Tale")
    assert await replies(teller, "A tale, please.", "Tell me a story.") == [SHORT_STORY, "Sure."]


async def test_without_a_trigger_every_turn_gets_the_story() -> None:
    assert await replies(Teller(trigger=None), "Hello.", "Stop.") == [STORY, STORY]


def test_the_stories_are_the_documented_texts() -> None:
    assert STORY.startswith(f"{SHORT_STORY} One stormy evening")
    assert STORY.count(". ") == 2 and SHORT_STORY.count(". ") == 1


@pytest.mark.parametrize(
    ("options", "error", "name"),
    [
        ({"story": ""}, ValueError, "story"),
        ({"story": 3}, TypeError, "story"),
        ({"acknowledgement": "  "}, ValueError, "acknowledgement"),
        ({"trigger": ""}, ValueError, "trigger"),
        ({"trigger": b"story"}, TypeError, "trigger"),
    ],
)
def test_bad_options_name_the_parameter(
    options: dict[str, Any], error: type[Exception], name: str
) -> None:
    with pytest.raises(error, match=name):
        Teller(**options)


def test_flow_options_pass_through() -> None:
    assert Teller(max_method_calls=7).max_method_calls == 7
    with pytest.raises(ValueError, match="max_method_calls"):
        Teller(max_method_calls=0)


def test_words_drop_punctuation_and_case() -> None:
    assert words("Wait, STOP! It's fine.") == ["wait", "stop", "it's", "fine"]
    assert words("...") == []
    with pytest.raises(TypeError, match="text"):
        words(None)  # type: ignore[arg-type]


def test_gate_frames_rejects_a_bad_frame_or_signal() -> None:
    import numpy as np
    from voxflow_adapters.testkit.flows import gate_frames
    from voxflow_voice.listen.echo import EchoGate

    signal = np.zeros(640, np.float32)
    with pytest.raises(ValueError, match="frame"):
        list(gate_frames(EchoGate(), signal, signal, frame=0))
    with pytest.raises(ValueError, match="1-D"):
        list(gate_frames(EchoGate(), signal.reshape(2, 320), signal))
