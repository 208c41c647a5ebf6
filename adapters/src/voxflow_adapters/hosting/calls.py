"""What one browser call runs: a fresh flow, its TurnRunner (and reply queue, jobs) and a
``VoiceSession`` over the call's transport.

A :data:`CallFactory` is called once per accepted offer. The engines are the server's,
loaded once and shared by every call; everything else (flow state, turns, replies, jobs,
the session) is the call's own and is closed with it.

* :func:`flow_call_factory`: any conversational Flow class, wired by
  :class:`~voxflow.wiring.AssistantWiring` (reply queue, jobs, announcements);
* :func:`assistant_call_factory`: the example assistant, as in ``voxflow demo``.

A server with a store (``WebRtcServer(store=...)``) passes each call a
:class:`CallSession`: the session id, the call's fenced persistence and whether the call
resumes a stored session. The flow then saves every turn through that store, its
session gets a resume token (new sessions), and a resumed one is loaded (nothing runs)
and its answers cut off by the drop are settled at what was heard
(:mod:`~voxflow_adapters.hosting.resume`), and the floor its dead process held released
(by :class:`~voxflow.wiring.AssistantWiring`, as for every entry point), before the call
goes on. A store that becomes unreachable during the call holds its saves back, not the
call: it keeps talking and saves once the store is back
(:mod:`~voxflow_adapters.hosting.deferred_saves`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from voxflow_voice.engines import VoiceEngines
from voxflow_voice.events import SessionEvent
from voxflow_voice.session import VoiceSession, VoiceSettings
from voxflow_voice.session.wiring import assistant_session
from voxflow_voice.transport import AudioTransport

from voxflow.clock import Clock
from voxflow.conversation import ConversationEvent
from voxflow.demo import load_example_module
from voxflow.errors import FencedWriteError
from voxflow.ids import SessionId
from voxflow.jobs import JobRunner, PostgresJobQueue
from voxflow.settings import Settings
from voxflow.tasks import cancel_and_wait
from voxflow.wiring import AssistantWiring

from .deferred_saves import DEFERRED_SAVES_AT_CLOSE, DeferredSaves, saves_deferred
from .resume import (
    CALL_ENDED_EVENT,
    HeardJournal,
    issue_resume_token,
    settle_dropped_replies,
)

__all__ = [
    "PHONE_HISS_RISE",
    "WEBRTC_VOICE_SETTINGS",
    "Call",
    "CallFactory",
    "CallSession",
    "ResumeUnavailableError",
    "assistant_call_factory",
    "flow_call_factory",
    "phone_voice_settings",
    "webrtc_voice_settings",
]

EventSink = Callable[[SessionEvent], None]



def webrtc_voice_settings(settings: Settings | None = None) -> VoiceSettings:
    """The voice settings of browser calls: turn taking and speculative replies from
    ``settings`` (None: the ``VOXFLOW_*`` variables, as every entry point), the server-side
    echo gate off.

    The page asks for the microphone with ``echoCancellation`` on, so the browser cancels
    the assistant's voice where it is actually played; the server-side gate would only see
    the send time of each frame, not the browser's playout (network and jitter-buffer
    delay in between).

    Raises:
        TypeError: ``settings`` is not a :class:`~voxflow.settings.Settings`.
    """
    settings = settings if settings is not None else Settings.from_env()
    return VoiceSettings.from_settings(settings, echo_gate=False)


PHONE_HISS_RISE = 6.0
"""dB over the line's floor at which the phone path's hiss cue counts (12 on a wideband
microphone): chosen on the tune half of ``benchmarks/phone_onset.py`` (espeak-ng voices),
where 12 missed every 'st' over a line with noise at -50 dBFS and 6 caught them with
no more noise pauses."""


def phone_voice_settings(settings: Settings | None = None) -> VoiceSettings:
    """The voice settings of phone calls: those of browser calls
    (:func:`webrtc_voice_settings`: the carrier cancels the echo), the hiss cue on the
    telephone band (``TurnDetection.hiss_band="telephone"``, ``hiss_rise``
    :data:`PHONE_HISS_RISE`): an 8 kHz line carries none of the energy over 4 kHz the
    wideband cue looks at, so the 's' of "Stop" paused a reply only at its vowel, ~100
    ms later (:mod:`voxflow_voice.listen.hiss`).

    Raises:
        TypeError: ``settings`` is not a :class:`~voxflow.settings.Settings`.
    """
    voice = webrtc_voice_settings(settings)
    detection = voice.turn_detection
    if detection.hiss_rise is not None:  # (None: the cue is off, and stays off)
        detection = detection.model_copy(update={"hiss_band": "telephone",
                                                 "hiss_rise": PHONE_HISS_RISE})
    return voice.model_copy(update={"turn_detection": detection})


WEBRTC_VOICE_SETTINGS = webrtc_voice_settings(Settings())
"""The default voice settings of browser calls (no ``VOXFLOW_*`` variable read: a factory
given no settings takes :func:`webrtc_voice_settings` of the environment when made)."""


class ResumeUnavailableError(LookupError):
    """A call was to resume a session that is not stored (or its flow cannot persist)."""


@dataclass(frozen=True, slots=True)
class CallSession:
    """The persisted session a call runs on (given by a server that has a store).

    Attributes:
        session_id: the session's id.
        persistence: the call's fenced store (every save checks the call's lease).
        resume: load the stored session and go on with it (else a new session).
    """

    session_id: SessionId
    persistence: Any = field(repr=False)
    resume: bool = False


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
    resume_token: str | None = field(default=None, repr=False)
    """A new persisted session's resume token (None: not persisted, or resumed)."""
    dropped: tuple[str, ...] = ()
    """A resumed session's answers that were cut off by the drop (their delivery ids)."""
    deferred: DeferredSaves | None = None
    """A persisted call's saves held back while its store was unreachable (outages)."""
    record_end: Callable[[str], Awaitable[None]] | None = None
    """A persisted call's: saves that the session ended for good (``how``), a
    :data:`~voxflow_adapters.hosting.resume.CALL_ENDED_EVENT` (None: not persisted)."""
    _closers: list[Callable[[], Awaitable[None]]] = field(default_factory=list)

    async def aclose(self) -> None:
        """Stop the call's background work (idempotent). Every closer runs, even when one
        fails or the close is cancelled meanwhile; the first such outcome is raised once
        they all ran (the wiring's job runner and database connections are never left
        open behind a failed journal flush or a second cancel at shutdown)."""
        closers, self._closers = self._closers, []
        first: BaseException | None = None
        for close in closers:
            try:
                await close()
            except BaseException as exc:  # (a cancellation too): the rest still close
                first = first if first is not None else exc
        if first is not None:
            raise first


