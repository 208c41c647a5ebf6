"""Audio chunks and conversions: any rate/channels in, 16 kHz mono s16le out.

Two hot-path audio types (frozen, slotted dataclasses, STYLE.md §5), one a direction:
:class:`AudioChunk` is what comes in (microphone, caller) and carries no reply identity;
:class:`ReplyChunk` is what goes out (the TTS's reply audio) and always carries the
identity of the reply (``delivery_id``) and of the text segment it was synthesized from.
Two types rather than one with optional ids, so that the type checker, not a runtime
``is None`` test in every stage, proves that the playback fence, the playout queue, the
heard history and the echo reference only ever get audio they can fence by identity.

Resampling uses ``soxr`` (a real band-limited resampler). :class:`Resampler` keeps the
filter state between calls, so a continuous stream resampled in pieces is the same as the
whole stream resampled at once (no clicks at chunk borders).
"""

from __future__ import annotations

import os
import wave
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from voxflow.ids import DeliveryId

from .decimator import Decimator

if TYPE_CHECKING:
    import soxr

__all__ = [
    "STT_SAMPLE_RATE",
    "AudioChunk",
    "InputConverter",
    "ReplyChunk",
    "Resampler",
    "WordTiming",
    "float_to_pcm16",
    "pcm16_to_float",
    "read_wav",
    "resample",
    "to_mono",
    "write_wav",
]

STT_SAMPLE_RATE = 16_000
"""The rate VAD and STT work at."""

_INT16_SCALE = 32768.0


@dataclass(frozen=True, slots=True)
class WordTiming:
    """Where a word lies inside the audio of one chunk (samples at the chunk's rate).

    Attributes:
        word: the word as written in the reply text.
        start: first sample of the word, relative to the chunk start.
        end: sample after the word's last one, relative to the chunk start.
    """

    word: str
    start: int
    end: int


class _Pcm16:
    """What a chunk of 16-bit PCM says of itself (its ``pcm`` and ``sample_rate``)."""

    __slots__ = ()
    pcm: bytes
    sample_rate: int

    @property
    def num_samples(self) -> int:
        """Number of samples in the chunk."""
        return len(self.pcm) // 2

    @property
    def duration(self) -> float:
        """Length in seconds."""
        return self.num_samples / self.sample_rate

    def samples(self) -> NDArray[np.float32]:
        """The samples as float32 in [-1, 1)."""
        return pcm16_to_float(self.pcm)


@dataclass(frozen=True, slots=True)
class AudioChunk(_Pcm16):
    """A piece of incoming s16le mono audio (microphone, caller): no reply identity.

    Attributes:
        pcm: little-endian signed 16-bit mono samples.
        sample_rate: samples per second.
        start_sample: index of the first sample within its input stream, when known.
    """

    pcm: bytes
    sample_rate: int
    start_sample: int | None = None

    def __post_init__(self) -> None:
        _check_pcm(self.pcm, self.sample_rate)
        if self.start_sample is not None:
            _check_position("start_sample", self.start_sample, 0)

    @classmethod
    def from_float(
        cls, samples: NDArray[np.floating[Any]], sample_rate: int, *,
        start_sample: int | None = None,
    ) -> AudioChunk:
        """Build a chunk from float samples in [-1, 1] (clipped)."""
        return cls(float_to_pcm16(samples), sample_rate, start_sample)


@dataclass(frozen=True, slots=True)
class ReplyChunk(_Pcm16):
    """A piece of one reply's synthesized s16le mono audio, born with its identity.

    The TTS makes it for a ``(delivery_id, segment_id)`` it is given; the playback
    stage, the playout queue, the heard history, the echo reference and every
    transport's output side take only this type.

    Attributes:
        pcm: little-endian signed 16-bit mono samples.
        sample_rate: samples per second.
        delivery_id: the reply this audio belongs to.
        segment_id: the reply text segment (from 1) the audio was synthesized from.
        start_sample: index of the first sample within its segment's audio.
        words: word timings inside this chunk (when the voice has alignments).
    """

    pcm: bytes
    sample_rate: int
    delivery_id: DeliveryId
    segment_id: int
    start_sample: int
    words: tuple[WordTiming, ...] = field(default=())

    def __post_init__(self) -> None:
        _check_pcm(self.pcm, self.sample_rate)
        if not isinstance(self.delivery_id, str) or not self.delivery_id:
            raise ValueError(f"delivery_id must be a non-empty str, got {self.delivery_id!r}")
        _check_position("segment_id", self.segment_id, 1)
        _check_position("start_sample", self.start_sample, 0)

    @classmethod
    def from_float(
        cls, samples: NDArray[np.floating[Any]], sample_rate: int, *, delivery_id: DeliveryId,
        segment_id: int, start_sample: int, words: tuple[WordTiming, ...] = (),
    ) -> ReplyChunk:
        """Build a chunk from float samples in [-1, 1] (clipped)."""
        return cls(float_to_pcm16(samples), sample_rate, delivery_id, segment_id,
                   start_sample, words)


