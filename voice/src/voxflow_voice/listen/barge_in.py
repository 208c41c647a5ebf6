"""Barge-in arbitration: pause on the first evidence, confirm, then fence or resume.

Speech over a reply no longer cuts it on a fixed timer. :class:`BargeInArbiter` follows
one *overlap* (user sound while a reply is active) through these steps:

1. **pause** at the first evidence (the VAD's first speech frame, or with
   ``pause_on_rise`` the first of the rising frames just before it): the adapter stops
   playing the reply within one frame and keeps its queued audio (see
   :class:`~voxflow_voice.transport.PausableTransport`);
2. **confirm**: the sound must go on for ``min_barge_in`` (the turn detector's
   ``BargeInDetected``) within ``confirm_window`` seconds of the onset, else it was a
   false alarm (a click, a breath, a short noise burst) and the reply **resumes** from the
   exact sample where it paused;
3. **decide** by the reply's :data:`BargeInPolicy`:

   * ``interrupt``: confirmed speech **fences** the reply (as any framework does);
   * ``ignore_backchannel`` (default): speech longer than ``backchannel_max`` is a request
     and fences; shorter speech waits for the transcript of the overlap (speculative STT
     on the pause that follows it): a backchannel ("uh-huh", "yeah", "okay") or no words
     at all (a cough, noise) resumes, anything else ("wait, stop") fences. With no
     transcript by ``decide_window`` seconds after the onset, confirmed speech fences
     (3 s by default: a loaded 2-core machine took up to ~1.8 s from onset to words);
   * ``must_finish``: nothing interrupts the reply (no pause either).

The arbiter is pure bookkeeping in input samples (16 kHz), so decisions are the same on
any machine; the session executes them (pause/resume/fence) and feeds it the turn
detector's view, the ``BargeInDetected`` confirmations and the overlap's transcript.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from voxflow.ids import DeliveryId

from ..audio import STT_SAMPLE_RATE

__all__ = [
    "BACKCHANNEL_WORDS",
    "DEFAULT_BARGE_IN",
    "BargeInAction",
    "BargeInArbiter",
    "BargeInPolicy",
    "BargeInSettings",
    "Overlap",
    "OverlapKind",
    "classify_overlap",
]

BargeInPolicy = Literal["interrupt", "ignore_backchannel", "must_finish"]
"""How user speech over a reply is treated (per session, overridable per reply)."""

BargeInAction = Literal["none", "pause", "resume", "fence"]
"""What the session must do now with the reply's playback."""

OverlapKind = Literal["backchannel", "noise", "request"]
"""What the words of an overlap amount to."""

BACKCHANNEL_WORDS: frozenset[str] = frozenset({
    "uh", "huh", "uhhuh", "uh-huh", "mm", "mmm", "hmm", "mhm", "mm-hmm", "mmhmm", "hm",
    "yeah", "yes", "yep", "yup", "ok", "okay", "right", "sure", "alright", "all",
    "i", "see", "got", "it", "cool", "nice", "great", "good", "oh", "ah", "aha", "wow",
    "true", "exactly", "indeed", "totally", "fine", "go", "on",
    "um", "umm", "uhm", "er", "erm", "ahem", "ooh", "hmmm",
})
"""Words a backchannel may consist of (lower case; compounds like ``all right``,
``i see``, ``got it``, ``go on`` are covered by their parts; fillers and throat-clearing
that Whisper writes out, like ``um`` or ``ahem``, count too)."""

_WORD = re.compile(r"[a-z]+(?:[-'][a-z]+)*")
_HUM = re.compile(r"[mhnu]+")  # "mhm", "M-H-N", "mmhmm", "uhm": a hum, however spelt
_NON_SPEECH = re.compile(r"\[[^\]]*\]|\([^)]*\)|\*[^*]*\*")  # Whisper's "(coughing)", "[BLANK]"


