"""ReplySpeaker: how a voice session speaks one reply, from reply events to played audio.

Every reply a :class:`~voxflow_voice.session.VoiceSession` speaks (a foreground answer,
a speculative answer held until its verdict, or a background announcement) takes the
same path, with its state in one :class:`SpokenReply` record:

* **generate** (:meth:`ReplySpeaker.generate`): the runner's reply events; only those
  that pass ``TurnRunner.accept_event`` (and, for an announcement, whose delivery still
  holds the floor in the ReplyQueue) are spoken. Text is cut into segments
  (:class:`~voxflow_voice.speak.segmenter.TextSegmenter`) while generation goes on;
* **synthesize** (a speaker task per reply): each complete segment is synthesized at
  once (TTS) and every chunk goes through the fenced
  :class:`~voxflow_voice.speak.playback.Playback` (and, with an echo gate, is remembered as
  our own voice); a speculative reply's audio is *held* by the playback stage;
* **drain** and **finish** (:meth:`ReplySpeaker.drain`, :meth:`ReplySpeaker.finish`):
  the last chunk handed over, the delivery is sealed, then played whole or fenced;
* **settle** (:meth:`ReplySpeaker.settle_history`): ``ReplyFinished``, or
  ``ReplyInterrupted`` with what the user heard, which the flow's history keeps (cut
  at the last word played); a heard announcement is appended to it
  (:func:`voxflow.replies.record_announcement`).

:meth:`ReplySpeaker.cut` interrupts a reply (barge-in, the client gone): its audio is
fenced first, then its synthesis cancelled and its generation interrupted through the
runner (or, for an announcement, its delivery settled ``interrupted``).

With a :class:`~voxflow.clock.VirtualClock`, waits for generation and synthesis take no
audio time (:func:`hold_clock`, :func:`iterate_held`), so deterministic runs measure only
what the audio itself takes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from voxflow.clock import Clock, VirtualClock
from voxflow.ids import DeliveryId, TurnId
from voxflow.replies import record_announcement
from voxflow.tasks import background
from voxflow.turns import ReplyEvent

from ..audio import ReplyChunk
from ..call import CallContext
from ..engines import TextToSpeech
from ..events import (
    ReplyFinished,
    ReplyInterrupted,
    ReplyStarted,
    ReplyTextStreamed,
    SessionEvent,
)
from ..listen.echo import EchoGate
from ..scheduler import Urgency, Work, scheduled
from .history import record_heard
from .playback import Playback
from .segmenter import SegmenterSettings, TextSegmenter
from .speculation import Speculation

__all__ = [
    "ReplySpeaker",
    "SpeakingSettings",
    "SpokenReply",
    "hold_clock",
    "iterate_events",
    "iterate_held",
]

_T = TypeVar("_T")
SYNTHESIS_MARGIN = 0.5
"""Seconds a later sentence's synthesis is started before playout would run dry."""
_Item = ReplyChunk | tuple[int, str | None] | None
"""What the synthesis producer queues: a chunk, a segment's start (its id and text) or
end (its id and None), and None after the last."""

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class SpokenReply:
    """The reply being spoken (foreground answer or announcement).

    Attributes:
        turn_id: the turn it answers (an announcement's own turn).
        input_revision: the turn's input revision (for ``TurnRunner.interrupt``).
        delivery_id: the reply's identity, given out when its turn started
            (:class:`~voxflow.turns.ReplyStream`), or the announcement's delivery.
        announcement: a background announcement, not an answer.
        speaker: the task synthesizing its segments (from its first event).
        interrupted: it was cut (barge-in, the client gone).
        failed: the runner's terminal event was ``failed`` (e.g. provider down).
        onset_at: the barge-in's speech onset, if one cut it.
        first_text: when its first accepted text arrived.
        first_audio: when the client started playing it.
        last_audio_end: when the audio played so far ends.
        segments: the text segments handed to synthesis.
        speculation: its speculation, until the turn is confirmed.
        provisional: its speculation while the confirmed turn may still be taken back
            (until a sample of it is heard: ``TurnDetection.resume_grace``) or continued
            (``TurnDetection.continue_within``).
        continued: cut because the user went on with its turn: its heard
            part is kept in its reply record, not in the history (the turn is answered
            again with all its words).
        work: the model-scheduler ticket of the segment being synthesized.
        played_from: when (on the session clock) its audio started going out, for the
            deadline of later segments; ``audio_seconds``: how much was handed over.
        held_seconds: audio handed over while the reply was held (speculative): it
            starts going out when the turn is confirmed.
        buffered_seconds: audio synthesized ahead, not yet handed over.
        synthesized: whether any of its audio was synthesized yet.
    """

    turn_id: TurnId
    input_revision: int
    delivery_id: DeliveryId
    announcement: bool = False
    speaker: asyncio.Task[None] | None = None
    interrupted: bool = False
    failed: bool = False
    onset_at: float | None = None
    first_text: float | None = None
    first_audio: float | None = None
    last_audio_end: float | None = None
    segments: list[str] = field(default_factory=list)
    speculation: Speculation | None = None
    provisional: Speculation | None = None
    continued: bool = False
    work: Work | None = None
    played_from: float | None = None
    audio_seconds: float = 0.0
    held_seconds: float = 0.0
    buffered_seconds: float = 0.0
    synthesized: bool = False

    def heard_whole(self, playback: Playback, at: float) -> bool:
        """Whether every word of it was synthesized and played before ``at`` (it may still
        be the session's reply: a confirmed turn's reply stays so until the turn is final,
        ``TurnDetection.continue_within``)."""
        if (self.speaker is None or not self.speaker.done()
                or self.last_audio_end is None or self.last_audio_end > at):
            return False
        heard = playback.heard_reply(self.delivery_id)
        return heard.text.split() == heard.full_text.split()

    def synthesis_work(self, call: str, now: float) -> Work:
        """The ticket of the next segment's synthesis (see :mod:`voxflow_voice.scheduler`),
        as :meth:`urgency` says at ``now`` (the session clock's reading)."""
        urgency, slack = self.urgency(now)
        return Work(call, urgency, slack)

    def urgency(self, now: float) -> tuple[Urgency, float]:
        """How urgent its synthesis is at ``now``, and the slack: speculative while the
        turn is unconfirmed; urgent until its first audio exists (the first clause:
        someone waits in silence); then due when playout runs dry (:meth:`slack`)."""
        if self.speculation is not None:
            return "speculative", 0.0
        if not self.synthesized:
            return "urgent", 0.0
        return "ahead", self.slack(now)

    def slack(self, now: float) -> float:
        """Seconds until the next sentence's synthesis must start for playout not to run
        dry (:meth:`ahead_seconds`, less the time a synthesis takes under load)."""
        return max(0.0, self.ahead_seconds(now) - SYNTHESIS_MARGIN)

    def ahead_seconds(self, now: float) -> float:
        """Seconds of its audio ready before playout runs dry at ``now`` (the session
        clock's reading: audio time, virtual in a deterministic run): handed over and not
        yet played, plus synthesized and not yet handed over."""
        played = 0.0
        if self.played_from is not None:
            played = max(0.0, self.played_from + self.audio_seconds - now)
        return played + self.buffered_seconds


