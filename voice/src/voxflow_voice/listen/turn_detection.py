"""The rules of turn taking (:class:`TurnDetection`): when the voice pipeline starts and
ends a user utterance, what counts as a barge-in and, with an end-of-turn model, how long
each kind of pause waits. :class:`~voxflow_voice.listen.turn_detector.TurnDetector` applies them
in audio time."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .hiss import HissBand

__all__ = ["DEFAULT_TURN_DETECTION", "FAST_TURN_DETECTION", "TurnDetection"]


class TurnDetection(BaseModel):
    """When the voice pipeline starts and ends a user utterance and what counts as a barge-in."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    threshold: float = Field(0.5, gt=0, lt=1, description="speech probability that starts speech")
    neg_threshold: float = Field(
        0.35, gt=0, lt=1, description="probability below which ongoing speech counts as silence"
    )
    onset_threshold: float = Field(
        0.15, ge=0, lt=1, description="probability of the frames just before an onset that count"
    )
    hiss_rise: float | None = Field(
        12.0, ge=0, le=80,
        description="a frame whose energy over 4 kHz outweighs the rest and stays this far "
        "(dB) over the recent floor for 24 ms also counts as rising, like onset_threshold "
        "(the unvoiced 's' opening 'Stop', 'Sorry'; 'f' and 'sh' are left to the VAD; see "
        "voxflow_voice.listen.hiss); None: the VAD alone",
    )
    hiss_band: HissBand = Field(
        "wide",
        description="the input's band for the hiss cue: wide (16 kHz audio, split at 4 kHz) "
        "or telephone (an 8 kHz line, split at 2 kHz: the phone path)",
    )
    min_speech: float = Field(
        0.25, ge=0, le=5, description="speech (s) needed before speech starts"
    )
    end_of_turn_silence: float = Field(0.6, gt=0, le=10, description="silence (s) that ends a turn")
    max_utterance: float = Field(30.0, gt=0, le=120, description="longest audio (s) handed to STT")
    min_barge_in: float = Field(
        0.3, ge=0, le=5, description="speech (s) needed to interrupt a reply"
    )
    # Silero confirms a short first word ("Stop, ...") up to ~0.4 s late; 0.6 s of
    # pre-roll keeps it in the audio handed to Whisper (which pads to 30 s anyway).
    pre_roll: float = Field(0.6, ge=0, le=5, description="audio (s) kept before the speech onset")
    # 0.1: the speculative STT starts at a 0.1 s pause, so the pause's words are known when
    # the end-of-turn model decides at decision_pause (0.2 s).
    end_pad: float = Field(
        0.1, ge=0, le=5,
        description="trailing silence (s) kept after the speech, and the pause after which "
        "the utterance is handed out early; at most half of end_of_turn_silence",
    )
    early_utterance: bool = Field(
        True, description="also hand out the utterance after end_pad of silence (speculative STT)"
    )
    max_end_of_turn_silence: float = Field(
        1.6, gt=0, le=10,
        description="with an end-of-turn model: silence (s) after which a turn it judged "
        "incomplete ends anyway",
    )
    complete_threshold: float = Field(
        0.5, gt=0, lt=1,
        description="with an end-of-turn model: probability from which a turn is complete",
    )
    decision_pause: float = Field(
        0.2, ge=0, le=2,
        description="with an end-of-turn model: silence (s) after which it judges the turn "
        "(at least end_pad, where the speculative STT starts)",
    )
    closed_answer_silence: float = Field(
        0.4, gt=0, le=10,
        description="with an end-of-turn model: silence (s) ending a closed answer ('No.') "
        "the model doubts",
    )
    # 1.0 s by end_of_turn.py (Dec 1): short answers committed late 5 -> 3 of 60 (two
    # "That's all." heard as "Next all" / "Matt's oil"), splits unchanged (0 / 1 of 180
    # sealed 0.3 / 0.1 s after the commit); 1.3 s split a misheard "My account number is".
    short_turn: float = Field(
        1.0, ge=0, le=5,
        description="with an end-of-turn model: a turn of at most this much speech (s) the "
        "model doubts, whose words neither close nor open anything, ends after "
        "closed_answer_silence like a closed answer (a short answer the STT misheard); 0: off",
    )
    # False by eot_session.py on its tune half (Dec 4): a question cut short ("Could you
    # book me the room" ... "for three nights") is worded as a whole one; asking the model
    # too (and holding a question it doubts complete_silence) split 18 of 128 paused
    # utterances against 26 with the words alone, questions answered 291 vs 279 ms
    # (median, virtual time) after the last word.
    question_closes: bool = Field(
        False,
        description="with an end-of-turn model: a pause whose words are a question ends the "
        "turn without asking the model (its 50-110 ms are then not on the reply's path); "
        "off: the model is asked too, and a question it doubts waits complete_silence",
    )
    complete_silence: float = Field(
        0.0, ge=0, le=10,
        description="with an end-of-turn model: silence (s) after which a turn judged "
        "complete ends, unless its words close it (a closed answer, 'No, thanks.', or a "
        "question: at once); up to it, speech goes on in the same turn; 0: at the verdict",
    )

    resume_grace: float = Field(
        1.0, ge=0, le=3,
        description="after a turn ended, speech starting within this silence (s) of its "
        "end continues it (TurnResumed) unless the caller sealed it; 0: never",
    )

    continue_within: float = Field(
        1.0, ge=0, le=5,
        description="after a turn ended (any turn with continue_complete, else one its "
        "words or the end-of-turn model say was unfinished), speech starting within this "
        "time (s) of the turn's end (its commit) continues it, even once its reply was "
        "heard: the reply is cut (its heard part kept) and the turn answered again with all "
        "its words (TurnDetector.allow_continuation); 0: never",
    )

    # True by eot_session.py on its tune half (Dec 4): a first half that is complete in
    # itself ("Could you book me a room?" (pause) "for three nights") or that the STT
    # misheard ("What time does this?" of "What time does the") is no longer a turn of its
    # own: paused utterances split 17 -> 5 of 128, short answers and questions unchanged.
    # Speech that starts within continue_within of a commit is the user going on: the
    # reply it overlaps began at most ~0.7 s before, too soon to be answered.
    continue_complete: bool = Field(
        True, description="a turn judged complete may be continued too (within "
        "continue_within of its commit, even once its reply was heard whole: the reply cut, "
        "the turn answered again with all its words); off: only a turn that ended "
        "unfinished",
    )

    judge_continuation: bool = Field(
        True, description="in a resumed turn, the model judges the continuation's audio "
        "(the part before was judged complete already) instead of the whole",
    )

    @model_validator(mode="after")
    def _check(self) -> TurnDetection:
        if self.onset_threshold > self.threshold:
            raise ValueError("onset_threshold must be <= threshold")
        if self.neg_threshold > self.threshold:
            raise ValueError("neg_threshold must be <= threshold")
        if self.max_utterance <= self.min_speech + self.pre_roll:
            raise ValueError("max_utterance must be longer than min_speech + pre_roll")
        pause = max(min(self.end_pad, self.end_of_turn_silence / 2), self.decision_pause)
        if min(self.max_end_of_turn_silence, self.closed_answer_silence) <= pause:
            raise ValueError("max_end_of_turn_silence and closed_answer_silence must be longer "
                             "than the pause where the model decides (end_pad, decision_pause)")
        if self.complete_silence > self.max_end_of_turn_silence:
            raise ValueError("complete_silence must be at most max_end_of_turn_silence (a turn "
                             "judged complete cannot wait longer than one judged incomplete)")
        return self


DEFAULT_TURN_DETECTION = TurnDetection()
FAST_TURN_DETECTION = TurnDetection(
    min_speech=0.1, end_of_turn_silence=0.2, min_barge_in=0.1, pre_roll=0.2, end_pad=0.1
)
"""Short settings for tests and the low-latency benchmark (validated like any other)."""
