"""The port a :class:`~voxflow_voice.session.VoiceSession` talks to: what adapters implement.

An adapter (simulated audio, a local sound card, a WebRTC peer) moves microphone audio
in, identity-tagged reply audio out, and reports what actually happened at the client
as :data:`ClientObservation` s: which reply audio was played (receipts), when the
output ran dry, and mute changes. The session turns those into ``ClientActivity`` for
the speaking floor and into "history as heard".

The voice package defines the port; ``voxflow_adapters`` implements it (the dependency
points only that way).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

from voxflow.ids import DeliveryId

from .audio import AudioChunk, ReplyChunk

__all__ = [
    "AudioTransport",
    "ClientObservation",
    "MuteChanged",
    "PausableTransport",
    "PlaybackDrained",
    "PlaybackReceipt",
]


@dataclass(frozen=True, slots=True)
class PlaybackReceipt:
    """The client played a piece of reply audio: the user heard it.

    Attributes:
        delivery_id: the reply the audio belongs to.
        segment_id: the reply text segment it was synthesized from.
        start_sample: where the piece starts within its segment's audio.
        num_samples: how many samples were played.
        sample_rate: the rate of those samples.
        at: clock time at which the piece started playing.
    """

    delivery_id: DeliveryId
    segment_id: int
    start_sample: int
    num_samples: int
    sample_rate: int
    at: float
    kind: Literal["playback_receipt"] = "playback_receipt"


@dataclass(frozen=True, slots=True)
class PlaybackDrained:
    """The client's output ran dry: nothing is playing any more.

    Attributes:
        at: clock time when the last buffered sample finished.
        delivery_id: the reply that was playing last, if any.
    """

    at: float
    delivery_id: DeliveryId | None = None
    kind: Literal["playback_drained"] = "playback_drained"


@dataclass(frozen=True, slots=True)
class MuteChanged:
    """The user muted or unmuted the microphone at the client."""

    muted: bool
    at: float
    kind: Literal["mute_changed"] = "mute_changed"


ClientObservation = PlaybackReceipt | PlaybackDrained | MuteChanged


@runtime_checkable
class AudioTransport(Protocol):
    """Audio in and out of one call, plus what the client observed.

    Rules an implementation keeps:

    * ``write_nowait`` never blocks; :meth:`wait_writable` is where back-pressure waits.
      Keeping the two apart makes "check the fence, then write" atomic on the loop.
    * :meth:`flush` drops every buffered chunk of that delivery *at once*, so nothing of
      it is played afterwards, not even a chunk written later; chunks of other deliveries
      stay queued.
    * Receipts describe audio that was really played, in playing order, in the chunk's
      own rate and sample positions; a :class:`PlaybackDrained` follows once the output
      ran dry after playing.

    :class:`~voxflow_voice.speak.playout.PlayoutQueue` keeps these rules for an adapter (which
    then adds only its cadence and resampling), and :func:`voxflow_voice.testing.
    check_transport` checks them against any transport.
    """

    def audio_input(self) -> AsyncIterator[AudioChunk]:
        """Microphone audio (mono s16, any rate), in order, until the call ends."""
        ...

    async def wait_writable(self) -> None:
        """Return when the output buffer has room for more reply audio."""
        ...

    def write_nowait(self, chunk: ReplyChunk) -> None:
        """Queue one reply chunk (it carries its reply's identity) for playout."""
        ...

    def flush(self, delivery_id: DeliveryId) -> int:
        """Drop the queued audio of ``delivery_id`` now; returns the samples dropped."""
        ...

    def observations(self) -> AsyncIterator[ClientObservation]:
        """What happened at the client (receipts, drains, mute), in order."""
        ...


@runtime_checkable
class PausableTransport(AudioTransport, Protocol):
    """An :class:`AudioTransport` that can also hold a reply's playout and go on later.

    A separate protocol, so that adapters without it keep working: the playback stage
    pauses only a transport that is an instance of this one (the session then simply
    decides without pausing). Rules an implementation keeps:

    * :meth:`pause` takes effect within one output frame: no further sample of that
      delivery is played, and its queued audio stays queued (nothing is dropped);
    * :meth:`resume` plays on from the exact sample where the pause stopped, so the
      receipts of the delivery stay contiguous (no gap, no repeat);
    * :meth:`flush` of a paused delivery drops its audio and forgets the pause.
    """

    def pause(self, delivery_id: DeliveryId) -> bool:
        """Hold ``delivery_id``'s playout now; False if it was already paused."""
        ...

    def resume(self, delivery_id: DeliveryId) -> bool:
        """Play on where ``delivery_id`` paused; False if it was not paused."""
        ...
