"""voxflow voice pipeline: audio types, VAD, turn detection, STT, TTS, segmenter.

Heavy libraries (faster-whisper, piper, onnxruntime) load only when a model is first
used, so importing this package is cheap.
"""

from __future__ import annotations

from .admission import (
    Admission as Admission,
)
from .admission import (
    AdmissionController as AdmissionController,
)
from .admission import (
    AdmissionSettings as AdmissionSettings,
)
from .admission import (
    Load as Load,
)
from .audio import (
    STT_SAMPLE_RATE as STT_SAMPLE_RATE,
)
from .audio import (
    AudioChunk as AudioChunk,
)
from .audio import (
    InputConverter as InputConverter,
)
from .audio import (
    Resampler as Resampler,
)
from .audio import (
    WordTiming as WordTiming,
)
from .audio import (
    float_to_pcm16 as float_to_pcm16,
)
from .audio import (
    pcm16_to_float as pcm16_to_float,
)
from .audio import (
    read_wav as read_wav,
)
from .audio import (
    resample as resample,
)
from .audio import (
    to_mono as to_mono,
)
from .audio import (
    write_wav as write_wav,
)
from .barge_in import (
    BACKCHANNEL_WORDS as BACKCHANNEL_WORDS,
)
from .barge_in import (
    DEFAULT_BARGE_IN as DEFAULT_BARGE_IN,
)
from .barge_in import (
    BargeInArbiter as BargeInArbiter,
)
from .barge_in import (
    BargeInPolicy as BargeInPolicy,
)
from .barge_in import (
    BargeInSettings as BargeInSettings,
)
from .barge_in import (
    classify_overlap as classify_overlap,
)
from .early_stt import (
    EarlyTranscriber as EarlyTranscriber,
)
from .early_stt import (
    EarlyTranscriberStatistics as EarlyTranscriberStatistics,
)
from .early_stt import (
    Transcriber as Transcriber,
)
from .echo import (
    DEFAULT_ECHO_GATE as DEFAULT_ECHO_GATE,
)
from .echo import (
    EchoGate as EchoGate,
)
from .echo import (
    EchoGateSettings as EchoGateSettings,
)
from .echo import (
    EchoGateStatistics as EchoGateStatistics,
)
from .end_of_turn import (
    EndOfTurnModel as EndOfTurnModel,
)
from .end_of_turn import (
    EndOfTurnVerdict as EndOfTurnVerdict,
)
from .end_of_turn import (
    SmartTurn as SmartTurn,
)
from .end_of_turn import (
    words_verdict as words_verdict,
)
from .engines import (
    VoiceEngines as VoiceEngines,
)
from .heard import (
    HeardLedger as HeardLedger,
)
from .heard import (
    HeardReply as HeardReply,
)
from .hiss import (
    HissDetector as HissDetector,
)
from .input_guard import (
    InputGuard as InputGuard,
)
from .input_guard import (
    InputStatistics as InputStatistics,
)
from .metrics import (
    Distribution as Distribution,
)
from .metrics import (
    LatencySummary as LatencySummary,
)
from .metrics import (
    summarize as summarize,
)
from .models import (
    BASE_PART_MODULES as BASE_PART_MODULES,
)
from .models import (
    DEFAULT_PIPER_MODULE as DEFAULT_PIPER_MODULE,
)
from .models import (
    DEFAULT_TINY_EN_MODULE as DEFAULT_TINY_EN_MODULE,
)
from .models import (
    WHISPER_BASE_SIZE as WHISPER_BASE_SIZE,
)
from .models import (
    assemble_whisper_base as assemble_whisper_base,
)
from .models import (
    default_cache_dir as default_cache_dir,
)
from .models import (
    find_piper_voice as find_piper_voice,
)
from .models import (
    find_silero_vad as find_silero_vad,
)
from .models import (
    find_smart_turn as find_smart_turn,
)
from .models import (
    find_whisper_model as find_whisper_model,
)
from .models import (
    load_piper_voice as load_piper_voice,
)
from .models import (
    load_silero_session as load_silero_session,
)
from .models import (
    load_smart_turn_session as load_smart_turn_session,
)
from .models import (
    load_whisper_model as load_whisper_model,
)
from .models import (
    loaded_models as loaded_models,
)
from .models import (
    unload_models as unload_models,
)
from .playback import (
    Playback as Playback,
)
from .playback import (
    PlaybackStatistics as PlaybackStatistics,
)
from .playout import (
    PlayoutQueue as PlayoutQueue,
)
from .playout import (
    Pulled as Pulled,
)
from .scheduler import (
    ModelScheduler as ModelScheduler,
)
from .scheduler import (
    Work as Work,
)
from .segmenter import (
    DEFAULT_SEGMENTER_SETTINGS as DEFAULT_SEGMENTER_SETTINGS,
)
from .segmenter import (
    Segment as Segment,
)
from .segmenter import (
    SegmenterSettings as SegmenterSettings,
)
from .segmenter import (
    TextSegmenter as TextSegmenter,
)
from .segmenter import (
    strip_markdown as strip_markdown,
)
from .session import (
    DEFAULT_VOICE_SETTINGS as DEFAULT_VOICE_SETTINGS,
)
from .session import (
    VoiceSession as VoiceSession,
)
from .session import (
    VoiceSettings as VoiceSettings,
)
from .stt import (
    DEFAULT_STT_SETTINGS as DEFAULT_STT_SETTINGS,
)
from .stt import (
    KNOWN_HALLUCINATIONS as KNOWN_HALLUCINATIONS,
)
from .stt import (
    SttSettings as SttSettings,
)
from .stt import (
    Transcript as Transcript,
)
from .stt import (
    WhisperStt as WhisperStt,
)
from .transport import (
    AudioTransport as AudioTransport,
)
from .transport import (
    ClientObservation as ClientObservation,
)
from .transport import (
    MuteChanged as MuteChanged,
)
from .transport import (
    PausableTransport as PausableTransport,
)
from .transport import (
    PlaybackDrained as PlaybackDrained,
)
from .transport import (
    PlaybackReceipt as PlaybackReceipt,
)
from .tts import (
    DEFAULT_TTS_SETTINGS as DEFAULT_TTS_SETTINGS,
)
from .tts import (
    DETERMINISTIC_TTS_SETTINGS as DETERMINISTIC_TTS_SETTINGS,
)
from .tts import (
    PiperTts as PiperTts,
)
from .tts import (
    SynthesizedSentence as SynthesizedSentence,
)
from .tts import (
    TtsSettings as TtsSettings,
)
from .tts import (
    TtsStatistics as TtsStatistics,
)
from .turn_detector import (
    DEFAULT_TURN_DETECTION as DEFAULT_TURN_DETECTION,
)
from .turn_detector import (
    FAST_TURN_DETECTION as FAST_TURN_DETECTION,
)
from .turn_detector import (
    BargeInDetected as BargeInDetected,
)
from .turn_detector import (
    SpeechEnded as SpeechEnded,
)
from .turn_detector import (
    SpeechStarted as SpeechStarted,
)
from .turn_detector import (
    TurnDetection as TurnDetection,
)
from .turn_detector import (
    TurnDetector as TurnDetector,
)
from .turn_detector import (
    TurnDetectorEvent as TurnDetectorEvent,
)
from .turn_detector import (
    TurnResumed as TurnResumed,
)
from .turn_detector import (
    UtterancePaused as UtterancePaused,
)
from .turn_detector import (
    UtteranceReady as UtteranceReady,
)
from .vad import (
    FRAME_SAMPLES as FRAME_SAMPLES,
)
from .vad import (
    EnergyVad as EnergyVad,
)
from .vad import (
    SileroVad as SileroVad,
)
from .vad import (
    VadStream as VadStream,
)
from .vad import (
    VoiceActivityDetector as VoiceActivityDetector,
)

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
    "Admission",
    "AdmissionController",
    "AdmissionSettings",
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
    "HissDetector",
    "InputConverter",
    "InputGuard",
    "InputStatistics",
    "LatencySummary",
    "Load",
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
