"""Semantic end of turn: is the user done, or only pausing?

A silence timer cannot tell "Wait, stop. <pause> tell me about the trains instead" from
"No, thanks.": a short timer cuts the first into two turns, a long one makes every answer
wait. An end-of-turn model listens to the turn so far (its intonation, its last words)
and says how likely it is to be complete. :class:`~voxflow_voice.listen.turn_detector.TurnDetector`
asks it at the user's short pause (``end_pad`` of silence, when the speculative reply
starts): complete, the turn ends there; incomplete, the turn goes on and ends only if the
silence lasts ``max_end_of_turn_silence`` (the speculative reply is kept warm meanwhile,
or dropped unheard if the user speaks on, as always).

:class:`SmartTurn` runs Smart Turn v3.2 (Daily, BSD-2-Clause; a Whisper-tiny encoder with a
classification head, 8.7 MB, int8 for CPU) on onnxruntime. Its input is the last 8 s of
16 kHz audio (zero-padded in front), normalised to zero mean and unit variance, as
Whisper's 80-band log-mel spectrogram (``n_fft`` 400, hop 160, Slaney mel scale, a
periodic Hann window, ``log10`` clamped 8 below the maximum, then ``(x + 4) / 4``):
:func:`log_mel_features`, written here from the Whisper feature extractor's definition.
Its output is the probability that the turn is complete. One model serves every call
(the onnxruntime session is shared and thread-safe); a decision takes ~50 ms on one idle
core of this class of CPU (~300 ms at a load average of 7).

The model hears prosody, and synthetic or flat voices end every clause on a falling tone,
so the pause's speculative transcript (already being computed: it takes about as long) is
a second opinion (:func:`words_verdict`): a turn whose words end on a phrase that cannot
end a request ("a table for", "... and", "my number is, ...") or that holds only holding
words ("Wait, stop.", "Hmm, let me think.") is incomplete whatever the audio says; a
closed answer ("No.", "No, thanks.") or a question that the model doubts (it hears a
flat, synthetic "No." as unfinished, and cannot tell it from the "No," of "No, thanks")
gets a shorter wait than other incomplete turns. A turn the model judges complete whose
words close nothing ("I need a flight to Boston.", which may go on "and a hotel") is
held ``complete_silence`` before it ends (:attr:`EndOfTurnVerdict.may_go_on`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np
from numpy.typing import NDArray
from pydantic import BaseModel, ConfigDict, Field

from ..audio import STT_SAMPLE_RATE, AudioChunk
from .models import load_smart_turn_session
from .registry import EngineContext, EngineFactory

if TYPE_CHECKING:
    import onnxruntime

__all__ = [
    "MODEL_SECONDS",
    "SMART_TURN_ENGINE",
    "EndOfTurnModel",
    "EndOfTurnVerdict",
    "SmartTurn",
    "SmartTurnOptions",
    "is_question",
    "log_mel_features",
    "words_verdict",
]

MODEL_SECONDS = 8
"""Seconds of audio the model hears (the end of the turn; earlier audio is dropped)."""

_WINDOW_SAMPLES = MODEL_SECONDS * STT_SAMPLE_RATE
_N_FFT = 400
_HOP = 160
_N_MELS = 80
_MEL_FLOOR = 1e-10
_VARIANCE_EPS = 1e-7


@runtime_checkable
class EndOfTurnModel(Protocol):
    """What the turn detector needs of an end-of-turn model (thread-safe)."""

    def probability(self, audio: AudioChunk | NDArray[Any]) -> float:
        """How likely the 16 kHz turn audio so far ends a complete turn (0 to 1)."""
        ...


# Words after which a request goes on: articles, possessives, prepositions, conjunctions,
# hesitations. ("so", "that", "is" end sentences too often to count.)
_OPEN_ENDINGS = frozenset({
    "a", "an", "the", "my", "your", "our", "their", "his", "her", "its", "for", "to", "of",
    "in", "on", "at", "with", "from", "about", "into", "by", "and", "but", "or", "because",
    "if", "than", "um", "uh", "er", "erm", "hmm", "like", "wait",
})
# A turn made only of these, with at least one of _HOLD, asks the assistant to wait.
_HOLDING = frozenset({
    "wait", "stop", "hold", "on", "hang", "hmm", "um", "uh", "er", "erm", "let", "me", "think",
    "one", "moment", "second", "sec", "minute", "just", "a", "okay", "ok", "so", "well",
    "actually",
})
_HOLD = frozenset({
    "wait", "hold", "hang", "hmm", "um", "uh", "er", "erm", "think", "moment", "second", "sec",
    "minute", "actually",
})
# Closed answers: a turn made only of these (four words at most) is complete ("No.",
# "Yes, please.", "No, thanks.", "That's all."), whatever the prosody.
_ANSWER = frozenset({
    "yes", "yeah", "yep", "yup", "no", "nope", "sure", "okay", "ok", "alright", "all",
    "right", "correct", "exactly", "thanks", "thank", "you", "please", "that's", "it",
    "goodbye", "bye", "great", "perfect", "fine", "nothing", "not", "really", "of", "course",
    "absolutely", "never", "mind", "good", "cool",
})
_OPEN_PAIRS = frozenset({("tell", "me"), ("show", "me"), ("give", "me"), ("remind", "me"),
                         ("let", "me"), ("i", "want"), ("i", "need"), ("would", "like"),
                         ("number", "is"), ("name", "is"), ("address", "is"), ("code", "is"),
                         ("email", "is")})
_WORD = re.compile(r"[a-z0-9']+")  # (Whisper writes numbers as digits: "at 8.")


# A question's first word: "What time does the museum open", "Can you help me". Whisper's
# question mark is not trusted: it writes one on a fragment ("Could you book me the
# room?", the pause before "for three nights").
_QUESTION_OPENINGS = frozenset({
    "what", "what's", "when", "where", "where's", "who", "who's", "whose", "why", "how",
    "how's", "which", "can", "could", "would", "will", "do", "does", "did", "is", "are",
    "was", "were", "should", "shall", "may", "might", "have", "has", "am", "isn't", "aren't",
    "don't", "doesn't", "didn't", "won't", "can't", "couldn't", "wouldn't",
})

def words_verdict(transcript: str) -> bool | None:
    """What the words alone say of a turn, never trusting a final ``.``, ``?`` or ``!``
    (Whisper writes one on a fragment cut at a pause: "Could you book me the room?" of
    "... the room for three nights", "No." of "No, thanks."): ``False`` (more to come)
    if they end on a comma, a dash or an ellipsis (Whisper's trailing off), on a word or
    pair after which a request goes on ("... a table for", "and", "the", "um", "can you
    tell me", "my number is"), or hold only holding words ("Wait, stop.", "Hmm, let me
    think.", "Hold on."); ``True`` (complete) for a closed answer of at most four words
    ("No.", "Yes, please.", "No, thanks.", "That's all.") or words that ask a question
    (:func:`is_question`: "What time does the museum open", with or without its "?");
    ``None`` otherwise (the model decides).

    Raises:
        TypeError: ``transcript`` is not a string.
    """
    if not isinstance(transcript, str):
        raise TypeError(f"transcript must be a string, got {type(transcript).__name__}")
    text = transcript.strip().lower().replace("\u2019", "'")
    words = _WORD.findall(text)
    if not words:
        return None  # nothing to go by
    if (text.endswith((",", "-", "\u2013", "\u2014", "...", "\u2026"))
            or words[-1] in _OPEN_ENDINGS or tuple(words[-2:]) in _OPEN_PAIRS):
        return False
    if all(w in _HOLDING for w in words) and any(w in _HOLD for w in words):
        return False
    if len(words) <= 4 and all(w in _ANSWER for w in words):
        return True
    if _asks(words):
        return True
    return None


def _asks(words: list[str]) -> bool:
    """Whether the words are worded as a question (three words at least, opening on a
    question word or an auxiliary): the punctuation is not looked at."""
    return len(words) >= 3 and words[0] in _QUESTION_OPENINGS


@dataclass(frozen=True, slots=True)
class EndOfTurnVerdict:
    """One decision at a pause.

    Attributes:
        end_sample: the sample after the pause's last speech frame.
        probability: the model's probability that the turn is complete.
        transcript: the pause's words, when they were known.
        words: what the words say (:func:`words_verdict`; ``None`` without words).
        complete: the verdict: ``probability`` reaches the threshold and the words do not
            say more is coming. (A closed answer the model doubts is not complete yet:
            the turn detector gives it a shorter wait than other incomplete turns.)
        asked: whether the model was asked; a question's words close the turn without it
            (``TurnDetection.question_closes``: ``probability`` is then 1.0).
    """

    end_sample: int
    probability: float
    transcript: str | None
    words: bool | None
    complete: bool
    asked: bool = True

    @property
    def may_go_on(self) -> bool:
        """Complete, but nothing in the words closes the turn (not a closed answer, not a
        question): "I need a flight to Boston." may go on "and a hotel"; the turn detector
        holds such a turn ``complete_silence``."""
        return self.complete and self.words is None

    @classmethod
    def of(cls, end_sample: int, probability: float, transcript: str | None,
           threshold: float) -> EndOfTurnVerdict:
        """The verdict on a pause from the model's ``probability`` and the words."""
        words = words_verdict(transcript) if transcript is not None else None
        return cls(end_sample, probability, transcript, words,
                   probability >= threshold and words is not False)

    @classmethod
    def question(cls, end_sample: int, transcript: str) -> EndOfTurnVerdict:
        """The verdict on a pause whose words are a question (:func:`is_question`):
        complete, the model not asked."""
        return cls(end_sample, 1.0, transcript, True, True, asked=False)


def is_question(transcript: str) -> bool:
    """Whether the words are a question that closes the turn: :func:`words_verdict` says
    complete and they are worded as one ("What time does the museum open", with or
    without Whisper's "?"; not "Can you tell me", whose "tell me" says more is coming,
    nor "No?"). The words only: whether the model is asked too is
    ``TurnDetection.question_closes``."""
    words = _WORD.findall(transcript.strip().lower().replace("\u2019", "'"))
    return words_verdict(transcript) is True and _asks(words)


def _hz_to_mel(freq: NDArray[np.float64]) -> NDArray[np.float64]:
    """Slaney's mel scale: linear below 1 kHz, logarithmic above."""
    mels = 3.0 * freq / 200.0
    above = freq >= 1000.0
    mels[above] = 15.0 + np.log(freq[above] / 1000.0) * (27.0 / np.log(6.4))
    return mels


def _mel_to_hz(mels: NDArray[np.float64]) -> NDArray[np.float64]:
    freq = 200.0 * mels / 3.0
    above = mels >= 15.0
    freq[above] = 1000.0 * np.exp((np.log(6.4) / 27.0) * (mels[above] - 15.0))
    return freq


def _mel_filterbank() -> NDArray[np.float64]:
    """Slaney-normalised triangular filters, shape ``(n_fft // 2 + 1, 80)``."""
    edges = _mel_to_hz(
        np.linspace(_hz_to_mel(np.array([0.0]))[0],
                    _hz_to_mel(np.array([STT_SAMPLE_RATE / 2]))[0], _N_MELS + 2)
    )
    bins = np.linspace(0, STT_SAMPLE_RATE // 2, _N_FFT // 2 + 1)
    slopes = edges[np.newaxis, :] - bins[:, np.newaxis]
    widths = np.diff(edges)
    down = -slopes[:, :-2] / widths[:-1]
    up = slopes[:, 2:] / widths[1:]
    filters = np.maximum(0.0, np.minimum(down, up))
    return filters * (2.0 / (edges[2:] - edges[:-2]))[np.newaxis, :]


_FILTERS_T = _mel_filterbank().T  # (80, 201)
_HANN = np.hanning(_N_FFT + 1)[:-1]  # periodic


def log_mel_features(audio: NDArray[Any]) -> NDArray[np.float32]:
    """Smart Turn's input for the last 8 s of 16 kHz ``audio``: shape ``(80, 800)``.

    Shorter audio is zero-padded in front (the end of the turn stays at the end).

    Raises:
        ValueError: ``audio`` is not one-dimensional or holds a NaN or an infinity.
    """
    x = _checked_samples(audio)
    if x.size >= _WINDOW_SAMPLES:
        x = x[-_WINDOW_SAMPLES:]
    else:
        x = np.concatenate([np.zeros(_WINDOW_SAMPLES - x.size, dtype=np.float32), x])
    x = (x - x.mean()) / np.sqrt(x.var() + _VARIANCE_EPS)
    padded = np.pad(x.astype(np.float64), _N_FFT // 2, mode="reflect")
    frames = np.lib.stride_tricks.sliding_window_view(padded, _N_FFT)[::_HOP]
    power = np.abs(np.fft.rfft(frames * _HANN, axis=-1)) ** 2  # (801, 201)
    log_spec: NDArray[np.float64] = np.log10(
        np.maximum(_MEL_FLOOR, _FILTERS_T @ power.T)
    )[:, :-1]
    log_spec = np.maximum(log_spec, log_spec.max() - 8.0)
    return np.asarray((log_spec + 4.0) / 4.0, dtype=np.float32)


def _checked_samples(audio: AudioChunk | NDArray[Any]) -> NDArray[np.float32]:
    if isinstance(audio, AudioChunk):
        if audio.sample_rate != STT_SAMPLE_RATE:
            raise ValueError(
                f"end-of-turn audio must be {STT_SAMPLE_RATE} Hz, got {audio.sample_rate} Hz"
            )
        return audio.samples()
    if not isinstance(audio, np.ndarray):
        raise TypeError(f"audio must be an AudioChunk or a numpy array, got {type(audio).__name__}")
    if audio.ndim != 1:
        raise ValueError(f"audio must be one-dimensional (mono), got shape {audio.shape}")
    if audio.dtype.kind not in "fiu":
        raise TypeError(f"audio must hold numbers, got dtype {audio.dtype}")
    samples = audio.astype(np.float32, copy=False)
    if not np.all(np.isfinite(samples)):
        raise ValueError("audio holds a NaN or an infinity")
    return samples


class SmartTurn:
    """Smart Turn v3.2 on onnxruntime: the probability that a turn is complete.

    Args:
        session: an onnxruntime session of the model; the process-wide shared one
            (:func:`voxflow_voice.engines.models.load_smart_turn_session`) if ``None``.
        model_path: the model file, when ``session`` is ``None``; the one in the installed
            ``voxflow-smart-turn`` package if ``None``.

    Raises:
        .errors.ModelNotFoundError: the model is not installed (the message names
            the extra to install).
    """

    def __init__(
        self,
        session: onnxruntime.InferenceSession | None = None,
        *,
        model_path: Path | None = None,
    ) -> None:
        if session is None:
            session = load_smart_turn_session(model_path)
        self._session = session

    def probability(self, audio: AudioChunk | NDArray[Any]) -> float:
        """How likely the turn whose audio (16 kHz mono, the turn so far) is ``audio`` is
        complete, from 0 to 1.

        Raises:
            TypeError: ``audio`` is neither an :class:`~voxflow_voice.audio.AudioChunk` nor
                a numeric numpy array.
            ValueError: ``audio`` is not 16 kHz, not mono, empty, or holds a NaN or an
                infinity.
        """
        samples = _checked_samples(audio)
        if samples.size == 0:
            raise ValueError("audio is empty: there is no turn to judge")
        features = log_mel_features(samples)[np.newaxis]
        (output,) = self._session.run(None, {"input_features": features})
        probability = float(np.asarray(output).reshape(-1)[0])
        if not 0.0 <= probability <= 1.0:  # the model ends in a sigmoid
            raise RuntimeError(f"the end-of-turn model returned {probability}, not a probability")
        return probability

    def __repr__(self) -> str:
        return "SmartTurn(v3.2)"


class SmartTurnOptions(BaseModel):
    """The options of the ``smart-turn`` engine."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model_path: Path | None = Field(
        None, description="a Smart Turn v3 ONNX file; the one voxflow-smart-turn ships if unset"
    )


def _smart_turn(options: SmartTurnOptions, context: EngineContext) -> SmartTurn:
    return SmartTurn(model_path=options.model_path)


SMART_TURN_ENGINE: EngineFactory[SmartTurn] = EngineFactory(
    "end_of_turn", _smart_turn, options=SmartTurnOptions, main_option="model_path",
    summary="Smart Turn v3.2 (onnxruntime) and the pause's words",
    models="smart-turn-v3.2-cpu.onnx from voxflow-smart-turn",
)
"""``smart-turn``: :class:`SmartTurn`."""