class CallFactory(Protocol):
    """``(transport, engines, clock, on_event, session=None) -> Call``, awaited once per
    accepted offer; ``session`` is given by a server with a store (a factory that takes
    no ``session`` keyword is called without one, its calls not persisted)."""

    def __call__(
        self, transport: AudioTransport, engines: VoiceEngines, clock: Clock,
        on_event: EventSink, /, *, session: CallSession | None = None,
    ) -> Awaitable[Call]: ...


def flow_call_factory(
    flow_class: type[Any], *, settings: VoiceSettings | None = None,
    job_queue: PostgresJobQueue | None = None,
) -> CallFactory:
    """Calls answered by a fresh ``flow_class()`` each, wired like every entry point
    (:class:`~voxflow.wiring.AssistantWiring`: reply queue, background jobs and
    announcements when its state has them); ``settings``: the voice settings of every
    call, :func:`webrtc_voice_settings` (the ``VOXFLOW_*`` variables) if None;
    ``job_queue``: the background jobs of persisted calls run in job-worker processes
    (``voxflow jobs worker``) and their updates come back through the session's inbox
    (None: in the call's process).

    Raises:
        TypeError: ``flow_class`` is not a class.
    """
    if not isinstance(flow_class, type):
        raise TypeError(f"flow_class must be a Flow class, got {type(flow_class).__name__}")
    settings = settings if settings is not None else webrtc_voice_settings()

    async def make(
        transport: AudioTransport, engines: VoiceEngines, clock: Clock, on_event: EventSink,
        /, *, session: CallSession | None = None,
    ) -> Call:
        if session is None:
            wiring = AssistantWiring(flow_class(), clock=clock)
            voice = assistant_session(wiring, transport, engines, settings=settings,
                                      on_event=on_event)
            call = Call(session=voice, flow=wiring.flow, jobs=wiring.jobs)
            call._closers.append(wiring.aclose)
            return call
        return await _persisted_call(flow_class, session, transport, engines, clock,
                                     on_event, settings, job_queue)

    return make


