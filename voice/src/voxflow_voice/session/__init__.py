"""The voice session: one call, and the parts it is made of.

:class:`VoiceSession` (:mod:`.voice_session`) runs the call; its parts each own one concern
of it: answering a turn, with the reply on air (:mod:`.answering`), the answers in the
user's pause (:mod:`.speculative_replies`), the user going on with
a turn after its reply began (:mod:`.continuation`), speech over a reply (:mod:`.overlap`),
the floor the client reports (:mod:`.floor`), background announcements (:mod:`.delivery`),
the latency summary (:mod:`.metrics`). :mod:`.wiring` builds a session over the one
assistant wiring every entry point shares. The session listens through
:mod:`voxflow_voice.listen` and speaks through :mod:`voxflow_voice.speak`.
"""

from .delivery import Announcer, default_announcer
from .voice_session import DEFAULT_VOICE_SETTINGS, VoiceSession, VoiceSettings

__all__ = ["DEFAULT_VOICE_SETTINGS", "Announcer", "VoiceSession", "VoiceSettings",
           "default_announcer"]