def _check_pcm(pcm: bytes, sample_rate: int) -> None:
    if not isinstance(pcm, bytes):
        raise TypeError(f"pcm must be bytes, got {type(pcm).__name__}")
    if len(pcm) % 2:
        raise ValueError(f"pcm must hold whole 16-bit samples, got {len(pcm)} bytes")
    _check_rate("sample_rate", sample_rate)


def _check_position(name: str, value: int, least: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an int, got {value!r}")
    if value < least:
        raise ValueError(f"{name} must be >= {least}, got {value}")


def pcm16_to_float(pcm: bytes | NDArray[np.int16]) -> NDArray[np.float32]:
    """s16le bytes (or an int16 array) → float32 samples in [-1, 1)."""
    if isinstance(pcm, bytes | bytearray | memoryview):
        if len(pcm) % 2:
            raise ValueError(f"pcm must hold whole 16-bit samples, got {len(pcm)} bytes")
        ints = np.frombuffer(pcm, dtype="<i2")
    else:
        ints = np.asarray(pcm, dtype=np.int16)
    return ints.astype(np.float32) / np.float32(_INT16_SCALE)


def float_to_pcm16(samples: NDArray[np.floating[Any]]) -> bytes:
    """Float samples in [-1, 1] → s16le bytes, clipping what lies outside.

    Raises:
        ValueError: a sample is NaN or infinite (it has no 16-bit value).
    """
    array = _finite(samples)
    scaled = np.clip(np.round(array * _INT16_SCALE), -32768, 32767)
    return scaled.astype("<i2").tobytes()


def to_mono(samples: NDArray[Any], channels: int) -> NDArray[np.float32]:
    """Average interleaved ``channels`` into one float32 channel.

    Args:
        samples: interleaved samples (1-D) or a ``(frames, channels)`` array.
        channels: number of interleaved channels (>= 1).
    """
    if isinstance(channels, bool) or not isinstance(channels, int) or channels < 1:
        raise ValueError(f"channels must be an int >= 1, got {channels!r}")
    array = np.asarray(samples, dtype=np.float32)
    if array.ndim > 2 or (array.ndim == 2 and array.shape[1] != channels):
        raise ValueError(f"samples must be 1-D or (frames, {channels}), got {array.shape}")
    if channels == 1:
        return array.reshape(-1)
    if array.size % channels:
        raise ValueError(f"{array.size} samples do not divide into {channels} channels")
    mono: NDArray[np.float32] = array.reshape(-1, channels).mean(axis=1, dtype=np.float32)
    return mono


def resample(samples: NDArray[Any], in_rate: int, out_rate: int) -> NDArray[np.float32]:
    """Resample a whole mono float signal at once (soxr, high quality).

    Raises:
        ValueError: ``samples`` is not 1-D (mix channels with :func:`to_mono` first), or
            holds NaN/infinity (the filter would spread it over the whole signal).
    """
    _check_rate("in_rate", in_rate)
    _check_rate("out_rate", out_rate)
    array = _mono_1d(samples)
    if in_rate == out_rate:
        return array
    # soxr takes ~0.3-0.6 s to import: only resampling pays for it
    import soxr

    return np.asarray(soxr.resample(array, in_rate, out_rate, quality="HQ"), dtype=np.float32)


def _check_rate(name: str, rate: int) -> None:
    if isinstance(rate, bool) or not isinstance(rate, int) or rate <= 0:
        raise ValueError(f"{name} must be a positive int, got {rate!r}")


def _finite(samples: NDArray[Any]) -> NDArray[np.float32]:
    array = np.asarray(samples, dtype=np.float32)
    if not np.isfinite(array).all():
        raise ValueError("samples must be finite: NaN or infinity found")
    return array


def _mono_1d(samples: NDArray[Any]) -> NDArray[np.float32]:
    array = _finite(samples)
    if array.ndim != 1:
        raise ValueError(
            f"samples must be mono 1-D, got shape {array.shape}: mix channels with to_mono first"
        )
    return array


class Resampler:
    """A streaming mono resampler: feed pieces, get the same result as one big call.

    soxr delays its output by a few milliseconds (filter look-ahead); :meth:`flush` returns
    the tail held back when the stream ends.
    """

    def __init__(self, in_rate: int, out_rate: int) -> None:
        _check_rate("in_rate", in_rate)
        _check_rate("out_rate", out_rate)
        self.in_rate = in_rate
        self.out_rate = out_rate
        self._stream: soxr.ResampleStream | None = None
        if in_rate != out_rate:
            # soxr takes ~0.3-0.6 s to import: only resampling pays for it
            import soxr

            self._stream = soxr.ResampleStream(in_rate, out_rate, 1, dtype="float32", quality="HQ")

    def process(self, samples: NDArray[Any]) -> NDArray[np.float32]:
        """Resample the next piece of the stream (mono 1-D float, finite)."""
        array = np.ascontiguousarray(_mono_1d(samples))
        if self._stream is None:
            return array
        return np.asarray(self._stream.resample_chunk(array), dtype=np.float32)

    def flush(self) -> NDArray[np.float32]:
        """End the stream: the samples still held in the filter. Call once."""
        if self._stream is None:
            return np.zeros(0, dtype=np.float32)
        tail = np.asarray(
            self._stream.resample_chunk(np.zeros(0, dtype=np.float32), last=True), dtype=np.float32
        )
        return tail

    def __repr__(self) -> str:
        return f"Resampler({self.in_rate} -> {self.out_rate})"


class InputConverter:
    """Turns a continuous input stream of any rate/channels into 16 kHz mono chunks.

    One converter per input stream: it keeps the resampler state and counts samples, so
    every output chunk's ``start_sample`` is its position in the 16 kHz stream. If the
    input rate or channel count changes mid-stream (a device switch), the resampler is
    rebuilt for the new rate. A whole multiple of the output rate (48 kHz: browsers,
    most sound cards) goes through a :class:`~voxflow_voice.decimator.Decimator`, which
    hands each frame on at once (soxr's streaming filter batches ~40 ms of output).
    """

    def __init__(self, out_rate: int = STT_SAMPLE_RATE) -> None:
        _check_rate("out_rate", out_rate)
        self.out_rate = out_rate
        self._resampler: Resampler | Decimator | None = None
        self._position = 0

    @property
    def position(self) -> int:
        """Output samples produced so far."""
        return self._position

    def convert(self, pcm: bytes, sample_rate: int, channels: int = 1) -> AudioChunk:
        """Convert interleaved s16le ``pcm`` to a mono chunk at ``out_rate``.

        The chunk may be slightly shorter or longer than the exact ratio (the resampler's
        look-ahead); over a stream the totals match.
        """
        _check_rate("sample_rate", sample_rate)
        mono = to_mono(pcm16_to_float(pcm), channels)
        return self.convert_float(mono, sample_rate)

    def convert_float(self, samples: NDArray[Any], sample_rate: int) -> AudioChunk:
        """Like :meth:`convert`, for mono float input."""
        _check_rate("sample_rate", sample_rate)
        if self._resampler is None or self._resampler.in_rate != sample_rate:
            whole = sample_rate % self.out_rate == 0 and sample_rate > self.out_rate
            self._resampler = (Decimator(sample_rate, self.out_rate) if whole
                               else Resampler(sample_rate, self.out_rate))
        out = self._resampler.process(samples)
        chunk = AudioChunk.from_float(out, self.out_rate, start_sample=self._position)
        self._position += chunk.num_samples
        return chunk

    def flush(self) -> AudioChunk:
        """End of input: the samples the resampler still holds."""
        held = self._resampler
        tail = held.flush() if isinstance(held, Resampler) else np.zeros(0, np.float32)
        self._resampler = None
        chunk = AudioChunk.from_float(tail, self.out_rate, start_sample=self._position)
        self._position += chunk.num_samples
        return chunk


def read_wav(path: str | os.PathLike[str], *, sample_rate: int | None = None) -> AudioChunk:
    """Read a 16-bit PCM WAV file as a mono chunk, optionally resampled.

    Args:
        path: the WAV file.
        sample_rate: resample to this rate; keep the file's rate if ``None``.

    Raises:
        ValueError: the file is not 16-bit PCM.
    """
    with wave.open(str(Path(path)), "rb") as wav:
        width, channels, rate = wav.getsampwidth(), wav.getnchannels(), wav.getframerate()
        frames = wav.readframes(wav.getnframes())
    if width != 2:
        raise ValueError(f"{path}: only 16-bit PCM WAV is supported, got {8 * width}-bit")
    mono = to_mono(pcm16_to_float(frames), channels)
    if sample_rate is not None and sample_rate != rate:
        return AudioChunk.from_float(resample(mono, rate, sample_rate), sample_rate)
    if channels == 1:
        return AudioChunk(frames, rate)
    return AudioChunk.from_float(mono, rate)


def write_wav(path: str | os.PathLike[str], audio: AudioChunk) -> None:
    """Write a chunk as a 16-bit mono PCM WAV file."""
    if not isinstance(audio, AudioChunk):
        raise TypeError(f"audio must be an AudioChunk, got {type(audio).__name__}")
    with wave.open(str(Path(path)), "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(audio.sample_rate)
        wav.writeframes(audio.pcm)