async def _persisted_call(
    flow_class: type[Any], session: CallSession, transport: AudioTransport,
    engines: VoiceEngines, clock: Clock, on_event: EventSink, settings: VoiceSettings,
    job_queue: PostgresJobQueue | None = None,
) -> Call:
    """A call whose flow saves through ``session.persistence`` (see the module)."""
    flow = flow_class(persistence=session.persistence)
    found = await flow.aload_session(session.session_id)
    if session.resume and not found:
        raise ResumeUnavailableError(f"session {session.session_id!r} is not stored")
    token: str | None = None
    dropped: tuple[str, ...] = ()
    if session.resume:
        dropped = tuple(settle_dropped_replies(flow.state))
    else:
        token = issue_resume_token(flow.state)
    await flow.asave_state("call_started")  # the token, or the settled drop, first
    # from here on, a store that is unreachable holds the saves back, not the call
    deferring = saves_deferred(flow, within=DEFERRED_SAVES_AT_CLOSE)
    deferred = await deferring.__aenter__()
    wiring = AssistantWiring(
        flow, clock=clock, job_queue=job_queue,
        save_jobs=None if job_queue is None else functools.partial(flow.asave_state,
                                                                   "job_update"))
    voice: VoiceSession | None = None

    def heard(delivery_id: Any) -> Any:
        assert voice is not None
        return voice.playback.heard_reply(delivery_id)

    journal = HeardJournal(flow, wiring.state_lock, heard)

    def events(event: SessionEvent) -> None:
        journal.on_event(event)
        on_event(event)

    voice = assistant_session(wiring, transport, engines, settings=settings, on_event=events)
    loop = asyncio.get_running_loop()
    task = loop.create_task(journal.run(), name="call.heard-journal")

    async def close_journal() -> None:
        # The journal lives as long as the call (its closers end it): stopped and waited
        # for, even if the close itself is cancelled meanwhile; its own failure is ours.
        await cancel_and_wait([task])
        if not task.cancelled() and (failure := task.exception()) is not None:
            raise failure
        # the last reply's settlement (refused, and already reported, once the lease
        # was lost: the call then writes nothing more)
        with contextlib.suppress(FencedWriteError):
            await journal.flush()

    async def close_deferred() -> None:
        # what an outage still holds back is saved now, if the store comes back in time
        await deferring.__aexit__(None, None, None)

    async def record_end(how: str) -> None:
        async with wiring.state_lock:
            flow.state.events.append(ConversationEvent(type=CALL_ENDED_EVENT,
                                                       payload={"how": how}))
            await flow.asave_state("call_ended")

    call = Call(session=voice, flow=flow, jobs=wiring.jobs, resume_token=token,
                dropped=dropped, deferred=deferred, record_end=record_end)
    call._closers.append(close_journal)
    call._closers.append(close_deferred)
    call._closers.append(wiring.aclose)
    return call


def assistant_call_factory(
    model: str | None = None, *, settings: VoiceSettings | None = None,
    work_seconds: float | None = None, job_queue: PostgresJobQueue | None = None,
) -> CallFactory:
    """Calls answered by the example assistant (:mod:`voxflow.examples.assistant`), its
    order lookups run as background jobs and announced when the floor is free.

    Args:
        model: a litellm model for open questions (None: rule-based, no key needed).
        settings: voice settings of every call (:func:`webrtc_voice_settings` if None).
        work_seconds: how long an order lookup takes (the example's default if None).
        job_queue: run the lookups in job-worker processes (see :func:`flow_call_factory`).
    """
    example = load_example_module("assistant")
    return flow_call_factory(example.assistant_class(model, lookup_seconds=work_seconds),
                             settings=settings, job_queue=job_queue)
