"""The events of :class:`~voxflow_voice.listen.turn_detector.TurnDetector`, in input samples."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..audio import AudioChunk

__all__ = [
    "BargeInDetected",
    "SpeechEnded",
    "SpeechStarted",
    "TurnDetectorEvent",
    "TurnResumed",
    "UtterancePaused",
    "UtteranceReady",
]


@dataclass(frozen=True, slots=True)
class SpeechStarted:
    """Speech went on for ``min_speech``: the user is speaking (``recording``).

    Attributes:
        onset_sample: the first speech sample, in the input stream.
        at_sample: where the decision was made (end of the deciding frame).
    """

    onset_sample: int
    at_sample: int
    kind: Literal["speech_started"] = "speech_started"


@dataclass(frozen=True, slots=True)
class BargeInDetected:
    """Speech went on for ``min_barge_in``: enough to interrupt an active reply."""

    onset_sample: int
    at_sample: int
    kind: Literal["barge_in_detected"] = "barge_in_detected"


@dataclass(frozen=True, slots=True)
class SpeechEnded:
    """``end_of_turn_silence`` of silence followed the speech: the turn may commit.

    Attributes:
        end_sample: the sample after the last speech frame.
        at_sample: where the silence was long enough.
    """

    end_sample: int
    at_sample: int
    kind: Literal["speech_ended"] = "speech_ended"


@dataclass(frozen=True, slots=True)
class UtteranceReady:
    """Audio of one utterance, ready for STT (16 kHz mono).

    Attributes:
        audio: the utterance, ``start_sample`` set to its place in the input stream.
        onset_sample: first speech sample (the audio starts up to ``pre_roll`` earlier).
        end_sample: sample after the last speech frame (the audio may run ``end_pad`` on).
        truncated: cut at ``max_utterance`` while the user was still speaking.
    """

    audio: AudioChunk
    onset_sample: int
    end_sample: int
    truncated: bool = False
    kind: Literal["utterance_ready"] = "utterance_ready"


@dataclass(frozen=True, slots=True)
class UtterancePaused:
    """``end_pad`` of silence followed speech: the utterance so far, for speculative STT.

    Attributes:
        audio: exactly the audio the :class:`UtteranceReady` for ``end_sample`` will carry.
        onset_sample: first speech sample.
        end_sample: sample after the last speech frame so far.
    """

    audio: AudioChunk
    onset_sample: int
    end_sample: int
    kind: Literal["utterance_paused"] = "utterance_paused"

    def matches(self, ready: UtteranceReady) -> bool:
        """Whether ``ready`` carries the same audio (so a transcript of this one holds)."""
        return (
            ready.end_sample == self.end_sample
            and ready.audio.start_sample == self.audio.start_sample
            and ready.audio.num_samples == self.audio.num_samples
        )


@dataclass(frozen=True, slots=True)
class TurnResumed:
    """Speech started within ``resume_grace`` of a committed turn's end, before the turn
    was sealed: the turn goes on (the next :class:`UtteranceReady` carries all of it).

    Attributes:
        end_sample: the end of the committed turn taken back (its ``UtteranceReady``'s).
        onset_sample: the onset of the speech that continues it.
        at_sample: where the speech was confirmed (``min_speech`` after its onset).
        committed_at: where the committed turn had ended (its ``SpeechEnded.at_sample``).
    """

    end_sample: int
    onset_sample: int
    at_sample: int
    committed_at: int
    kind: Literal["turn_resumed"] = "turn_resumed"


TurnDetectorEvent = (
    SpeechStarted | BargeInDetected | SpeechEnded | UtterancePaused | UtteranceReady
    | TurnResumed
)
