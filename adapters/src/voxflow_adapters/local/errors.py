"""The local audio devices' errors, on voxflow's tree (:mod:`voxflow.errors`)::

    VoxflowError
    + AdapterBrokenError         device went away; original error in __cause__
    + AudioBackendError          PortAudio missing; .install names the fix (also ImportError)
    + AudioDeviceError           no/unknown audio device, or it refused the settings (LookupError)
"""

from __future__ import annotations

from voxflow.errors import VoxflowError

__all__ = ["AdapterBrokenError", "AudioBackendError", "AudioDeviceError"]


class AdapterBrokenError(VoxflowError):
    """The device or peer behind an adapter went away; the cause is in ``__cause__``."""


class AudioBackendError(VoxflowError, ImportError):
    """The native audio library is missing (e.g. PortAudio for sounddevice).

    Attributes:
        install: the command that fixes it, e.g. ``apt-get install libportaudio2``.
    """

    def __init__(self, message: str, *, install: str) -> None:
        super().__init__(message)
        self.install = install


class AudioDeviceError(VoxflowError, LookupError):
    """No audio device, an unknown one, or one that refused the stream settings.

    Attributes:
        device: the device asked for (index or name), None for the default one.
        kind: ``"input"`` or ``"output"``.
    """

    def __init__(self, message: str, *, device: int | str | None, kind: str) -> None:
        super().__init__(message)
        self.device = device
        self.kind = kind
