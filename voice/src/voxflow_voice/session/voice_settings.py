"""How a voice session takes turns and speaks (:class:`VoiceSettings`), and the settings
a command's :class:`~voxflow.settings.Settings` (``VOXFLOW_*``) ask for."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from voxflow.settings import Settings

from ..listen.barge_in import BargeInSettings
from ..listen.echo import EchoGateSettings
from ..listen.turn_detection import TurnDetection
from ..settings import VoiceSection
from ..speak.segmenter import SegmenterSettings

__all__ = ["DEFAULT_VOICE_SETTINGS", "VoiceSettings"]


class VoiceSettings(BaseModel):
    """How a voice session takes turns and speaks."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    turn_detection: TurnDetection = Field(default_factory=TurnDetection)
    interruptions: bool = Field(True, description="user speech may interrupt replies")
    segmenter: SegmenterSettings = Field(default_factory=SegmenterSettings)
    announcements: bool = Field(True, description="speak completed jobs when the floor is free")
    echo_gate: bool = Field(
        True, description="keep the assistant's own voice (speakers) from counting as the user"
    )  # off for headphones; see voxflow_voice.listen.echo
    echo: EchoGateSettings = Field(default_factory=EchoGateSettings)
    speculative_replies: bool = Field(
        True, description="answer in the user's pause; speak only once the turn is confirmed"
    )  # see voxflow_voice.speak.speculation (off for flows whose turns act on the world directly)
    stt_warm_up: bool = Field(False, description="a dummy STT run at each speech onset")
    synthesis_ahead: float = Field(
        0.0, ge=0, le=60, description="seconds of a reply's audio synthesized ahead of "
        "playback (later sentences are ready before playout needs them); 0: each sentence "
        "once the one before was handed over",
    )
    barge_in: BargeInSettings = Field(
        default_factory=BargeInSettings,
        description="pause, confirm, then fence or resume; backchannel policy",
    )  # see voxflow_voice.listen.barge_in

    @classmethod
    def from_settings(cls, settings: Settings, **overrides: Any) -> VoiceSettings:
        """The voice settings a command's :class:`~voxflow.settings.Settings` ask for.

        Turn taking comes from its :class:`~voxflow_voice.settings.VoiceSection`:
        ``[max_]end_of_turn_silence``, ``min_barge_in``,
        ``resume_grace`` and (with an ``end_of_turn`` model) ``complete_silence``, plus
        ``speculative_replies``; every other field is :class:`VoiceSettings`' own default,
        so ``from_settings(Settings())`` is ``VoiceSettings()``. ``overrides``
        (``echo_gate=False``, ...) then replace.

        Raises:
            TypeError: ``settings`` is not a :class:`~voxflow.settings.Settings`.
            pydantic.ValidationError: an override is unknown or out of range.
        """
        if not isinstance(settings, Settings):
            raise TypeError(f"settings must be voxflow Settings, got {type(settings).__name__}")
        voice = settings.section(VoiceSection)
        judged = voice.judges_end_of_turn
        turn_detection = TurnDetection(
            end_of_turn_silence=voice.end_of_turn_silence, min_barge_in=voice.min_barge_in,
            max_end_of_turn_silence=voice.max_end_of_turn_silence,
            complete_silence=voice.complete_silence * judged,
            resume_grace=voice.resume_grace)
        values: dict[str, Any] = {"turn_detection": turn_detection,
                                  "speculative_replies": voice.speculative_replies}
        return cls.model_validate({**values, **overrides})

    @classmethod
    def from_environment(
        cls, environ: Mapping[str, str] | None = None, **overrides: Any
    ) -> VoiceSettings:
        """The voice settings the ``VOXFLOW_*`` variables ask for (``os.environ`` if
        ``environ`` is None): :meth:`from_settings` of :meth:`Settings.from_env
        <voxflow.settings.Settings.from_env>`. Every entry point not given settings takes
        these: ``run_call``, the pytest plugin's fixtures, ``voxflow demo``, ``chat --voice``,
        ``serve`` and its call workers, ``phone``; the end-of-turn engine comes from the same
        variables (:meth:`VoiceEngines.from_environment
        <voxflow_voice.engines.VoiceEngines.from_environment>`).

        Raises:
            voxflow.settings.SettingsError: a variable's value is invalid.
            pydantic.ValidationError: an override is unknown or out of range.
        """
        return cls.from_settings(Settings.from_env(environ), **overrides)


DEFAULT_VOICE_SETTINGS = VoiceSettings()
