"""The local sound card: microphone in, speakers out (PortAudio), and ``chat --voice``.

:mod:`.device` is the transport (:class:`LocalAudio`), :mod:`.backend` the PortAudio
boundary it talks to (sounddevice is imported only when a stream opens), and :mod:`.chat`
the ``voxflow chat --voice`` command over it.
"""

from .device import *  # noqa: F403  (its public names, listed once: in its __all__)
from .device import __all__ as __all__
