"""OverlapHandler: what a voice session does when the user's speech overlaps a reply.

The :class:`~voxflow_voice.listen.barge_in.BargeInArbiter` *decides* (from sample positions and
the overlap's words) whether user sound over a reply is a false alarm, a backchannel or a
real request. :class:`OverlapHandler` feeds it from the session's turn detector and
*acts* on its decisions for the reply being spoken:

* at the first speech frame over a reply, the reply is *paused* at the client
  (``BargeInPaused``), unless the reply's policy is ``must_finish``; with
  ``BargeInSettings.pause_on_rise`` (the default) already at the first of the rising
  frames that score the detector's ``onset_threshold`` (Silero scores the "s" of "Stop"
  0.05-0.4 for ~110 ms before its vowel reaches 0.5), a tentative pause that the arbiter
  undoes when no speech follows (after ``rise_hold``, 0.1 s of quiet);
* a false alarm (cough, blip) or a backchannel ("uh-huh", judged from the overlap's
  transcript) *resumes* it from the exact sample (``BargeInResumed``);
* a real request (or, under the ``interrupt`` policy, any speech of ``min_barge_in``)
  *cuts* it (``BargeIn``, then :meth:`voxflow_voice.speak.speaker.ReplySpeaker.cut`).

Speech that began well before the reply, or that only overlaps its trailing silence,
is not a barge-in. Each reply's policy is the session's
(``BargeInSettings.policy``) unless overridden with :meth:`OverlapHandler.set_policy`.
"""

from __future__ import annotations

from voxflow.ids import DeliveryId

from ..audio import STT_SAMPLE_RATE
from ..call import CallContext
from ..events import BargeIn, BargeInPaused, BargeInResumed
from ..listen.barge_in import (
    BargeInAction,
    BargeInArbiter,
    BargeInPolicy,
    OverlapKind,
    classify_overlap,
)
from ..listen.early_stt import EarlyTranscriber
from ..listen.turn_detector import TurnDetector, UtterancePaused
from ..speak.playback import Playback
from ..speak.speaker import ReplySpeaker, SpokenReply, hold_clock
from .voice_settings import VoiceSettings

__all__ = ["OverlapHandler"]

_POLICIES = ("interrupt", "ignore_backchannel", "must_finish")