@contextlib.contextmanager
def hold_clock(clock: Clock) -> Iterator[None]:
    """Hold ``clock`` (if virtual) for the block, so awaiting inside it takes no time."""
    if isinstance(clock, VirtualClock):
        with clock.hold():
            yield
    else:
        yield


async def iterate_held(clock: Clock, items: AsyncIterator[_T]) -> AsyncIterator[_T]:
    """Iterate ``items`` with a virtual ``clock`` held while each next item is awaited, so
    generation and synthesis take no audio time; closes ``items`` when done."""
    iterator = aiter(items)
    try:
        while True:
            with hold_clock(clock):
                try:
                    item = await anext(iterator)
                except StopAsyncIteration:
                    return
            yield item
    finally:
        close = getattr(iterator, "aclose", None)
        if close is not None:
            await close()


async def iterate_events(events: Sequence[ReplyEvent]) -> AsyncIterator[ReplyEvent]:
    """Ready reply events (an announcement's) as the stream :meth:`ReplySpeaker.generate` takes."""
    for event in events:
        yield event


class SpeakingSettings(Protocol):
    """What the speaker reads of its call's settings (a session's
    :class:`~voxflow_voice.session.VoiceSettings` has both, validated)."""

    @property
    def segmenter(self) -> SegmenterSettings:
        """How reply text is cut into synthesized segments."""

    @property
    def synthesis_ahead(self) -> float:
        """Seconds of a reply's audio synthesized ahead of what was handed to playback
        (later sentences are synthesized while earlier ones play, so they are ready before
        playout needs them; a fence drops them unheard)."""


