"""What a voice session reports: past-tense facts with identities and clock times.

Every event carries ``at`` (the session clock's reading) and the identities it concerns,
so a recorder can write them as JSON lines and a reader can reassemble the call.

Each event class also declares, once, what a client is told of it (``wire``: none, one
or two :class:`WireView` messages, e.g. the transcript of a committed turn, or an
``interrupted`` then the ``state`` it leaves the call in): a transport's encoder
(:func:`voxflow_adapters.webrtc.protocol.messages_for_event`) reads these declarations
instead of translating each event by hand, so an event and its message cannot drift
apart.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from voxflow.ids import DeliveryId, JobId, SessionId, TurnId
from voxflow.replies.records import SettleStatus

__all__ = [
    "AnnouncementQueued",
    "AudioStarted",
    "BargeIn",
    "BargeInPaused",
    "BargeInResumed",
    "CallState",
    "DeliverySettled",
    "MuteObserved",
    "ReplyFinished",
    "ReplyInterrupted",
    "ReplyStarted",
    "ReplyTextStreamed",
    "SessionClosed",
    "SessionEvent",
    "SpeculativeReplyDiscarded",
    "SpeechEnded",
    "SpeechStarted",
    "TranscriptDiscarded",
    "TurnCommitted",
    "TurnMetrics",
    "TurnRevoked",
    "WireView",
    "state_view",
]

CallState = Literal["connecting", "listening", "user_speaking", "thinking", "speaking", "ended"]
"""What a call is doing, as a client shows it (the ``state`` message)."""


@dataclass(frozen=True, slots=True)
class WireView:
    """One message a client is sent for an event: ``{"v": 1, "type": type, <fields>}``.

    Each of ``fields``, in this order, is the event's attribute (or property) of that
    name, unless ``fixed`` gives its value (the same for every event of the class) or it
    is ``supplied``: measured by the transport, not the session (null when the transport
    supplies none).
    """

    type: str
    fields: tuple[str, ...] = ()
    fixed: Mapping[str, str | None] = field(default_factory=dict)
    supplied: tuple[str, ...] = ()


def state_view(state: CallState) -> WireView:
    """The ``state`` message: what the call is doing now."""
    return WireView("state", ("state",), fixed={"state": state})


def _ms(later: float | None, earlier: float) -> float | None:
    return None if later is None else round((later - earlier) * 1000.0, 1)


class _Event(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    wire: ClassVar[tuple[WireView, ...]] = ()
    """What a client is told of it, in order (nothing: an internal event)."""

    session_id: SessionId
    at: float = Field(description="Clock.now() when it happened, never time.time()")


class SpeechStarted(_Event):
    """The user started speaking (``recording``); ``onset_at`` is when speech began."""

    kind: Literal["speech_started"] = "speech_started"
    wire: ClassVar[tuple[WireView, ...]] = (state_view("user_speaking"),)
    onset_at: float


class SpeechEnded(_Event):
    """The user's silence was long enough: the utterance ended at ``end_at``."""

    kind: Literal["speech_ended"] = "speech_ended"
    wire: ClassVar[tuple[WireView, ...]] = (state_view("thinking"),)
    end_at: float


class TranscriptDiscarded(_Event):
    """An utterance gave no words (noise, a cough, silence); no turn was committed."""

    kind: Literal["transcript_discarded"] = "transcript_discarded"
    reason: str


class SpeculativeReplyDiscarded(_Event):
    """A reply prepared in the user's pause was dropped unheard: the user spoke on.

    Nothing of it was played, and the flow's state (history, turn and reply records,
    the persisted snapshot) was rolled back to before it. Its turn was never committed.
    """

    kind: Literal["speculative_reply_discarded"] = "speculative_reply_discarded"
    turn_id: TurnId
    text: str = Field(description="the transcript it answered")
    reason: str


class TurnRevoked(_Event):
    """A committed turn was taken back: the user went on speaking before a sample of its
    reply was heard (``TurnDetection.resume_grace``).

    Its reply was fenced unheard, its generation closed, and the flow's state rolled back
    to before the turn (history, turn and reply records, the persisted snapshot): the
    continuation is committed as one turn with the whole utterance, under a new identity.
    """

    kind: Literal["turn_revoked"] = "turn_revoked"
    turn_id: TurnId
    text: str = Field(description="the transcript of the turn taken back")
    reason: str


class TurnCommitted(_Event):
    """A user turn was committed with a fresh identity (or, ``input_revision`` > 1, the
    same turn again with all its words: the user went on with it after its reply began,
    and that reply was cut)."""

    kind: Literal["turn_committed"] = "turn_committed"
    wire: ClassVar[tuple[WireView, ...]] = (
        WireView("transcript", ("role", "turn_id", "text"), fixed={"role": "user"}),)
    turn_id: TurnId
    text: str
    speech_end_at: float
    input_revision: int = Field(1, ge=1, description="the input's version: 2 and more for "
                                "a turn the user went on with")


class ReplyStarted(_Event):
    """A reply (foreground answer or background announcement) began."""

    kind: Literal["reply_started"] = "reply_started"
    turn_id: TurnId
    delivery_id: DeliveryId
    reply_kind: str


class ReplyTextStreamed(_Event):
    """A speakable segment of reply text was handed to TTS."""

    kind: Literal["reply_text"] = "reply_text"
    wire: ClassVar[tuple[WireView, ...]] = (
        WireView("reply_text", ("delivery_id", "segment_id", "text")),)
    delivery_id: DeliveryId
    segment_id: int
    text: str


