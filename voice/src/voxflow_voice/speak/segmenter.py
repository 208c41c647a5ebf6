"""Split streaming reply text into speakable segments as it arrives.

Audio can only start once a first piece of text is complete, so the *first* segment is
short: it ends at the first clause break (``,`` ``;`` ``:`` dash or ellipsis followed by a
space), or after ``first_max_words`` words if no break comes. Later segments are whole
sentences (``.`` ``!`` ``?`` followed by a space, or a line break), with overlong ones cut
at a clause break or, failing that, a word boundary.

A period is not a sentence end after a title ("Dr. Smith"), an initial ("J. K."), a
Latin abbreviation ("e.g.") or in a number ("3.14", "1,000" has no space either); "etc.",
"a.m.", "p.m." and the like end a sentence only when a capital letter follows. A
punctuation mark needs the next character to decide, so a trailing "." waits for more
text or :meth:`TextSegmenter.flush`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = [
    "DEFAULT_SEGMENTER_SETTINGS",
    "Segment",
    "SegmenterSettings",
    "TextSegmenter",
    "strip_markdown",
]

_NEVER_END = frozenset(
    {
        "mr", "mrs", "ms", "dr", "prof", "sr", "st", "mt", "gen", "col", "capt", "lt",
        "sgt", "rev", "hon", "fr", "e.g", "i.e", "eg", "ie", "vs", "cf", "approx", "fig",
        "no", "nos", "vol", "ch", "pp", "dept", "est", "ave", "rd", "blvd",
    }
)  # fmt: skip
"""Abbreviations after which a period never ends a sentence ("No." only before a digit)."""

_END_IF_CAPITAL = frozenset(
    {
        "etc", "a.m", "p.m", "am", "pm", "inc", "ltd", "co", "corp", "jr", "al",
        "jan", "feb", "mar", "apr", "jun", "jul", "aug", "sep", "sept", "oct", "nov", "dec",
    }
)  # fmt: skip
"""Abbreviations that end a sentence only when a capital letter follows."""

_CLOSERS = "\"')]}\u201d\u2019*_`"  # closing quotes, brackets and markdown markers
_SENTENCE_END = ".!?"
_CLAUSE_END = ",;:"
_SPEAKABLE = re.compile(r"\w")
_WORD_BEFORE = re.compile(r"([\w.]+)$")
_MD_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
_MD_LINE_START = re.compile(r"^(?:#{1,6}\s+|>\s*|[-*+]\s+)+")
_MD_PAIRED = re.compile(r"\*\*|__|~~|`+")
_MD_EMPHASIS = re.compile(r"(?<![\w*])[*_]+(?=\w)|(?<=\w)[*_]+(?![\w*])")


def strip_markdown(text: str) -> str:
    """Remove the markdown a chat model writes and a voice should not read.

    Links keep their text, heading/quote/bullet markers at the start go, and emphasis,
    strike and code markers go; ``snake_case`` and a spaced ``3 * 4`` are left alone.
    """
    text = _MD_LINK.sub(r"\1", text)
    text = _MD_LINE_START.sub("", text.lstrip())
    text = _MD_PAIRED.sub("", text)
    text = _MD_EMPHASIS.sub("", text)
    return " ".join(text.split())


class SegmenterSettings(BaseModel):
    """How reply text is cut into segments for TTS."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    first_min_words: int = Field(1, ge=1, description="words before a clause break may end seg 1")
    first_max_words: int = Field(
        12, ge=1, description="words after which segment 1 ends at a word boundary"
    )
    max_chars: int = Field(250, ge=20, description="longest later segment before a forced cut")
    strip_markdown: bool = Field(
        True, description="drop markdown markers espeak would read aloud ('asterisk', 'hash')"
    )

    @model_validator(mode="after")
    def _check(self) -> SegmenterSettings:
        if self.first_max_words < self.first_min_words:
            raise ValueError("first_max_words must be >= first_min_words")
        return self


DEFAULT_SEGMENTER_SETTINGS = SegmenterSettings()


@dataclass(frozen=True, slots=True)
class Segment:
    """One speakable piece of a reply.

    Attributes:
        segment_id: 1 for the first segment of the reply, then 2, 3, ...
        text: the text to synthesize, stripped.
    """

    segment_id: int
    text: str


