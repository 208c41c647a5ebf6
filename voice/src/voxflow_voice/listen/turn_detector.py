"""Turn taking: VAD probabilities → speech start, barge-in, speech end, utterances.

:class:`TurnDetector` is :class:`~.turn_machine.TurnMachine` (the rules, synchronous and in
audio time: see that module) with the async face a session drives it with:
:meth:`TurnDetector.apush` runs the VAD on the event loop while it is cheap and in a worker
thread otherwise, and asks for every verdict owed; :meth:`TurnDetector.adecide` runs the
end-of-turn model in a worker thread once the pause's words are in. The rules and the
events are re-exported here, where users import them from.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from numpy.typing import NDArray

from ..audio import AudioChunk
from ..engines.stt import Transcript
from .turn_detection import DEFAULT_TURN_DETECTION, FAST_TURN_DETECTION, TurnDetection
from .turn_events import (
    BargeInDetected,
    SpeechEnded,
    SpeechStarted,
    TurnDetectorEvent,
    TurnResumed,
    UtterancePaused,
    UtteranceReady,
)
from .turn_machine import TurnMachine

logger = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_TURN_DETECTION",
    "FAST_TURN_DETECTION",
    "INLINE_PUSH",
    "BargeInDetected",
    "SpeechEnded",
    "SpeechStarted",
    "TurnDetection",
    "TurnDetector",
    "TurnDetectorEvent",
    "TurnResumed",
    "UtterancePaused",
    "UtteranceReady",
]


INLINE_PUSH = 0.002
"""Seconds: :meth:`TurnDetector.apush` runs pushes on the event loop while the pushes that
ran the VAD took less (their moving average), in a worker thread otherwise."""


class TurnDetector(TurnMachine):
    """Turns a 16 kHz input stream into turn events, deterministically in audio time: the
    rules of :class:`~.turn_machine.TurnMachine` (its arguments), driven from async code
    with :meth:`apush` and :meth:`adecide`."""

    _push_cost = 0.0
    """Seconds a VAD-running push takes (a moving average, per instance once measured):
    see :meth:`apush`."""

    async def apush(
        self,
        audio: AudioChunk | NDArray[Any],
        words: Callable[[UtterancePaused], Awaitable[Transcript | None]] | None = None,
        *,
        hold: Callable[[], AbstractContextManager[object]] = nullcontext,
    ) -> AsyncIterator[list[TurnDetectorEvent]]:
        """:meth:`push`, then every verdict owed (:meth:`adecide`, on ``words(pause)`` if
        given): yields each step's events, so the caller handles a pause (and starts its
        STT) before the verdict on it is asked for.

        The push runs on the event loop while VAD runs take under :data:`INLINE_PUSH`
        (Silero: ~0.2 ms a 32 ms frame; a hop to a worker thread and back cost the loop
        more than that, ``benchmarks/cpu_budget.py``), in a worker thread otherwise (a
        slow VAD engine never stalls every call's audio).

        Args:
            hold: a context entered around each wait (a session holds its virtual clock).
        """
        if self._push_cost < INLINE_PUSH:
            events = self._timed_push(audio)
            await asyncio.sleep(0)  # the other tasks' turn, as a thread hop gave them
        else:
            with hold():
                events = await asyncio.to_thread(self._timed_push, audio)
        yield events
        while (pause := self._undecided) is not None:
            with hold():
                events = await self.adecide(words(pause) if words is not None else None)
            yield events

    async def adecide(
        self, transcript: Awaitable[Transcript | None] | None = None
    ) -> list[TurnDetectorEvent]:
        """:meth:`decide`, with the model in a worker thread once ``transcript`` (e.g.
        the pause's speculative STT, already running) is there: one after the other, not
        side by side. On two cores the model's thread took one of Whisper's two: the STT
        ran twice as long and the verdict waits for it (``end_of_turn.py --v2v``, load
        1.3: the pause's STT 690 ms beside the model, 340 ms alone; the model ~50 ms
        alone)."""
        pause = self._undecided
        if pause is None or self._model is None:
            if transcript is not None:
                await transcript
            return self.decide()
        model, heard = self._model, self._heard()

        async def judged() -> float:
            # A failing model never ends the call: the pause counts as incomplete (the
            # turn then ends after max_end_of_turn_silence, or on a closed answer's words).
            try:
                return float(await asyncio.to_thread(model.probability, heard))
            except Exception:
                logger.warning("the end-of-turn model failed; the pause counts as "
                               "incomplete", exc_info=True)
                return 0.0

        if transcript is None:
            return self.decide(probability=await judged())
        words = await transcript
        text = words.text if words is not None else None
        if self._question(text):
            return self.decide(transcript=text)  # (the model is not asked)
        return self.decide(probability=await judged(), transcript=text)


    def _timed_push(self, audio: AudioChunk | NDArray[Any]) -> list[TurnDetectorEvent]:
        """:meth:`push`, its time averaged over the pushes that ran the VAD."""
        scored, begun = self._stream.frames_done, time.perf_counter()
        try:
            return self.push(audio)
        finally:
            if self._stream.frames_done != scored:
                self._push_cost += 0.2 * (time.perf_counter() - begun - self._push_cost)

