"""Cutting streaming reply text into speakable segments (no models)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from voxflow_voice import Segment, SegmenterSettings, TextSegmenter


def segments(text: str, step: int = 3, settings: SegmenterSettings | None = None) -> list[str]:
    """Feed ``text`` in ``step``-character deltas, as an LLM stream would."""
    seg = TextSegmenter(settings)
    out: list[Segment] = []
    for i in range(0, len(text), step):
        out += seg.push(text[i : i + step])
    out += seg.flush()
    assert [s.segment_id for s in out] == list(range(1, len(out) + 1))
    return [s.text for s in out]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "Sure, I can help with that. It will take a minute.",
            ["Sure,", "I can help with that.", "It will take a minute."],
        ),
        (
            "Dr. Smith will see you at 3 p.m. Tomorrow is fine too.",
            ["Dr. Smith will see you at 3 p.m.", "Tomorrow is fine too."],
        ),
        (
            "It is 3.14 metres. It costs $1,000 per year! Really? Yes.",
            ["It is 3.14 metres.", "It costs $1,000 per year!", "Really?", "Yes."],
        ),
        (
            "No. Go to No. 5 street, e.g. by bus. J. K. Rowling lived in the U.S. for years.",
            [
                "No.",
                "Go to No. 5 street, e.g. by bus.",
                "J. K. Rowling lived in the U.S. for years.",
            ],
        ),
        (
            "Here is the list:\n1. Buy milk\n2. Call Mr. Jones.\nDone.",
            ["Here is the list:", "1. Buy milk", "2. Call Mr. Jones.", "Done."],
        ),
        (
            'Well... maybe. "I agree." She said so.',
            ["Well...", "maybe.", '"I agree."', "She said so."],
        ),
        ("apples, pears etc. and more.", ["apples,", "pears etc. and more."]),
    ],
)
def test_cases(text: str, expected: list[str]) -> None:
    assert segments(text) == expected


@pytest.mark.parametrize("step", [1, 2, 7, 1000])
def test_result_does_not_depend_on_delta_sizes(step: int) -> None:
    text = "Okay, so here's the thing. Mrs. Lee arrived at 9 a.m. She left at 5. The end"
    assert segments(text, step) == segments(text, 3)


def test_first_segment_is_cut_after_max_words_without_punctuation() -> None:
    text = "one two three four five six seven eight nine ten eleven twelve thirteen fourteen."
    out = segments(text, settings=SegmenterSettings(first_max_words=5))
    assert out == [
        "one two three four five",
        "six seven eight nine ten eleven twelve thirteen fourteen.",
    ]


def test_long_later_sentences_are_cut_at_a_clause_then_a_word() -> None:
    settings = SegmenterSettings(max_chars=40)
    clause = "Hi. " + "alpha beta gamma delta, epsilon zeta eta theta iota kappa."
    assert segments(clause, settings=settings) == [
        "Hi.",
        "alpha beta gamma delta,",
        "epsilon zeta eta theta iota kappa.",
    ]
    words = "Hi. " + " ".join(["word"] * 20) + "."
    out = segments(words, settings=settings)
    assert all(len(s) <= 40 for s in out[1:]) and " ".join(out[1:]) == " ".join(["word"] * 20) + "."


def test_a_trailing_period_waits_for_the_next_word() -> None:
    seg = TextSegmenter()
    assert seg.push("Hello there") == []
    assert seg.push(". Call Dr.") == [Segment(1, "Hello there.")]
    assert seg.push(" ") == []  # "Dr." is never an end, but we also wait for "Call Dr. X"
    assert seg.pending.strip() == "Call Dr."
    assert seg.flush() == [Segment(2, "Call Dr.")]


def test_markdown_is_not_read_aloud() -> None:
    text = "**Sure,** here you go:\n# Plan\n- Buy *fresh* milk\n- See [the map](https://x.y/m).\n"
    assert segments(text) == ["Sure,", "here you go:", "Plan", "Buy fresh milk", "See the map."]
    assert segments("Keep snake_case and 3 * 4 as is.") == ["Keep snake_case and 3 * 4 as is."]
    raw = segments("**Bold.**", settings=SegmenterSettings(strip_markdown=False))
    assert raw == ["**Bold.**"]


def test_punctuation_only_text_makes_no_segment() -> None:
    assert segments(" ... -- ** ") == []
    assert segments("") == []


def test_push_validates_and_refuses_after_flush() -> None:
    seg = TextSegmenter()
    with pytest.raises(TypeError, match="delta"):
        seg.push(3)  # type: ignore[arg-type]
    seg.flush()
    with pytest.raises(RuntimeError, match="new TextSegmenter"):
        seg.push("more")
    assert seg.flush() == []


def test_settings_are_validated() -> None:
    with pytest.raises(ValidationError):
        SegmenterSettings(first_min_words=5, first_max_words=2)
    with pytest.raises(ValidationError):
        SegmenterSettings(max_chars=5)
    with pytest.raises(TypeError, match="settings"):
        TextSegmenter(settings={"max_chars": 40})  # type: ignore[arg-type]
