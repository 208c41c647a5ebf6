"""What one browser call runs: a fresh flow, its TurnRunner (and reply queue, jobs) and a
``VoiceSession`` over the call's transport.

A :data:`CallFactory` is called once per accepted offer. The engines are the server's,
loaded once and shared by every call; everything else (flow state, turns, replies, jobs,
the session) is the call's own and is closed with it.

* :func:`flow_call_factory`: any conversational Flow class, wired by
  :class:`~voxflow.wiring.AssistantWiring` (reply queue, jobs, announcements);
* :func:`assistant_call_factory`: the example assistant, as in ``voxflow demo``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from voxflow_voice.engines import VoiceEngines
from voxflow_voice.events import SessionEvent
from voxflow_voice.session import VoiceSession, VoiceSettings
from voxflow_voice.transport import AudioTransport
from voxflow_voice.wiring import assistant_session

from voxflow.clock import Clock
from voxflow.jobs import JobRunner
from voxflow.settings import Settings
from voxflow.wiring import AssistantWiring

__all__ = [
    "WEBRTC_VOICE_SETTINGS",
    "Call",
    "CallFactory",
    "assistant_call_factory",
    "flow_call_factory",
    "webrtc_voice_settings",
]

EventSink = Callable[[SessionEvent], None]



def webrtc_voice_settings(settings: Settings | None = None) -> VoiceSettings:
    """The voice settings of browser calls: turn taking and speculative replies from
    ``settings`` (``VOXFLOW_*``; defaults if None), the server-side echo gate off.

    The page asks for the microphone with ``echoCancellation`` on, so the browser cancels
    the assistant's voice where it is actually played; the server-side gate would only see
    the send time of each frame, not the browser's playout (network and jitter-buffer
    delay in between).

    Raises:
        TypeError: ``settings`` is not a :class:`~voxflow.settings.Settings`.
    """
    settings = settings if settings is not None else Settings()
    return VoiceSettings.from_settings(settings, echo_gate=False)


WEBRTC_VOICE_SETTINGS = webrtc_voice_settings()
"""Voice settings of browser calls unless a factory is given others (the defaults of
:func:`webrtc_voice_settings`)."""


@dataclass(slots=True)
class Call:
    """One call's session and what must be closed with it.

    Attributes:
        session: the voice session (run it; it returns when the transport's input ends).
        flow: the call's flow instance.
        jobs: the call's JobRunner, if the flow uses background jobs.
    """

    session: VoiceSession
    flow: Any
    jobs: JobRunner | None = None
    _closers: list[Callable[[], Awaitable[None]]] = field(default_factory=list)

    async def aclose(self) -> None:
        """Stop the call's background work (idempotent)."""
        closers, self._closers = self._closers, []
        for close in closers:
            await close()


CallFactory = Callable[[AudioTransport, VoiceEngines, Clock, EventSink], Awaitable[Call]]
"""``(transport, engines, clock, on_event) -> Call``, awaited once per accepted offer."""


def flow_call_factory(
    flow_class: type[Any], *, settings: VoiceSettings | None = None
) -> CallFactory:
    """Calls answered by a fresh ``flow_class()`` each, wired like every entry point
    (:class:`~voxflow.wiring.AssistantWiring`: reply queue, background jobs and
    announcements when its state has them); ``settings``: the voice settings of every
    call, :data:`WEBRTC_VOICE_SETTINGS` if None.

    Raises:
        TypeError: ``flow_class`` is not a class.
    """
    if not isinstance(flow_class, type):
        raise TypeError(f"flow_class must be a Flow class, got {type(flow_class).__name__}")
    settings = settings if settings is not None else WEBRTC_VOICE_SETTINGS

    async def make(
        transport: AudioTransport, engines: VoiceEngines, clock: Clock, on_event: EventSink
    ) -> Call:
        wiring = AssistantWiring(flow_class(), clock=clock)
        session = assistant_session(wiring, transport, engines, settings=settings,
                                    on_event=on_event)
        call = Call(session=session, flow=wiring.flow, jobs=wiring.jobs)
        call._closers.append(wiring.aclose)
        return call

    return make


def assistant_call_factory(
    model: str | None = None, *, settings: VoiceSettings | None = None,
    work_seconds: float | None = None,
) -> CallFactory:
    """Calls answered by the example assistant (:mod:`voxflow.examples.assistant`), its
    order lookups run as background jobs and announced when the floor is free.

    Args:
        model: a litellm model for open questions (None: rule-based, no key needed).
        settings: voice settings of every call (:data:`WEBRTC_VOICE_SETTINGS` if None).
        work_seconds: how long an order lookup takes (the example's default if None).
    """
    from voxflow.demo import load_example_module

    example = load_example_module("assistant")
    return flow_call_factory(example.assistant_class(model, lookup_seconds=work_seconds),
                             settings=settings)
