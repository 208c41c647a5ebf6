"""The engines a voice session needs, loaded once per process and shared.

:class:`VoiceEngines` bundles speech-to-text, text-to-speech, a factory of per-session
voice activity detectors (a VAD keeps recurrent state, so each session gets its own; the
ONNX model under it is shared) and, optionally, the end-of-turn model (stateless, one for
every call). Each is chosen by name and options (``whisper:base``): installed packages
register them as entry points (:mod:`voxflow_voice.engines.registry`), voxflow-voice its
own (``whisper``, ``piper``, ``silero``, ``energy``, ``smart-turn``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import FunctionType
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

from voxflow.engine_spec import (
    DEFAULT_ENGINES,
    ENGINE_LABELS,
    NO_ENGINE,
    EngineKind,
    parse_engine_spec,
)
from voxflow.ids import DeliveryId
from voxflow.settings import Settings

from ..audio import STT_SAMPLE_RATE, AudioChunk, ReplyChunk, WordTiming, resample
from ..scheduler import ModelScheduler
from ..settings import VoiceSection
from .end_of_turn import EndOfTurnModel
from .errors import EngineContractError, EngineWarmUpError
from .rates import WARM_UP_TEXT, ModelRates, WarmUpRates
from .registry import (
    ChosenEngine,
    EngineContext,
    EngineFactory,
    InstalledEngine,
    check_spoken,
    choose_engine,
    installed_engines,
    installed_from,
)
from .stt import SttSettings, Transcript
from .tts import PiperOptions, PiperTts, TtsSettings
from .vad import VadStream, VoiceActivityDetector

__all__ = [
    "ChosenEngine",
    "EngineContext",
    "EngineFactory",
    "InstalledEngine",
    "ModelRates",
    "SpeechToText",
    "SpokenSentence",
    "TextToSpeech",
    "VoiceEngines",
    "WarmUpRates",
    "choose_engine",
    "installed_engines",
]


class SpeechToText(Protocol):
    """What the session needs of an STT engine."""

    async def transcribe(self, audio: AudioChunk) -> Transcript | None:
        """The words of one 16 kHz utterance, or None when it holds none."""
        ...


class SpokenSentence(Protocol):
    """One sentence of :meth:`TextToSpeech.synthesize` (Piper's
    :class:`~voxflow_voice.engines.tts.SynthesizedSentence`)."""

    @property
    def samples(self) -> NDArray[np.float32]:
        """Float mono audio in [-1, 1] at the engine's ``sample_rate``."""
        ...

    @property
    def words(self) -> Sequence[WordTiming]:
        """Its words' timings within ``samples`` (empty without alignments)."""
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

    def synthesize(self, text: str) -> Iterator[SpokenSentence]:
        """Blocking synthesis, sentence by sentence (used to render scripted speech and
        by :meth:`VoiceEngines.warm_up`)."""
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
        rates: the models' real-time factors: the warm-up's (:meth:`warm_up`) and the
            recent jobs' (the built-in engines record theirs;
            :mod:`~voxflow_voice.engines.rates`).
    """

    stt: SpeechToText
    tts: TextToSpeech
    make_vad: Callable[[], VoiceActivityDetector]
    end_of_turn: EndOfTurnModel | None = None
    scheduler: ModelScheduler | None = None
    rates: ModelRates = field(default_factory=ModelRates)

    async def warm_up(self) -> WarmUpRates:
        """Run each model once on real speech and measure its CPU real-time factor on
        this machine (:mod:`~voxflow_voice.engines.rates`: 0.71 s of CPU with the
        default models), kept as ``rates.warmed_up``; every entry point runs it once the
        engines are loaded, before the first call (it also allocates what a model's first
        run does).

        The TTS says :data:`~voxflow_voice.engines.rates.WARM_UP_TEXT` (its first, short
        sentence untimed; Piper bypasses its speech cache, which could hold the text from
        an earlier run), a fresh VAD hears the timed sentence 20 ms at a time (a first
        frame untimed), the STT decodes 1 s of silence (untimed), then the sentence.

        Raises:
            EngineWarmUpError: an engine's warm-up step raised (the error its cause), or
                the TTS said nothing of the warm-up text (it does not work: better known
                before the first call); one line naming the engine and the fix.
        """
        begun = time.process_time()
        with self._warming("tts", self.tts):
            speech, tts_cpu = await asyncio.to_thread(self._say)
        if speech.size == 0:
            raise self._failed("tts", self.tts, f"said nothing of the warm-up text "
                               f"{WARM_UP_TEXT!r}: it does not work here")
        said = resample(speech, self.tts.sample_rate, STT_SAMPLE_RATE).astype(np.float32)
        audio = said.size / STT_SAMPLE_RATE
        with self._warming("vad", self.make_vad):
            vad_cpu = await asyncio.to_thread(self._hear, said)
        with self._warming("stt", self.stt):
            await self.stt.transcribe(AudioChunk.from_float(
                np.zeros(STT_SAMPLE_RATE, np.float32), STT_SAMPLE_RATE))  # allocates
            cpu = time.process_time()
            await self.stt.transcribe(AudioChunk.from_float(said * 0.5, STT_SAMPLE_RATE))
            stt_cpu = time.process_time() - cpu  # (words or none: the decode ran)
        rates = WarmUpRates(
            stt=stt_cpu / audio, tts=tts_cpu / (speech.size / self.tts.sample_rate),
            vad=vad_cpu / audio, audio_seconds=audio, cpu_seconds=time.process_time() - begun)
        self.rates.warmed_up = rates
        return rates

    @contextmanager
    def _warming(self, kind: EngineKind, engine: object) -> Iterator[None]:
        """Turns an exception of ``engine``'s warm-up step into :class:`EngineWarmUpError`
        (``from`` it); an ``EngineWarmUpError`` passes as it is."""
        try:
            yield
        except EngineWarmUpError:
            raise
        except EngineContractError as exc:  # (names the plug-in, what it yielded, the fix)
            raise EngineWarmUpError(f"the {ENGINE_LABELS[kind]} engine {exc.reason}",
                                    kind=kind, reason=exc.reason) from exc
        except Exception as exc:
            first = (str(exc).strip().splitlines() or [""])[0]
            raise self._failed(kind, engine, f"failed its warm-up run "
                               f"({type(exc).__name__}{': ' + first if first else ''})") from exc

    @staticmethod
    def _failed(kind: EngineKind, engine: object, what: str) -> EngineWarmUpError:
        """The warm-up error of ``engine`` (of ``kind``): one line, naming it and the fix."""
        installed = installed_from(engine)  # (another package's engine, where known)
        name, fix = ((installed.described, installed.fix) if installed is not None
                     else (engine.__qualname__ if isinstance(engine, type | FunctionType)
                           else type(engine).__name__, "reinstall its package"))
        option = kind.replace("_", "-")
        reason = (f"{name} {what}; check its {'voice' if kind == 'tts' else 'model'} and "
                  f"options (--{option}, "
                  f"VOXFLOW_{kind.upper()}; voxflow doctor lists the engines installed) "
                  f"or {fix}")
        return EngineWarmUpError(f"the {ENGINE_LABELS[kind]} engine {reason}", kind=kind,
                                 reason=reason)

    def _say(self) -> tuple[NDArray[np.float32], float]:
        """The warm-up's timed sentences (float samples at the TTS's rate) and their CPU:
        those after the first (untimed: the first run allocates), or, from an engine that
        says the whole text as one sentence, all of a second run.

        Raises:
            EngineContractError: the first sentence is no :class:`SpokenSentence` (it
                lacks ``samples`` or ``words``): checked here for an engine given
                directly, by its wrapper for an installed plug-in's (once either way);
                :meth:`warm_up` turns it into its :class:`EngineWarmUpError`.
        """
        sentences = self._sentences()
        first = next(sentences, None)
        if first is None:
            return np.zeros(0, np.float32), 0.0
        if installed_from(self.tts) is None:  # (a plug-in's: checked as it was yielded)
            check_spoken(first, type(self.tts).__name__, "its package")
        cpu = time.process_time()
        parts = [np.asarray(s.samples, np.float32).reshape(-1) for s in sentences]
        if not parts:  # (the first was the only one: time the whole text again)
            cpu = time.process_time()
            parts = [np.asarray(s.samples, np.float32).reshape(-1) for s in self._sentences()]
        used = time.process_time() - cpu
        return (np.concatenate(parts) if parts else np.zeros(0, np.float32)), used

    def _sentences(self) -> Iterator[SpokenSentence]:
        """The TTS's sentences of the warm-up text. Piper's speech cache is bypassed
        (``cached=False``: the model's own work); the protocol's ``synthesize`` takes the
        text alone, as every other engine's does."""
        if isinstance(self.tts, PiperTts):
            return self.tts.synthesize(WARM_UP_TEXT, cached=False)
        return self.tts.synthesize(WARM_UP_TEXT)

    def _hear(self, said: NDArray[np.float32]) -> float:
        """A fresh detector's CPU over ``said``, pushed 20 ms at a time (as a transport
        delivers it), a first frame untimed."""
        stream = VadStream(self.make_vad())
        stream.push(np.zeros(stream.detector.frame_samples, np.float32))
        cpu = time.process_time()
        step = STT_SAMPLE_RATE // 50
        for start in range(0, said.size, step):
            stream.push(said[start:start + step])
        return time.process_time() - cpu

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
        rates = ModelRates()
        context = EngineContext(ModelScheduler() if scheduling else None, deterministic, rates)
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
                   end_of_turn=built.get("end_of_turn"), scheduler=context.scheduler,
                   rates=rates)

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
