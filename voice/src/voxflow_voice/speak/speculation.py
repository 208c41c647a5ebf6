"""Speculative replies: answer in the user's pause, speak only once the turn is confirmed.

The turn detector reports a short pause
(:class:`~voxflow_voice.listen.turn_detector.UtterancePaused`, after ``end_pad`` of
silence) well before the end of the turn (``end_of_turn_silence``). The session
transcribes the pause's audio at once (:mod:`voxflow_voice.listen.early_stt`) and, with
``VoiceSettings.speculative_replies``, also *answers* it: the flow's turn runs and its first
segments are synthesized while the user is still silent, with the audio **held** by the
playback stage (:meth:`~voxflow_voice.speak.playback.Playback.hold`). Then exactly one of:

* **confirmed**: the turn ends on the very same audio (the detector's ``UtteranceReady``
  matches the pause). The turn is committed, its held audio is released and plays at
  once: the end-of-turn silence hid STT, the flow and the first synthesis. The reply's
  events held back so far (``ReplyStarted``, ``ReplyTextStreamed``) follow the
  ``TurnCommitted``, stamped with its time: that is when the reply became public
  (``TurnMetrics`` keeps when its text and audio were really prepared).
* **discarded**: the user spoke on (speech after the pause's end), or the turn ended on
  other audio. The reply is fenced (its held chunks are dropped: not a sample is heard),
  its generation is closed, and the flow's state is rolled back to before it
  (:class:`~voxflow.flow.RollbackPoint`: history, turn and reply records, the persisted
  snapshot). Its events are never emitted; a ``SpeculativeReplyDiscarded`` says so.

* **provisional**: with ``TurnDetection.resume_grace``, a confirmed turn may still be
  taken back until the first sample of its reply is heard (or the grace is over):
  :meth:`Speculation.seal` makes it final, :meth:`Speculation.revoke` drops it as a
  discarded one is dropped (fenced before a sample was heard, rolled back), and the
  detector's continuation of the utterance becomes the turn (``TurnRevoked``).

The state lock is held while the flow runs the speculative turn, not while its verdict
is awaited: a job's result that is ready meanwhile is committed and queued for
announcement at once, and a rollback keeps it (:class:`~voxflow.flow.RollbackPoint` keeps
the work of others: job updates, the reply queue). The jobs the turn asks for are
admitted only once it is final (a provisional one's seal): none starts for a turn that
is undone. Side effects outside the flow's state cannot be undone: turn speculation off
for flows whose turns act on the world directly (use jobs).

A voice session carries these rules out through its
:class:`~voxflow_voice.session.speculative_replies.SpeculativeReplies`.
"""

from __future__ import annotations

import asyncio

from ..events import SessionEvent
from ..listen.turn_detector import UtterancePaused, UtteranceReady

__all__ = ["Speculation"]


class Speculation:
    """One speculative answer to the utterance heard up to a pause.

    Args:
        paused: the pause whose audio is answered.
    """

    __slots__ = ("_final", "_verdict", "continued", "events", "late", "paused", "reason",
                 "task", "text")

    def __init__(self, paused: UtterancePaused) -> None:
        if not isinstance(paused, UtterancePaused):
            raise TypeError(f"paused must be an UtterancePaused, got {type(paused).__name__}")
        self.paused = paused
        loop = asyncio.get_running_loop()
        self._verdict: asyncio.Future[bool] = loop.create_future()
        self._final: asyncio.Future[bool] = loop.create_future()  # sealed or revoked
        self.events: list[SessionEvent] = []  # held back until the verdict
        self.task: asyncio.Task[bool] | None = None  # True once it answered the turn
        self.reason = ""
        self.text: str | None = None  # its transcript, once known
        self.continued = False  # the user went on with the turn after its reply began
        self.late = False  # made for a turn answered after its end (to keep it open)

    @property
    def decided(self) -> bool:
        """Whether it was confirmed or discarded."""
        return self._verdict.done()

    @property
    def discarded(self) -> bool:
        """Whether it was discarded."""
        return self._verdict.done() and not self._verdict.result()

    def matches(self, ready: UtteranceReady) -> bool:
        """Whether the turn ended on the very audio this speculation answers."""
        return self.paused.matches(ready)

    def spoken_over(self, speech_end: int) -> bool:
        """Whether speech went on after the pause (``speech_end``: the detector's latest)."""
        return speech_end > self.paused.end_sample

    def confirm(self) -> None:
        """The turn ended on this audio: the reply is the turn's (idempotent; a
        discarded speculation stays discarded)."""
        if not self._verdict.done():
            self._verdict.set_result(True)

    def discard(self, reason: str) -> None:
        """Drop the reply unheard and roll its turn back (idempotent; a confirmed
        speculation stays confirmed)."""
        if not self._verdict.done():
            self.reason = reason
            self._verdict.set_result(False)

    @property
    def sealed(self) -> bool:
        """Whether the confirmed turn is final (no longer revocable)."""
        return self._final.done() and self._final.result()

    @property
    def revoked(self) -> bool:
        """Whether the confirmed turn was taken back."""
        return self._final.done() and not self._final.result()

    def seal(self) -> None:
        """The turn can no longer be taken back (idempotent; a revoked one stays revoked)."""
        if not self._final.done():
            self._final.set_result(True)

    def revoke(self, reason: str) -> None:
        """Take the confirmed turn back: its reply is dropped unheard and rolled back
        (idempotent; a sealed one stays sealed; before a verdict, a discard)."""
        self.discard(reason)
        if not self._final.done():
            self.reason = reason
            self._final.set_result(False)

    def continue_(self, reason: str) -> None:
        """The user went on with the confirmed turn after its reply began: the reply is
        cut (its heard part kept; one heard whole stays completed), and the turn answered again with
        all its words (as :meth:`revoke`, a final ``False``; :attr:`continued` tells it
        apart). A sealed one stays sealed."""
        if not self._final.done() and self._verdict.done() and self._verdict.result():
            self.reason, self.continued = reason, True
            self._final.set_result(False)

    async def final(self) -> bool:
        """Wait for :meth:`seal` (True) or :meth:`revoke` (False)."""
        return await asyncio.shield(self._final)

    async def verdict(self) -> bool:
        """Wait for :meth:`confirm` (True) or :meth:`discard` (False)."""
        return await asyncio.shield(self._verdict)

    def __repr__(self) -> str:
        state = ("pending" if not self.decided else "discarded" if self.discarded
                 else "continued" if self.continued else "revoked" if self.revoked
                 else "sealed" if self.sealed else "confirmed")
        return f"Speculation(end_sample={self.paused.end_sample}, {state})"