class OverlapHandler:
    """Pauses, resumes or cuts the reply being spoken as user speech overlaps it.

    Args:
        call: the call (its clock, held while an overlap is transcribed; where events
            go; the clock time of an input sample; its settings' ``interruptions``:
            whether user speech may interrupt replies at all).
        arbiter: decides what each overlap is (the session's ``barge_in``).
        detector: the session's turn detector (input position, speech onset and end).
        playback: the fenced playback stage (paused, resumed, asked for words left).
        early: transcribes an overlap's audio (its words tell a backchannel apart).
        speaker: cuts a reply (:meth:`voxflow_voice.speak.speaker.ReplySpeaker.cut`).
    """

    def __init__(
        self,
        call: CallContext[VoiceSettings],
        arbiter: BargeInArbiter,
        detector: TurnDetector,
        playback: Playback,
        early: EarlyTranscriber,
        speaker: ReplySpeaker,
    ) -> None:
        if not isinstance(arbiter, BargeInArbiter):
            raise TypeError(f"arbiter must be a BargeInArbiter, got {type(arbiter).__name__}")
        self._arbiter = arbiter
        self._detector = detector
        self._playback = playback
        self._early = early
        self._speaker = speaker
        self._call = call
        self._clock = call.clock
        self._emit = call.emit
        self._time_of = call.time_of
        self._interruptions = call.settings.interruptions
        self._policies: dict[DeliveryId, BargeInPolicy] = {}
        self._since: tuple[DeliveryId | None, int] = (None, 0)  # reply, first sample

    # -- policies -----------------------------------------------------------------------

    def set_policy(self, delivery_id: DeliveryId, policy: BargeInPolicy) -> None:
        """Override the barge-in policy for one reply.

        Raises:
            ValueError: ``policy`` is not ``interrupt``, ``ignore_backchannel`` or
                ``must_finish``.
        """
        if policy not in _POLICIES:
            raise ValueError(
                f"policy must be interrupt, ignore_backchannel or must_finish, got {policy!r}"
            )
        self._policies[delivery_id] = policy

    def forget(self, delivery_id: DeliveryId) -> None:
        """The reply settled: drop its policy override, if any."""
        self._policies.pop(delivery_id, None)

    # -- detector events ----------------------------------------------------------------

    async def speech_confirmed(
        self, reply: SpokenReply | None, onset_at: float, onset_sample: int | None = None
    ) -> None:
        """The detector confirmed speech (a barge-in candidate) over ``reply``."""
        if reply is None or reply.interrupted or not self._interruptions:
            return
        if onset_sample is not None:
            # Confirmed speech: the arbiter decides (fence, or wait for the words).
            await self._act(reply, self._begin(reply, onset_sample), onset_sample)
            overlap = self._arbiter.overlap
            first = overlap.first_onset if overlap is not None else onset_sample
            await self._act(reply, self._arbiter.confirmed(), first)
            return
        await self.cut(reply, onset_at, "User barged in.")

    async def ended(self, reply: SpokenReply | None, onset_sample: int) -> None:
        """An utterance over ``reply`` ended as a turn (the end-of-turn model may end one
        at a 0.2 s pause: "Stop," of "Stop, thanks."): speech, not a blip, even when
        shorter than ``min_barge_in``. An overlap still paused and unconfirmed is confirmed,
        so its words decide (:meth:`words`): a request cuts the reply, a backchannel
        resumes it. (Unconfirmed, it was resumed as a false alarm while the turn waited
        for the whole reply to play.)"""
        overlap = self._arbiter.overlap
        if (reply is None or overlap is None
                or overlap.delivery_id != reply.delivery_id or overlap.confirmed
                or not overlap.paused):
            return
        await self.speech_confirmed(reply, self._time_of(onset_sample), onset_sample)

    async def arbitrate(self, reply: SpokenReply | None) -> None:
        """After each input push: start, follow and end overlaps of user sound and reply."""
        detector = self._detector
        onset = detector.speech_onset  # (in a resumed turn: the new speech's)
        if reply is None or reply.interrupted or not self._interruptions:
            self._arbiter.update(None, position=detector.position, active=onset is not None,
                                 speech_end=detector.speech_end)
            return
        delivery = reply.delivery_id
        self._reply_since(delivery)
        rising = onset is None and self._arbiter.settings.pause_on_rise
        if rising:
            onset = detector.rising_onset  # tentative: undone if speech does not follow
        if onset is not None:
            await self._act(reply, self._begin(reply, onset, rising=rising), onset)
        overlap = self._arbiter.overlap
        action = self._arbiter.update(
            delivery, position=detector.position, active=onset is not None,
            speech_end=detector.speech_end,
        )
        if overlap is not None:
            await self._act(reply, action, overlap.first_onset, reason=overlap.outcome or "")

    async def words(self, reply: SpokenReply | None, event: UtterancePaused) -> None:
        """Speech over a reply paused: its transcript tells a backchannel from a request."""
        if reply is None or not self._arbiter.wants_words(event.onset_sample):
            return
        with hold_clock(self._clock):
            transcript = await self._early.transcript_of(event)
        text = transcript.text if transcript is not None else ""
        overlap = self._arbiter.overlap
        first = overlap.first_onset if overlap is not None else event.onset_sample
        action, kind = self._arbiter.transcribed(text, event.end_sample)
        await self._act(reply, action, first, reason=kind, text=text)

    def may_cut(self, reply: SpokenReply) -> bool:
        """Whether user speech may cut ``reply`` (interruptions on, not ``must_finish``)."""
        if not self._interruptions:
            return False
        policy = self._policies.get(reply.delivery_id, self._arbiter.settings.policy)
        return policy != "must_finish"

    async def judge(self, reply: SpokenReply | None, end_sample: int, text: str) -> OverlapKind:
        """The speech over ``reply`` up to ``end_sample`` said ``text``: an overlap of it
        still undecided is decided by those words now (confirmed first if it was still
        short of ``min_barge_in``: a request cuts the reply, a backchannel or a noise
        resumes it), whatever the policy's wait for words. Returns what the words are."""
        overlap = self._arbiter.overlap
        if (reply is None or overlap is None
                or overlap.delivery_id != reply.delivery_id or not overlap.paused
                or overlap.outcome is not None):
            return classify_overlap(text, self._arbiter.settings)
        first = overlap.first_onset
        if not overlap.confirmed:
            await self._act(reply, self._arbiter.confirmed(), first)
            if reply.interrupted or not overlap.paused:  # (the interrupt policy cut it)
                return classify_overlap(text, self._arbiter.settings)
        action, kind = self._arbiter.transcribed(text, end_sample)
        await self._act(reply, action, first, reason=kind, text=text)
        return kind

    # -- helpers ------------------------------------------------------------------------

    def _begin(self, reply: SpokenReply, onset: int, *, rising: bool = False) -> BargeInAction:
        since = self._reply_since(reply.delivery_id)
        if onset < since - self._detector.settings.min_barge_in * STT_SAMPLE_RATE:
            return "none"  # speech that began well before this reply: not a barge-in
        overlap = self._arbiter.overlap
        if (overlap is None or overlap.onset != onset) and (
                not self._playback.words_left(reply.delivery_id)
                or reply.heard_whole(self._playback, self._clock.now())):
            return "none"  # every word was heard: only trailing silence is left
        policy = self._policies.get(reply.delivery_id, self._arbiter.settings.policy)
        return self._arbiter.begin(reply.delivery_id, onset, policy, rising=rising)

    def _reply_since(self, delivery_id: DeliveryId) -> int:
        """The input sample at which ``delivery_id`` was first seen active."""
        delivery, since = self._since
        if delivery != delivery_id:
            since = self._detector.position
            self._since = (delivery_id, since)
        return since

    async def _act(
        self, reply: SpokenReply, action: BargeInAction, onset: int, *, reason: str = "",
        text: str = "",
    ) -> None:
        delivery = reply.delivery_id
        if action == "none":
            return
        onset_at = self._time_of(onset)
        if action == "pause":
            if self._playback.pause(delivery):
                self._emit(BargeInPaused(session_id=self._call.session_id, at=self._clock.now(),
                                         delivery_id=delivery, onset_at=onset_at))
        elif action == "resume":
            if self._playback.resume(delivery):
                self._emit(BargeInResumed(session_id=self._call.session_id, at=self._clock.now(),
                                          delivery_id=delivery, onset_at=onset_at,
                                          reason=reason or "false_alarm", text=text))
        elif action == "fence" and not reply.interrupted:
            await self.cut(reply, onset_at, "User barged in.")

    async def cut(self, reply: SpokenReply, onset_at: float, reason: str) -> None:
        """Cut ``reply`` as a barge-in cuts it, for speech from ``onset_at``: ``BargeIn``,
        then the speaker's cut (``ReplyInterrupted``, ``reason``)."""
        reply.onset_at = onset_at
        self._emit(BargeIn(session_id=self._call.session_id, at=self._clock.now(),
                           delivery_id=reply.delivery_id, onset_at=onset_at))
        await self._speaker.cut(reply, reason)

    def __repr__(self) -> str:
        return (
            f"OverlapHandler(interruptions={self._interruptions}, "
            f"policies={len(self._policies)}, {self._arbiter!r})"
        )
