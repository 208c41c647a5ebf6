"""A small scenario API for voice tests: run a scripted call, then ask what happened.

Example::

    script = CallScript().user_says(0.5, "Tell me a story.").user_says(4.0, "Stop.")
    call = await run_call(turns, script, engines)
    reply = call.replies()[0]
    assert call.settled(reply) == "interrupted"
    assert call.stale_samples() == 0
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

from voxflow_voice.engines import VoiceEngines
from voxflow_voice.events import SessionEvent
from voxflow_voice.session import Announcer, VoiceSession, VoiceSettings, default_announcer
from voxflow_voice.session.wiring import assistant_session

from voxflow.clock import Clock, VirtualClock
from voxflow.conversation.flow import Flow
from voxflow.jobs import JobRunner
from voxflow.llm import preload
from voxflow.replies import ReplyQueue
from voxflow.turns import TurnRunner
from voxflow.wiring import AssistantWiring

from ..hosting.deferred_saves import saves_deferred
from .assertions import ScriptStepError
from .result import CallResult
from .script import CallScript
from .simulated import SimulatedClient

__all__ = ["CallResult", "run_call"]


async def run_call(
    turns: Flow[Any] | AssistantWiring | TurnRunner,
    script: CallScript,
    engines: VoiceEngines,
    *,
    clock: Clock | None = None,
    settings: VoiceSettings | None = None,
    replies: ReplyQueue | None = None,
    jobs: JobRunner | None = None,
    announcer: Announcer = default_announcer,
    on_event: Callable[[SessionEvent], None] | None = None,
    on_session: Callable[[VoiceSession], None] | None = None,
    tail: float = 3.0,
) -> CallResult:
    """Play ``script`` against a voice session and return the result.

    ``turns`` is what answers: a conversational flow instance (wired like every entry
    point: :class:`~voxflow.wiring.AssistantWiring`, background jobs and announcements
    included; closed after the call; its saves that find the store unreachable deferred
    and made once it is back, as a hosted call's: :func:`~voxflow_adapters.hosting.
    deferred_saves.saves_deferred`; a store away from the start is refused before the
    call), an ``AssistantWiring`` of your own (its clock is
    the call's; you close it), or a bare ``TurnRunner`` (with ``replies``/``jobs`` if
    any).
    Runs on a deterministic :class:`~voxflow.clock.VirtualClock` unless ``clock`` is given.
    ``settings``: the session's voice settings; None: those the ``VOXFLOW_*`` variables
    ask for (:meth:`VoiceSettings.from_environment
    <voxflow_voice.session.VoiceSettings.from_environment>`, as the CLI's entry points).
    ``on_session`` is called with the session before the call starts.

    Raises:
        TypeError: ``turns`` is none of these (before anything is played).
        PersistenceUnavailableError: the flow's session store cannot be written as the
            call begins (the message names it and the fix); nothing was played.
        ScriptStepError: a reactive step of ``script`` could not happen when it said (its
            reply never came); the error holds the call (``error.call``).
    """
    wiring: AssistantWiring | None = None
    owned = False
    if isinstance(turns, AssistantWiring):
        wiring = turns
        clock = wiring.clock
    elif isinstance(turns, Flow):
        # a store away from the start is refused, as a call worker refuses to start: its
        # saves are deferred (below) only once it answered (a wrong URL never will)
        await asyncio.to_thread(turns.check_persistence)
        clock = clock if clock is not None else VirtualClock(autojump=True)
        wiring, owned = AssistantWiring(turns, clock=clock), True
    elif not isinstance(turns, TurnRunner):
        raise TypeError("turns must be a conversational Flow, an AssistantWiring or a "
                        f"TurnRunner, got {type(turns).__name__}")
    clock = clock if clock is not None else VirtualClock(autojump=True)
    if settings is None:  # as every entry point: the VOXFLOW_* variables, else the defaults
        settings = VoiceSettings.from_environment()
    client = SimulatedClient(script, clock=clock, tail=tail)
    deferring: contextlib.AbstractAsyncContextManager[Any] = (
        saves_deferred(turns) if owned else contextlib.nullcontext())
    try:
        # the caller's audio and litellm (off the loop) are ready before the call starts:
        # no turn imports litellm, and virtual time never waits on it
        await asyncio.gather(client.render(engines.tts), preload())
        if wiring is not None:
            session = assistant_session(wiring, client, engines, settings=settings,
                                        on_event=on_event)
        else:
            assert isinstance(turns, TurnRunner)
            session = VoiceSession(
                turns, client, engines, settings=settings, clock=clock, replies=replies,
                jobs=jobs, announcer=announcer, on_event=on_event,
            )
        if on_session is not None:
            on_session(session)
        entered = clock if isinstance(clock, VirtualClock) else None
        if entered is not None:
            await entered.__aenter__()
        try:
            async with deferring, client:
                await session.run()
        finally:
            if entered is not None:
                await entered.__aexit__(None, None, None)
    finally:
        if owned and wiring is not None:
            await wiring.aclose()
    await asyncio.sleep(0)
    result = CallResult(session=session, client=client)
    missed = [step for step in client.steps() if step.missed is not None]
    if missed:
        raise ScriptStepError(result, missed)
    return result
