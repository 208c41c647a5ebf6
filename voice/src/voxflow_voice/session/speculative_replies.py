"""SpeculativeReplies: a voice session's answers in the user's pause, until their verdict.

The rules are those of :mod:`voxflow_voice.speak.speculation` (one
:class:`~voxflow_voice.speak.speculation.Speculation` per answered pause); this is the part of a
:class:`~voxflow_voice.session.VoiceSession` that carries them out:

* **pause** (:meth:`SpeculativeReplies.paused`): while nothing else is spoken, the words
  heard up to the pause are transcribed and answered in a task of their own, through the
  session's answer path, which hands the turn back here (:meth:`~SpeculativeReplies.generate`,
  the state lock held while the flow runs, not while the verdict is awaited, so a job's
  result is committed and queued the moment it is ready; the jobs the turn asks for are
  admitted only once it is final): its audio held, its events kept back;
* **verdict**: the turn's end on the very same audio confirms it
  (:meth:`~SpeculativeReplies.turn_ended`); speech after the pause
  (:meth:`~SpeculativeReplies.after_frame`) or a turn ending on other audio discards it.
  Confirmed, the reply becomes the session's reply, ``TurnCommitted`` and then its held
  events are emitted, and its audio is released; discarded, its generation is closed, its
  audio fenced unheard and the flow rolled back (``SpeculativeReplyDiscarded``);
* **provisional** (``TurnDetection.resume_grace``): a confirmed turn may still be taken
  back (:meth:`~SpeculativeReplies.resumed`, ``TurnRevoked``, dropped as a discarded one)
  until a sample of its reply is heard (:meth:`~SpeculativeReplies.heard`) or the grace is
  over; the detector is told it is final between frames
  (:meth:`~SpeculativeReplies.before_frame`);
* **continued** (``TurnDetection.continue_within``, :mod:`.continuation`): a confirmed
  turn stays open that long after its commit, even once its reply was heard, unless its
  answer asked for a job (:meth:`~SpeculativeReplies._asked_job`). Speech starting
  meanwhile (:meth:`~SpeculativeReplies.resumed`) is judged by the barge-in rules
  (:meth:`~SpeculativeReplies.went_on`): a cough or a backchannel leaves the turn standing;
  a request goes on with it, its reply cut and the flow rolled back, and the detector's
  next utterance is answered once as the same turn, its next ``input_revision``
  (:meth:`~SpeculativeReplies.continuation`). A turn
  answered the usual way (after its end) is kept open until its words are known
  (:meth:`~SpeculativeReplies.late`): continuable, it is answered through this path with
  a speculation confirmed from the start. The window is counted in input samples by the
  detector, and on the session clock once the input stalls.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

from voxflow.flow import RollbackPoint
from voxflow.ids import TurnId
from voxflow.turns import ReplyEvent, ReplyStream

from ..audio import STT_SAMPLE_RATE
from ..call import CallContext
from ..events import (
    SpeculativeReplyDiscarded,
    TurnCommitted,
    TurnRevoked,
)
from ..listen.barge_in import BargeInArbiter
from ..listen.early_stt import EarlyTranscriber
from ..listen.turn_detector import TurnDetector, TurnResumed, UtterancePaused, UtteranceReady
from ..speak.playback import Playback
from ..speak.speaker import ReplySpeaker, SpokenReply, hold_clock
from ..speak.speculation import Speculation
from .answering import Answering
from .continuation import GoingOn, continuable, goes_on, may_go_on, roll_back, started_jobs
from .floor import FloorReporter
from .overlap import OverlapHandler
from .voice_settings import VoiceSettings

__all__ = ["SpeculativeReplies"]

logger = logging.getLogger(__name__)

_STALLED = 0.25
"""Seconds without an input frame after which a provisional turn's window is counted on
the session clock (a transport that stopped sending: DTX, hold), not in input samples."""



class SpeculativeReplies:
    """The speculative replies of one voice session, from the pause to the verdict.

    Args:
        call: the call: its TurnRunner (whose flow answers, and is rolled back), clock
            (held while a pause is transcribed), ``speaking`` lock (held while any reply
            is spoken), state lock (held while a speculative turn runs, and while one is
            rolled back), job runner (a speculative turn's jobs start once it is final),
            where events go, the clock time of an input sample, whether the client
            is gone, and whether to answer in pauses at all (its settings'
            ``speculative_replies``).
        detector: the session's turn detector (its provisional turn sealed or detached).
        early: transcribes the pause's audio.
        arbiter: tells a turn from a backchannel over a reply.
        speaker: speaks the replies (holds, fences and cuts their audio).
        playback: releases a confirmed reply's held audio.
        overlap: the session's barge-in handling (judges speech over a reply).
        floor: the session's floor (no speculation while a turn waits for its answer).
        answering: the session's answering: a speculative turn is answered in its frame
            (:meth:`answer`), a confirmed reply put on air there (before its audio is
            released, so its receipts find it); its reply on air is read.
    """

    def __init__(
        self,
        call: CallContext[VoiceSettings],
        detector: TurnDetector,
        early: EarlyTranscriber,
        arbiter: BargeInArbiter,
        speaker: ReplySpeaker,
        playback: Playback,
        overlap: OverlapHandler,
        floor: FloorReporter,
        answering: Answering,
    ) -> None:
        self._call = call
        self._turns = call.turns
        self._detector = detector
        self._early = early
        self._arbiter = arbiter
        self._speaker = speaker
        self._playback = playback
        self._overlap = overlap
        self._floor = floor
        self._clock = call.clock
        self._speaking = call.speaking
        self._lock = call.lock
        self._jobs = call.jobs
        self._answering = answering
        self._emit = call.emit
        self._time_of = call.time_of
        self._enabled = call.settings.speculative_replies
        self._pending: Speculation | None = None  # no verdict yet
        self._provisional: Speculation | None = None  # confirmed, may be taken back
        self._seal_at: int | None = None  # a provisional turn's end to seal (it was heard)
        self._allow_at: int | None = None  # an unfinished turn's end the detector keeps open
        self._late: int | None = None  # the end of a turn answered the usual way, kept open
        # (onset sample, turn id, next input revision) of the turn the user went on with
        self._continuing: tuple[int, TurnId, int] | None = None
        self._going: GoingOn | None = None  # speech after a heard turn, undecided
        self._detach_at: TurnResumed | None = None  # its speech apart (told between frames)
        self._committed = 0.0  # clock time of the last commit
        self._timer: asyncio.Task[None] | None = None  # seals a provisional turn on the clock
        rules = detector.settings
        self._grace = rules.resume_grace
        self._window = rules.continue_within
        self._revoked: set[int] = set()  # end samples of the utterances taken back
        self._running: set[asyncio.Task[bool]] = set()

    # -- the listen task --------------------------------------------------------------

    def before_frame(self) -> None:
        """Before the detector scores a frame: seal its provisional turn if the reply was
        heard meanwhile (the detector is told only between frames, by the listen task)."""
        if self._seal_at is not None:
            if self._detector.provisional == self._seal_at:
                self._detector.seal()
            self._seal_at = None
        if self._allow_at is not None:
            self._detector.allow_continuation(self._allow_at)
            self._allow_at = None
        if self._detach_at is not None:
            self._detector.detach(self._detach_at)
            self._detach_at = None

    def after_frame(self) -> None:
        """After a frame's detector events: discard the pending speculation if the user
        spoke on; a provisional turn is final once its ``resume_grace`` is over."""
        spec = self._pending
        if spec is not None and spec.spoken_over(self._detector.speech_end):
            spec.discard("the user spoke on")
            self._pending = None
        held = self._provisional
        if held is not None and self._detector.provisional != held.paused.end_sample:
            self._seal(held)  # resume_grace is over
        going = self._going
        if going is not None:
            if going.reply.interrupted and going.reply.onset_at is not None:
                self._going = None  # the barge-in rules cut its reply: the user goes on
                self._continuing = going.go_on()
            elif going.reply.interrupted or started_jobs(self._turns, going.reply.turn_id):
                self._going = None  # cut otherwise (a mute), or it acted on the world:
                self._detached(going.resumed, going.spec)  # the turn stands

    def paused(self, paused: UtterancePaused) -> None:
        """Answer the utterance heard up to this pause, held unheard until the verdict."""
        if (not self._enabled or self._pending is not None
                or self._answering.reply is not None or self._speaking.locked()
                or self._floor.pending_turns or self._call.gone or self._turns.flow.state.ended):
            return
        spec = Speculation(paused)
        self._pending = spec
        spec.task = asyncio.create_task(self._run(spec), name="voice.speculate")
        self._running.add(spec.task)
        spec.task.add_done_callback(self._running.discard)

    def turn_ended(self, ready: UtteranceReady) -> Speculation | None:
        """The turn ended on ``ready``: the pending speculation is confirmed if it answers
        this very audio, else discarded. The turn stays provisional while a confirmed
        speculative reply may be taken back, else it is final.

        Returns:
            The speculation that goes with the turn (None if there was none).
        """
        spec, self._pending = self._pending, None
        self._committed = self._clock.now()
        if spec is not None:
            if spec.matches(ready):
                spec.confirm()
            else:
                spec.discard("the turn ended on other audio")
        if self._provisional is not None:  # (sealed already: a turn came after it)
            self._seal(self._provisional)
        if (self._detector.provisional == ready.end_sample and spec is not None
                and not spec.discarded
                # (asked first: a continuation may come after the grace is over)
                and (self._open_for_continuation(spec) or self._grace > 0)):
            self._keep_open(spec)  # may be taken back until its reply is heard
        elif self._window > 0 and (spec is None or spec.discarded):
            # answered the usual way: open until its words say whether it is continuable
            self._late = ready.end_sample  # (late() decides)
        else:  # final: no grace, or answered the usual way (nothing to take back)
            self._detector.seal()
            if spec is not None:
                spec.seal()
        return spec

    def late(self, utterance: UtteranceReady, text: str) -> Speculation | None:
        """The turn that ended on ``utterance`` is answered the usual way, its words
        ``text``: if it may still be continued, a confirmed
        speculation for it (answer it through :meth:`generate`: it stays open, and is
        rolled back if the user goes on with it); else None, and it is final."""
        end = utterance.end_sample
        late, self._late = self._late, None
        spec = Speculation(UtterancePaused(utterance.audio, utterance.onset_sample, end))
        spec.text, spec.late = text.strip(), True
        if (late != end or self._detector.provisional != end
                or not continuable(spec, self._detector)):
            self._seal_at = end  # (if still open: final, the detector told between frames)
            return None
        spec.confirm()
        if self._provisional is not None:
            self._seal(self._provisional)
        self._keep_open(spec)
        self._allow_at = end
        return spec

    def _keep_open(self, spec: Speculation) -> None:
        """``spec``'s committed turn is provisional: it may be taken back or continued
        until it is sealed. The detector counts that window in input samples; if the
        transport stops sending audio (DTX, a call on hold), the session clock closes it
        (:data:`_STALLED`), so its reply settles and its jobs start all the same."""
        self._provisional = spec
        if self._timer is not None:
            self._timer.cancel()
        deadline = self._committed + max(self._grace, self._window)
        self._timer = asyncio.create_task(self._close_after(spec, deadline),
                                          name="voice.provisional")

    async def _close_after(self, spec: Speculation, deadline: float) -> None:
        while self._provisional is spec or (self._going is not None
                                            and self._going.spec is spec):
            now = self._clock.now()
            if now >= deadline and now - self._time_of(self._detector.position) >= _STALLED:
                # no input for a while: the window is over on the clock
                going, self._going = self._going, None
                if going is not None:  # a sound no words followed: the turn stands
                    self._detach_at = going.resumed  # (the detector told between frames)
                self._seal(spec)
                return
            await self._clock.sleep(max(deadline - now, _STALLED))

    def _open_for_continuation(self, spec: Speculation) -> bool:
        """Keep ``spec``'s committed turn open while it may be continued (its words not
        known yet: until they are); the detector is told between frames."""
        if spec.text is None:
            return self._window > 0
        if continuable(spec, self._detector):
            self._allow_at = spec.paused.end_sample
            return True
        return False

    def continuation(self, onset_sample: int) -> tuple[TurnId, int] | None:
        """The turn (its id and next ``input_revision``) that the utterance from
        ``onset_sample`` goes on with, if the user went on with one (None: a new turn)."""
        going = self._continuing
        if going is None or going[0] != onset_sample:
            return None
        return going[1], going[2]

    async def resumed(self, event: TurnResumed) -> bool:
        """The user went on after a committed turn: take it back if nothing of its reply
        was heard within ``resume_grace`` (the continuation then makes one turn with
        it); go on with it if it may be continued (``continue_within``: its reply cut, the
        turn answered again with all its words); else keep it (the speech is a new turn,
        over the reply: a barge-in).

        Returns:
            True if the session's reply was taken back with its turn (fenced unheard: it
            is no longer being spoken).
        """
        spec = self._provisional
        reply = self._answering.reply
        if reply is not None and (spec is None or reply.provisional is not spec):
            reply = None  # (an announcement, or the reply of another turn)
        if spec is None or spec.sealed or spec.paused.end_sample != event.end_sample:
            return self._detached(event, spec)
        # (A confirmed reply stays the session's reply until its turn is final, even once
        # it was played whole: the answer path waits for the verdict of its provisional.)
        heard = reply is not None and reply.first_audio is not None
        if heard or event.onset_sample - event.end_sample > self._grace * STT_SAMPLE_RATE:
            if reply is None or not may_go_on(event, spec, reply, self._turns, self._detector):
                return self._detached(event, spec)
            # The user goes on with the turn, or it is a sound over its reply (a cough, an
            # "mm-hm"): the reply is paused as for any barge-in, and a barge-in cutting
            # it, or else the speech's words at its first pause (went_on), decide.
            self._provisional = None  # (its clock bound goes on: _close_after)
            self._going = GoingOn(event, spec, reply)
            return False
        taken = False
        if reply is not None:
            self._speaker.fence(reply)  # not one sample more (none was heard)
            taken = True
        spec.revoke("the user went on speaking before a sample of the reply was heard")
        self._provisional = None
        self._revoked.add(event.end_sample)
        return taken

    async def went_on(self, event: UtterancePaused | UtteranceReady) -> bool:
        """``event`` pauses (or ends) the utterance that speech after a committed turn
        continued, its reply neither cut nor decided yet: the words of that speech decide
        (through the barge-in rules, :meth:`OverlapHandler.judge`). A request goes on
        with the turn (its reply cut, unless heard whole); a backchannel or a noise
        leaves the turn standing and its reply playing on, and the speech is an
        utterance of its own (the detector hands it out again from its onset).

        Returns:
            True if ``event`` is no longer the user's utterance (ignore it).
        """
        going = self._going
        if going is None or event.onset_sample != going.spec.paused.onset_sample:
            return False
        self._going = None
        reply = going.reply
        if not await goes_on(going, event, early=self._early, overlap=self._overlap,
                             clock=self._clock, pre_roll=self._detector.settings.pre_roll):
            if isinstance(event, UtterancePaused):
                self._detached(going.resumed, going.spec)
            else:  # (it ended already: nothing in it is a turn)
                self._seal(going.spec)
                self._seal_at = event.end_sample
            return True
        # The user goes on with the turn; its reply is cut if it may be (a must_finish
        # reply, or with interruptions off, plays out first)
        if (not reply.interrupted and self._overlap.may_cut(reply)
                and not reply.heard_whole(self._playback, self._clock.now())):
            await self._overlap.cut(reply, self._time_of(going.resumed.onset_sample),
                                    "The user went on with the turn.")
        self._continuing = going.go_on()
        return False

    def _detached(self, event: TurnResumed, spec: Speculation | None) -> bool:
        """The speech is a new utterance: ``spec``'s turn stands."""
        self._detector.detach(event)
        if spec is not None:
            self._seal(spec)
        return False

    def input_ended(self) -> None:
        """The adapter's input ended: a pending speculation is discarded (a turn the
        detector's flush ended confirmed it already), a provisional turn is final."""
        if self._pending is not None:
            self._pending.discard("the call ended")
            self._pending = None
        if self._provisional is not None:
            self._seal(self._provisional)
        if self._going is not None:
            self._seal(self._going.spec)
            self._going = None

    # -- the converse and observe tasks -----------------------------------------------

    async def answered(self, utterance: UtteranceReady, spec: Speculation | None) -> bool:
        """Whether the turn that ended on ``utterance`` needs no answer the usual way: its
        speculative reply became its reply (and was spoken), or it was taken back (a later
        utterance has it all). Otherwise it is final from here."""
        if spec is not None and spec.task is not None and await spec.task:
            return True
        if utterance.end_sample in self._revoked:
            self._revoked.discard(utterance.end_sample)
            return True
        if spec is not None:
            if self._window > 0 and self._provisional is spec:
                spec.seal()  # answered the usual way: late() decides whether it stays open
                self._provisional = None
                self._late = utterance.end_sample
            else:
                self._seal(spec)
        return False

    def heard(self, reply: SpokenReply) -> None:
        """The client played a first sample of ``reply``: its turn, if provisional, is
        final (unless it may be continued: then it stays open)."""
        spec = reply.provisional
        if spec is not None and not (spec.text is not None and continuable(spec, self._detector)):
            self._seal(spec)

    async def aclose(self) -> None:
        """The session closes: settle every speculation and wait for their tasks."""
        if self._pending is not None:
            self._pending.discard("the session closed")
        if self._provisional is not None:
            self._seal(self._provisional)
        if self._going is not None:
            self._seal(self._going.spec)
            self._going = None
        if self._timer is not None:
            self._timer.cancel()
        if self._running:
            await asyncio.wait(self._running)

    # -- the speculative answer ---------------------------------------------------------

    async def _run(self, spec: Speculation) -> bool:
        """True if the speculative reply became the turn's reply (it was then spoken)."""
        try:
            with hold_clock(self._clock):
                transcript = await self._early.pause_words(spec.paused)
        finally:
            if self._pending is spec:  # no reply to hold back: nothing to decide
                self._pending = None
        text = transcript.text.strip() if transcript is not None else ""
        spec.text = text
        if self._provisional is spec:  # committed while its words were transcribed
            if continuable(spec, self._detector):
                self._allow_at = spec.paused.end_sample
            elif self._grace <= 0:
                self._seal(spec)
        if (spec.discarded or not text or self._speaking.locked()
                or self._answering.reply is not None
                or not self._arbiter.is_turn(spec.paused.onset_sample, text)
                or self._turns.flow.state.ended):
            return False  # the turn, if it ends here, is answered the usual way
        if not spec.decided:  # (confirmed already if the turn ended while STT ran)
            self._pending = spec  # pending again: its verdict comes from listening
        async with self._speaking:
            return await self.answer(text, self._time_of(spec.paused.end_sample), spec)

    async def answer(self, text: str, speech_end: float, spec: Speculation) -> bool:
        """Answer ``spec``'s turn (``text``) in the session's answering frame, its reply
        held until the verdict (:meth:`generate`). False if the speculation was
        discarded (nothing of it was said); True once its reply settled."""
        going = self.continuation(spec.paused.onset_sample)
        async with self._answering.turn(text, speech_end, spec, turn=going) as answer:
            reply, stream = answer.start()
            answer.dropped = not await self.generate(reply, stream, text, spec)
        return not answer.dropped

    async def generate(
        self, reply: SpokenReply, stream: ReplyStream, text: str, spec: Speculation
    ) -> bool:
        """Run the turn ``text`` (``stream``, the turn the session started for ``reply``,
        not read yet) with its audio held; on the verdict release it (True) or drop it
        and roll the turn back (False, as when the state cannot be rolled back: then
        nothing ran).

        The state lock is held while the flow runs the turn (and while it is rolled
        back), not while the verdict is awaited: a job's result that is ready meanwhile
        is committed and queued at once, and a rollback keeps it
        (:class:`~voxflow.flow.RollbackPoint` keeps the work of others). The jobs the
        turn asks for are admitted once it is final (none if it is undone)."""
        if self._jobs is not None:
            self._jobs.hold_admissions(reply.turn_id, asked=lambda: self._asked_job(spec))
        try:
            async with self._lock:
                # A speculative turn may be undone: copy the state before it starts
                # (~1.4 ms with 100 turns of records, ~15 ms with 1,000).
                try:
                    point = RollbackPoint.take(self._turns.flow)
                except Exception as exc:  # e.g. an object that cannot be copied
                    logger.warning("no speculative reply: the state cannot be "
                                   "rolled back (%s)", exc)
                    return False  # the turn, if it ends here, is answered as usual
            return await self._hold(reply, self._speaker.held(stream), spec, point, text)
        finally:
            self._admit(reply)  # (final, or undone: then none is admitted)

    def _asked_job(self, spec: Speculation) -> None:
        """``spec``'s turn asked for a job (held until the turn is final): a turn that
        acts on the world stands, so it is final from now on (its job starts at once) if
        it was confirmed; unconfirmed, its verdict seals it (:meth:`_hold`)."""
        if self._provisional is spec:
            self._seal(spec)

    def _admit(self, reply: SpokenReply) -> None:
        """``reply``'s turn is final (or undone): the jobs it asked for are admitted
        (idempotent; none if it was rolled back)."""
        if self._jobs is not None:
            self._jobs.release_admissions(reply.turn_id)

    async def _generate(self, reply: SpokenReply, events: AsyncIterator[ReplyEvent]) -> None:
        """The flow runs the turn, the state lock held (never across the verdict)."""
        async with self._lock:
            await self._speaker.generate(reply, events)

    async def _hold(
        self, reply: SpokenReply, events: AsyncIterator[ReplyEvent], spec: Speculation,
        point: RollbackPoint, text: str,
    ) -> bool:
        """Generate with the audio held; on the verdict release it (True) or drop it and
        roll the turn back (False)."""
        # Not voxflow.tasks.background(): a dropped reply's generation is cancelled
        # before its audio is fenced and its failure only logged (_drop), while a kept
        # reply's generation runs on and its failure is the turn's.
        generation = asyncio.create_task(self._generate(reply, events), name="voice.generate")
        verdict = asyncio.ensure_future(spec.verdict())
        await asyncio.wait({generation, verdict}, return_when=asyncio.FIRST_COMPLETED)
        if not await verdict or spec.revoked:
            await self._drop(reply, generation, point)
            self._emit(SpeculativeReplyDiscarded(
                session_id=self._call.session_id, at=self._clock.now(), turn_id=reply.turn_id,
                text=text, reason=spec.reason,
            ))
            return False
        self._answering.on_air(reply)
        reply.speculation = None
        if not spec.sealed and started_jobs(self._turns, reply.turn_id):
            self._seal(spec)  # a turn that asked for a job stands (never continued): final
        if spec.sealed:  # final already: the jobs it asked for start now, not once its
            self._admit(reply)  # held audio was handed over
        if not spec.sealed:
            reply.provisional = spec  # until a sample of it is heard (or resume_grace)
        self._speaker.confirmed(reply)  # its synthesis is no longer speculative work
        now = self._clock.now()
        self._emit(TurnCommitted(session_id=self._call.session_id, at=now, turn_id=reply.turn_id,
                                 text=text, speech_end_at=self._time_of(spec.paused.end_sample),
                                 input_revision=reply.input_revision))
        for event in spec.events:  # public from now on (when each was prepared: metrics)
            self._emit(event.model_copy(update={"at": now}))
        if self._call.gone:  # confirmed by the end of input: nobody plays it any more
            await self._speaker.cut(reply, "Session closed.")  # (a release would block)
        else:
            await self._playback.release(reply.delivery_id)
        if not await spec.final() and spec.continued:  # the user went on with the turn
            reply.provisional = None
            await roll_back(self._turns, self._lock, reply, generation, point)
            return True  # (it settles as cut, its heard part kept)
        if spec.revoked:  # the user went on before a sample of it was heard
            await self._drop(reply, generation, point)
            self._emit(TurnRevoked(session_id=self._call.session_id, at=self._clock.now(),
                                   turn_id=reply.turn_id, text=text, reason=spec.reason))
            return False
        reply.provisional = None
        self._admit(reply)  # final
        await generation
        return True

    async def _drop(
        self, reply: SpokenReply, generation: asyncio.Task[None], point: RollbackPoint
    ) -> None:
        """Drop an unheard reply: close its generation, fence its audio, roll back."""
        generation.cancel()  # closes the turn's stream: the runner interrupts it
        self._speaker.fence(reply)  # drops the held audio unheard (and any to come)
        for task in (generation, reply.speaker):
            if task is not None:
                await asyncio.wait({task})  # never raises; a failure is only logged
                if not task.cancelled() and task.exception() is not None:
                    logger.warning("dropped reply: %s failed", task.get_name(),
                                   exc_info=task.exception())
        try:
            async with self._lock:
                await point.restore()  # in memory first, then the store
        except Exception:  # (a failed write: the next save is a full one)
            logger.exception("saving a rolled-back turn failed")

    def _seal(self, spec: Speculation) -> None:
        """``spec``'s turn is final: speech after it is a new turn."""
        spec.seal()
        if self._provisional is spec:
            self._provisional = None
            self._seal_at = spec.paused.end_sample  # (the listen task seals the detector)
            if self._timer is not None and self._going is None:
                self._timer.cancel()  # (one bounding a pending sound's turn runs on)
                self._timer = None

    def __repr__(self) -> str:
        return (f"SpeculativeReplies(enabled={self._enabled}, pending={self._pending!r}, "
                f"provisional={self._provisional!r}, running={len(self._running)})")