class ReplySpeaker:
    """Speaks replies: segments, synthesis, fenced playback, interruption and settling.

    Args:
        call: the call: its TurnRunner (whose events are accepted and whose turns are
            interrupted), clock (held while generation and synthesis are awaited), state
            lock, ReplyQueue of announcements (if any), where events go, whether
            the client is gone (then a drained reply is cut), and its settings
            (:class:`SpeakingSettings`).
        playback: the session's fenced playback stage.
        tts: the text-to-speech engine.
        echo_gate: told of every chunk sent, if the session has one.
    """

    def __init__(
        self,
        call: CallContext[SpeakingSettings],
        playback: Playback,
        tts: TextToSpeech,
        *,
        echo_gate: EchoGate | None = None,
    ) -> None:
        if not isinstance(playback, Playback):
            raise TypeError(f"playback must be a Playback, got {type(playback).__name__}")
        self._call = call
        self._turns = call.turns
        self._playback = playback
        self._tts = tts
        self._segmenter = call.settings.segmenter
        self._clock = call.clock
        self._lock = call.lock
        self._emit = call.emit
        self._replies = call.replies
        self._echo_gate = echo_gate
        self._ahead = float(call.settings.synthesis_ahead)

    def held(self, items: AsyncIterator[_T]) -> AsyncIterator[_T]:
        """``items`` iterated with the session clock held (see :func:`iterate_held`)."""
        return iterate_held(self._clock, items)

    # -- generate and synthesize ------------------------------------------------------

    async def generate(self, reply: SpokenReply, events: AsyncIterator[ReplyEvent]) -> None:
        """Accepted text events → segments, for a speaker task that synthesizes each
        segment as soon as it is complete (TTS → playback) while generation goes on."""
        segments: asyncio.Queue[tuple[int, str] | None] = asyncio.Queue()
        segmenter = TextSegmenter(self._segmenter)
        try:
            async for event in events:
                if reply.speaker is None:  # its first event: the reply began
                    if reply.speculation is not None:
                        self._playback.hold(reply.delivery_id)
                    self._emit_for(reply, ReplyStarted(
                        session_id=self._call.session_id, at=self._clock.now(),
                        turn_id=reply.turn_id, delivery_id=reply.delivery_id,
                        reply_kind=event.kind,
                    ))
                    reply.speaker = asyncio.create_task(
                        self._synthesize(reply, segments), name="voice.speak"
                    )
                    if reply.interrupted:  # cut before its turn began: the runner's
                        self._interrupt(reply)  # interruption stops it now
                if not await self._accept(reply, event):
                    continue
                if event.type == "text" and event.text:
                    if reply.first_text is None:
                        reply.first_text = self._clock.now()
                    for seg in segmenter.push(event.text):
                        segments.put_nowait((seg.segment_id, seg.text))
                elif event.type == "completed":
                    for seg in segmenter.flush():
                        segments.put_nowait((seg.segment_id, seg.text))
                elif event.type == "failed":
                    reply.failed = True
        finally:
            segments.put_nowait(None)

    async def _accept(self, reply: SpokenReply, event: ReplyEvent) -> bool:
        if reply.announcement and self._replies is not None:
            async with self._lock:
                if not self._replies.accepts_output(event.delivery_id):
                    self._replies.settle(event.delivery_id, "skipped", "Floor lost before output.")
                    return False
                return self._turns.accept_event(event)
        return self._turns.accept_event(event)

    async def _synthesize(
        self, reply: SpokenReply, segments: asyncio.Queue[tuple[int, str] | None]
    ) -> None:
        """Hand the reply's audio to playback while the next sentences are synthesized
        (up to ``synthesis_ahead`` seconds ahead) by a producer task."""
        delivery = reply.delivery_id
        ready: asyncio.Queue[_Item] = asyncio.Queue()
        room = asyncio.Event()
        # The producer lives as long as this loop: cancelled (and waited for) when the
        # reply is fenced or cut; done, its failure raised here, when it queued the end.
        async with background(self._produce(reply, segments, ready, room),
                              name="voice.synthesize"):
            while (item := await ready.get()) is not None:
                if isinstance(item, tuple):
                    segment_id, text = item
                    if text is None:
                        self._playback.end_segment(delivery, segment_id)
                        continue
                    if self._playback.is_fenced(delivery):
                        return
                    self._playback.begin_segment(delivery, segment_id, text)
                    reply.segments.append(text)
                    self._emit_for(reply, ReplyTextStreamed(
                        session_id=self._call.session_id, at=self._clock.now(),
                        delivery_id=delivery, segment_id=segment_id, text=text,
                    ))
                    continue
                seconds = item.num_samples / item.sample_rate
                reply.buffered_seconds = max(0.0, reply.buffered_seconds - seconds)
                room.set()
                if self._echo_gate is not None:
                    self._echo_gate.sent(item)
                if not await self._playback.play(item):
                    return
                self._played_out(reply, seconds)

    async def _produce(
        self, reply: SpokenReply, segments: asyncio.Queue[tuple[int, str] | None],
        ready: asyncio.Queue[_Item], room: asyncio.Event,
    ) -> None:
        """Synthesize each segment as it comes, its chunks queued for :meth:`_synthesize`;
        waits while ``synthesis_ahead`` seconds are queued."""
        delivery = reply.delivery_id
        try:
            while (item := await segments.get()) is not None:
                segment_id, text = item
                if self._playback.is_fenced(delivery):
                    return
                ready.put_nowait((segment_id, text))
                reply.work = work = reply.synthesis_work(str(self._call.session_id),
                                                          self._clock.now())
                with scheduled(work):  # the stream's model jobs carry this ticket
                    chunks = self._tts.stream(text, delivery_id=delivery, segment_id=segment_id)
                    async for chunk in self.held(chunks):
                        reply.synthesized = True
                        reply.buffered_seconds += chunk.num_samples / chunk.sample_rate
                        ready.put_nowait(chunk)
                        while reply.buffered_seconds > self._ahead:
                            room.clear()
                            await room.wait()
                        if reply.speculation is None:
                            work.update("ahead", reply.slack(self._clock.now()))
                ready.put_nowait((segment_id, None))
        finally:
            ready.put_nowait(None)

    def _played_out(self, reply: SpokenReply, seconds: float) -> None:
        """Account ``seconds`` of audio handed over; the segment's next sentences are
        due when it has played (unless the reply is still held, speculative)."""
        if reply.speculation is not None:
            reply.held_seconds += seconds  # (held: it goes out when the turn is confirmed)
            return
        now = self._clock.now()
        if reply.played_from is None or reply.played_from + reply.audio_seconds < now:
            reply.played_from, reply.audio_seconds = now, 0.0  # started, or ran dry
        reply.audio_seconds += seconds

    def confirmed(self, reply: SpokenReply) -> None:
        """``reply``'s turn was confirmed (its speculation cleared, its release next): the
        audio held so far goes out from now, and the synthesis under way is no longer
        speculative: urgent if none of the reply's audio exists yet, else due when that
        audio has played (a later sentence does not take an urgent lane)."""
        now = self._clock.now()
        if reply.held_seconds > 0.0:
            reply.played_from, reply.audio_seconds = now, reply.held_seconds
        if reply.work is not None:
            reply.work.update(*reply.urgency(now))

    def _emit_for(self, reply: SpokenReply, event: SessionEvent) -> None:
        """Emit an event of ``reply``; a speculative reply's wait for its verdict."""
        if reply.speculation is not None:
            reply.speculation.events.append(event)
        else:
            self._emit(event)

    # -- drain, finish, settle ----------------------------------------------------------

    async def drain(self, reply: SpokenReply) -> None:
        """Wait for the speaker to hand over the last chunk, then seal the delivery."""
        if self._call.gone:
            await self.cut(reply, "Session closed.")  # no client left to play it
        speaker = reply.speaker
        if speaker is not None:
            await asyncio.wait({speaker})  # never raises: a fenced speaker was cancelled
            if not speaker.cancelled() and speaker.exception() is not None:
                logger.error("speech synthesis failed", exc_info=speaker.exception())
        self._playback.seal(reply.delivery_id)

    async def finish(self, reply: SpokenReply) -> bool:
        """Wait until the reply was played whole (True) or fenced (False); False at once
        for a reply whose turn never began (no event came: nothing of it was said)."""
        if reply.speaker is None:
            return False
        return await self._playback.wait_played(reply.delivery_id)

    async def settle_history(self, reply: SpokenReply, played: bool) -> None:
        """Emit how ``reply`` ended; an interrupted answer's history keeps what was heard.

        Args:
            reply: the reply.
            played: whether it was played whole (:meth:`finish`).
        """
        heard = self._playback.heard_reply(reply.delivery_id)
        now = self._clock.now()
        if played and not reply.failed:  # a failed reply was never "played whole"
            self._emit(ReplyFinished(session_id=self._call.session_id, at=now,
                                     turn_id=reply.turn_id, delivery_id=reply.delivery_id,
                                     text=heard.full_text))
        elif reply.interrupted:
            stop_ms = None
            if reply.onset_at is not None and reply.last_audio_end is not None:
                stop_ms = max(0.0, (reply.last_audio_end - reply.onset_at) * 1000.0)
            self._emit(ReplyInterrupted(
                session_id=self._call.session_id, at=now, turn_id=reply.turn_id,
                delivery_id=reply.delivery_id, heard_text=heard.text, full_text=heard.full_text,
                heard_seconds=heard.heard_seconds, stop_latency_ms=stop_ms,
            ))
            if reply.continued:  # its turn goes on: what was heard stays in its record
                async with self._lock:
                    record = self._turns.flow.state.replies.get(reply.delivery_id)
                    if record is not None:
                        record.heard_text = heard.text.strip()
                        record.heard_seconds = round(heard.heard_seconds, 3)
                        record.interrupted = True
            elif not reply.announcement:
                async with self._lock:
                    record_heard(self._turns.flow.state, reply.turn_id, reply.delivery_id,
                                 heard)
        if reply.announcement:  # heard announcements are conversation too
            cut = not played or reply.failed
            async with self._lock:
                record_announcement(
                    self._turns.flow, reply.delivery_id,
                    heard_text=heard.text if cut else heard.full_text,
                    full_text=heard.full_text, interrupted=cut,
                    heard_seconds=heard.heard_seconds,
                )
        self._playback.forget(reply.delivery_id)

    # -- interrupt ----------------------------------------------------------------------

    async def cut(self, reply: SpokenReply, reason: str) -> None:
        """Interrupt ``reply``: fence its audio, stop its synthesis and generation."""
        if reply.interrupted:
            return
        reply.interrupted = True
        self.fence(reply)  # first: not one more frame of it is played
        if reply.announcement and self._replies is not None:
            async with self._lock:
                self._replies.settle(reply.delivery_id, "interrupted", reason)
        else:
            self._interrupt(reply)

    def _interrupt(self, reply: SpokenReply) -> None:
        """Interrupt ``reply``'s turn through the runner (thread-safe and lock-free: it
        cancels the reply's LLM stream if still generating). Before the turn began (its
        first event), the runner does not know it yet: :meth:`generate` asks again then."""
        self._turns.interrupt(
            session_id=self._call.session_id, turn_id=reply.turn_id,
            input_revision=reply.input_revision, delivery_id=reply.delivery_id,
        )

    def fence(self, reply: SpokenReply) -> None:
        """Drop the rest of ``reply``'s audio (held audio too) and stop its synthesis."""
        self._playback.fence(reply.delivery_id)
        if self._echo_gate is not None:
            self._echo_gate.forget(reply.delivery_id)  # its unplayed chunks never echo
        if reply.speaker is not None:
            reply.speaker.cancel()  # stop synthesis too, not only playback

    def __repr__(self) -> str:
        return (
            f"ReplySpeaker(echo_gate={self._echo_gate is not None}, "
            f"announcements={self._replies is not None}, {self._playback!r})"
        )
