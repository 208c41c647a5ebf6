"""The local sound card: microphone in, speakers out (PortAudio), and ``chat --voice``.

:mod:`.device` is the transport (:class:`LocalAudio`), :mod:`.backend` the PortAudio
boundary it talks to (sounddevice is imported only when a stream opens), and :mod:`.chat`
the ``voxflow chat --voice`` command over it.
"""

from .device import (
    PORTAUDIO_INSTALL,
    AudioStream,
    LocalAudio,
    LocalAudioSettings,
    LocalAudioStatistics,
    LocalAudioStatus,
    SoundDeviceBackend,
    StreamBackend,
    StreamCallback,
    StreamKind,
    load_sounddevice,
)

__all__ = [
    "PORTAUDIO_INSTALL",
    "AudioStream",
    "LocalAudio",
    "LocalAudioSettings",
    "LocalAudioStatistics",
    "LocalAudioStatus",
    "SoundDeviceBackend",
    "StreamBackend",
    "StreamCallback",
    "StreamKind",
    "load_sounddevice",
]