class TextSegmenter:
    """Cuts one reply's streaming text into :class:`Segment` s (one segmenter per reply).

    Args:
        settings: the cutting rules; :data:`DEFAULT_SEGMENTER_SETTINGS` if ``None``.
    """

    def __init__(self, settings: SegmenterSettings | None = None) -> None:
        if settings is not None and not isinstance(settings, SegmenterSettings):
            raise TypeError(f"settings must be a SegmenterSettings, got {type(settings).__name__}")
        self.settings = settings if settings is not None else DEFAULT_SEGMENTER_SETTINGS
        self._buffer = ""
        self._next_id = 1
        self._flushed = False

    @property
    def pending(self) -> str:
        """Text received but not yet part of a segment."""
        return self._buffer

    def push(self, delta: str) -> list[Segment]:
        """Add a text delta; return the segments it completed (maybe none).

        Raises:
            TypeError: ``delta`` is not a str.
            RuntimeError: called after :meth:`flush`.
        """
        if not isinstance(delta, str):
            raise TypeError(f"delta must be a str, got {type(delta).__name__}")
        if self._flushed:
            raise RuntimeError("push() after flush(): use a new TextSegmenter per reply")
        self._buffer += delta
        out: list[Segment] = []
        while True:
            cut = self._find_cut(final=False)
            if cut is None:
                break
            self._emit(self._buffer[:cut], out)
            self._buffer = self._buffer[cut:]
        return out

    def flush(self) -> list[Segment]:
        """The reply text is complete: return what is left as segments."""
        out: list[Segment] = []
        if not self._flushed:
            self._flushed = True
            while self._buffer.strip():
                cut = self._find_cut(final=True)
                if cut is None:
                    cut = len(self._buffer)
                self._emit(self._buffer[:cut], out)
                self._buffer = self._buffer[cut:]
            self._buffer = ""
        return out

    def _emit(self, text: str, out: list[Segment]) -> None:
        text = " ".join(text.split())
        if self.settings.strip_markdown:
            text = strip_markdown(text)
        if not _SPEAKABLE.search(text):
            return  # punctuation or markup alone is not worth a TTS call
        out.append(Segment(self._next_id, text))
        self._next_id += 1

    def _find_cut(self, *, final: bool) -> int | None:
        """Index after which the buffer's first segment ends, if it is decided yet."""
        text = self._buffer
        first = self._next_id == 1
        words = 0
        in_word = False
        for i, char in enumerate(text):
            if char.isspace():
                if in_word:
                    words += 1
                in_word = False
                if char == "\n" and text[:i].strip():
                    return i + 1
                continue
            in_word = True
            at_end = i + 1 >= len(text)
            if at_end and not final:
                return None  # the next character decides
            stop = self._after_closers(text, i + 1)
            follower = text[stop] if stop < len(text) else ""
            if follower and not follower.isspace():
                continue
            if char in _SENTENCE_END:
                ends = self._ends_sentence(text, i, stop)
                if ends is None and not final:
                    return None  # wait for the next word
                if ends is None or ends:
                    return stop
            if first and words + 1 >= self.settings.first_min_words and self._clause(text, i):
                return stop
            if first and follower and words + 1 >= self.settings.first_max_words:
                return stop
            if not first and stop >= self.settings.max_chars:
                return self._forced_cut(text[:stop])
        return None

    @staticmethod
    def _after_closers(text: str, index: int) -> int:
        while index < len(text) and text[index] in _CLOSERS:
            index += 1
        return index

    @staticmethod
    def _clause(text: str, i: int) -> bool:
        char = text[i]
        if char in _CLAUSE_END:
            return True
        if char in "\u2014\u2013" or (char == "-" and i > 0 and text[i - 1].isspace()):
            return True
        return char == "\u2026" or text[max(0, i - 2) : i + 1] == "..."

    @staticmethod
    def _ends_sentence(text: str, i: int, stop: int) -> bool | None:
        """Whether the mark at ``i`` ends a sentence; ``None`` until the next word shows."""
        if text[i] != ".":
            return True
        if text[max(0, i - 2) : i + 1] == "...":
            return TextSegmenter._next_is_capital(text, stop)
        match = _WORD_BEFORE.search(text[:i])
        if match is None:
            return True
        word = match.group(1).lower().rstrip(".")
        before = text[: i - len(match.group(1))]
        if word.isdigit() and (not before.strip() or before.rstrip(" \t").endswith("\n")):
            return False  # a list marker: "1. Buy milk"
        if word == "no":
            capital = TextSegmenter._next_is_capital(text, stop)
            return None if capital is None else not TextSegmenter._next_is_digit(text, stop)
        if word in _NEVER_END:
            return False
        if word in _END_IF_CAPITAL:
            return TextSegmenter._next_is_capital(text, stop)
        if len(word) == 1 and word.isalpha():
            return False  # an initial: "J. K. Rowling", "U.S."
        # "U.S", "e.g": single letters joined by periods are abbreviations too.
        return not ("." in word and all(len(part) == 1 for part in word.split(".")))

    @staticmethod
    def _next_is_capital(text: str, stop: int) -> bool | None:
        rest = text[stop:].lstrip()
        if not rest:
            return None
        return rest[0].isupper() or not rest[0].isalpha()

    @staticmethod
    def _next_is_digit(text: str, stop: int) -> bool:
        rest = text[stop:].lstrip()
        return bool(rest) and rest[0].isdigit()

    def _forced_cut(self, text: str) -> int:
        """Cut an overlong sentence at its last clause break, else its last space."""
        for i in range(len(text) - 1, 0, -1):
            if text[i] in _CLAUSE_END and i + 1 < len(text) and text[i + 1].isspace():
                return i + 1
        space = text.rstrip().rfind(" ")
        return space + 1 if space > 0 else len(text)

    def __repr__(self) -> str:
        return f"TextSegmenter(next_id={self._next_id}, pending={len(self._buffer)} chars)"
