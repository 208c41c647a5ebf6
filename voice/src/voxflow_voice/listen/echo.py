"""A reference-aware echo gate: the assistant's own voice never counts as the user's.

On speakers the microphone hears the assistant. A voice session knows exactly what it
plays (every reply chunk it writes, and a receipt saying when each piece was played), so
:class:`EchoGate` keeps that *reference* on the session clock and cleans each microphone
frame before the turn detector sees it:

1. **echo path**: every ``hop`` seconds while reference audio is in range (every
   ``track_hop`` once a path is known, to follow a change cheaply), the delay and
   gain that best map the reference onto the microphone are found by normalised
   cross-correlation (FFT) over the last ``window`` seconds, searching delays up to
   ``max_delay``. An estimate is only taken when the correlation is at least
   ``min_correlation`` and the next estimate agrees on the delay: while the user talks
   over the echo the correlation drops, so double talk never corrupts the path, and the
   last good path is kept across replies.
2. **cancel**: the delayed, scaled reference is subtracted from the microphone (unless
   that would add energy: a wrong path must never inject the reference).
3. **gate**: a frame whose residual is no louder than the echo expected there (the
   reference energy around the delay times the path's gain squared, or the reverberant
   reference of the last ``tail`` seconds times the residual coupling measured when the
   path was confirmed; times ``margin_db``) is echo only and is attenuated; a louder
   residual is the user and passes (and keeps passing for ``hangover`` seconds, so soft
   syllables of a barge-in are not chopped). Gated frames keep the residual
   ``suppression_db`` down rather than silence, so a soft first consonant of the user is
   not lost to STT.

Until a path is found (two estimates, about ``2 * hop`` after the echo starts), the first
``acquire`` seconds of playback are gated by a prior: a frame no louder than
``prior_coupling`` times the loudest reference within ``max_delay`` may be the echo, so
even the first syllable of the first reply never reaches the turn detector (a barge-in
arbiter pauses on a single speech frame). After that, with no path, audio passes
unchanged: with no echo at all (headphones, a muted speaker) no path is ever found, and
only a barge-in in a reply's first ``acquire`` seconds that is quieter than the reply
itself is held back.

Audio with no reference in range passes through unchanged (the same object), so without
playback the gate costs nothing and changes nothing. This is a gate plus a single-tap
canceller, not a full acoustic echo canceller: a strongly reverberant room leaves residual
echo that only the gate (not the subtraction) removes, and a user much quieter than the
echo is gated too. Headphones need none of it (``VoiceSettings(echo_gate=False)``).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from pydantic import BaseModel, ConfigDict, Field

from voxflow.ids import DeliveryId

from ..audio import STT_SAMPLE_RATE, AudioChunk, ReplyChunk, resample
from ..transport import PlaybackReceipt

__all__ = ["DEFAULT_ECHO_GATE", "EchoGate", "EchoGateSettings", "EchoGateStatistics"]

_FRAME = 320  # 20 ms at 16 kHz: the unit of the gate's decisions
_MAX_STORED_SECONDS = 120.0  # reply audio kept while waiting for its receipts
_EPS = 1e-10
_DELAY_TOLERANCE = 16  # samples (1 ms) two estimates may differ by and still agree


class EchoGateSettings(BaseModel):
    """How the echo gate finds and removes the assistant's voice from the microphone."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_delay: float = Field(
        0.5, gt=0, le=2.0, description="longest echo delay (s): output latency plus acoustics"
    )
    window: float = Field(0.3, gt=0.02, le=2.0, description="audio (s) used to estimate the path")
    hop: float = Field(0.1, gt=0, le=2.0, description="seconds between estimates, no path yet")
    track_hop: float = Field(
        0.5, gt=0, le=5.0, description="seconds between estimates once a path is known"
    )
    min_correlation: float = Field(
        0.6, gt=0, lt=1, description="normalised correlation that confirms an echo path"
    )
    margin_db: float = Field(
        3.0, ge=-20, le=30, description="residual above the expected echo (dB) that is the user"
    )
    spread: float = Field(
        0.06, ge=0, le=0.5, description="jitter (s) around the delay for the expected echo"
    )
    tail: float = Field(
        0.3, ge=0, le=2.0, description="reverberation (s) after the delay the residual may hold"
    )
    suppression_db: float = Field(
        60.0, ge=0, le=120, description="attenuation (dB) of the residual in an echo-only frame"
    )
    acquire: float = Field(
        0.6, ge=0, le=5.0, description="seconds after playback starts that are gated by the "
        "prior while no echo path is known yet"
    )
    prior_coupling: float = Field(
        1.0, gt=0, le=10.0, description="echo/reference energy ratio assumed while acquiring"
    )
    hangover: float = Field(0.2, ge=0, le=2.0, description="seconds a detected user keeps passing")


