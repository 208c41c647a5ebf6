"""VoiceSession: one call, from microphone audio to spoken, identity-fenced replies.

Three tasks run in one task group (the caller owns the session's lifetime):

* **listen**: microphone audio → 16 kHz → VAD/turn detector → recording observations,
  barge-ins, and finished utterances (queued for the converse task);
* **converse**: utterance → STT → a committed turn (fresh ``turn_id``) → the flow's reply
  through ``TurnRunner.astream_turn``, spoken by the
  :class:`~voxflow_voice.speak.speaker.ReplySpeaker`: only events that pass
  ``accept_event`` are spoken, text is cut into segments, each synthesized as soon as it
  is complete, and every chunk goes through the fenced
  :class:`~voxflow_voice.speak.playback.Playback`; then drain → finish → settle history;
* **observe**: the adapter's receipts, drains and mute changes → playback accounting and
  the client's floor state (a mute cuts the reply or announcement playing, by identity);

plus **floor** (:class:`~voxflow_voice.session.floor.FloorReporter`: the user's recording,
playback, mute and pending turns, reported to the ``ReplyQueue`` as ``ClientActivity``)
and **deliver** (:class:`~voxflow_voice.session.delivery.AnnouncementDelivery`: background
announcements of completed jobs, claimed whenever the floor is free and spoken through
the same speaker path as answers, :meth:`~voxflow_voice.session.answering.Answering.announce`).
Every reply is answered (or announced) by the session's
:class:`~voxflow_voice.session.answering.Answering`, which keeps the reply on air.

Speculative replies (:mod:`voxflow_voice.speak.speculation`, ``VoiceSettings.speculative_replies``),
carried out by the session's :class:`~voxflow_voice.session.speculative_replies.SpeculativeReplies`:
at the user's short pause the session answers what it heard with the audio held, releases
it the instant the turn's end is confirmed on the same audio (``VoiceEngines.end_of_turn``
may confirm it at once), or drops it unheard and rolls the flow back if the user speaks on.
With ``TurnDetection.resume_grace`` a confirmed turn stays *provisional* until the first
sample of its reply is heard: if the user goes on speaking before that, the turn is taken
back (``TurnRevoked``: the reply fenced unheard, the flow rolled back) and the whole
utterance becomes one turn; once a sample was heard, speech over the reply is a barge-in,
unless it starts within ``TurnDetection.continue_within`` of the commit (any turn, with
``continue_complete``) and its words are a request: then the user goes on with the turn,
the reply is cut as a barge-in cuts it (its heard part kept, marked interrupted; heard
whole, it settles completed; one that may not be cut plays out first), and the whole
utterance is answered once as the same turn,
its next ``input_revision``, one user message in the history. A cough or a backchannel
there resumes the reply, and the turn stands.

Barge-in: user speech over a reply is fed to the
:class:`~voxflow_voice.listen.barge_in.BargeInArbiter` (``VoiceSession.barge_in``) by the
:class:`~voxflow_voice.session.overlap.OverlapHandler` (:mod:`voxflow_voice.session.overlap`), which
*pauses* the reply at the first speech frame, *resumes* it from the exact sample after a
false alarm or a backchannel (which never becomes a turn), or *cuts* it for a real
request: ``TurnRunner.interrupt`` (which cancels its LLM stream), the TTS task is
cancelled, and playback is fenced and flushed. ``must_finish`` replies are never cut
(:meth:`VoiceSession.set_reply_policy`). The history then keeps what the user heard, cut
at the last word played.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from functools import partial
from typing import Any

from voxflow.clock import Clock, MonotonicClock
from voxflow.ids import DeliveryId, SessionId
from voxflow.jobs import JobRunner
from voxflow.logs import log_context, log_scope
from voxflow.replies import ReplyQueue
from voxflow.storable import check_text
from voxflow.turns import TurnRunner

from ..call import CallContext
from ..engines import VoiceEngines
from ..events import (
    AudioStarted,
    MuteObserved,
    ReplyInterrupted,
    SessionClosed,
    SessionEvent,
    SpeechEnded,
    SpeechStarted,
    TranscriptDiscarded,
    TurnMetrics,
)
from ..listen.barge_in import BargeInArbiter, BargeInPolicy
from ..listen.early_stt import EarlyTranscriber
from ..listen.echo import EchoGate
from ..listen.input_guard import InputGuard, InputStatistics
from ..listen.turn_detector import (
    BargeInDetected,
    TurnDetector,
    TurnResumed,
    UtterancePaused,
    UtteranceReady,
)
from ..listen.turn_detector import SpeechEnded as DetectorSpeechEnded
from ..listen.turn_detector import SpeechStarted as DetectorSpeechStarted
from ..speak.playback import Playback
from ..speak.speaker import ReplySpeaker, hold_clock
from ..speak.speculation import Speculation
from ..transport import AudioTransport, MuteChanged, PlaybackDrained, PlaybackReceipt
from .answering import Answering
from .delivery import AnnouncementDelivery
from .delivery import Announcer as Announcer  # re-exported: adapters import it from here
from .delivery import default_announcer as default_announcer
from .floor import FloorReporter
from .metrics import LatencySummary, summarize
from .overlap import OverlapHandler
from .speculative_replies import SpeculativeReplies
from .tracing import SessionTrace
from .voice_settings import DEFAULT_VOICE_SETTINGS, VoiceSettings

__all__ = ["DEFAULT_VOICE_SETTINGS", "MAX_SUBMITTED_TEXT_CHARS", "VoiceSession",
           "VoiceSettings"]

logger = logging.getLogger(__name__)

MAX_SUBMITTED_TEXT_CHARS = 4000
"""The longest text :meth:`VoiceSession.submit_text` answers (it becomes a stored user
message)."""


class VoiceSession:
    """One voice call over an :class:`~voxflow_voice.transport.AudioTransport`.

    Args:
        turns: the TurnRunner of the conversational flow that answers.
        transport: the adapter's side of the call.
        engines: STT, TTS and VAD (shared by every session of the process).
        settings: turn taking and speaking rules.
        clock: the session clock (a :class:`~voxflow.clock.VirtualClock` for
            deterministic runs); monotonic if ``None``.
        replies: the ReplyQueue for background announcements (optional).
        jobs: the JobRunner whose ``state_lock`` serialises turns, job commits and queue
            operations (optional; a private lock otherwise).
        announcer: builds announcement text from the current jobs.
        on_event: called with every :data:`~voxflow_voice.events.SessionEvent`.
    """

    def __init__(
        self,
        turns: TurnRunner,
        transport: AudioTransport,
        engines: VoiceEngines,
        *,
        settings: VoiceSettings | None = None,
        clock: Clock | None = None,
        replies: ReplyQueue | None = None,
        jobs: JobRunner | None = None,
        announcer: Announcer = default_announcer,
        on_event: Callable[[SessionEvent], None] | None = None,
    ) -> None:
        if not isinstance(turns, TurnRunner):
            raise TypeError(f"turns must be a TurnRunner, got {type(turns).__name__}")
        if settings is not None and not isinstance(settings, VoiceSettings):
            raise TypeError(f"settings must be VoiceSettings, got {type(settings).__name__}")
        self.turns = turns
        self.transport = transport
        self.engines = engines
        self.settings = settings if settings is not None else DEFAULT_VOICE_SETTINGS
        self.clock: Clock = clock if clock is not None else MonotonicClock()
        self.replies = replies
        self.jobs = jobs
        self._on_event = on_event
        self._call = CallContext(turns, self.clock, self._emit, self.settings,
                                 replies=replies, jobs=jobs,
                                 lock=jobs.state_lock if jobs is not None else asyncio.Lock())
        self._lock = self._call.lock
        self._speaking = self._call.speaking  # one reply (answer or announcement) at a time
        self._trace = SessionTrace(self.clock, lambda: str(self.session_id))
        self.events: list[SessionEvent] = []
        self.playback = Playback(transport)
        self._detector = TurnDetector(engines.make_vad(), self.settings.turn_detection,
                                      end_of_turn_model=engines.end_of_turn)
        self._input_guard = InputGuard()
        self.echo_gate = EchoGate(self.settings.echo) if self.settings.echo_gate else None
        self._utterances: asyncio.Queue[tuple[UtteranceReady, Speculation | None] | None] = (
            asyncio.Queue()
        )
        self._early = EarlyTranscriber(engines.stt, call=str(self.session_id))
        self.barge_in = BargeInArbiter(self.settings.barge_in)
        self._closed = False
        call = self._call  # what the parts share: ids, clock, events, settings, locks, liveness
        self._floor = FloorReporter(call)
        self._speaker = ReplySpeaker(call, self.playback, engines.tts, echo_gate=self.echo_gate)
        self._overlap = OverlapHandler(
            call, self.barge_in, self._detector, self.playback, self._early, self._speaker,
        )
        self._answering = Answering(call, self._speaker, self.playback, self._overlap,
                                    self._trace)
        self.metrics: list[TurnMetrics] = self._answering.metrics
        self._delivery = AnnouncementDelivery(
            call, self._floor, self._answering, announcer=announcer,
        )
        self._speculative = SpeculativeReplies(
            call, self._detector, self._early, self.barge_in, self._speaker, self.playback,
            self._overlap, self._floor, self._answering,
        )

    @property
    def session_id(self) -> SessionId:
        """The conversation's identity (the flow state's ``id``)."""
        return self._call.session_id

    @property
    def quiet(self) -> bool:
        """Nothing is under way: no speech being heard (nor an utterance still open in its
        end-of-turn silence), no turn waiting for its answer or being answered, nothing
        being said. Ending the call's connection now loses no word of either side (a call
        handed over to another worker waits for this)."""
        return (self._detector.active_onset is None and self._detector.provisional is None
                and self._floor.pending_turns == 0 and self._utterances.empty()
                and self._answering.reply is None and not self._speaking.locked())

    # -- lifetime -----------------------------------------------------------------

    async def run(self) -> None:
        """Listen, converse, observe and deliver until the transport's input ends."""
        if self._closed:
            raise RuntimeError("a VoiceSession runs once; create a new one per call")
        # every line of the call says whose it is; its span carries the same ids
        with log_scope(session_id=str(self.session_id)), self._trace.call(log_context()):
            await self._run()

    async def _run(self) -> None:
        try:
            async with asyncio.TaskGroup() as tg:
                observe = tg.create_task(self._observe(), name="voice.observe")
                floor = tg.create_task(self._floor.run(), name="voice.floor")
                deliver = tg.create_task(self._delivery.run(), name="voice.deliver")
                converse = tg.create_task(self._converse(), name="voice.converse")
                await self._listen()
                # The client is gone (script over, peer disconnected): its receipts will
                # never come, so the reply it was hearing is cut now, not waited for.
                self._call.gone = True
                if self._answering.reply is not None:
                    await self._speaker.cut(self._answering.reply, "Session closed.")
                await converse  # the last utterance is answered (and cut) before we close
                async with self._speaking:  # and an announcement being cut settles
                    pass
                for task in (observe, floor, deliver):
                    task.cancel()
        finally:
            await self._close()

    async def _close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await self._speculative.aclose()
        await self._early.aclose()
        reply = self._answering.reply
        if reply is not None:
            self._speaker.fence(reply)
        if self.replies is not None:
            async with self._lock:
                self.replies.close()
        self._emit(SessionClosed(session_id=self.session_id, at=self.clock.now()))

    # -- listen ---------------------------------------------------------------------

    async def _listen(self) -> None:
        try:
            async for chunk in self.transport.audio_input():
                audio = self._input_guard.convert_chunk(chunk)  # any adapter's frames
                if audio is None:
                    continue
                self._call.anchor = (self.clock.now(), self._detector.position)
                self._speculative.before_frame()
                if self.echo_gate is not None:
                    audio = self.echo_gate.process(audio, self._call.anchor[0])
                # (then the end-of-turn model's verdict on a pause, with its words: a
                # streaming engine's decode at the pause, once it heard all the speech)
                if self._detector.active_onset is None:  # latched at an utterance's onset
                    self._detector.speaking_over = self._floor.playing is not None
                async for events in self._detector.apush(
                        audio, self._early.pause_words, hold=partial(hold_clock, self.clock)):
                    for event in events:
                        await self._on_detector_event(event)
                self._early.heard(audio, self._detector)  # a streaming STT's partial decodes
                self._speculative.after_frame()
                await self._overlap.arbitrate(self._answering.reply)
            for event in self._detector.flush():
                await self._on_detector_event(event)
        finally:
            self._speculative.input_ended()
            self._utterances.put_nowait(None)

    async def _on_detector_event(self, event: Any) -> None:
        if isinstance(event, TurnResumed):
            if await self._speculative.resumed(event):  # its turn taken back, its reply too
                self._answering.reply = None
        elif isinstance(event, DetectorSpeechStarted):
            if self.settings.stt_warm_up:
                self._early.warm_up()
            self._floor.recording_changed(True)
            self._emit(SpeechStarted(session_id=self.session_id, at=self.clock.now(),
                                     onset_at=self._call.time_of(event.onset_sample)))
        elif isinstance(event, BargeInDetected):
            await self._overlap.speech_confirmed(
                self._answering.reply, self._call.time_of(event.onset_sample), event.onset_sample
            )
        elif isinstance(event, DetectorSpeechEnded):
            self._floor.recording_changed(False)
            self._emit(SpeechEnded(session_id=self.session_id, at=self.clock.now(),
                                   end_at=self._call.time_of(event.end_sample)))
        elif isinstance(event, UtterancePaused | UtteranceReady) and (
                await self._speculative.went_on(event)):
            return  # a sound over the reply of a turn that stands: an utterance of its own
        elif isinstance(event, UtterancePaused):
            # Speculative STT in the end-of-turn silence: the silence hides its latency.
            self._early.paused(event)
            await self._overlap.words(self._answering.reply, event)
            self._speculative.paused(event)  # answered now, heard only once confirmed
        elif isinstance(event, UtteranceReady):
            # Speech over a paused reply with no speculative transcript yet (a short
            # end-of-turn silence): decide from its words now (kept for the turn's STT).
            await self._overlap.ended(self._answering.reply, event.onset_sample)
            await self._overlap.words(self._answering.reply, UtterancePaused(
                event.audio, event.onset_sample, event.end_sample))
            # From the end of the user's speech until its reply settles, the floor is
            # the foreground's: no announcement may slip in while STT runs.
            self._floor.foreground_entered()
            self._early.turn_ended(event)  # its STT (if on this audio) is urgent now
            spec = self._speculative.turn_ended(event)  # the speculation it confirmed
            self._utterances.put_nowait((event, spec))

    # -- converse -------------------------------------------------------------------

    async def _converse(self) -> None:
        while (item := await self._utterances.get()) is not None:
            utterance, spec = item
            try:
                if await self._speculative.answered(utterance, spec):
                    continue  # answered in the pause, or taken back (the user went on)
                speech_end = self._call.time_of(utterance.end_sample)
                with hold_clock(self.clock):
                    transcript = await self._early.final(utterance)
                if transcript is None or not transcript.text.strip():
                    self._emit(TranscriptDiscarded(
                        session_id=self.session_id, at=self.clock.now(),
                        reason="no words in the utterance",
                    ))
                    continue
                if not self.barge_in.is_turn(utterance.onset_sample, transcript.text):
                    self._emit(TranscriptDiscarded(
                        session_id=self.session_id, at=self.clock.now(),
                        reason=f"backchannel over a reply: {transcript.text.strip()!r}",
                    ))
                    continue
                if self.turns.flow.state.ended:
                    continue  # the conversation is over: nothing more is answered
                # continuable, it is answered through the speculative path, which keeps it
                # open for a continuation (continue_within) and rolls it back if one comes
                late = self._speculative.late(utterance, transcript.text)
                async with self._speaking:  # after an announcement that is still playing
                    if late is None or (not await self._speculative.answer(
                            transcript.text, speech_end, late) and not late.revoked):
                        # (late: its state could not be rolled back: a final turn)
                        await self._answering.answer(transcript.text, speech_end, turn=(
                            self._speculative.continuation(utterance.onset_sample)))
            finally:
                self._floor.foreground_left()

    # -- replies ----------------------------------------------------------------------

    async def submit_text(self, text: str) -> None:
        """Answer ``text`` as a committed user turn that came without speech (a phone
        key press: ``"1"``), spoken like any answer, after the reply being said, if any.

        The floor is the user's until its reply settles, as for an utterance.

        Raises:
            TypeError, ValueError: ``text`` is not a non-empty string.
            UnstorableTextError: ``text`` holds a NUL or a lone surrogate, or is longer
                than :data:`MAX_SUBMITTED_TEXT_CHARS` (:mod:`voxflow.storable`'s rule:
                it becomes a stored user message); nothing is answered.
        """
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        if not text.strip():
            raise ValueError("text must be non-empty")
        check_text(text, "text", max_chars=MAX_SUBMITTED_TEXT_CHARS)
        if self._closed or self._call.gone or self.turns.flow.state.ended:
            return
        self._floor.foreground_entered()
        try:
            async with self._speaking:
                await self._answering.answer(text, self.clock.now())
        finally:
            self._floor.foreground_left()

    def set_reply_policy(self, delivery_id: DeliveryId, policy: BargeInPolicy) -> None:
        """Override the session's barge-in policy for one reply (``interrupt``,
        ``ignore_backchannel`` or ``must_finish``), e.g. from ``on_event`` at its
        ``ReplyStarted``.

        Raises:
            ValueError: ``policy`` is not one of the three.
        """
        self._overlap.set_policy(delivery_id, policy)

    def input_statistics(self) -> InputStatistics:
        """Input chunks the session's own audio boundary dropped (wrong type or rate).

        Transports validate their raw frames first (their statistics count those).
        """
        return self._input_guard.statistics()

    def summary(self) -> LatencySummary:
        """Medians and p90s of this call's latency marks and barge-in stops so far."""
        return summarize(
            self.metrics, [e for e in self.events if isinstance(e, ReplyInterrupted)]
        )

    # -- observe --------------------------------------------------------------------

    async def _observe(self) -> None:
        async for obs in self.transport.observations():
            if isinstance(obs, PlaybackReceipt):
                self.playback.on_receipt(obs)
                if self.echo_gate is not None:
                    self.echo_gate.played(obs)
                reply = self._answering.reply
                if reply is not None and reply.delivery_id == obs.delivery_id:
                    if reply.first_audio is None:
                        reply.first_audio = obs.at
                        self._speculative.heard(reply)  # heard: the turn is final
                        self._emit(AudioStarted(session_id=self.session_id, at=obs.at,
                                                delivery_id=obs.delivery_id))
                    reply.last_audio_end = obs.at + obs.num_samples / obs.sample_rate
                self._floor.playback_observed(obs.delivery_id)
            elif isinstance(obs, PlaybackDrained):
                self._floor.playback_stopped(obs.delivery_id)
            elif isinstance(obs, MuteChanged):
                self._floor.muted_changed(obs.muted)
                self._emit(MuteObserved(session_id=self.session_id, at=obs.at, muted=obs.muted))
                reply = self._answering.reply
                if (obs.muted and reply is not None  # a mute cuts what is playing
                        and not reply.heard_whole(self.playback, obs.at)):
                    await self._speaker.cut(reply, "The user muted the microphone.")

    # -- deliver --------------------------------------------------------------------

    def notify(self) -> None:
        """Wake the delivery task (call after enqueueing a job result)."""
        self._delivery.wake()

    async def on_job_update(self, snapshot: Any = None) -> None:
        """``JobRunner(on_update=...)`` target: queue completed jobs for announcement.

        Enqueueing is idempotent (the ReplyQueue coalesces a job version it already
        holds), so every snapshot can simply offer every completed job; a job first seen
        completed here was ready now (its announcement's ``ready_at``).
        """
        await self._delivery.jobs_updated()

    # -- helpers --------------------------------------------------------------------

    def _emit(self, event: SessionEvent) -> None:
        self.events.append(event)
        self._trace.observe(event)
        if self._on_event is not None:
            try:
                self._on_event(event)
            except Exception:  # a broken observer must not break the call
                logger.exception("session event callback failed")

    def __repr__(self) -> str:
        return (
            f"VoiceSession(session_id={self.session_id!r}, recording={self._floor.recording}, "
            f"playing={self._floor.playing!r}, muted={self._floor.muted}, {self.playback!r})"
        )