class BargeInSettings(BaseModel):
    """How a voice session arbitrates user sound over its replies."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    policy: BargeInPolicy = Field(
        "ignore_backchannel", description="interrupt, ignore_backchannel or must_finish"
    )
    pause_on_onset: bool = Field(
        True, description="pause playback at the first speech frame, before confirming"
    )
    pause_on_rise: bool = Field(
        True,
        description="pause already at the first rising frame (the detector's onset_threshold)",
    )
    confirm_window: float = Field(
        0.6, gt=0, le=10, description="s after the onset within which min_barge_in must be reached"
    )
    resume_hold: float = Field(
        0.4, ge=0, le=5,
        description="silence (s) after an unconfirmed sound before playback resumes",
    )
    rise_hold: float = Field(
        0.1, ge=0, le=5,
        description="silence (s) after a rising sound that never became speech before "
        "playback resumes (pause_on_rise)",
    )
    backchannel_max: float = Field(
        1.0, ge=0, le=10, description="speech (s) longer than this is a request, whatever its words"
    )
    backchannel_max_words: int = Field(
        4, ge=1, le=50, description="a backchannel has at most this many words"
    )
    decide_window: float = Field(
        3.0, gt=0, le=30, description="s after the onset by which the decision falls without words"
    )
    backchannel_words: frozenset[str] = Field(
        BACKCHANNEL_WORDS, description="the words a backchannel may consist of"
    )

    @model_validator(mode="after")
    def _check(self) -> BargeInSettings:
        if self.decide_window < self.confirm_window:
            raise ValueError("decide_window must be >= confirm_window")
        return self


DEFAULT_BARGE_IN = BargeInSettings()


def classify_overlap(text: str, settings: BargeInSettings = DEFAULT_BARGE_IN) -> OverlapKind:
    """What the transcript of an overlap is: ``noise`` (no words), a ``backchannel``, or a
    ``request``.

    Raises:
        TypeError: ``text`` is not a string.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    words = _WORD.findall(_NON_SPEECH.sub(" ", text.lower()))
    if not words:
        return "noise"
    if len(words) <= settings.backchannel_max_words and all(
        w in settings.backchannel_words or w.replace("-", "") in settings.backchannel_words
        or _HUM.fullmatch(w.replace("-", "")) is not None
        for w in words
    ):
        return "backchannel"
    return "request"


@dataclass(slots=True)
class Overlap:
    """One stretch of user sound over a reply, as the arbiter follows it.

    Attributes:
        delivery_id: the reply it overlaps.
        onset: first speech sample (input stream).
        policy: the policy in force for that reply.
        paused: playback is paused now.
        confirmed: the sound reached ``min_barge_in`` (real speech, not a blip).
        decided_end: speech end the last "resume" decision covered (a backchannel).
        outcome: how it ended (``None`` while undecided).
        pauses: how often playback was paused for it.
        idle_since: where the sound stopped short of an utterance (waiting to resume).
        first_onset: onset of the first sound of a run of overlaps that kept the reply
            paused ("Wa... it, stop"): where the user's interruption really began.
        rising: begun at rising frames (``pause_on_rise``) and no speech frame since.
    """

    delivery_id: DeliveryId
    onset: int
    policy: BargeInPolicy
    paused: bool = False
    confirmed: bool = False
    decided_end: int | None = None
    outcome: str | None = None
    pauses: int = 0
    idle_since: int | None = None
    first_onset: int = -1
    rising: bool = False

    def __post_init__(self) -> None:
        if self.first_onset < 0:
            self.first_onset = self.onset


