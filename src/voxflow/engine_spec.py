"""Voice engines by name: the spec that chooses one (``whisper:base``).

A voice engine (speech to text, text to speech, voice activity detection, end of turn)
is chosen by a *spec*: the name it is registered under, then optionally ``:`` and its
options, separated by commas::

    whisper                      the engine with its defaults
    whisper:base                 a value for its main option (Whisper's model)
    whisper:base,beam_size=2     then options by name
    energy:threshold_db=-35      options by name only
    piper:/voices/en_GB.onnx     (a value may hold ':' and spaces, never ',')

Installed packages register engines as entry points, one group per kind
(:data:`ENGINE_GROUPS`: ``voxflow.stt``, ``voxflow.tts``, ``voxflow.vad``,
``voxflow.end_of_turn``); ``voxflow_voice.engines.registry`` loads them. This module only
reads a spec, without importing anything, so :class:`~voxflow.settings.Settings` refuses
a malformed one naming its variable or option before a command runs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, get_args

from .errors import EngineSpecError

__all__ = [
    "DEFAULT_ENGINES",
    "ENGINE_GROUPS",
    "ENGINE_KINDS",
    "ENGINE_LABELS",
    "ENGINE_OPTIONS",
    "NO_ENGINE",
    "EngineKind",
    "EngineSpec",
    "parse_engine_spec",
]

EngineKind = Literal["stt", "tts", "vad", "end_of_turn"]

ENGINE_KINDS: tuple[EngineKind, ...] = get_args(EngineKind)

ENGINE_GROUPS: dict[EngineKind, str] = {kind: f"voxflow.{kind}" for kind in ENGINE_KINDS}
"""The entry-point group an installed package registers an engine of each kind in."""

ENGINE_OPTIONS: dict[EngineKind, str] = {
    "stt": "--stt", "tts": "--tts", "vad": "--vad", "end_of_turn": "--end-of-turn",
}
"""The command-line option that chooses each kind (``VOXFLOW_STT``... in the environment)."""

DEFAULT_ENGINES: dict[EngineKind, str] = {
    "stt": "whisper:tiny.en", "tts": "piper", "vad": "silero", "end_of_turn": "smart-turn",
}
"""What every command uses unless told otherwise."""

NO_ENGINE = "none"
"""The end-of-turn spec that loads no model: the silence timer alone."""

ENGINE_LABELS: dict[EngineKind, str] = {
    "stt": "speech-to-text", "tts": "text-to-speech", "vad": "voice activity",
    "end_of_turn": "end-of-turn",
}

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
_MAX_SPEC = 2048
_EXAMPLES: dict[EngineKind, str] = {
    "stt": "whisper:base", "tts": "piper:/path/to/voice.onnx", "vad": "energy:threshold_db=-35",
    "end_of_turn": "smart-turn",
}


@dataclass(frozen=True, slots=True)
class EngineSpec:
    """A spec, read: which engine of a kind, with which options (their text as given).

    Attributes:
        kind: ``stt``, ``tts``, ``vad`` or ``end_of_turn``.
        name: the registered name (``whisper``); :data:`NO_ENGINE` for no end-of-turn
            model.
        value: the value given without a name (``base`` in ``whisper:base``), which the
            engine's main option takes; ``None`` when there is none.
        options: ``(name, value)`` of the options given by name, in order.
    """

    kind: EngineKind
    name: str
    value: str | None = None
    options: tuple[tuple[str, str], ...] = ()

    def __str__(self) -> str:
        parts = ([self.value] if self.value is not None else []) + [
            f"{key}={value}" for key, value in self.options]
        return f"{self.name}:{','.join(parts)}" if parts else self.name


def _refuse(kind: EngineKind, text: str, why: str) -> EngineSpecError:
    reason = (f"{why}; the form is NAME or NAME:OPTIONS, e.g. {_EXAMPLES[kind]} (voxflow "
              "doctor lists the engines installed)")
    return EngineSpecError(f"{ENGINE_LABELS[kind]} engine {text!r}: {reason}", kind=kind,
                           reason=reason)


def parse_engine_spec(text: object, kind: EngineKind) -> EngineSpec:
    """Read the spec ``text`` of an engine of ``kind``.

    Args:
        text: ``NAME`` or ``NAME:OPTIONS``; the options are separated by ``,``; the first
            may be a bare value (the engine's main option), the others are ``key=value``.
        kind: which engine it chooses.

    Raises:
        EngineSpecError: the spec is not a string, is empty or too long, holds a control
            character (a newline, a tab), names no engine (``:base``) or a malformed name,
            has nothing after ``:`` (``whisper:``), an empty option (``whisper:base,``),
            an option without a name after the first, a name given twice, a key without a
            value (``beam_size=``), or spaces around a value; the message (one line, the
            input shown quoted) says what and the fix.
        ValueError: ``kind`` is not one of :data:`ENGINE_KINDS` (a programming error).
    """
    if kind not in ENGINE_KINDS:
        raise ValueError(f"kind must be one of {', '.join(ENGINE_KINDS)}, got {kind!r}")
    if not isinstance(text, str):
        raise EngineSpecError(f"{ENGINE_LABELS[kind]} engine must be a string such as "
                              f"{_EXAMPLES[kind]}, got {type(text).__name__}", kind=kind,
                              reason=f"must be a string such as {_EXAMPLES[kind]}")
    if len(text) > _MAX_SPEC:
        raise _refuse(kind, text[:40] + "...", f"longer than {_MAX_SPEC} characters")
    if not text.strip():
        raise _refuse(kind, text, "it is empty")
    if not text.isprintable():
        raise _refuse(kind, text, "it holds a control character (a newline, a tab)")
    name, colon, rest = text.partition(":")
    if not name:
        raise _refuse(kind, text, "no engine name before ':'")
    if not _NAME.fullmatch(name):
        raise _refuse(kind, text, f"{name!r} is not an engine name (letters, digits, "
                                  "'.', '_' and '-', starting with a letter or a digit)")
    if not colon:
        return EngineSpec(kind, name)
    if not rest:
        raise _refuse(kind, text, "nothing after ':' (leave out the ':' for the defaults)")
    value: str | None = None
    options: list[tuple[str, str]] = []
    for index, part in enumerate(rest.split(",")):
        if not part.strip():
            raise _refuse(kind, text, f"option {index + 1} is empty (two commas, or one "
                                      "at an end)")
        if part != part.strip():
            raise _refuse(kind, text, f"spaces around {part.strip()!r}")
        key, equals, given = part.partition("=")
        if equals and not key:
            raise _refuse(kind, text, f"option {part!r} has no name before '='")
        if equals and _KEY.fullmatch(key):
            if not given:
                raise _refuse(kind, text, f"option {key!r} has no value after '='")
            if given != given.strip():
                raise _refuse(kind, text, f"spaces around {given.strip()!r}")
            if key in dict(options):
                raise _refuse(kind, text, f"option {key!r} is given twice")
            options.append((key, given))
        elif index == 0:
            value = part
        else:
            raise _refuse(kind, text, f"option {part!r} has no name: only the first option "
                                      "may be a bare value; give the others as name=value")
    if name == NO_ENGINE and kind == "end_of_turn":
        raise _refuse(kind, text, f"{NO_ENGINE!r} (no end-of-turn model) takes no options")
    return EngineSpec(kind, name, value, tuple(options))

