"""Continuation: the user going on with a committed turn after its reply began.

A turn is committed at its end, and its reply may already be playing when the user goes on
("a table for ... four, at eight"). ``TurnDetection.continue_within`` keeps a confirmed
turn open that long after its commit even once its reply was heard (``continue_complete``,
the default: any turn; off: only one that was unfinished, its words ending on "... a table
for" or its pause judged incomplete by the end-of-turn model, :func:`continuable`), and no
longer once its answer asked for a job (:func:`started_jobs`: a turn that acted on the
world stands). Speech starting meanwhile (:func:`may_go_on`) is :class:`GoingOn` until the
barge-in rules judge it (:func:`goes_on`, on the words of that speech alone,
:func:`own_speech`): the reply pauses; a cough or a backchannel resumes it and the turn
stands (the speech is an utterance of its own); a request, or speech the rules cut the
reply for, goes on with the turn: the reply is cut as a barge-in cuts it (``BargeIn``,
then ``ReplyInterrupted`` with its heard part, kept in its reply record; heard whole, it
settles completed), the flow rolled back to before the turn (:func:`roll_back`: its reply
record and turn record kept, so every identity the client saw stays known), and the
detector's next utterance, all the words from the turn's onset, is answered once as the
same turn, its next ``input_revision``: one user message in the history.

:class:`~voxflow_voice.session.speculative_replies.SpeculativeReplies` carries this out
(it keeps a committed turn open and answers the continuation through its answer path);
this module holds the parts of it that need none of that state, and imports nothing of
the session.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

from voxflow.clock import Clock
from voxflow.flow import RollbackPoint
from voxflow.ids import TurnId
from voxflow.turns import TurnRunner

from ..audio import STT_SAMPLE_RATE, AudioChunk
from ..engines.end_of_turn import words_verdict
from ..listen.early_stt import EarlyTranscriber
from ..listen.turn_detector import TurnDetector, TurnResumed, UtterancePaused, UtteranceReady
from ..speak.speaker import SpokenReply, hold_clock
from ..speak.speculation import Speculation
from .overlap import OverlapHandler

__all__ = ["GoingOn", "continuable", "goes_on", "may_go_on", "own_speech", "roll_back",
           "started_jobs", "unfinished", "words_after"]

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class GoingOn:
    """Speech that started within ``continue_within`` of a committed turn whose reply was
    heard: the user going on with the turn, or a sound over its reply (a cough, an
    "mm-hm"), until its words or the barge-in rules say which."""

    resumed: TurnResumed
    spec: Speculation
    reply: SpokenReply

    def go_on(self) -> tuple[int, TurnId, int]:
        """The user goes on with this turn: it is answered again with all its words (its
        reply, if cut, keeps its heard part; heard whole, it stays completed).

        Returns:
            The continuation: the onset sample of the utterance that answers it, the
            turn's id and its next ``input_revision``.
        """
        reply, spec = self.reply, self.spec
        reply.continued = reply.interrupted
        spec.continue_("the user went on with the turn after its reply began")
        return spec.paused.onset_sample, reply.turn_id, reply.input_revision + 1


def own_speech(event: UtterancePaused | UtteranceReady, resumed: TurnResumed,
               pre_roll: float) -> UtterancePaused:
    """The part of ``event`` (an utterance that went on from a committed turn's onset)
    that the speech ``resumed`` it said: from up to ``pre_roll`` seconds before that
    speech's onset, never before the turn's commit (the turn's own words)."""
    audio = event.audio
    start = audio.start_sample or 0
    first = max(resumed.onset_sample - round(pre_roll * STT_SAMPLE_RATE),
                resumed.committed_at)
    skip = min(max(0, first - start), audio.num_samples)
    chunk = AudioChunk.from_float(audio.samples()[skip:], STT_SAMPLE_RATE,
                                  start_sample=start + skip)
    return UtterancePaused(chunk, resumed.onset_sample, event.end_sample)


def continuable(spec: Speculation, detector: TurnDetector) -> bool:
    """Whether ``spec``'s turn may be continued (``TurnDetection.continue_within`` on, its
    words known): any turn (``continue_complete``), else only an unfinished one."""
    rules = detector.settings
    if rules.continue_within <= 0 or spec.text is None:
        return False
    return rules.continue_complete or unfinished(spec, detector)


def may_go_on(resumed: TurnResumed, spec: Speculation, reply: SpokenReply,
              turns: TurnRunner, detector: TurnDetector) -> bool:
    """Whether the speech ``resumed`` may go on with ``spec``'s committed turn, whose
    reply is ``reply``: the turn is :func:`continuable`, the speech began within
    ``continue_within`` of its commit, and its answer started no job."""
    window = detector.settings.continue_within * STT_SAMPLE_RATE
    return (continuable(spec, detector)
            and resumed.onset_sample - resumed.committed_at <= window
            and not started_jobs(turns, reply.turn_id))


def unfinished(spec: Speculation, detector: TurnDetector) -> bool:
    """Whether ``spec``'s words say more was coming, or the end-of-turn model judged
    its last pause incomplete."""
    if spec.text is not None and words_verdict(spec.text) is False:
        return True
    end = spec.paused.end_sample
    return any(v.end_sample == end and not v.complete for v in detector.decisions)


def started_jobs(turns: TurnRunner, turn_id: TurnId) -> bool:
    """Whether ``turn_id``'s answer started a background job: the turn acted on the
    world (its job runs on, and will be announced), so it stands; rolling it back to
    merge a continuation would lose the job's record while the job runs."""
    jobs = getattr(turns.flow.state, "jobs", None) or {}
    return any(getattr(job, "origin_turn_id", None) == turn_id for job in jobs.values())


def words_after(text: str, turn: str) -> str | None:
    """The words of ``text`` (a transcript of a turn and the speech that went on with
    it) after the turn's own words ``turn`` (its transcript), compared without case and
    punctuation; ``None`` when ``text`` does not start with them (then they are not
    known apart)."""
    said, first = text.split(), turn.split()
    if not first or [_key(w) for w in said[: len(first)]] != [_key(w) for w in first]:
        return None
    return " ".join(said[len(first):])


def _key(word: str) -> str:
    return "".join(c for c in word.lower() if c.isalnum())


async def goes_on(going: GoingOn, event: UtterancePaused | UtteranceReady, *,
                  early: EarlyTranscriber, overlap: OverlapHandler, clock: Clock,
                  pre_roll: float) -> bool:
    """Whether the speech ``going`` goes on with its turn, ``event`` pausing (or ending)
    it: its reply was cut already, or the barge-in rules (:meth:`OverlapHandler.judge`)
    take the words of that speech for a request. False: a backchannel or a noise, the
    turn stands.

    The words of that speech are read from the transcript of ``event`` (all the words
    from the turn's onset, which the end-of-turn judgement, the speculative reply and
    the turn need anyway: decoded once) after the turn's own words
    (:func:`words_after`); only when that transcript does not start with them, or has
    no words after them, is the speech decoded apart (:func:`own_speech`)."""
    reply = going.reply
    if reply.interrupted:
        return True
    whole = (event if isinstance(event, UtterancePaused)
             else UtterancePaused(event.audio, event.onset_sample, event.end_sample))
    with hold_clock(clock):
        transcript = await early.transcript_of(whole)
        text = words_after(transcript.text if transcript is not None else "",
                           going.spec.text or "")
        if not text:  # (no words after the turn's: a short start of speech may be lost
            # in the longer decode, "I need a flight to Boston." for "... Boston and")
            transcript = await early.transcript_of(own_speech(event, going.resumed, pre_roll))
            text = transcript.text if transcript is not None else ""
    kind = await overlap.judge(reply, event.end_sample, text)
    return reply.interrupted or kind == "request"


async def roll_back(turns: TurnRunner, lock: asyncio.Lock, reply: SpokenReply,
                    generation: asyncio.Task[None], point: RollbackPoint) -> None:
    """The user went on with ``reply``'s turn (cut already): roll the flow of ``turns``
    back to ``point``, before the turn, keeping its turn and reply records (the reply was
    heard: its identity, its fence and what was heard of it stay known), and save that,
    ``lock`` (the session's state lock) held."""
    await asyncio.wait({generation})  # the cut closed its stream; never raises
    if not generation.cancelled() and generation.exception() is not None:
        logger.warning("continued reply: its generation failed",
                       exc_info=generation.exception())
    state = turns.flow.state
    turn = state.turns.get(reply.turn_id)
    record = state.replies.get(reply.delivery_id) if reply.delivery_id else None

    def keep(restored: Any) -> None:  # in the one save of the rollback
        if turn is not None:
            restored.turns[turn.turn_id] = turn
        if record is not None:
            restored.replies[record.delivery_id] = record

    try:
        async with lock:
            await point.restore(keep)  # (saves it, with the heard reply's records)
    except Exception:  # (a failed write: the next save is a full one)
        logger.exception("saving a continued turn failed")