class BargeInArbiter:
    """Decides, overlap by overlap, whether a reply pauses, resumes or is fenced.

    Args:
        settings: the rules; :data:`DEFAULT_BARGE_IN` if ``None``.
    """

    def __init__(self, settings: BargeInSettings | None = None) -> None:
        if settings is not None and not isinstance(settings, BargeInSettings):
            raise TypeError(f"settings must be BargeInSettings, got {type(settings).__name__}")
        self.settings = settings if settings is not None else DEFAULT_BARGE_IN
        rate = STT_SAMPLE_RATE
        self._confirm = round(self.settings.confirm_window * rate)
        self._decide = round(self.settings.decide_window * rate)
        self._backchannel_max = round(self.settings.backchannel_max * rate)
        self._hold = round(self.settings.resume_hold * rate)
        self._rise_hold = round(self.settings.rise_hold * rate)
        self.overlap: Overlap | None = None
        self._overlapped: dict[int, BargeInPolicy] = {}  # onset → policy, recent overlaps

    def begin(
        self, delivery_id: DeliveryId, onset: int, policy: BargeInPolicy, *,
        rising: bool = False,
    ) -> BargeInAction:
        """User sound starts at ``onset`` while ``delivery_id`` is the active reply
        (``rising``: only frames over the detector's ``onset_threshold`` so far)."""
        current = self.overlap
        if current is not None and current.delivery_id == delivery_id and current.onset == onset:
            current.rising = current.rising and rising
            return "none"
        self.overlap = Overlap(delivery_id, onset, policy, rising=rising)
        self._overlapped[onset] = policy
        if current is not None and current.paused and current.delivery_id == delivery_id:
            self.overlap.paused = True  # more sound right after a short one: still paused
            self.overlap.first_onset = current.first_onset
            self.overlap.rising = rising and current.rising  # after speech: resume_hold
            return "none"
        if policy == "must_finish" or not self.settings.pause_on_onset:
            return "none"
        return self._pause(self.overlap)

    def confirmed(self) -> BargeInAction:
        """The overlap's speech reached ``min_barge_in``."""
        ov = self.overlap
        if ov is None or ov.outcome == "fenced":
            return "none"
        ov.confirmed = True
        if ov.policy == "must_finish":
            return "none"
        if ov.policy == "interrupt":
            return self._fence(ov)
        if ov.decided_end is not None:
            return "none"  # a backchannel already let through; update() watches for more
        return "none" if ov.paused else self._pause(ov)

    def update(
        self, delivery_id: DeliveryId | None, *, position: int, active: bool, speech_end: int
    ) -> BargeInAction:
        """After each input push: the active reply, the stream ``position``, whether the
        detector hears (or is still within) an utterance, and its last speech sample."""
        ov = self.overlap
        if ov is None:
            return "none"
        if delivery_id != ov.delivery_id or ov.outcome == "fenced":
            # The reply ended or was cut: the overlap is over.
            self.overlap = None
            return "resume" if ov.paused and ov.outcome != "fenced" else "none"
        if ov.policy == "must_finish":
            if not active:
                self.overlap = None
            return "none"
        if not active:
            # The utterance is over (or never became one).
            if ov.paused and not ov.confirmed:
                # A false alarm, unless more sound follows soon ("Wa... it, stop"):
                # stay paused for resume_hold, a new onset takes the pause over.
                if ov.idle_since is None:
                    ov.idle_since = position
                hold = self._rise_hold if ov.rising else self._hold
                if position - ov.idle_since < hold:
                    return "none"
                self.overlap = None
                ov.outcome = "false_alarm"
                return "resume"
            self.overlap = None
            if ov.paused:
                return self._fence(ov)  # confirmed speech that got no verdict in time
            return "none"
        elapsed = position - ov.onset
        if not ov.confirmed:
            # Unconfirmed by the window: resume, but not while the user is mid-phrase
            # ("Stop, thanks": the comma's pause is shorter than resume_hold), unless the
            # sound has dragged on past the decide window.
            recent = position - speech_end < self._hold and elapsed < self._decide
            if ov.paused and elapsed >= self._confirm and not recent:
                ov.paused = False
                ov.outcome = "unconfirmed"
                return "resume"
            return "none"
        if ov.policy != "ignore_backchannel":
            return "none"
        if speech_end - ov.onset > self._backchannel_max:
            return self._fence(ov)  # too long for an acknowledgment: a request
        if ov.decided_end is not None:
            if speech_end > ov.decided_end and not ov.paused:
                ov.decided_end = None  # the user goes on speaking: decide again
                ov.outcome = None
                return self._pause(ov)
            return "none"
        if ov.paused and elapsed >= self._decide:
            return self._fence(ov)  # no words in time: confirmed speech wins
        return "none"

    def wants_words(self, onset: int) -> bool:
        """Whether the overlap starting at ``onset`` awaits its transcript now."""
        ov = self.overlap
        return (
            ov is not None and ov.onset == onset and ov.paused and ov.confirmed
            and ov.policy == "ignore_backchannel" and ov.outcome is None
        )

    def transcribed(self, text: str, speech_end: int) -> tuple[BargeInAction, OverlapKind]:
        """The transcript of the overlap up to ``speech_end`` is ``text``."""
        kind = classify_overlap(text, self.settings)
        ov = self.overlap
        if ov is None or not ov.paused or ov.outcome == "fenced":
            return "none", kind
        if kind == "request":
            return self._fence(ov), kind
        ov.paused = False
        ov.decided_end = speech_end
        ov.outcome = kind
        return "resume", kind

    def overlapped(self, onset: int) -> BargeInPolicy | None:
        """The policy of the reply that the utterance starting at ``onset`` overlapped,
        or ``None`` if it overlapped none. Forgets that utterance and older ones (call
        once per finished utterance, so memory stays flat)."""
        policy = self._overlapped.get(onset)
        self._overlapped = {k: v for k, v in self._overlapped.items() if k > onset}
        return policy

    def is_turn(self, onset: int, text: str) -> bool:
        """Whether a finished utterance with transcript ``text`` is a turn to answer: not
        when it was an acknowledgment or noise over a reply (policies other than
        ``interrupt``)."""
        policy = self.overlapped(onset)
        if policy is None or policy == "interrupt":
            return True
        return classify_overlap(text, self.settings) == "request"

    @staticmethod
    def _pause(ov: Overlap) -> BargeInAction:
        ov.paused = True
        ov.pauses += 1
        return "pause"

    @staticmethod
    def _fence(ov: Overlap) -> BargeInAction:
        ov.paused = False
        ov.outcome = "fenced"
        return "fence"

    def __repr__(self) -> str:
        return f"BargeInArbiter(policy={self.settings.policy}, overlap={self.overlap!r})"
