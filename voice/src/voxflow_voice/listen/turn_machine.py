"""Turn taking's rules in audio time: VAD probabilities → speech start, barge-in, speech
end, utterances (:class:`TurnMachine`, synchronous; :class:`~.turn_detector.TurnDetector`
adds the async face a session drives it with).

:class:`TurnDetector` is driven by *audio time*: every decision is counted in samples of
the 16 kHz input stream, never read from a wall clock, so the same audio always gives the
same events at the same sample positions, however fast the machine is. A session maps
sample positions to its :class:`~voxflow.clock.Clock` if it needs clock time.

The rules (:class:`TurnDetection`):

* a frame is speech when its probability is >= ``threshold``; once speech started, it goes
  on while frames stay >= ``neg_threshold`` (hysteresis, as in Silero's own iterator);
* the onset is backdated over up to three frames just before the first speech frame
  that score at least ``onset_threshold``: Silero's probability rises over a frame or two
  (measured 40 to 100 ms behind the first voiced sample on the bundled voice), and the
  durations below count from the onset; with ``hiss_rise`` a frame of sustained
  high-frequency noise (:class:`~voxflow_voice.listen.hiss.HissDetector`: the 's' of "Stop",
  which Silero scores low for up to ~140 ms) counts as rising too;
* speech *starts* after ``min_speech`` seconds of it (shorter blips are ignored);
* a *barge-in* is signalled once per utterance after ``min_barge_in`` seconds of speech
  (never before the start); the session acts on it only while a reply is active;
* speech *ends* after ``end_of_turn_silence`` seconds of silence and the utterance (with
  ``pre_roll`` seconds of audio before the onset) is handed out for STT;
* an utterance longer than ``max_utterance`` is cut and handed out (``truncated``), and
  collection goes on, so STT never gets an unbounded input.

Speculative transcription: with ``early_utterance``, the utterance is also handed out as
:class:`UtterancePaused` as soon as ``end_pad`` seconds of silence follow the speech,
well before the turn ends. Its audio is *bit-identical* to that of the
:class:`UtteranceReady` that follows if the user stays silent (same ``end_sample`` and
``audio.start_sample``), so a session may start STT on the pause and, at the turn end,
use that transcript as is: the end-of-turn silence then hides the STT latency. If the user
speaks again, the pause is simply superseded (a later pause or ready has another
``end_sample``).

Semantic end of turn (:mod:`voxflow_voice.engines.end_of_turn`): with an ``end_of_turn_model``, the
silence timer is replaced. After ``decision_pause`` of silence (at least ``end_pad``, where
:class:`UtterancePaused` comes and the speculative STT starts) the detector owes a decision
(:attr:`TurnDetector.undecided`) and :meth:`TurnDetector.decide` asks the model about the
turn's audio so far (the words of the paused audio may join in): complete
(probability >= ``complete_threshold``, or a closed answer the model agrees with), the turn
ends right there, on exactly the paused audio; incomplete, it ends only after
``max_end_of_turn_silence`` of silence, unless the user speaks on (the next pause is judged
again, on the whole turn); a closed answer the model doubts ("No," may open "No, thanks")
ends after ``closed_answer_silence``. ``decide`` is a
separate call so the caller can start the pause's speculative STT first and run both at
once; positions are still audio time: the verdict applies at the pause's sample, and
the caller pushes no audio before it has decided.

Provisional commits (``resume_grace``): a turn that ended at a short pause may still be
taken back. Until :meth:`TurnDetector.seal` (the caller seals it once any of its reply
was heard) or ``resume_grace`` of silence after its end, the turn's audio is kept; speech
that starts within that window brings :class:`TurnResumed` (before its
:class:`SpeechStarted`), and the utterance goes on from the committed turn's onset: the
next :class:`UtteranceReady` carries the whole of it, pause included, and the model
judges the whole of it. A caller that cannot take the turn back any more (its reply was
heard meanwhile) calls :meth:`TurnDetector.detach`: the speech is a new utterance.

Continuations (``continue_within``): a turn the caller keeps open (any turn, or only an
unfinished one: its words end on "... a table for", or the model judged its last pause
incomplete) may be continued even after its reply was heard. The caller says so with
:meth:`TurnDetector.allow_continuation`; speech that starts within ``continue_within`` of
the turn's commit then brings :class:`TurnResumed` as above, and the utterance goes on
from the committed turn's onset. Without that call a turn is resumable only within
``resume_grace``; the audio is kept for the longer of the two until :meth:`seal`.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

from ..audio import STT_SAMPLE_RATE, AudioChunk
from ..engines.end_of_turn import EndOfTurnModel, EndOfTurnVerdict, is_question
from ..engines.vad import VadStream, VoiceActivityDetector
from .hiss import HissDetector
from .turn_detection import DEFAULT_TURN_DETECTION, TurnDetection
from .turn_events import (
    BargeInDetected,
    SpeechEnded,
    SpeechStarted,
    TurnDetectorEvent,
    TurnResumed,
    UtterancePaused,
    UtteranceReady,
)

__all__ = ["TurnMachine"]


_State = Literal["idle", "pending", "speaking"]
_ONSET_LOOKBACK_FRAMES = 3


class TurnMachine:
    """The turn detector's state machine: :meth:`push`, :meth:`decide` and
    :meth:`flush`, synchronous and in audio time (the module docs);
    :class:`~.turn_detector.TurnDetector` is this with its async face.

    Args:
        vad: the per-stream detector (e.g. a new :class:`~voxflow_voice.engines.vad.SileroVad`).
        settings: the rules; :data:`DEFAULT_TURN_DETECTION` if ``None``.
        end_of_turn_model: judges the turn at each short pause (e.g. the shared
            :class:`~voxflow_voice.engines.end_of_turn.SmartTurn`); the silence timer
            alone if ``None``.
    """

    def __init__(
        self,
        vad: VoiceActivityDetector,
        settings: TurnDetection | None = None,
        *,
        end_of_turn_model: EndOfTurnModel | None = None,
    ) -> None:
        if vad.sample_rate != STT_SAMPLE_RATE:
            raise ValueError(f"vad must work at {STT_SAMPLE_RATE} Hz, got {vad.sample_rate}")
        if settings is not None and not isinstance(settings, TurnDetection):
            raise TypeError(f"settings must be a TurnDetection, got {type(settings).__name__}")
        if end_of_turn_model is not None and not isinstance(end_of_turn_model, EndOfTurnModel):
            raise TypeError("end_of_turn_model must have a probability(audio) method, got "
                            f"{type(end_of_turn_model).__name__}")
        self.settings = settings if settings is not None else DEFAULT_TURN_DETECTION
        self._model = end_of_turn_model
        self._stream = VadStream(vad)
        self._hiss = None if self.settings.hiss_rise is None else HissDetector(
            rise_db=self.settings.hiss_rise, band=self.settings.hiss_band)
        rate = STT_SAMPLE_RATE
        s = self.settings
        self._min_speech = round(s.min_speech * rate)
        self._min_barge_in = max(round(s.min_barge_in * rate), self._min_speech)
        self._silence = round(s.end_of_turn_silence * rate)
        # With a model, only a turn it judged incomplete waits out the silence (the long
        # one); the timer starts at the short pause, where the model decides.
        self._max_wait = self._silence if end_of_turn_model is None else round(
            s.max_end_of_turn_silence * rate
        )
        self._timeout = self._max_wait  # for the pause being heard (a verdict may shorten it)
        self._max_utterance = round(s.max_utterance * rate)
        self._short_turn = round(s.short_turn * rate)
        self._pre_roll = round(s.pre_roll * rate)
        # The early utterance (speculative STT and replies) comes halfway through the
        # end-of-turn wait at the latest, so a short wait still leaves time to use it.
        self._end_pad = min(round(s.end_pad * rate), self._silence // 2)
        self._position = 0  # samples scored so far
        self._state: _State = "idle"
        self._frames: list[NDArray[np.float32]] = []  # pre-roll + utterance so far
        self._buffer_start = 0  # stream position of self._frames[0]
        self._onset = 0
        self._speech_onset = 0  # of the speech being heard (after a resumed turn's onset)
        self._last_speech_end = 0
        self._barge_in_sent = False
        self._last_probability = 0.0
        self._recent: deque[tuple[int, float]] = deque(maxlen=_ONSET_LOOKBACK_FRAMES)
        self._rising: tuple[int, int] | None = None  # (start, end) of idle frames >= onset_t.
        self._paused_at: int | None = None  # speech end of the last UtterancePaused
        self._paused: UtterancePaused | None = None  # the last one
        self._judged_at: int | None = None  # speech end of the last pause judged
        self._decision_pause = max(round(s.decision_pause * rate), self._end_pad, 1)
        self._undecided: UtterancePaused | None = None  # a pause the model must judge
        self._decisions: list[EndOfTurnVerdict] = []
        self.speaking_over = False
        """Set by the caller while no utterance is under way, so latched at each one's
        onset: True if a reply's audio was playing then. A turn begun over a reply that
        the model judges complete but whose words close nothing is held at least
        ``closed_answer_silence`` (the "Stop," of "Stop, please." over a reply is not a
        turn of its own)."""
        self._backlog: deque[tuple[NDArray[np.float32], float]] = deque()  # after a pause
        self._grace = round(s.resume_grace * rate)
        self._window = round(s.continue_within * rate)
        self._continuable = False  # the provisional turn may be continued (the caller said)
        self._judged_from = 0  # in a resumed turn: where the continuation's audio starts
        # (onset, end, commit position) of the committed turn that may still be resumed
        self._provisional: tuple[int, int, int] | None = None

    @property
    def position(self) -> int:
        """Input samples scored so far (a partial frame waits for more audio)."""
        return self._position

    @property
    def speaking(self) -> bool:
        """True between :class:`SpeechStarted` and :class:`SpeechEnded` (``recording``)."""
        return self._state == "speaking"

    @property
    def active_onset(self) -> int | None:
        """The onset sample of the speech being heard (from its first speech frame, before
        ``min_speech``) or of the utterance still open; ``None`` when idle."""
        return None if self._state == "idle" else self._onset

    @property
    def speech_onset(self) -> int | None:
        """The onset sample of the speech being heard: :attr:`active_onset`, except in a
        turn that speech resumed (:class:`TurnResumed`), where it is that speech's onset
        (the utterance's is the committed turn's); ``None`` when idle."""
        return None if self._state == "idle" else self._speech_onset

    @property
    def rising_onset(self) -> int | None:
        """While idle, the start of the run of latest frames that all score at least
        ``onset_threshold`` (the rising frames an onset is backdated over: the same sample
        when speech starts within three frames of it); ``None`` otherwise. It stays put
        while the run goes on, however long."""
        rising = self._rising
        if self._state != "idle" or rising is None or rising[1] != self._position:
            return None
        return rising[0]

    @property
    def speech_end(self) -> int:
        """The sample after the latest speech frame."""
        return self._last_speech_end

    @property
    def undecided(self) -> UtterancePaused | None:
        """The pause just heard, while the end-of-turn model owes a verdict on it (call
        :meth:`decide` or :meth:`adecide` before pushing more audio); its audio is that of
        the :class:`UtterancePaused` handed out (the same object, when one was)."""
        return self._undecided

    @property
    def provisional(self) -> int | None:
        """The end sample of the last committed turn while it may still be resumed
        (``resume_grace``, or ``continue_within`` of its commit, not sealed; its audio is
        kept that long); ``None`` otherwise."""
        return None if self._provisional is None else self._provisional[1]

    def allow_continuation(self, end_sample: int) -> bool:
        """The committed turn that ended at ``end_sample`` may be continued: speech starting
        within ``continue_within`` of its commit continues it (:class:`TurnResumed`), until
        :meth:`seal`. True if that turn is still open (not sealed, not over)."""
        if self._provisional is None or self._provisional[1] != end_sample or self._window <= 0:
            return False
        self._continuable = True
        return True

    def _resumable(self, onset: int) -> bool:
        """Whether speech from ``onset`` continues the provisional turn."""
        assert self._provisional is not None
        _, turn_end, committed_at = self._provisional
        return (onset - turn_end <= self._grace
                or (self._continuable and onset - committed_at <= self._window))

    def seal(self) -> None:
        """The last committed turn stands: speech after it is a new turn (idempotent)."""
        if self._provisional is None:
            return
        committed_at = self._provisional[2]
        self._provisional = None
        self._continuable = False
        self._drop_before(committed_at)  # as if idle from the commit on
        if self._state == "idle":
            self._trim_pre_roll()
        else:  # a new speech onset pending: keep its pre-roll only
            self._drop_before(self._onset - self._pre_roll)

    def detach(self, resumed: TurnResumed) -> None:
        """Undo ``resumed``: the speech from its onset on is a new utterance, apart from
        the committed turn (for a caller that could not take that turn back).

        Raises:
            TypeError: ``resumed`` is not a :class:`TurnResumed`.
        """
        if not isinstance(resumed, TurnResumed):
            raise TypeError(f"resumed must be a TurnResumed, got {type(resumed).__name__}")
        if self._state == "idle" or self._onset >= resumed.onset_sample:
            return  # that utterance ended already, or it was detached
        self._onset = self._speech_onset = resumed.onset_sample
        self._drop_before(max(resumed.committed_at, resumed.onset_sample - self._pre_roll))
        self._paused_at = self._paused = self._judged_at = self._undecided = None
        self._judged_from = 0

    @property
    def decisions(self) -> list[EndOfTurnVerdict]:
        """The verdicts so far, oldest first."""
        return list(self._decisions)

    def decide(
        self, *, transcript: str | None = None, probability: float | None = None
    ) -> list[TurnDetectorEvent]:
        """Judge the pause just heard (blocking: runs the model unless ``probability`` is
        given, ~40-150 ms).

        Args:
            transcript: the words of the pause's audio (its speculative transcript), if
                known: a turn that ends on an unfinished phrase ("... for", "and", "wait")
                is incomplete and a closed answer ("No, thanks.") complete, whatever the
                audio says (:func:`~voxflow_voice.engines.end_of_turn.words_verdict`).
            probability: the model's probability for the pause's audio, if already
                computed (as :meth:`adecide` does).

        Returns ``SpeechEnded`` and an ``UtteranceReady`` carrying exactly the paused
        audio if the turn is complete; nothing if it is not (it then ends after
        ``max_end_of_turn_silence``, or goes on), or if no verdict was owed. Then the
        audio pushed after the pause is processed (its events follow).

        Raises:
            TypeError: ``transcript`` is not a string.
            ValueError: ``probability`` is not between 0 and 1.
        """
        if transcript is not None and not isinstance(transcript, str):
            raise TypeError(f"transcript must be a string, got {type(transcript).__name__}")
        if probability is not None and not 0.0 <= probability <= 1.0:
            raise ValueError(f"probability must be between 0 and 1, got {probability}")
        pause, self._undecided = self._undecided, None
        if pause is None or self._model is None:
            return []
        if probability is None and self._question(transcript):
            assert transcript is not None
            verdict = EndOfTurnVerdict.question(pause.end_sample, transcript)
        else:
            if probability is None:
                probability = self._model.probability(self._heard())
            verdict = EndOfTurnVerdict.of(
                pause.end_sample, probability, transcript, self.settings.complete_threshold
            )
        self._decisions.append(verdict)
        events: list[TurnDetectorEvent] = []
        self._timeout = self._max_wait
        short = (pause.end_sample - pause.onset_sample <= self._short_turn
                 and verdict.transcript is not None and verdict.words is None)
        hold = round(self.settings.complete_silence * STT_SAMPLE_RATE)
        if self.speaking_over:
            hold = max(hold, round(self.settings.closed_answer_silence * STT_SAMPLE_RATE))
        if verdict.words is True or short:
            # the model doubts a closed answer, or a short turn whose words open nothing
            # (a short answer misheard: "That's all." as "Next all"): a shorter wait; a
            # question it doubts may be one cut short ("Could you book me the room" ...
            # "for three nights"): as long as a complete turn whose words close nothing
            self._timeout = round(self.settings.closed_answer_silence * STT_SAMPLE_RATE)
            if verdict.transcript is not None and is_question(verdict.transcript):
                self._timeout = max(self._timeout, hold)
        if verdict.may_go_on and self._position - pause.end_sample < hold:
            # Complete, but nothing in the words closes it ("I need a flight to Boston."
            # may go on "and a hotel"; not "No, thanks." nor a question): the turn ends
            # after complete_silence, and speech before then goes on in it (judged on its
            # own, as a resumed turn is: the model doubts a turn with a pause inside).
            self._timeout = hold
            self._judged_from = self._position
        elif verdict.complete:
            events += [SpeechEnded(pause.end_sample, self._position),
                       UtteranceReady(pause.audio, pause.onset_sample, pause.end_sample)]
            self._committed(pause.end_sample)
        self._run(events)  # the audio pushed after the pause
        return events


    def _question(self, transcript: str | None) -> bool:
        """Whether ``transcript`` closes the turn as a question without the model."""
        return (self.settings.question_closes and transcript is not None
                and is_question(transcript))

    @property
    def last_probability(self) -> float:
        """The latest frame's speech probability."""
        return self._last_probability


    def push(self, audio: AudioChunk | NDArray[Any]) -> list[TurnDetectorEvent]:
        """Add input audio (16 kHz mono); return the events it caused, in order."""
        if isinstance(audio, AudioChunk):
            if audio.sample_rate != STT_SAMPLE_RATE:
                raise ValueError(
                    f"audio must be {STT_SAMPLE_RATE} Hz (use InputConverter), "
                    f"got {audio.sample_rate}"
                )
            samples = audio.samples()
        else:
            samples = np.asarray(audio, dtype=np.float32).reshape(-1)
        if self._undecided is not None:
            raise RuntimeError("call decide() on the pause just heard before pushing audio")
        frames, probs = self._stream.push(samples)
        self._backlog.extend(zip(frames, probs.tolist(), strict=True))
        events: list[TurnDetectorEvent] = []
        self._run(events)
        return events

    def _run(self, out: list[TurnDetectorEvent], *, judge: bool = True) -> None:
        """Step through the scored frames; stop at a pause the model must judge, so the
        verdict applies there whatever the size of the pushes."""
        while self._backlog and not (judge and self._undecided is not None):
            frame, prob = self._backlog.popleft()
            self._step(frame, prob, out)
            if not judge:
                self._undecided = None

    def flush(self) -> list[TurnDetectorEvent]:
        """End of input: end an utterance in progress as if the silence had come (a pause
        still owed a verdict gets none: the turn ends here anyway)."""
        events: list[TurnDetectorEvent] = []
        self._undecided = None
        self._run(events, judge=False)
        if self._state == "speaking":
            events.append(SpeechEnded(self._last_speech_end, self._position))
            events.append(self._utterance(self._last_speech_end, truncated=False))
        self._to_idle()
        return events

    def reset(self) -> None:
        """Forget everything (VAD state included); positions restart at 0."""
        self._stream.reset()
        self._position = 0
        self._to_idle()  # (from position 0: no audio kept)
        self._backlog.clear()
        self._recent.clear()
        self._rising = None
        if self._hiss is not None:
            self._hiss.reset()

    def _step(self, frame: NDArray[np.float32], prob: float, out: list[TurnDetectorEvent]) -> None:
        s = self.settings
        start = self._position
        end = start + frame.size
        self._position = end
        self._last_probability = prob
        self._frames.append(frame)
        hiss = self._hiss is not None and self._hiss.push(frame)  # (its floor: every frame)
        if (self._provisional is not None and self._state == "idle"
                and end - self._provisional[1] > self._grace
                and end - self._provisional[2] > self._window):
            self.seal()  # (also trims the kept audio)
        if self._state == "idle":
            if prob >= s.threshold:
                self._state = "pending"
                self._onset = self._speech_onset = self._backdated_onset(start)
                self._last_speech_end = end
            else:
                if hiss:  # an unvoiced first consonant: rising like a frame the VAD scores
                    prob = max(prob, s.onset_threshold)
                self._recent.append((start, prob))
                if prob >= s.onset_threshold:
                    rising = self._rising
                    self._rising = (start if rising is None or rising[1] != start
                                    else rising[0], end)
                self._trim_pre_roll()
                return
        elif prob >= s.neg_threshold:
            self._last_speech_end = end
        elif self._state == "pending":
            # A blip shorter than min_speech: not speech after all.
            self._state = "idle"
            self._trim_pre_roll()
            return
        if self._state == "pending" and end - self._onset >= self._min_speech:
            self._state = "speaking"
            if self._provisional is not None:
                onset, turn_end, committed_at = self._provisional
                if self._resumable(self._onset):  # the committed turn goes on
                    out.append(TurnResumed(turn_end, self._onset, end, committed_at))
                    self._provisional = None
                    self._continuable = False
                    self._judged_from = max(self._onset - self._pre_roll, committed_at)
                    self._onset = onset
                else:
                    self.seal()
            out.append(SpeechStarted(self._onset, end))
        if self._state != "speaking":
            return
        speech = self._last_speech_end - self._speech_onset  # (not the resumed turn's)
        if not self._barge_in_sent and speech >= self._min_barge_in:
            self._barge_in_sent = True
            out.append(BargeInDetected(self._speech_onset, end))
        silent = end - self._last_speech_end
        if silent >= self._timeout:
            out.append(SpeechEnded(self._last_speech_end, end))
            out.append(self._utterance(self._last_speech_end, truncated=False))
            self._committed(self._last_speech_end)
        elif end - self._buffer_start >= self._max_utterance:
            out.append(self._utterance(end, truncated=True))
            self._frames = []
            self._buffer_start = end
            self._onset = end
        elif (
            (s.early_utterance or self._model is not None)
            and silent >= max(self._end_pad, 1)
            and self._paused_at != self._last_speech_end
        ):
            self._paused_at = self._last_speech_end
            ready = self._utterance(self._last_speech_end, truncated=False)
            self._paused = UtterancePaused(ready.audio, ready.onset_sample, ready.end_sample)
            if s.early_utterance:
                out.append(self._paused)
        paused = self._paused
        if (
            self._model is not None
            and self._state == "speaking"
            and paused is not None
            and paused.end_sample == self._last_speech_end
            and silent >= self._decision_pause
            and self._judged_at != self._last_speech_end
        ):
            self._judged_at = self._last_speech_end
            self._undecided = paused

    def _backdated_onset(self, start: int) -> int:
        """The onset: ``start``, or earlier over the rising frames just before it."""
        onset = start
        while self._recent:
            frame_start, prob = self._recent.pop()
            if prob < self.settings.onset_threshold or frame_start < self._buffer_start:
                break
            onset = frame_start
        self._recent.clear()
        return onset

    def _heard(self) -> NDArray[np.float32]:
        """The turn's audio up to now (the decision point): what the model judges (from
        the resumption on, in a resumed turn, with ``judge_continuation``)."""
        if not self._frames:
            return np.zeros(0, dtype=np.float32)
        audio = np.concatenate(self._frames)
        if self.settings.judge_continuation and self._judged_from > self._buffer_start:
            return audio[self._judged_from - self._buffer_start :]
        return audio

    def _utterance(self, speech_end: int, *, truncated: bool) -> UtteranceReady:
        stop = min(speech_end + self._end_pad, self._position)
        audio = (
            np.concatenate(self._frames) if self._frames else np.zeros(0, dtype=np.float32)
        )
        audio = audio[: max(0, stop - self._buffer_start)]
        chunk = AudioChunk.from_float(audio, STT_SAMPLE_RATE, start_sample=self._buffer_start)
        return UtteranceReady(chunk, max(self._onset, self._buffer_start), speech_end, truncated)

    def _committed(self, end_sample: int) -> None:
        """A turn ended at ``end_sample``: idle, its audio kept while it may be resumed."""
        frames, start, onset = self._frames, self._buffer_start, self._onset
        self._to_idle()
        if self._grace > 0 or self._window > 0:
            self._provisional = (onset, end_sample, self._position)
            self._frames, self._buffer_start = frames, start

    def _drop_before(self, sample: int) -> None:
        """Drop the kept frames that end before ``sample``."""
        while self._frames and self._buffer_start + self._frames[0].size <= sample:
            self._buffer_start += self._frames[0].size
            self._frames.pop(0)

    def _to_idle(self) -> None:
        self._provisional = None
        self._continuable = False
        self._judged_from = 0
        self._timeout = self._max_wait
        self._state = "idle"
        self._barge_in_sent = False
        self._paused_at = None
        self._paused = None
        self._judged_at = None
        self._undecided = None
        self._frames = []
        self._buffer_start = self._position

    def _trim_pre_roll(self) -> None:
        """Keep only the last ``pre_roll`` samples while idle (all, while provisional)."""
        if self._provisional is not None:
            return
        total = sum(f.size for f in self._frames)
        while self._frames and total - self._frames[0].size >= self._pre_roll:
            total -= self._frames[0].size
            self._buffer_start += self._frames[0].size
            self._frames.pop(0)


    def __repr__(self) -> str:
        return f"{type(self).__name__}(state={self._state}, position={self._position})"
