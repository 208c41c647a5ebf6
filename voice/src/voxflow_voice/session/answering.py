"""Answering: how a voice session answers a turn and speaks an announcement.

One part that the session, its speculative replies and its announcement delivery call;
it calls none of them back. It keeps the reply on air (:attr:`Answering.reply`: the
reply being spoken, which the session's listen and observe tasks read) and the latency
marks of every turn answered (:attr:`Answering.metrics`).

* :meth:`Answering.answer`: a committed turn, answered now: its reply is on air from the
  moment its turn starts, the flow runs with the state lock held.
* :meth:`Answering.turn`: the frame of any answer (its log lines and span, the
  ``TurnCommitted`` of a turn that is not speculative, then drain, finish, settle and
  the turn's metrics), around a body that starts the turn and generates its reply:
  :meth:`answer`'s, or the speculative replies' (held until the verdict, put on air with
  :meth:`Answering.on_air` when confirmed, or dropped: then nothing of it is settled or
  measured).
* :meth:`Answering.announce`: a claimed background announcement, spoken through the same
  speaker path and settled in the ReplyQueue.

A failed reply (e.g. the LLM provider is down) ends its turn, not the call: the runner
issued its ``failed`` event, the failure is logged here.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

from voxflow.ids import DeliveryId, TurnId, new_turn_id
from voxflow.logs import log_scope
from voxflow.turns import ReplyEvent, ReplyStream

from ..call import CallContext
from ..events import DeliverySettled, TurnCommitted, TurnMetrics
from ..speak.playback import Playback
from ..speak.speaker import ReplySpeaker, SpokenReply, iterate_events
from ..speak.speculation import Speculation
from .overlap import OverlapHandler
from .tracing import SessionTrace

__all__ = ["Answer", "Answering"]

logger = logging.getLogger(__name__)


@dataclass(eq=False, slots=True)
class Answer:
    """One turn being answered (the body of :meth:`Answering.turn`).

    Attributes:
        turn_id: the turn (a new one, or the turn the user went on with).
        input_revision: its input revision.
        text: its words.
        speculation: its speculation, for a speculative answer.
        reply: its reply, once :meth:`start` started the turn.
        dropped: the speculative reply was dropped unheard (nothing to settle).
    """

    call: CallContext[object]
    turn_id: TurnId
    input_revision: int
    text: str
    speculation: Speculation | None = None
    reply: SpokenReply | None = None
    dropped: bool = False

    def start(self) -> tuple[SpokenReply, ReplyStream]:
        """Start the turn: its reply, with the id the runner gave out, and its events."""
        stream = self.call.turns.astream_turn(self.text, turn_id=self.turn_id,
                                              input_revision=self.input_revision)
        self.reply = SpokenReply(self.turn_id, self.input_revision, stream.delivery_id,
                                 speculation=self.speculation)
        return self.reply, stream


class Answering:
    """Answers the turns of one voice call and speaks its announcements (module docs).

    Args:
        call: the call (its runner, clock, locks, ReplyQueue and where events go).
        speaker: speaks every reply.
        playback: the fenced playback stage (its dropped chunks are a turn's fenced ones).
        overlap: the barge-in handling (a settled reply's policy override is dropped).
        trace: the session's spans.
    """

    def __init__(self, call: CallContext[object], speaker: ReplySpeaker, playback: Playback,
                 overlap: OverlapHandler, trace: SessionTrace) -> None:
        self._call = call
        self._speaker = speaker
        self._playback = playback
        self._overlap = overlap
        self._trace = trace
        self.reply: SpokenReply | None = None
        """The reply being spoken (answer or announcement), if any."""
        self.metrics: list[TurnMetrics] = []
        """The latency marks of every turn answered, in order."""

    def on_air(self, reply: SpokenReply) -> None:
        """``reply`` (a confirmed speculative one) is the reply being spoken from now on."""
        self.reply = reply

    async def answer(self, text: str, speech_end: float, *,
                     turn: tuple[TurnId, int] | None = None) -> None:
        """Answer the committed turn ``text`` (``turn``: the turn and input revision the
        user went on with; a new turn otherwise)."""
        # The flow runs with the state lock held, so job commits and queue operations
        # never interleave with it; audio waits happen outside it.
        async with self.turn(text, speech_end, turn=turn) as answer, self._call.lock:
            reply, stream = answer.start()
            self.reply = reply
            await self._speaker.generate(reply, self._speaker.held(stream))

    @contextlib.asynccontextmanager
    async def turn(
        self, text: str, speech_end: float, speculation: Speculation | None = None, *,
        turn: tuple[TurnId, int] | None = None,
    ) -> AsyncIterator[Answer]:
        """The frame of one answer around its body, which starts the turn
        (:meth:`Answer.start`) and generates its reply (see the module docs)."""
        call = self._call
        turn_id, revision = turn if turn is not None else (new_turn_id(), 1)
        speculative = speculation is not None and not speculation.late
        with log_scope(turn_id=str(turn_id)), self._trace.turn(
                turn_id, speech_end, speculative=speculative, text=text):
            answer = Answer(call, turn_id, revision, text, speculation)
            transcript_final = call.clock.now()
            if speculation is None:
                call.emit(TurnCommitted(session_id=call.session_id, at=transcript_final,
                                        turn_id=turn_id, text=text, speech_end_at=speech_end,
                                        input_revision=revision))
            dropped_before = self._playback.statistics().chunks_dropped
            try:
                try:
                    yield answer
                except Exception:
                    logger.exception("reply failed", extra={"turn_id": turn_id})
                if answer.dropped:
                    return  # held and dropped unheard (or not answered at all)
                reply = answer.reply
                if reply is not None:
                    await self._speaker.drain(reply)
                    await self.settle(reply, await self._speaker.finish(reply))
            finally:
                self.reply = None
            fenced = self._playback.statistics().chunks_dropped - dropped_before
            metrics = TurnMetrics(
                session_id=call.session_id, at=call.clock.now(), turn_id=turn_id,
                delivery_id=reply.delivery_id if reply is not None else None,
                speech_end=speech_end, transcript_final=transcript_final,
                first_text=reply.first_text if reply is not None else None,
                first_audio=reply.first_audio if reply is not None else None,
                playback_end=reply.last_audio_end if reply is not None else None,
                interrupted=reply is not None and reply.interrupted, fenced_chunks=fenced,
                speculative=speculative,
            )
            self.metrics.append(metrics)
            call.emit(metrics)

    async def settle(self, reply: SpokenReply, played: bool) -> None:
        """Settle ``reply``'s history, then drop its barge-in policy override."""
        await self._speaker.settle_history(reply, played)
        self._overlap.forget(reply.delivery_id)

    async def announce(
        self, turn_id: TurnId, delivery_id: DeliveryId, events: Sequence[ReplyEvent]
    ) -> None:
        """Speak a claimed announcement (its ready reply events) and settle it."""
        # its lines and its span name the delivery (and the turn that asked for the jobs)
        with log_scope(delivery_id=str(delivery_id)), self._trace.announcement(
                turn_id, delivery_id):
            await self._announce(turn_id, delivery_id, events)

    async def _announce(
        self, turn_id: TurnId, delivery_id: DeliveryId, events: Sequence[ReplyEvent]
    ) -> None:
        call = self._call
        reply = SpokenReply(turn_id=turn_id, input_revision=events[0].input_revision,
                            delivery_id=delivery_id, announcement=True)
        self.reply = reply
        try:
            await self._speaker.generate(reply, iterate_events(events))
            await self._speaker.drain(reply)
            played = await self._speaker.finish(reply)
            assert call.replies is not None
            async with call.lock:
                call.replies.settle(delivery_id, "completed" if played else "interrupted")
                record = call.turns.flow.state.deliveries.get(delivery_id)
            status = record.status if record is not None else None
            if status is not None and status != "pending" and status != "scheduled":
                logger.info("announcement %s", status, extra={
                    "session_id": str(call.session_id), "delivery_id": str(delivery_id)})
                call.emit(DeliverySettled(session_id=call.session_id, at=call.clock.now(),
                                          delivery_id=delivery_id, status=status))
            await self.settle(reply, played)
        finally:
            self.reply = None

    def __repr__(self) -> str:
        on_air = self.reply.delivery_id if self.reply is not None else None
        return f"Answering(on_air={on_air!r}, turns={len(self.metrics)})"