class AudioStarted(_Event):
    """The client started playing a reply's audio."""

    kind: Literal["audio_started"] = "audio_started"
    wire: ClassVar[tuple[WireView, ...]] = (state_view("speaking"),)
    delivery_id: DeliveryId


class BargeIn(_Event):
    """The user spoke over a reply long enough to interrupt it."""

    kind: Literal["barge_in"] = "barge_in"
    wire: ClassVar[tuple[WireView, ...]] = (  # what was heard follows, with the cut
        WireView("interrupted", ("delivery_id", "heard_text"), fixed={"heard_text": None}),)
    delivery_id: DeliveryId
    onset_at: float


class BargeInPaused(_Event):
    """User sound over a reply paused its playback, pending confirmation."""

    kind: Literal["barge_in_paused"] = "barge_in_paused"
    delivery_id: DeliveryId
    onset_at: float


class BargeInResumed(_Event):
    """The paused reply plays on from the sample where it paused.

    Attributes:
        reason: ``false_alarm`` (the sound stopped short), ``unconfirmed`` (not confirmed
            in the window), ``backchannel`` or ``noise`` (the overlap's words).
        text: the overlap's transcript, when it decided.
    """

    kind: Literal["barge_in_resumed"] = "barge_in_resumed"
    delivery_id: DeliveryId
    onset_at: float
    reason: str
    text: str = ""


class ReplyInterrupted(_Event):
    """A reply was cut; the history keeps what was heard."""

    kind: Literal["reply_interrupted"] = "reply_interrupted"
    wire: ClassVar[tuple[WireView, ...]] = (
        WireView("interrupted", ("delivery_id", "heard_text")), state_view("listening"))
    turn_id: TurnId
    delivery_id: DeliveryId
    heard_text: str
    full_text: str
    heard_seconds: float
    stop_latency_ms: float | None = Field(
        None, description="barge-in speech onset → last reply sample played"
    )


class ReplyFinished(_Event):
    """A reply was played whole."""

    kind: Literal["reply_finished"] = "reply_finished"
    wire: ClassVar[tuple[WireView, ...]] = (
        WireView("reply_done", ("delivery_id",)), state_view("listening"))
    turn_id: TurnId
    delivery_id: DeliveryId
    text: str


class AnnouncementQueued(_Event):
    """A completed job's result was queued for announcement in the ReplyQueue.

    Emitted once per delivery, when the session first sees it pending: ``at`` is when it
    was queued, ``ready_at`` when its jobs' results were ready. It is spoken when the
    floor is free (a ``reply_started`` with the same ``delivery_id``), or settled unsaid.
    """

    kind: Literal["announcement_queued"] = "announcement_queued"
    delivery_id: DeliveryId
    turn_id: TurnId = Field(description="the turn that asked for the job(s)")
    job_ids: tuple[JobId, ...] = Field(description="the jobs whose results it reports")
    ready_at: float | None = Field(
        None, description="when the results it reports were ready (the last of its jobs "
        "completed), on the session clock; None: before this session (a restored one)")


class DeliverySettled(_Event):
    """A background announcement's delivery settled (never emitted for a delivery that is
    still pending or scheduled)."""

    kind: Literal["delivery_settled"] = "delivery_settled"
    delivery_id: DeliveryId
    status: SettleStatus


class MuteObserved(_Event):
    """The client muted or unmuted the microphone."""

    kind: Literal["mute"] = "mute"
    wire: ClassVar[tuple[WireView, ...]] = (WireView("mute", ("muted",)),)
    muted: bool


class TurnMetrics(_Event):
    """Latency marks of one foreground turn, on the session clock (seconds)."""

    kind: Literal["turn_metrics"] = "turn_metrics"
    wire: ClassVar[tuple[WireView, ...]] = (WireView(
        "latency", ("turn_id", "transcript_ms", "first_text_ms", "first_audio_ms",
                    "interrupted", "receive_ms"), supplied=("receive_ms",)),)
    turn_id: TurnId
    delivery_id: DeliveryId | None
    speech_end: float
    transcript_final: float
    first_text: float | None
    first_audio: float | None
    playback_end: float | None
    interrupted: bool
    fenced_chunks: int
    speculative: bool = Field(
        False, description="answered in the pause, before the end of the turn was confirmed"
    )

    @property
    def transcript_ms(self) -> float:
        """End of the user's speech → final transcript (ms, to 0.1)."""
        return round((self.transcript_final - self.speech_end) * 1000.0, 1)

    @property
    def first_text_ms(self) -> float | None:
        """End of the user's speech → first reply text (ms, to 0.1)."""
        return _ms(self.first_text, self.speech_end)

    @property
    def first_audio_ms(self) -> float | None:
        """End of the user's speech → first reply sample played (ms, to 0.1)."""
        return _ms(self.first_audio, self.speech_end)

    @property
    def voice_to_voice_ms(self) -> float | None:
        """Last user speech sample → first reply sample played (ms)."""
        if self.first_audio is None:
            return None
        return (self.first_audio - self.speech_end) * 1000.0


class SessionClosed(_Event):
    """The session ended; every delivery was settled."""

    kind: Literal["session_closed"] = "session_closed"
    wire: ClassVar[tuple[WireView, ...]] = (state_view("ended"),)


SessionEvent = Annotated[
    SpeechStarted | SpeechEnded | TranscriptDiscarded | TurnCommitted | ReplyStarted
    | ReplyTextStreamed | SpeculativeReplyDiscarded | TurnRevoked | AudioStarted | BargeIn
    | BargeInPaused | BargeInResumed
    | ReplyInterrupted | ReplyFinished
    | AnnouncementQueued | DeliverySettled | MuteObserved | TurnMetrics | SessionClosed,
    Field(discriminator="kind"),
]
