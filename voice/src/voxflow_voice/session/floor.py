"""FloorReporter: the client's side of the speaking floor, reported to the ReplyQueue.

A voice session learns what happens at the client from two sources: its own VAD (the
user is *recording*, i.e. speaking) and the adapter's observations (a delivery's audio is
*playing* or has *stopped*, the microphone is *muted*). It also knows how many user
utterances are still waiting for their reply (the *foreground*). Background
announcements may only be spoken when none of that holds the floor.

:class:`FloorReporter` keeps that state and reports it, as one
:class:`~voxflow.replies.ClientActivity` with an increasing ``seq`` plus
``set_foreground``, to the :class:`~voxflow.replies.ReplyQueue` under the state lock.
Each change only marks the floor dirty (never waits, so listening never stalls); the
:meth:`FloorReporter.run` task sends the latest state, then sets :attr:`FloorReporter.changed`
so the announcement delivery task (:mod:`voxflow_voice.session.delivery`) looks again.
"""

from __future__ import annotations

import asyncio

from voxflow.ids import DeliveryId
from voxflow.replies import ClientActivity

from ..call import CallContext

__all__ = ["FloorReporter"]


class FloorReporter:
    """The client's floor state (recording, playback, mute, pending foreground turns).

    Args:
        call: the call (its identity, read at each report; the ReplyQueue to report to,
            if any, else the state stays local; the state lock for queue operations).
    """

    def __init__(self, call: CallContext[object]) -> None:
        self._call = call
        self._replies = call.replies
        self._lock = call.lock
        self._recording = False
        self._playing: DeliveryId | None = None
        self._stopped: DeliveryId | None = None  # the delivery whose playback stopped last
        self._muted = False
        self._foreground = 0  # utterances whose reply has not settled yet
        self._seq = 0
        self._dirty = asyncio.Event()  # wakes the reporter
        self.changed = asyncio.Event()
        """Set after every report (and by anyone with news for the delivery task)."""

    # -- state ----------------------------------------------------------------------

    @property
    def recording(self) -> bool:
        """The user is speaking (VAD)."""
        return self._recording

    @property
    def playing(self) -> DeliveryId | None:
        """The delivery whose audio the client is playing, if any."""
        return self._playing

    @property
    def muted(self) -> bool:
        """The client's microphone is muted."""
        return self._muted

    @property
    def pending_turns(self) -> int:
        """Finished utterances whose reply has not settled yet."""
        return self._foreground

    @property
    def held(self) -> bool:
        """The user holds the floor: a foreground turn is pending, or they speak, or mute.

        This local view is always current; the ReplyQueue's may lag a report behind.
        """
        return self._foreground > 0 or self._recording or self._muted

    # -- changes (each never waits) ---------------------------------------------------

    def recording_changed(self, recording: bool) -> None:
        """The user started (True) or stopped (False) speaking."""
        self._recording = recording
        self._mark()

    def playback_observed(self, delivery_id: DeliveryId | None) -> None:
        """A playback receipt: the client is playing ``delivery_id``'s audio."""
        if self._playing != delivery_id:
            self._playing = delivery_id
            self._mark()

    def playback_stopped(self, delivery_id: DeliveryId | None) -> None:
        """The client's playback drained; ``delivery_id`` names what stopped, if known."""
        # A stop names what stopped: the ReplyQueue refuses an anonymous stop while
        # identified playback is on (a stale stop must not free newer audio).
        self._stopped = delivery_id or self._playing
        self._playing = None
        self._mark()

    def muted_changed(self, muted: bool) -> None:
        """The client's microphone was muted (True) or unmuted (False)."""
        self._muted = muted
        self._mark()

    def foreground_entered(self) -> None:
        """A user utterance ended: the floor is the foreground's until its reply settles."""
        self._foreground += 1
        self._mark()

    def foreground_left(self) -> None:
        """The reply to one utterance settled (or the utterance was discarded)."""
        self._foreground -= 1
        self._mark()

    def _mark(self) -> None:
        self._dirty.set()

    # -- reporting ------------------------------------------------------------------

    async def run(self) -> None:
        """Report the latest client state to the ReplyQueue as a new ClientActivity,
        each time it changed (until cancelled)."""
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            if self._replies is not None:
                async with self._lock:
                    self._replies.set_foreground(self._foreground > 0)
                    self._seq += 1
                    self._replies.observe_client(ClientActivity(
                        session_id=self._call.session_id, seq=self._seq,
                        recording=self._recording, playback=self._playing is not None,
                        muted=self._muted,
                        delivery_id=self._playing if self._playing is not None else self._stopped,
                    ))
            self.changed.set()

    def __repr__(self) -> str:
        return (
            f"FloorReporter(recording={self._recording}, playing={self._playing!r}, "
            f"muted={self._muted}, foreground={self._foreground}, seq={self._seq})"
        )
