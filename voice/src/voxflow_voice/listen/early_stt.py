"""Speculative transcription: start STT in the pause, use it when the turn ends.

The turn detector hands out :class:`~voxflow_voice.listen.turn_detector.UtterancePaused` as soon as
a little silence follows speech, with the exact audio the turn will have if the user stays
silent. :class:`EarlyTranscriber` transcribes it right away, so when
:class:`~voxflow_voice.listen.turn_detector.UtteranceReady` arrives (after the whole end-of-turn
silence) the transcript is already there, or partly done: the end-of-turn silence hides
the STT latency. Nothing is approximated: a speculative transcript is used only for the
very same audio; otherwise the final utterance is transcribed as usual.

At most one transcription runs at a time (a thread cannot be stopped, and two would only
slow each other down on a small machine): a pause that comes while one is running waits
as the single *next* job, replacing an older waiting one.

On a :class:`~voxflow_voice.scheduler.ModelScheduler` a transcription at a pause is
``speculative`` work (it yields to every call's urgent work: the turn may not end), made
``urgent`` the moment the turn ends on that very audio; a turn whose audio was not
transcribed yet is transcribed as ``urgent`` work.
"""

from __future__ import annotations

import asyncio
import functools
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from ..audio import STT_SAMPLE_RATE, AudioChunk
from ..engines.stt import Transcript
from ..scheduler import Work, scheduled
from .incremental_stt import NOT_HEARD, WHOLE, DetectorState, IncrementalStt, PartialWords
from .turn_detector import UtterancePaused, UtteranceReady

__all__ = ["EarlyTranscriber", "EarlyTranscriberStatistics", "Transcriber"]

_WARM_UP_SAMPLES = STT_SAMPLE_RATE // 2


class Transcriber(Protocol):
    """Anything that transcribes one 16 kHz utterance (e.g. :class:`WhisperStt`)."""

    async def transcribe(self, audio: AudioChunk) -> Transcript | None:
        """The words of the utterance, or ``None``."""
        ...


@dataclass(frozen=True, slots=True)
class EarlyTranscriberStatistics:
    """How speculation went.

    Attributes:
        started: speculative transcriptions started.
        used: final utterances answered by a speculative transcript.
        missed: final utterances transcribed afresh (the user spoke on, or no pause).
        pause_words: pauses whose words :meth:`EarlyTranscriber.pause_words` read from
            the streaming engine's decode at the pause (a verdict and a speculative
            reply count one each).
    """

    started: int
    used: int
    missed: int
    pause_words: int = 0


