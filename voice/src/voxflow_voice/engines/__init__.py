"""The engines a voice session needs, loaded once per process and shared.

:class:`VoiceEngines` bundles speech-to-text, text-to-speech, a factory of per-session
voice activity detectors (a VAD keeps recurrent state, so each session gets its own; the
ONNX model under it is shared) and, optionally, the end-of-turn model (stateless, one for
every call). Each is chosen by name and options (``whisper:base``): installed packages
register them as entry points (:mod:`voxflow_voice.engines.registry`), voxflow-voice its
own (``whisper``, ``piper``, ``silero``, ``energy``, ``smart-turn``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from voxflow.engine_spec import DEFAULT_ENGINES, NO_ENGINE, EngineKind, parse_engine_spec
from voxflow.ids import DeliveryId
from voxflow.settings import Settings

from ..audio import AudioChunk, ReplyChunk
from ..scheduler import ModelScheduler
from ..settings import VoiceSection
from .end_of_turn import EndOfTurnModel
from .registry import (
    ChosenEngine,
    EngineContext,
    EngineFactory,
    InstalledEngine,
    choose_engine,
    installed_engines,
)
from .stt import SttSettings, Transcript
from .tts import PiperOptions, TtsSettings
from .vad import VoiceActivityDetector

__all__ = [
    "ChosenEngine",
    "EngineContext",
    "EngineFactory",
    "InstalledEngine",
    "SpeechToText",
    "TextToSpeech",
    "VoiceEngines",
    "choose_engine",
    "installed_engines",
]


class SpeechToText(Protocol):
    """What the session needs of an STT engine."""

    async def transcribe(self, audio: AudioChunk) -> Transcript | None:
        """The words of one 16 kHz utterance, or None when it holds none."""
        ...


class TextToSpeech(Protocol):
    """What the session needs of a TTS engine."""

    @property
    def sample_rate(self) -> int:
        """Output rate."""
        ...

    def stream(
        self, text: str, *, delivery_id: DeliveryId, segment_id: int
    ) -> AsyncIterator[ReplyChunk]:
        """The audio of ``text``, born with the identity of the reply it is part of."""
        ...

    def synthesize(self, text: str) -> Iterator[Any]:
        """Blocking synthesis, sentence by sentence (used to render scripted speech)."""
        ...


@dataclass(frozen=True, slots=True)
class VoiceEngines:
    """STT, TTS and a VAD factory for voice sessions.

    Attributes:
        stt: the speech-to-text engine.
        tts: the text-to-speech engine.
        make_vad: builds one fresh detector per session.
        end_of_turn: judges the user's pauses (:mod:`voxflow_voice.engines.end_of_turn`); the
            silence timer alone if ``None``.
        scheduler: the :class:`~voxflow_voice.scheduler.ModelScheduler` running ``stt``
            and ``tts`` work, deadline first (for its statistics); ``None`` when they run
            first come, first served on the default executor.
    """

    stt: SpeechToText
    tts: TextToSpeech
    make_vad: Callable[[], VoiceActivityDetector]
    end_of_turn: EndOfTurnModel | None = None
    scheduler: ModelScheduler | None = None

    @classmethod
    def load(
        cls,
        *,
        stt: str | SttSettings | None = None,
        tts: str | TtsSettings | None = None,
        vad: str | None = None,
        end_of_turn: str | None = None,
        deterministic: bool = False,
        scheduling: bool = False,
        loading: Callable[[EngineKind, ChosenEngine[Any]], None] | None = None,
    ) -> VoiceEngines:
        """Load the engines the specs name (blocking: call from a thread or before the loop).

        Every spec is read and its engine found, its options checked, before any model
        loads: a bad one fails at once, whichever it is.

        Args:
            stt: a speech-to-text spec (``whisper:base``; default ``whisper:tiny.en``), or
                the :class:`~voxflow_voice.engines.stt.SttSettings` of ``whisper``.
            tts: a text-to-speech spec (``piper:/voices/x.onnx``; default ``piper``, the
                bundled voice), or the :class:`~voxflow_voice.engines.tts.TtsSettings` of
                ``piper``.
            vad: a voice-activity spec: ``silero`` (default) or ``energy``.
            end_of_turn: ``smart-turn`` (default: Smart Turn v3.2 and the pause's words) or
                another end-of-turn engine; ``none``: the silence timer alone.
            deterministic: synthesize without sampling noise unless the TTS options ask
                for it (Piper: :data:`~voxflow_voice.engines.tts.DETERMINISTIC_TTS_SETTINGS`).
            scheduling: run STT and TTS on one deadline-aware
                :class:`~voxflow_voice.scheduler.ModelScheduler` (a worker per core and
                an urgent lane); ``False`` (the default: ``benchmarks/capacity.py`` found
                it no better at 12 and 16 calls on an idle 2-core machine): a
                default-executor thread per job.
            loading: called with each engine's kind and choice before it loads (a progress
                display).

        Raises:
            voxflow.errors.EngineError: a spec is malformed, names no installed engine,
                or gives options it does not take (each names the fix).
            .errors.ModelNotFoundError: a model package is missing (the message
                names the package to install).
        """
        chosen: dict[EngineKind, ChosenEngine[Any]] = {
            "stt": _choose("stt", stt, SttSettings, "whisper"),
            "tts": _choose("tts", tts, TtsSettings, "piper"),
            "vad": _choose("vad", vad),
        }
        judge_spec = parse_engine_spec(
            DEFAULT_ENGINES["end_of_turn"] if end_of_turn is None else end_of_turn,
            "end_of_turn")
        if judge_spec.name != NO_ENGINE:
            chosen["end_of_turn"] = choose_engine("end_of_turn", judge_spec)
        context = EngineContext(ModelScheduler() if scheduling else None, deterministic)
        built: dict[EngineKind, Any] = {}
        for kind in ("end_of_turn", "stt", "tts", "vad"):  # a missing extra fails first
            if kind in chosen:
                if loading is not None:
                    loading(kind, chosen[kind])
                built[kind] = chosen[kind].create(context)  # (the VAD's shared model too)
        vad_choice = chosen["vad"]

        def make_vad() -> VoiceActivityDetector:
            detector: VoiceActivityDetector = vad_choice.create(context)
            return detector

        return cls(stt=built["stt"], tts=built["tts"], make_vad=make_vad,
                   end_of_turn=built.get("end_of_turn"), scheduler=context.scheduler)

    @classmethod
    def from_settings(
        cls, settings: Settings, *, deterministic: bool = False,
        loading: Callable[[EngineKind, ChosenEngine[Any]], None] | None = None,
    ) -> VoiceEngines:
        """Load the engines a command's :class:`~voxflow.settings.Settings` name (blocking):
        its :class:`~voxflow_voice.settings.VoiceSection`'s ``stt``, ``tts``, ``vad`` and
        ``end_of_turn`` (``loading``: as :meth:`load`).

        Raises:
            TypeError: ``settings`` is not a :class:`~voxflow.settings.Settings`.
            voxflow.errors.EngineError, .errors.ModelNotFoundError: as :meth:`load`.
        """
        if not isinstance(settings, Settings):
            raise TypeError(f"settings must be voxflow Settings, got {type(settings).__name__}")
        voice = settings.section(VoiceSection)
        return cls.load(stt=voice.stt, tts=voice.tts, vad=voice.vad,
                        end_of_turn=voice.end_of_turn, deterministic=deterministic,
                        loading=loading)

    @classmethod
    def from_environment(
        cls, environ: Mapping[str, str] | None = None, *, deterministic: bool = False,
        loading: Callable[[EngineKind, ChosenEngine[Any]], None] | None = None,
    ) -> VoiceEngines:
        """Load the engines the ``VOXFLOW_*`` variables name (``os.environ`` if ``environ``
        is None; blocking): :meth:`from_settings` of :meth:`Settings.from_env
        <voxflow.settings.Settings.from_env>`, what every entry point not given engines
        loads (the pytest plugin's ``voice_engines``, ``serve``).

        Raises:
            voxflow.settings.SettingsError: a variable's value is invalid.
            voxflow.errors.EngineError, .errors.ModelNotFoundError: as :meth:`load`.
        """
        return cls.from_settings(Settings.from_env(environ), deterministic=deterministic,
                                 loading=loading)


def _choose(kind: EngineKind, given: object, settings: type[Any] | None = None,
            name: str = "") -> ChosenEngine[Any]:
    """The engine ``given`` chooses: a spec, ``None`` (the default), or the settings of the
    built-in engine ``name`` (``SttSettings`` → ``whisper``)."""
    if given is None:
        return choose_engine(kind, DEFAULT_ENGINES[kind])
    if isinstance(given, str):
        return choose_engine(kind, given)
    if settings is not None and isinstance(given, settings):
        if kind == "tts":  # every field set: deterministic leaves them as given
            given = PiperOptions.model_validate(given.model_dump())
        return choose_engine(kind, name, options=given)
    raise TypeError(f"{kind} must be a spec such as {DEFAULT_ENGINES[kind]!r}"
                    + (f" or {settings.__name__}" if settings else "")
                    + f", got {type(given).__name__}")
