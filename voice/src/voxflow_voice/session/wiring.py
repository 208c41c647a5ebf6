"""The voice side of the one assistant wiring (:mod:`voxflow.wiring`): a
:class:`~voxflow_voice.session.VoiceSession` over an :class:`~voxflow.wiring.AssistantWiring`.

Every voice entry point (the demo, ``chat --voice``, ``serve``, ``run_call`` given a flow)
builds its session here, so each gets the same floor, jobs, announcer and history; a
stored session's floor, held by a process that died, was already taken over by the
``AssistantWiring`` (whatever the entry point).
"""

from __future__ import annotations

from collections.abc import Callable

from voxflow.wiring import AssistantWiring

from ..engines import VoiceEngines
from ..events import SessionEvent
from ..transport import AudioTransport
from .voice_session import VoiceSession, VoiceSettings

__all__ = ["assistant_session"]


def assistant_session(
    wiring: AssistantWiring,
    transport: AudioTransport,
    engines: VoiceEngines,
    *,
    settings: VoiceSettings | None = None,
    on_event: Callable[[SessionEvent], None] | None = None,
) -> VoiceSession:
    """A voice session for ``wiring``'s call: its turns, reply queue, jobs, announcer and
    clock, with job updates forwarded to the session (announced when the floor is free).
    Sessions of one wiring run one after the other (``chat --voice`` reconnects): each
    reopens the floor the previous one closed.

    Raises:
        TypeError: ``wiring`` is not an :class:`~voxflow.wiring.AssistantWiring`.
    """
    if not isinstance(wiring, AssistantWiring):
        raise TypeError(f"wiring must be an AssistantWiring, got {type(wiring).__name__}")
    if wiring.replies is not None:
        wiring.replies.reopen()  # a previous session of this conversation closed it
    session = VoiceSession(
        wiring.turns, transport, engines, settings=settings, clock=wiring.clock,
        replies=wiring.replies, jobs=wiring.jobs, announcer=wiring.announcer,
        on_event=on_event,
    )
    wiring.subscribe(session.on_job_update)
    return session