DEFAULT_ECHO_GATE = EchoGateSettings()


@dataclass(frozen=True, slots=True)
class EchoGateStatistics:
    """What the gate did so far.

    Attributes:
        frames: 20 ms microphone frames seen while reference audio was in range.
        frames_gated: of those, frames replaced by silence as echo only.
        delay: the echo path's delay in seconds (None until one was found).
        gain: the echo path's amplitude gain (None until one was found).
        correlation: the normalised correlation of the latest accepted estimate.
        estimates: path estimates accepted so far.
        unplayed: seconds of reply audio sent and still waiting for its receipts.
    """

    frames: int
    frames_gated: int
    delay: float | None
    gain: float | None
    correlation: float
    estimates: int
    unplayed: float = 0.0


@dataclass(slots=True)
class _Sent:
    delivery_id: DeliveryId
    segment_id: int
    start_sample: int
    samples: NDArray[np.float32]
    sample_rate: int
    _reference: NDArray[np.float32] | None = None

    def reference(self, lo: int, hi: int) -> NDArray[np.float32]:
        """Its samples ``lo:hi`` (its own rate, from its start) at 16 kHz: the chunk is
        resampled whole, once, at its first receipt (not each 20 ms piece on its own), and
        pieces are cut from it at matching places, so they join without a gap."""
        if self._reference is None:
            self._reference = resample(self.samples, self.sample_rate, STT_SAMPLE_RATE)
        size, out = self.samples.size, self._reference.size
        return self._reference[lo * out // size : hi * out // size]


class _Timeline:
    """A float signal at 16 kHz indexed by absolute sample index, keeping only the recent part."""

    def __init__(self, keep: int) -> None:
        self._keep = keep
        self._base = 0
        self._data = np.zeros(0, np.float32)

    @property
    def end(self) -> int:
        return self._base + self._data.size

    def write(self, index: int, samples: NDArray[np.float32]) -> None:
        if samples.size == 0:
            return
        if self._data.size == 0:
            self._base = index
        end = index + samples.size
        if end > self.end:
            self._data = np.concatenate([self._data, np.zeros(end - self.end, np.float32)])
        start = max(index, self._base)
        if start < end:
            self._data[start - self._base : end - self._base] = samples[start - index :]
        extra = self._data.size - self._keep
        if extra > 0:
            self._data = self._data[extra:]
            self._base += extra

    def read(self, start: int, stop: int) -> NDArray[np.float32]:
        out = np.zeros(max(0, stop - start), np.float32)
        lo, hi = max(start, self._base), min(stop, self.end)
        if lo < hi:
            out[lo - start : hi - start] = self._data[lo - self._base : hi - self._base]
        return out


class EchoGate:
    """Removes the assistant's own voice from microphone audio, using what was played.

    The session calls :meth:`sent` with every reply chunk it writes, :meth:`played` with
    every playback receipt, and :meth:`process` with every 16 kHz microphone chunk (with
    the clock time of its first sample) before turn detection.

    Args:
        settings: the gate's rules; :data:`DEFAULT_ECHO_GATE` if ``None``.
    """

    def __init__(self, settings: EchoGateSettings | None = None) -> None:
        if settings is not None and not isinstance(settings, EchoGateSettings):
            raise TypeError(f"settings must be EchoGateSettings, got {type(settings).__name__}")
        self.settings = settings if settings is not None else DEFAULT_ECHO_GATE
        rate = STT_SAMPLE_RATE
        s = self.settings
        self._max_delay = round(s.max_delay * rate)
        self._window = round(s.window * rate)
        self._hop = max(_FRAME, round(s.hop * rate))
        self._track_hop = max(_FRAME, round(s.track_hop * rate))
        self._spread = round(s.spread * rate)
        self._tail = round(s.tail * rate)
        self._hangover = round(s.hangover * rate)
        self._acquire = round(s.acquire * rate)
        self._margin = 10.0 ** (s.margin_db / 10.0)
        self._floor = 10.0 ** (-s.suppression_db / 20.0)
        keep = self._max_delay + self._window + self._spread + self._tail + 4 * _FRAME
        self._ref = _Timeline(keep + rate)  # a second of slack for late receipts
        self._mic = _Timeline(keep)
        self._origin: float | None = None  # clock time of index 0
        self._mic_next: int | None = None
        self._sent: deque[_Sent] = deque()
        self._forgotten: deque[DeliveryId] = deque(maxlen=64)  # fenced: never played whole
        self._sent_samples = 0.0
        self._ref_last = -(10**12)  # index just after the last reference sample written
        self._delay: int | None = None
        self._gain = 0.0
        self._correlation = 0.0
        self._estimates = 0
        self._candidate: int | None = None  # delay of the last unconfirmed estimate
        self._tail_coupling = 0.0  # residual energy / reverberant reference energy
        self._active_since: int | None = None  # mic index where reference came in range
        self._next_estimate = 0
        self._pass_until = -(10**12)
        self._frames = 0
        self._gated = 0

    # -- the reference --------------------------------------------------------------

    def sent(self, chunk: ReplyChunk) -> None:
        """A reply chunk was handed to the output (its receipts come later)."""
        if not isinstance(chunk, ReplyChunk):
            raise TypeError(f"chunk must be a ReplyChunk, got {type(chunk).__name__}")
        self._sent.append(_Sent(chunk.delivery_id, chunk.segment_id, chunk.start_sample,
                                chunk.samples(), chunk.sample_rate))
        self._sent_samples += chunk.duration
        while self._sent and self._sent_samples > _MAX_STORED_SECONDS:
            old = self._sent.popleft()
            self._sent_samples -= old.samples.size / old.sample_rate

    def forget(self, delivery_id: DeliveryId) -> None:
        """``delivery_id`` was fenced: its chunks still waiting for receipts never will
        get them; drop them once a later delivery plays (a receipt of audio already on
        its way still finds its reference until then).

        Raises:
            TypeError: ``delivery_id`` is not a non-empty str.
        """
        if not isinstance(delivery_id, str) or not delivery_id:
            raise TypeError(f"delivery_id must be a non-empty str, got {delivery_id!r}")
        if delivery_id not in self._forgotten:
            self._forgotten.append(delivery_id)

    def played(self, receipt: PlaybackReceipt) -> None:
        """The client played a piece of reply audio at ``receipt.at``: it may echo now."""
        if not isinstance(receipt, PlaybackReceipt):
            raise TypeError(f"receipt must be a PlaybackReceipt, got {type(receipt).__name__}")
        pieces: list[NDArray[np.float32]] = []
        need_start, need_end = receipt.start_sample, receipt.start_sample + receipt.num_samples
        for item in self._sent:
            if item.delivery_id != receipt.delivery_id or item.segment_id != receipt.segment_id:
                continue
            if item.sample_rate != receipt.sample_rate:
                continue
            lo = max(need_start, item.start_sample)
            hi = min(need_end, item.start_sample + item.samples.size)
            if lo < hi:
                pieces.append(item.reference(lo - item.start_sample, hi - item.start_sample))
        if not pieces:
            return  # audio we never saw (e.g. written by someone else): nothing to cancel
        samples = pieces[0] if len(pieces) == 1 else np.concatenate(pieces)
        index = self._index(receipt.at)
        self._ref.write(index, samples)
        self._ref_last = max(self._ref_last, index + samples.size)
        self._forget_played(receipt)

    def _forget_played(self, receipt: PlaybackReceipt) -> None:
        end = receipt.start_sample + receipt.num_samples
        while self._sent:
            head = self._sent[0]
            stale = head.delivery_id != receipt.delivery_id and head.delivery_id in self._forgotten
            done = stale or (head.delivery_id == receipt.delivery_id
                    and head.segment_id == receipt.segment_id
                    and head.start_sample + head.samples.size <= end)
            if not done:
                return
            self._sent.popleft()
            self._sent_samples -= head.samples.size / head.sample_rate

    # -- the microphone -------------------------------------------------------------

    def process(self, audio: AudioChunk, at: float) -> AudioChunk:
        """Clean one 16 kHz microphone chunk whose first sample was captured at ``at``.

        Returns:
            ``audio`` itself when no reference is in range, else a chunk of the same
            length and ``start_sample`` with the echo removed (or silenced).
        """
        if not isinstance(audio, AudioChunk):
            raise TypeError(f"audio must be an AudioChunk, got {type(audio).__name__}")
        if audio.sample_rate != STT_SAMPLE_RATE:
            raise ValueError(f"audio must be {STT_SAMPLE_RATE} Hz, got {audio.sample_rate}")
        start = self._mic_index(at, audio.num_samples)
        samples = audio.samples()
        self._mic.write(start, samples)
        stop = start + samples.size
        if stop - self._max_delay - self._spread - self._tail >= self._ref_last or not samples.size:
            self._active_since = None
            return audio  # nothing played recently enough to echo here
        if self._active_since is None:
            self._active_since = start
        if stop >= self._next_estimate:
            self._estimate(stop)
            self._next_estimate = stop + (self._hop if self._delay is None else self._track_hop)
        clean = self._clean
        if self._delay is None:
            if start - self._active_since >= self._acquire:
                return audio  # no echo heard (or headphones after all): nothing to remove
            clean = self._acquiring
        out = np.empty_like(samples)
        for lo in range(0, samples.size, _FRAME):
            hi = min(lo + _FRAME, samples.size)
            out[lo:hi] = clean(samples[lo:hi], start + lo)
        return AudioChunk.from_float(out, STT_SAMPLE_RATE, start_sample=audio.start_sample)

    def _acquiring(self, frame: NDArray[np.float32], index: int) -> NDArray[np.float32]:
        """No path yet: a frame no louder than ``prior_coupling`` times the loudest
        reference within ``max_delay`` may be the echo, and is attenuated."""
        n = frame.size
        self._frames += 1
        around = self._ref.read(index - self._max_delay - self._spread, index + n)
        expected = self.settings.prior_coupling * _max_frame_energy(around, n)
        energy = float(np.mean(frame.astype(np.float64) ** 2))
        if energy > expected * self._margin + _EPS or index < self._pass_until:
            if energy > expected * self._margin + _EPS:
                self._pass_until = index + n + self._hangover
            return frame
        self._gated += 1
        return (frame * np.float32(self._floor)).astype(np.float32)

    def _clean(self, frame: NDArray[np.float32], index: int) -> NDArray[np.float32]:
        assert self._delay is not None
        n = frame.size
        self._frames += 1
        ref = self._ref.read(index - self._delay, index + n - self._delay)
        residual = (frame - np.float32(self._gain) * ref).astype(np.float32)
        frame_energy = float(np.mean(frame.astype(np.float64) ** 2))
        energy = float(np.mean(residual.astype(np.float64) ** 2))
        if energy > frame_energy:
            # The subtraction added energy: the path does not hold here (it must never
            # inject the reference into the microphone), so this frame is kept as is.
            residual, energy = frame, frame_energy
        around = self._ref.read(index - self._delay - self._spread,
                                index + n - self._delay + self._spread)
        expected = self._gain**2 * _max_frame_energy(around, n)
        if self._tail_coupling > 0:
            reverb = self._ref.read(index - self._delay - self._tail,
                                    index + n - self._delay + self._spread)
            expected = max(expected, self._tail_coupling * _max_frame_energy(reverb, n))
        if energy > expected * self._margin + _EPS:
            self._pass_until = index + n + self._hangover
            return residual
        if index < self._pass_until:
            return residual
        self._gated += 1
        return (residual * np.float32(self._floor)).astype(np.float32)

    def _estimate(self, stop: int) -> None:
        """Find the delay and gain mapping the reference onto the last ``window`` of mic."""
        w, d = self._window, self._max_delay
        mic = self._mic.read(stop - w, stop).astype(np.float64)
        ref = self._ref.read(stop - w - d, stop).astype(np.float64)  # ref[k + d - lag] ~ mic[k]
        mic_energy = float(np.dot(mic, mic))
        if mic_energy < _EPS * w or float(np.dot(ref, ref)) < _EPS * w:
            return
        size = 1 << int(np.ceil(np.log2(ref.size)))  # lags 0..d never wrap around
        spectrum = np.fft.rfft(ref, size) * np.conj(np.fft.rfft(mic, size))
        corr = np.fft.irfft(spectrum, size)[: d + 1]  # corr[j] = sum mic[k] * ref[k + j]
        squares = np.concatenate([[0.0], np.cumsum(ref * ref)])
        window_energy = squares[w : w + d + 1] - squares[: d + 1]  # energy of ref[j : j + w]
        valid = window_energy > _EPS * w
        if not np.any(valid):
            return
        ncc = np.where(valid, corr / np.sqrt(np.maximum(window_energy, _EPS) * mic_energy), 0.0)
        best = int(np.argmax(ncc))
        if ncc[best] < self.settings.min_correlation:
            self._candidate = None
            return
        delay, gain = d - best, float(corr[best] / window_energy[best])
        if gain <= 0:
            self._candidate = None
            return
        # A path is adopted only when two estimates in a row agree on it: speech in the
        # same voice can match the reference once by chance, never twice at one delay.
        candidate = self._candidate
        self._candidate = delay
        if candidate is None or abs(candidate - delay) > _DELAY_TOLERANCE:
            return
        self._delay = delay
        self._gain = gain
        self._correlation = float(ncc[best])
        self._tail_coupling = self._residual_coupling(mic, ref, best, gain)
        self._estimates += 1

    def _residual_coupling(self, mic: NDArray[np.float64], ref: NDArray[np.float64],
                           best: int, gain: float) -> float:
        """How loud the echo left after the subtraction is (reverberation the single tap
        cannot remove), relative to the reference of the last ``tail`` seconds.

        Measured on the window that just confirmed the path (the echo dominates it); the
        75th percentile over its frames, capped at twice the direct path's energy gain so
        that a quiet user talking in that window cannot make the gate deaf.
        """
        residual = mic - gain * ref[best : best + mic.size]
        frames = mic.size // _FRAME
        if frames == 0:
            return 0.0
        energies = np.mean(residual[: frames * _FRAME].reshape(frames, _FRAME) ** 2, axis=1)
        squares = np.concatenate([[0.0], np.cumsum(ref * ref)])
        step = _FRAME // 2
        starts = np.arange(0, ref.size - _FRAME + 1, step)
        windows = (squares[starts + _FRAME] - squares[starts]) / _FRAME  # 20 ms, 10 ms hops
        ratios: list[float] = []
        floor = _EPS * _FRAME * 100
        for f in range(frames):
            lo = max(0, f * _FRAME + best - self._tail) // step
            hi = (f * _FRAME + best + self._spread) // step + 1
            envelope = float(np.max(windows[lo:hi])) if hi > lo else 0.0
            if envelope > floor:
                ratios.append(float(energies[f]) / envelope)
        if not ratios:
            return 0.0
        ratios.sort()
        return min(ratios[(3 * (len(ratios) - 1)) // 4], 2.0 * gain * gain)

    # -- helpers --------------------------------------------------------------------

    def _index(self, at: float) -> int:
        if self._origin is None:
            self._origin = at
        return round((at - self._origin) * STT_SAMPLE_RATE)

    def _mic_index(self, at: float, size: int) -> int:
        """Microphone chunks are contiguous; re-anchor only on a jump (a stall, a reopen)."""
        index = self._index(at)
        if self._mic_next is None or abs(index - self._mic_next) > STT_SAMPLE_RATE // 4:
            self._mic_next = index
        start = self._mic_next
        self._mic_next = start + size
        return start

    def statistics(self) -> EchoGateStatistics:
        """Counters and the current echo path."""
        return EchoGateStatistics(
            frames=self._frames, frames_gated=self._gated,
            delay=None if self._delay is None else self._delay / STT_SAMPLE_RATE,
            gain=None if self._delay is None else self._gain,
            correlation=self._correlation, estimates=self._estimates,
            unplayed=round(self._sent_samples, 6),
        )

    def __repr__(self) -> str:
        s = self.statistics()
        path = "unknown" if s.delay is None else f"{s.delay * 1000:.0f} ms x {s.gain:.2f}"
        return f"EchoGate(path={path}, gated={s.frames_gated}/{s.frames})"


def _max_frame_energy(signal: NDArray[np.float32], frame: int) -> float:
    """Mean-square energy of the loudest ``frame``-long stretch of ``signal`` (10 ms steps)."""
    if signal.size == 0:
        return 0.0
    if signal.size <= frame:
        return float(np.mean(signal.astype(np.float64) ** 2))
    squares = np.concatenate([[0.0], np.cumsum(signal.astype(np.float64) ** 2)])
    step = max(1, frame // 2)
    starts = np.arange(0, signal.size - frame + 1, step)
    return float(np.max(squares[starts + frame] - squares[starts]) / frame)
