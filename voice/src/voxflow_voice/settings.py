"""The voice pipeline's ``VOXFLOW_*`` settings (:class:`VoiceSection`): the four engines
by name and the turn taking of a call.

======================================  ===========================  ==================
variable                                setting                      default
======================================  ===========================  ==================
``VOXFLOW_STT``                         ``stt``                      ``whisper:tiny.en``
``VOXFLOW_TTS``                         ``tts``                      ``piper``
``VOXFLOW_VAD``                         ``vad``                      ``silero``
``VOXFLOW_END_OF_TURN``                 ``end_of_turn``              ``smart-turn``
``VOXFLOW_END_OF_TURN_SILENCE``         ``end_of_turn_silence``      ``0.6``
``VOXFLOW_MAX_END_OF_TURN_SILENCE``     ``max_end_of_turn_silence``  ``1.6``
``VOXFLOW_RESUME_GRACE``                ``resume_grace``             ``1.0``
``VOXFLOW_COMPLETE_SILENCE``            ``complete_silence``         ``0``
``VOXFLOW_MIN_BARGE_IN``                ``min_barge_in``             ``0.3``
``VOXFLOW_SPECULATIVE_REPLIES``         ``speculative_replies``      ``true``
======================================  ===========================  ==================

A section of :class:`voxflow.settings.Settings`, registered in ``pyproject.toml`` (the
``voxflow.settings`` entry points, one per variable) so the core lists and checks these
variables without importing this package; read them with
``settings.section(VoiceSection)``. The four voice engines are chosen by name and options
(:mod:`voxflow.engine_spec`: ``VOXFLOW_STT=whisper:base``); a spec is read here, its
engine found when a voice command starts. The variables of the settings they replaced
(``stt_model``, ``voice``, ``end_of_turn_model``: ``RETIRED``, registered too) are
refused, set, with the variable that replaces each and its value.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from pydantic import Field, ValidationInfo, field_validator, model_validator

from voxflow.engine_spec import (
    DEFAULT_ENGINES,
    ENGINE_OPTIONS,
    NO_ENGINE,
    EngineKind,
    EngineSpec,
    parse_engine_spec,
)
from voxflow.errors import EngineSpecError
from voxflow.settings import SettingsSection

__all__ = ["VoiceSection"]


class VoiceSection(SettingsSection):
    """The voice pipeline's settings: the engines, and how a call takes turns."""

    FIXES: ClassVar[Mapping[str, str]] = {
        "speculative_replies": "use true or false",
        "max_end_of_turn_silence": "give seconds, more than 0.2 (the pause where the model "
        "decides) and at most 10",
    }
    FLAGS: ClassVar[Mapping[str, str]] = dict(ENGINE_OPTIONS.items())
    CROSS_FIELDS: ClassVar[tuple[str, ...]] = (
        "complete_silence", "max_end_of_turn_silence", "end_of_turn")
    RETIRED: ClassVar[Mapping[str, tuple[str, str]]] = {
        "stt_model": ("stt", "whisper:{}"),
        "voice": ("tts", "piper:{}"),
        "end_of_turn_model": ("end_of_turn", "{}"),
    }

    stt: str = Field(
        DEFAULT_ENGINES["stt"], description="speech to text: an engine and its options "
        "(`--stt`), e.g. whisper:base or whisper:/path/to/model (voxflow doctor lists them)",
    )
    tts: str = Field(
        DEFAULT_ENGINES["tts"], description="text to speech (`--tts`), e.g. piper (the bundled "
        "voice) or piper:/path/to/voice.onnx",
    )
    vad: str = Field(
        DEFAULT_ENGINES["vad"], description="voice activity detection (`--vad`): silero, or "
        "energy (loudness alone, e.g. energy:threshold_db=-35)",
    )
    end_of_turn: str = Field(
        DEFAULT_ENGINES["end_of_turn"], description="end-of-turn model (`--end-of-turn`): "
        "smart-turn judges each short pause (complete: the turn ends at once; else it waits "
        "up to max_end_of_turn_silence); none: the silence alone",
    )
    end_of_turn_silence: float = Field(0.6, gt=0, le=5, description="silence (s) ending a turn")
    max_end_of_turn_silence: float = Field(  # the model decides at a 0.2 s pause
        1.6, gt=0.2, le=10, description="with an end-of-turn model: silence (s) ending a turn it "
        "judged incomplete",
    )
    resume_grace: float = Field(
        1.0, ge=0, le=3, description="speech resuming within this silence (s) after a turn "
        "ended, before any of its reply was heard, takes the turn back and makes one turn of "
        "it all (0: never)",
    )
    # 0 by eot_session.py on its tune half (Dec 4): with every turn open to a continuation
    # for continue_within (TurnDetection.continue_complete), holding a complete statement
    # 0.8 s split no fewer paused utterances (0 of 128 either way) and answered statements
    # 864 -> 286 ms (median, last word -> first reply sample, virtual time).
    complete_silence: float = Field(
        0.0, ge=0, le=10, description="with an end-of-turn model: silence (s) ending a turn it "
        "judged complete whose words do not close it (not a closed answer such as 'No, "
        "thanks.', not a question); speech before then goes on in the turn (0: at once)",
    )
    min_barge_in: float = Field(0.3, ge=0, le=5, description="speech (s) that interrupts a reply")
    speculative_replies: bool = Field(
        True, description="answer in the user's pause, spoken once the turn is confirmed"
    )

    @model_validator(mode="before")
    @classmethod
    def _retired(cls, data: Any) -> Any:
        if isinstance(data, Mapping):
            for old, (new, form) in cls.RETIRED.items():
                if old in data:
                    raise ValueError(f"{old} is replaced by {new}: give {new}="
                                     f"{form.format(str(data[old]).strip())!r}")
        return data

    @field_validator("stt", "tts", "vad", "end_of_turn")
    @classmethod
    def _check_engine(cls, value: str, info: ValidationInfo) -> str:
        kind: EngineKind = info.field_name  # type: ignore[assignment]
        try:
            parse_engine_spec(value, kind)
        except EngineSpecError as exc:
            raise ValueError(exc.reason) from None
        return value

    def engine(self, kind: EngineKind) -> EngineSpec:
        """The engine of ``kind`` these settings choose, read
        (:func:`voxflow.engine_spec.parse_engine_spec`)."""
        spec: str = getattr(self, kind)
        return parse_engine_spec(spec, kind)

    @property
    def judges_end_of_turn(self) -> bool:
        """Whether an end-of-turn model judges the pauses (``end_of_turn`` is not
        ``none``)."""
        return self.engine("end_of_turn").name != NO_ENGINE

    @model_validator(mode="after")
    def _check_turn_taking(self) -> VoiceSection:
        if self.judges_end_of_turn and self.complete_silence > self.max_end_of_turn_silence:
            raise ValueError(
                f"VOXFLOW_COMPLETE_SILENCE ({self.complete_silence}) is longer than "
                f"VOXFLOW_MAX_END_OF_TURN_SILENCE ({self.max_end_of_turn_silence}): a turn "
                "judged complete cannot wait longer than one judged incomplete; lower "
                "VOXFLOW_COMPLETE_SILENCE or raise VOXFLOW_MAX_END_OF_TURN_SILENCE")
        return self
