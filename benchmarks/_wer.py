"""Word error rate for the STT benchmarks: a normalizer and a word-level edit distance.

:func:`normalize` (see ``stt_accuracy.py``'s docstring for its rules) puts a reference and
a transcript in the same words; :func:`word_errors` scores a transcript with whichever
reading of its digits has fewer errors; :func:`repeats` says whether it loops.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

__all__ = ["cardinal", "edit_distance", "normalize", "repeats", "word_errors"]

_ONES = [
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
    "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen",
    "nineteen",
]
_TENS = ["_", "_", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
_ORDINALS = {
    "one": "first", "two": "second", "three": "third", "five": "fifth", "eight": "eighth",
    "nine": "ninth", "twelve": "twelfth", "twenty": "twentieth", "thirty": "thirtieth",
}
_SAME = {"ok": "okay", "alright": "all right", "mr": "mister", "dr": "doctor"}


def cardinal(n: int) -> str:
    """``n`` (0 to 999 999) in words, without "and" (as the voice says it)."""
    if n < 20:
        return _ONES[n]
    if n < 100:
        return _TENS[n // 10] + ("" if n % 10 == 0 else " " + _ONES[n % 10])
    if n < 1000:
        rest = "" if n % 100 == 0 else " " + cardinal(n % 100)
        return _ONES[n // 100] + " hundred" + rest
    rest = "" if n % 1000 == 0 else " " + cardinal(n % 1000)
    return cardinal(n // 1000) + " thousand" + rest


def _ordinal(n: int) -> str:
    words = cardinal(n).split()
    last = words[-1]
    words[-1] = _ORDINALS.get(last, last[:-1] + "ieth" if last.endswith("y") else last + "th")
    return " ".join(words)


def normalize(text: str, *, reading: str = "cardinal") -> list[str]:
    """The words of ``text`` for WER (see the module docstring).

    ``reading`` says how a number in digits is read: ``cardinal`` (4592: four thousand
    five hundred ninety two), ``digits`` (four five nine two) or ``clock`` (730: seven
    thirty; a cardinal when it is no time of day).
    """
    text = text.lower()
    text = re.sub(r"\$(\d+)", r"\1 dollars", text)
    text = text.replace("%", " percent").replace("°", " degrees")
    text = re.sub(r"(\d+)(st|nd|rd|th)\b", lambda m: _ordinal(int(m.group(1))), text)
    text = text.replace("'", "").replace("\u2019", "")
    text = re.sub(r"[^a-z0-9]+", " ", text)
    words: list[str] = []
    for word in text.split():
        if word.isdigit() and len(word) <= 6:
            hours, minutes = divmod(int(word), 100)
            if reading == "digits" and len(word) > 1:
                words.extend(_ONES[int(d)] for d in word)
            elif reading == "clock" and len(word) in (3, 4) and 0 < minutes < 60 and hours < 24:
                words.extend(f"{cardinal(hours)} {cardinal(minutes)}".split())
            else:
                words.extend(cardinal(int(word)).split())
        else:
            words.extend(_SAME.get(word, word).split())
    return words


def edit_distance(ref: Sequence[str], hyp: Sequence[str]) -> int:
    """Word-level Levenshtein distance (substitutions + deletions + insertions)."""
    previous = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        current = [i]
        for j, h in enumerate(hyp, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (r != h)))
        previous = current
    return previous[-1]


def word_errors(reference: str, heard: str) -> int:
    """Errors of ``heard`` against ``reference``, reading its digits the kinder way."""
    ref = normalize(reference)
    readings = ("cardinal", "digits", "clock")
    return min(edit_distance(ref, normalize(heard, reading=r)) for r in readings)


def repeats(reference: str, heard: str) -> bool:
    """Whether ``heard`` loops: a word or word pair 3x in a row, or 50% more words."""
    words = normalize(heard)
    if len(words) > 1.5 * len(normalize(reference)) + 1:
        return True
    for size in (1, 2):
        for i in range(len(words) - 3 * size + 1):
            chunk = words[i : i + size]
            if chunk == words[i + size : i + 2 * size] == words[i + 2 * size : i + 3 * size]:
                return True
    return False
