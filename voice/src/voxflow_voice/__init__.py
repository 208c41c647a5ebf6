"""voxflow voice pipeline: audio types, VAD, turn detection, STT, TTS, segmenter.

Heavy libraries (faster-whisper, piper, onnxruntime) load only when a model is first
used, and each name below loads its module when it is first used (``__getattr__``), so
importing this package is cheap: ``voxflow --help`` reads the voice settings
(:mod:`voxflow_voice.settings`) without the pipeline, or numpy.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the names, for type checkers; loaded on first use below
    from .audio import STT_SAMPLE_RATE as STT_SAMPLE_RATE
    from .audio import AudioChunk as AudioChunk
    from .audio import InputConverter as InputConverter
    from .audio import ReplyChunk as ReplyChunk
    from .audio import Resampler as Resampler
    from .audio import WordTiming as WordTiming
    from .audio import float_to_pcm16 as float_to_pcm16
    from .audio import pcm16_to_float as pcm16_to_float
    from .audio import read_wav as read_wav
    from .audio import resample as resample
    from .audio import to_mono as to_mono
    from .audio import write_wav as write_wav
    from .engines import VoiceEngines as VoiceEngines
    from .engines.end_of_turn import EndOfTurnModel as EndOfTurnModel
    from .engines.end_of_turn import EndOfTurnVerdict as EndOfTurnVerdict
    from .engines.end_of_turn import SmartTurn as SmartTurn
    from .engines.end_of_turn import words_verdict as words_verdict
    from .engines.models import BASE_PART_MODULES as BASE_PART_MODULES
    from .engines.models import DEFAULT_PIPER_MODULE as DEFAULT_PIPER_MODULE
    from .engines.models import DEFAULT_TINY_EN_MODULE as DEFAULT_TINY_EN_MODULE
    from .engines.models import WHISPER_BASE_SIZE as WHISPER_BASE_SIZE
    from .engines.models import assemble_whisper_base as assemble_whisper_base
    from .engines.models import default_cache_dir as default_cache_dir
    from .engines.models import find_piper_voice as find_piper_voice
    from .engines.models import find_silero_vad as find_silero_vad
    from .engines.models import find_smart_turn as find_smart_turn
    from .engines.models import find_whisper_model as find_whisper_model
    from .engines.models import load_piper_voice as load_piper_voice
    from .engines.models import load_silero_session as load_silero_session
    from .engines.models import load_smart_turn_session as load_smart_turn_session
    from .engines.models import load_whisper_model as load_whisper_model
    from .engines.models import loaded_models as loaded_models
    from .engines.models import unload_models as unload_models
    from .engines.stt import DEFAULT_STT_SETTINGS as DEFAULT_STT_SETTINGS
    from .engines.stt import KNOWN_HALLUCINATIONS as KNOWN_HALLUCINATIONS
    from .engines.stt import SttSettings as SttSettings
    from .engines.stt import Transcript as Transcript
    from .engines.stt import WhisperStt as WhisperStt
    from .engines.tts import DEFAULT_TTS_SETTINGS as DEFAULT_TTS_SETTINGS
    from .engines.tts import DETERMINISTIC_TTS_SETTINGS as DETERMINISTIC_TTS_SETTINGS
    from .engines.tts import PiperTts as PiperTts
    from .engines.tts import SynthesizedSentence as SynthesizedSentence
    from .engines.tts import TtsSettings as TtsSettings
    from .engines.tts import TtsStatistics as TtsStatistics
    from .engines.vad import FRAME_SAMPLES as FRAME_SAMPLES
    from .engines.vad import EnergyVad as EnergyVad
    from .engines.vad import SileroVad as SileroVad
    from .engines.vad import VadStream as VadStream
    from .engines.vad import VoiceActivityDetector as VoiceActivityDetector
    from .listen.barge_in import BACKCHANNEL_WORDS as BACKCHANNEL_WORDS
    from .listen.barge_in import DEFAULT_BARGE_IN as DEFAULT_BARGE_IN
    from .listen.barge_in import BargeInArbiter as BargeInArbiter
    from .listen.barge_in import BargeInPolicy as BargeInPolicy
    from .listen.barge_in import BargeInSettings as BargeInSettings
    from .listen.barge_in import classify_overlap as classify_overlap
    from .listen.early_stt import EarlyTranscriber as EarlyTranscriber
    from .listen.early_stt import EarlyTranscriberStatistics as EarlyTranscriberStatistics
    from .listen.early_stt import Transcriber as Transcriber
    from .listen.echo import DEFAULT_ECHO_GATE as DEFAULT_ECHO_GATE
    from .listen.echo import EchoGate as EchoGate
    from .listen.echo import EchoGateSettings as EchoGateSettings
    from .listen.echo import EchoGateStatistics as EchoGateStatistics
    from .listen.hiss import HissBand as HissBand
    from .listen.hiss import HissDetector as HissDetector
    from .listen.input_guard import InputGuard as InputGuard
    from .listen.input_guard import InputStatistics as InputStatistics
    from .listen.turn_detector import DEFAULT_TURN_DETECTION as DEFAULT_TURN_DETECTION
    from .listen.turn_detector import FAST_TURN_DETECTION as FAST_TURN_DETECTION
    from .listen.turn_detector import BargeInDetected as BargeInDetected
    from .listen.turn_detector import SpeechEnded as SpeechEnded
    from .listen.turn_detector import SpeechStarted as SpeechStarted
    from .listen.turn_detector import TurnDetection as TurnDetection
    from .listen.turn_detector import TurnDetector as TurnDetector
    from .listen.turn_detector import TurnDetectorEvent as TurnDetectorEvent
    from .listen.turn_detector import TurnResumed as TurnResumed
    from .listen.turn_detector import UtterancePaused as UtterancePaused
    from .listen.turn_detector import UtteranceReady as UtteranceReady
    from .scheduler import ModelScheduler as ModelScheduler
    from .scheduler import Work as Work
    from .session.metrics import Distribution as Distribution
    from .session.metrics import LatencySummary as LatencySummary
    from .session.metrics import summarize as summarize
    from .session.voice_session import DEFAULT_VOICE_SETTINGS as DEFAULT_VOICE_SETTINGS
    from .session.voice_session import VoiceSession as VoiceSession
    from .session.voice_session import VoiceSettings as VoiceSettings
    from .settings import VoiceSection as VoiceSection
    from .speak.heard import HeardLedger as HeardLedger
    from .speak.heard import HeardReply as HeardReply
    from .speak.playback import Playback as Playback
    from .speak.playback import PlaybackStatistics as PlaybackStatistics
    from .speak.playout import PlayoutQueue as PlayoutQueue
    from .speak.playout import Pulled as Pulled
    from .speak.segmenter import DEFAULT_SEGMENTER_SETTINGS as DEFAULT_SEGMENTER_SETTINGS
    from .speak.segmenter import Segment as Segment
    from .speak.segmenter import SegmenterSettings as SegmenterSettings
    from .speak.segmenter import TextSegmenter as TextSegmenter
    from .speak.segmenter import strip_markdown as strip_markdown
    from .transport import AudioTransport as AudioTransport
    from .transport import ClientObservation as ClientObservation
    from .transport import MuteChanged as MuteChanged
    from .transport import PausableTransport as PausableTransport
    from .transport import PlaybackDrained as PlaybackDrained
    from .transport import PlaybackReceipt as PlaybackReceipt

_WHERE: dict[str, str] = {
    "AudioChunk": "audio",
    "AudioTransport": "transport",
    "BACKCHANNEL_WORDS": "listen.barge_in",
    "BASE_PART_MODULES": "engines.models",
    "BargeInArbiter": "listen.barge_in",
    "BargeInDetected": "listen.turn_detector",
    "BargeInPolicy": "listen.barge_in",
    "BargeInSettings": "listen.barge_in",
    "ClientObservation": "transport",
    "DEFAULT_BARGE_IN": "listen.barge_in",
    "DEFAULT_ECHO_GATE": "listen.echo",
    "DEFAULT_PIPER_MODULE": "engines.models",
    "DEFAULT_SEGMENTER_SETTINGS": "speak.segmenter",
    "DEFAULT_STT_SETTINGS": "engines.stt",
    "DEFAULT_TINY_EN_MODULE": "engines.models",
    "DEFAULT_TTS_SETTINGS": "engines.tts",
    "DEFAULT_TURN_DETECTION": "listen.turn_detector",
    "DEFAULT_VOICE_SETTINGS": "session.voice_session",
    "DETERMINISTIC_TTS_SETTINGS": "engines.tts",
    "Distribution": "session.metrics",
    "EarlyTranscriber": "listen.early_stt",
    "EarlyTranscriberStatistics": "listen.early_stt",
    "EchoGate": "listen.echo",
    "EchoGateSettings": "listen.echo",
    "EchoGateStatistics": "listen.echo",
    "EndOfTurnModel": "engines.end_of_turn",
    "EndOfTurnVerdict": "engines.end_of_turn",
    "EnergyVad": "engines.vad",
    "FAST_TURN_DETECTION": "listen.turn_detector",
    "FRAME_SAMPLES": "engines.vad",
    "HeardLedger": "speak.heard",
    "HeardReply": "speak.heard",
    "HissBand": "listen.hiss",
    "HissDetector": "listen.hiss",
    "InputConverter": "audio",
    "InputGuard": "listen.input_guard",
    "InputStatistics": "listen.input_guard",
    "KNOWN_HALLUCINATIONS": "engines.stt",
    "LatencySummary": "session.metrics",
    "ModelScheduler": "scheduler",
    "MuteChanged": "transport",
    "PausableTransport": "transport",
    "PiperTts": "engines.tts",
    "Playback": "speak.playback",
    "PlaybackDrained": "transport",
    "PlaybackReceipt": "transport",
    "PlaybackStatistics": "speak.playback",
    "PlayoutQueue": "speak.playout",
    "Pulled": "speak.playout",
    "ReplyChunk": "audio",
    "Resampler": "audio",
    "STT_SAMPLE_RATE": "audio",
    "Segment": "speak.segmenter",
    "SegmenterSettings": "speak.segmenter",
    "SileroVad": "engines.vad",
    "SmartTurn": "engines.end_of_turn",
    "SpeechEnded": "listen.turn_detector",
    "SpeechStarted": "listen.turn_detector",
    "SttSettings": "engines.stt",
    "SynthesizedSentence": "engines.tts",
    "TextSegmenter": "speak.segmenter",
    "Transcriber": "listen.early_stt",
    "Transcript": "engines.stt",
    "TtsSettings": "engines.tts",
    "TtsStatistics": "engines.tts",
    "TurnDetection": "listen.turn_detector",
    "TurnDetector": "listen.turn_detector",
    "TurnDetectorEvent": "listen.turn_detector",
    "TurnResumed": "listen.turn_detector",
    "UtterancePaused": "listen.turn_detector",
    "UtteranceReady": "listen.turn_detector",
    "VadStream": "engines.vad",
    "VoiceActivityDetector": "engines.vad",
    "VoiceEngines": "engines",
    "VoiceSection": "settings",
    "VoiceSession": "session.voice_session",
    "VoiceSettings": "session.voice_session",
    "WHISPER_BASE_SIZE": "engines.models",
    "WhisperStt": "engines.stt",
    "WordTiming": "audio",
    "Work": "scheduler",
    "assemble_whisper_base": "engines.models",
    "classify_overlap": "listen.barge_in",
    "default_cache_dir": "engines.models",
    "find_piper_voice": "engines.models",
    "find_silero_vad": "engines.models",
    "find_smart_turn": "engines.models",
    "find_whisper_model": "engines.models",
    "float_to_pcm16": "audio",
    "load_piper_voice": "engines.models",
    "load_silero_session": "engines.models",
    "load_smart_turn_session": "engines.models",
    "load_whisper_model": "engines.models",
    "loaded_models": "engines.models",
    "pcm16_to_float": "audio",
    "read_wav": "audio",
    "resample": "audio",
    "strip_markdown": "speak.segmenter",
    "summarize": "session.metrics",
    "to_mono": "audio",
    "unload_models": "engines.models",
    "words_verdict": "engines.end_of_turn",
    "write_wav": "audio",
}
"""Each public name → the module (under this package) that defines it."""


if not TYPE_CHECKING:  # (type checkers see the imports above; a typo stays an error)

    def __getattr__(name: str) -> Any:
        """A public name (or a sub-package), imported on first use and kept."""
        module = _WHERE.get(name)
        if module is None:
            try:
                value: Any = importlib.import_module(f"{__name__}.{name}")
            except ModuleNotFoundError as exc:
                if exc.name != f"{__name__}.{name}":
                    raise
                raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
        else:
            value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
        globals()[name] = value
        return value


    def __dir__() -> list[str]:
        return sorted({*globals(), *__all__})


__all__ = [
    "BACKCHANNEL_WORDS",
    "BASE_PART_MODULES",
    "DEFAULT_BARGE_IN",
    "DEFAULT_ECHO_GATE",
    "DEFAULT_PIPER_MODULE",
    "DEFAULT_SEGMENTER_SETTINGS",
    "DEFAULT_STT_SETTINGS",
    "DEFAULT_TINY_EN_MODULE",
    "DEFAULT_TTS_SETTINGS",
    "DEFAULT_TURN_DETECTION",
    "DEFAULT_VOICE_SETTINGS",
    "DETERMINISTIC_TTS_SETTINGS",
    "FAST_TURN_DETECTION",
    "FRAME_SAMPLES",
    "KNOWN_HALLUCINATIONS",
    "STT_SAMPLE_RATE",
    "WHISPER_BASE_SIZE",
    "AudioChunk",
    "AudioTransport",
    "BargeInArbiter",
    "BargeInDetected",
    "BargeInPolicy",
    "BargeInSettings",
    "ClientObservation",
    "Distribution",
    "EarlyTranscriber",
    "EarlyTranscriberStatistics",
    "EchoGate",
    "EchoGateSettings",
    "EchoGateStatistics",
    "EndOfTurnModel",
    "EndOfTurnVerdict",
    "EnergyVad",
    "HeardLedger",
    "HeardReply",
    "HissBand",
    "HissDetector",
    "InputConverter",
    "InputGuard",
    "InputStatistics",
    "LatencySummary",
    "ModelScheduler",
    "MuteChanged",
    "PausableTransport",
    "PiperTts",
    "Playback",
    "PlaybackDrained",
    "PlaybackReceipt",
    "PlaybackStatistics",
    "PlayoutQueue",
    "Pulled",
    "ReplyChunk",
    "Resampler",
    "Segment",
    "SegmenterSettings",
    "SileroVad",
    "SmartTurn",
    "SpeechEnded",
    "SpeechStarted",
    "SttSettings",
    "SynthesizedSentence",
    "TextSegmenter",
    "Transcriber",
    "Transcript",
    "TtsSettings",
    "TtsStatistics",
    "TurnDetection",
    "TurnDetector",
    "TurnDetectorEvent",
    "TurnResumed",
    "UtterancePaused",
    "UtteranceReady",
    "VadStream",
    "VoiceActivityDetector",
    "VoiceEngines",
    "VoiceSection",
    "VoiceSession",
    "VoiceSettings",
    "WhisperStt",
    "WordTiming",
    "Work",
    "assemble_whisper_base",
    "classify_overlap",
    "default_cache_dir",
    "find_piper_voice",
    "find_silero_vad",
    "find_smart_turn",
    "find_whisper_model",
    "float_to_pcm16",
    "load_piper_voice",
    "load_silero_session",
    "load_smart_turn_session",
    "load_whisper_model",
    "loaded_models",
    "pcm16_to_float",
    "read_wav",
    "resample",
    "strip_markdown",
    "summarize",
    "to_mono",
    "unload_models",
    "words_verdict",
    "write_wav",
]
