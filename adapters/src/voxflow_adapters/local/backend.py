"""The PortAudio side of the local adapter: importing sounddevice, opening streams.

:class:`StreamBackend` is the boundary :class:`~voxflow_adapters.local.LocalAudio` talks
to; :class:`SoundDeviceBackend` implements it on real devices, and tests replace it with
a fake audio driver. ``sounddevice`` is imported only by :func:`load_sounddevice`, so a
machine without PortAudio gets a clear :class:`~.errors.AudioBackendError` (naming
``apt-get install libportaudio2``) when a stream is opened, never an import crash.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any, Literal, Protocol

import numpy as np
from numpy.typing import NDArray

from .errors import AudioBackendError, AudioDeviceError

__all__ = [
    "PORTAUDIO_INSTALL",
    "AudioStream",
    "Device",
    "SoundDeviceBackend",
    "StreamBackend",
    "StreamCallback",
    "StreamKind",
    "load_sounddevice",
]

PORTAUDIO_INSTALL = "apt-get install libportaudio2"
"""The fix when PortAudio is missing (Debian/Ubuntu; ``brew install portaudio`` on macOS)."""

StreamKind = Literal["input", "output"]
StreamCallback = Callable[[NDArray[np.float32], int, Any, Any], None]
"""``(buffer, frames, time_info, status)``, as sounddevice calls it (buffer is (frames, 1))."""
Device = int | str | None


def load_sounddevice() -> ModuleType:
    """Import sounddevice, translating a missing PortAudio into a clear error.

    Raises:
        AudioBackendError: PortAudio (``.install`` names the package) or sounddevice is
            missing.
    """
    try:
        import sounddevice  # imported late: it loads PortAudio at import time
    except OSError as exc:  # the Python package is there, the native library is not
        raise AudioBackendError(
            "the PortAudio library is missing, so the microphone and speakers cannot be "
            f"opened: install it with `{PORTAUDIO_INSTALL}` (macOS: `brew install portaudio`)",
            install=PORTAUDIO_INSTALL,
        ) from exc
    except ImportError as exc:
        raise AudioBackendError(
            "sounddevice is not installed: install it with `pip install 'voxflow[local]'`",
            install="pip install 'voxflow[local]'",
        ) from exc
    module: ModuleType = sounddevice
    return module


class AudioStream(Protocol):
    """What the adapter needs of an open stream (a ``sounddevice`` stream fits)."""

    @property
    def samplerate(self) -> float:
        """The rate the stream runs at."""
        ...

    @property
    def active(self) -> bool:
        """False once the stream stopped (an error, a lost device)."""
        ...

    def start(self) -> None:
        """Start calling back."""
        ...

    def close(self, ignore_errors: bool = True) -> None:
        """Stop at once and release the device."""
        ...


class StreamBackend(Protocol):
    """Opens audio streams; :class:`SoundDeviceBackend` for real devices."""

    def open(
        self, kind: StreamKind, *, device: Device, samplerate: int | None, block: float,
        latency: str | float, callback: StreamCallback,
    ) -> AudioStream:
        """Open (not start) a mono float32 stream; ``samplerate`` None means the device's.

        Raises:
            AudioDeviceError: no such device, or it refused the settings.
        """
        ...

    def refresh(self) -> None:
        """Rescan the devices (before a reopen: a device may have come back)."""
        ...


class SoundDeviceBackend:
    """Streams on real devices through sounddevice (PortAudio)."""

    def __init__(self) -> None:
        self._sd = load_sounddevice()

    def open(
        self, kind: StreamKind, *, device: Device, samplerate: int | None, block: float,
        latency: str | float, callback: StreamCallback,
    ) -> AudioStream:
        """Open a mono float32 stream at the device's rate (or ``samplerate``)."""
        sd = self._sd
        label = "default" if device is None else repr(device)
        info = self._query(kind, device)
        rate = int(samplerate or round(float(info["default_samplerate"])))
        factory = sd.InputStream if kind == "input" else sd.OutputStream
        try:
            stream: AudioStream = factory(
                device=device, samplerate=rate, blocksize=max(1, round(rate * block)),
                channels=1, dtype="float32", latency=latency, callback=callback,
            )
        except (ValueError, sd.PortAudioError) as exc:
            raise AudioDeviceError(
                f"the {kind} device {info.get('name', label)!r} refused {rate} Hz mono ({exc})",
                device=device, kind=kind,
            ) from exc
        return stream

    def describe(self, kind: StreamKind, device: Device) -> str:
        """The device's name and default rate, e.g. ``'USB Mic' (48000 Hz)``.

        Raises:
            AudioDeviceError: there is no such device (or none at all).
        """
        info = self._query(kind, device)
        return f"{info.get('name', '?')!r} ({round(float(info['default_samplerate']))} Hz)"

    def _query(self, kind: StreamKind, device: Device) -> dict[str, Any]:
        sd = self._sd
        label = "default" if device is None else repr(device)
        try:
            info: dict[str, Any] = dict(sd.query_devices(device, kind=kind))
        except (ValueError, sd.PortAudioError) as exc:
            option = "--input-device" if kind == "input" else "--output-device"
            fix = (
                f"pick one that `voxflow doctor` lists with {option}" if device is not None
                else "connect a microphone and speakers, talk from a browser with "
                "`voxflow serve` instead, or try it without a sound card (README: Local "
                "microphone)"
            )
            raise AudioDeviceError(
                f"no {kind} device {label} found ({exc}); {fix}", device=device, kind=kind,
            ) from exc
        return info

    def refresh(self) -> None:
        """Re-initialise PortAudio so that its device list is current."""
        # sounddevice has no public rescan; terminating and initialising PortAudio again
        # is what its documentation suggests for hot-plugged devices.
        self._sd._terminate()
        self._sd._initialize()