class EarlyTranscriber:
    """Runs STT on pauses and answers turn ends from it when the audio is the same.

    Use one per input stream; call :meth:`paused` for every ``UtterancePaused`` and
    ``await`` :meth:`final` for every ``UtteranceReady``; :meth:`aclose` at the end.

    Args:
        stt: the transcriber.
        call: the call its work is queued for on a model scheduler.
    """

    def __init__(self, stt: Transcriber, *, call: str = "") -> None:
        self._stt = stt
        self._call = str(call)
        self._work: Work | None = None  # the running transcription's ticket
        self._running: tuple[UtterancePaused, asyncio.Task[Transcript | None]] | None = None
        self._waiting: UtterancePaused | None = None
        # the latest transcripts (two: a continuation's whole utterance, and its own
        # speech when that had to be decoded apart), newest last
        self._done: list[tuple[UtterancePaused, Transcript | None]] = []
        self._closed = False
        self._warming: asyncio.Task[Transcript | None] | None = None
        self._started = 0
        self._used = 0
        self._missed = 0
        self._pause_words = 0
        self.incremental: IncrementalStt | None = (
            IncrementalStt(stt, call=self._call)  # type: ignore[arg-type]
            if getattr(stt, "streaming", False) is True else None
        )
        """The partial decodes during speech, with a streaming engine
        (:mod:`voxflow_voice.listen.incremental_stt`); ``None`` otherwise."""

    def heard(self, audio: AudioChunk | np.ndarray, detector: DetectorState) -> None:
        """The frame just pushed to the turn detector ``detector``: with a streaming
        engine, decode the speech under way (a no-op otherwise)."""
        if self.incremental is not None and not self._closed:
            self.incremental.heard(audio, detector)

    @property
    def partial(self) -> PartialWords | None:
        """The words of the speech under way known so far (a streaming engine's partial
        decodes: :class:`~voxflow_voice.listen.incremental_stt.PartialWords`); ``None``
        without one, or before its first decode."""
        return self.incremental.partial if self.incremental is not None else None

    def statistics(self) -> EarlyTranscriberStatistics:
        """Counters of speculation (started, used, missed)."""
        return EarlyTranscriberStatistics(self._started, self._used, self._missed,
                                          self._pause_words)

    def paused(self, event: UtterancePaused) -> None:
        """Start transcribing ``event`` now, or next if a transcription is running."""
        if not isinstance(event, UtterancePaused):
            raise TypeError(f"event must be an UtterancePaused, got {type(event).__name__}")
        if self._closed:
            raise RuntimeError("EarlyTranscriber is closed")
        running = self._running
        if (running is not None and running[0] is event) or self._found(event) is not None:
            return  # transcribed already (transcript_of came first): never twice
        if running is None:
            self._start(event)
        else:
            self._waiting = event  # the newest pause supersedes an older waiting one

    def warm_up(self) -> bool:
        """Start a dummy transcription (0.5 s of silence) if none is running, so the first
        real one of the turn (at the pause) finds the model and the CPU warm; True if it
        started. (Called at speech onset; a pause does not wait for it.)"""
        if self._closed or self._running is not None or self._warming is not None:
            return False
        silence = AudioChunk.from_float(np.zeros(_WARM_UP_SAMPLES, np.float32), STT_SAMPLE_RATE)
        with scheduled(Work(self._call, "speculative")):
            task = asyncio.create_task(self._stt.transcribe(silence), name="voice.stt_warm_up")
        self._warming = task
        task.add_done_callback(self._warmed)
        return True

    def _warmed(self, task: asyncio.Task[Transcript | None]) -> None:
        self._warming = None
        if not task.cancelled():
            task.exception()  # retrieved: a failed warm-up changes nothing

    async def transcript_of(self, event: UtterancePaused) -> Transcript | None:
        """Speculate on ``event`` (as :meth:`paused`) and wait for its transcript.

        For a look at the words before the turn ends (e.g. to tell a backchannel from a
        request over a reply); the transcript stays available to :meth:`final`, so the
        same audio is never transcribed twice.
        """
        if not isinstance(event, UtterancePaused):
            raise TypeError(f"event must be an UtterancePaused, got {type(event).__name__}")
        if self._closed:
            raise RuntimeError("EarlyTranscriber is closed")
        for _ in range(3):  # at most: a stale running job, then ours
            done = self._found(event)
            if done is not None:
                return done[1]
            running = self._running
            if running is not None and running[0] is event:
                await asyncio.wait({running[1]})  # cancelled, the waiter leaves it running
                continue
            if running is None:
                self._start(event)
                continue
            if self._waiting is not event:
                self._waiting = event  # next after the running (stale) one
            await self._settle_running()
        done = self._found(event)
        return done[1] if done is not None else None

    async def pause_words(self, event: UtterancePaused) -> Transcript | None:
        """The words of the utterance that paused with ``event`` as soon as they are
        known, for the end-of-turn verdict and the speculative reply.

        With a streaming engine, when the decode that started as the speech paused
        heard all of it (:meth:`IncrementalStt.heard_all
        <voxflow_voice.listen.incremental_stt.IncrementalStt.heard_all>`), its words: waiting
        for that decode only, never for a transcription of an earlier pause queued
        before this one's (a stale tail decode). Otherwise, and with a plain engine,
        :meth:`transcript_of` (the pause's transcription, the tail decoded after the
        committed words if need be). Either way :meth:`final` gives the same words for
        the same audio. ``None``: the utterance has no words (the pause's decode heard
        none: that is its answer, no transcription follows)."""
        if not isinstance(event, UtterancePaused):
            raise TypeError(f"event must be an UtterancePaused, got {type(event).__name__}")
        incremental = self.incremental
        if incremental is not None and not self._closed:
            await incremental.pause_decode(event.end_sample)
            heard = incremental.heard_all(event)
            if heard is not NOT_HEARD:
                self._pause_words += 1
                return heard
        return await self.transcript_of(event)

    def turn_ended(self, event: UtteranceReady) -> bool:
        """The turn ended on ``event``: the transcription running on that very audio is
        no longer speculative work but urgent (someone waits for the answer); True if
        one was. (:meth:`final` does it too; a speculative reply awaits the transcript
        through :meth:`transcript_of` and never calls it.)"""
        if not isinstance(event, UtteranceReady):
            raise TypeError(f"event must be an UtteranceReady, got {type(event).__name__}")
        running = self._running
        if running is None or self._work is None or not running[0].matches(event):
            return False
        self._work.update("urgent", 0.0)
        return True

    async def final(self, event: UtteranceReady) -> Transcript | None:
        """The transcript of the turn's utterance, reusing speculation when it matches."""
        if not isinstance(event, UtteranceReady):
            raise TypeError(f"event must be an UtteranceReady, got {type(event).__name__}")
        if self._closed:
            raise RuntimeError("EarlyTranscriber is closed")
        waiting, self._waiting = self._waiting, None
        if waiting is not None and waiting.matches(event):
            # Its turn was next: run it now (after the running one, which is stale).
            await self._settle_running()
            self._start(waiting)
        running = self._running
        if running is not None and running[0].matches(event):
            if self._work is not None:
                self._work.update("urgent", 0.0)  # the turn ended on this audio
            transcript = await running[1]
            self._used += 1
            return transcript
        done = next((d for d in reversed(self._done) if d[0].matches(event)), None)
        self._done = []
        if done is not None:
            self._used += 1
            return done[1]
        await self._settle_running()  # stale: let it finish rather than compete for CPU
        self._missed += 1
        with scheduled(Work(self._call, "urgent")):
            return await self._transcribe(event)

    async def aclose(self) -> None:
        """Stop speculating and wait for the running transcription to end."""
        self._closed = True
        self._waiting = None
        if self._warming is not None:
            await asyncio.gather(self._warming, return_exceptions=True)
        running, self._running = self._running, None
        if running is not None:
            running[1].cancel()
            await asyncio.gather(running[1], return_exceptions=True)
        if self.incremental is not None:
            await self.incremental.aclose()

    def _start(self, event: UtterancePaused) -> None:
        self._started += 1
        self._work = Work(self._call, "speculative")
        with scheduled(self._work):
            task = asyncio.create_task(self._transcribe(event), name="voice.early_stt")
        self._running = (event, task)
        task.add_done_callback(functools.partial(self._finished, event))

    async def _transcribe(self, event: UtterancePaused | UtteranceReady) -> Transcript | None:
        if self.incremental is not None:
            said = await self.incremental.final(event)
            if said is not WHOLE:
                return said
        return await self._stt.transcribe(event.audio)

    def _finished(self, event: UtterancePaused, task: asyncio.Task[Transcript | None]) -> None:
        if self._running is not None and self._running[1] is task:
            self._running = None
        if not task.cancelled() and task.exception() is None:
            self._done = [*self._done[-1:], (event, task.result())]
        if self._waiting is not None and not self._closed:
            waiting, self._waiting = self._waiting, None
            self._start(waiting)

    def _found(self, event: UtterancePaused) -> tuple[UtterancePaused, Transcript | None] | None:
        return next((d for d in self._done if d[0] is event), None)

    async def _settle_running(self) -> None:
        running = self._running
        if running is not None:
            await asyncio.wait({running[1]})  # cancelled, the waiter leaves it running

    def __repr__(self) -> str:
        return f"EarlyTranscriber({self.statistics()})"
