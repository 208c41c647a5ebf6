"""The server's Opus per 20 ms frame: PyAV's libopus codec (before) vs libopus called
through ctypes (now), and what a lower encoder complexity would buy.

Run: ``uv run python benchmarks/opus_codec.py [--runs 7] [--stt base]``

Three tables, CPU time (``time.process_time``) per 20 ms frame, the median of ``--runs``
runs over the same frames (before and now alternate within each run, so both see the
same load):

* encode: the reply track's 48 kHz mono frame to its packet (96 kb/s, ``voip``, -3 dB):
  PyAV's ``libopus`` codec (an ``av.AudioFrame`` in, an ``av.Packet`` out) vs
  :class:`~voxflow_adapters.webrtc.opus.MonoOpusEncoder` (libopus through ctypes, the
  same bytes);
* decode + guard: an inbound packet to the 16 kHz mono chunk the session takes: PyAV
  decoding at 48 kHz, ``to_ndarray`` and ``InputGuard.convert`` (its 48 → 16 kHz
  decimator) vs :class:`~voxflow_adapters.webrtc.opus.MonoOpusDecoder` (libopus at
  16 kHz) and the guard (no resampler); and the decode alone;
* complexity: the encoder at complexity 10 (libopus's default, the product's) and
  lower: us/frame, bytes/packet, the SNR of its 48 kHz decode against complexity 10's
  and against the reply itself (aligned), and with ``--stt MODEL`` the word errors a
  Whisper model makes on each decoded reply (a WER proxy; ``none`` skips it).

The frames: Piper's voice saying a few replies (speech, with its pauses).

Measured (2 cores, shared; see opus.py's docstring for the figures and the load).
"""

from __future__ import annotations

import argparse
import fractions
import math
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import av
import numpy as np
from _figures import figure
from _wer import normalize, word_errors
from numpy.typing import NDArray
from voxflow_adapters.webrtc._libopus import OpusDecoderHandle
from voxflow_adapters.webrtc.opus import MonoOpusDecoder, MonoOpusEncoder
from voxflow_voice.audio import AudioChunk, resample
from voxflow_voice.listen.input_guard import InputGuard

REPLIES = [
    "Hello! How can I help you today?",
    "Your table for four is booked at seven thirty tomorrow evening.",
    "The weather in Paris will be sunny with a high of twenty two degrees.",
    "I have moved your dentist appointment to Thursday at nine fifteen.",
]
_RATE = 48_000
_FRAME = 960
_TIME_BASE = fractions.Fraction(1, _RATE)
_GAIN = math.sqrt(0.5)


class PyAvEncoder:
    """The reply track's encoder before: PyAV's libopus codec, mono, 96 kb/s, voip."""

    def __init__(self) -> None:
        codec = av.CodecContext.create("libopus", "w")
        codec.bit_rate, codec.format, codec.layout = 96_000, "s16", "mono"
        codec.options = {"application": "voip"}
        codec.sample_rate, codec.time_base = _RATE, _TIME_BASE
        self._codec, self._n = codec, 0

    def encode(self, pcm: bytes) -> bytes:
        gained = np.rint(np.frombuffer(pcm, np.int16) * _GAIN).astype(np.int16)
        frame = av.AudioFrame(format="s16", layout="mono", samples=_FRAME)
        frame.planes[0].update(gained.tobytes())
        frame.sample_rate, frame.pts, frame.time_base = _RATE, self._n * _FRAME, _TIME_BASE
        self._n += 1
        (packet,) = self._codec.encode(frame)
        return bytes(packet)


class PyAvDecoder:
    """The receive path's decoder before: PyAV's libopus, mono, 48 kHz."""

    def __init__(self) -> None:
        codec = av.CodecContext.create("libopus", "r")
        codec.format, codec.layout, codec.sample_rate = "s16", "mono", _RATE
        self._codec = codec

    def decode(self, payload: bytes, pts: int) -> list[Any]:
        packet = av.Packet(payload)
        packet.pts, packet.time_base = pts, _TIME_BASE
        return list(self._codec.decode(packet))


def _speech() -> NDArray[np.float32]:
    from voxflow_voice.engines import VoiceEngines

    tts = VoiceEngines.from_environment(deterministic=True).tts
    parts = []
    for text in REPLIES:
        spoken = np.concatenate([np.asarray(s.samples, np.float32)
                                 for s in tts.synthesize(text)])
        parts += [resample(spoken, tts.sample_rate, _RATE), np.zeros(9600, np.float32)]
    return np.concatenate(parts)


def _frames(audio: NDArray[np.float32]) -> list[bytes]:
    pcm = (np.clip(audio, -1, 1) * 32767).astype(np.int16)
    usable = pcm.size - pcm.size % _FRAME
    return [pcm[i:i + _FRAME].tobytes() for i in range(0, usable, _FRAME)]


def _us(run: Callable[[], int]) -> float:
    start = time.process_time()
    count = run()
    return (time.process_time() - start) / count * 1e6


def _medians(runs: int, paths: dict[str, Callable[[], int]]) -> dict[str, float]:
    times: dict[str, list[float]] = {name: [] for name in paths}
    for _ in range(runs):
        for name, run in paths.items():
            times[name].append(_us(run))
    return {name: statistics.median(t) for name, t in times.items()}


def _decoded48(packets: list[bytes]) -> NDArray[np.float64]:
    decoder = OpusDecoderHandle(_RATE, 1)
    return np.concatenate([decoder.decode(p) for p in packets]).astype(np.float64) / 32768


def _aligned_snr(reference: NDArray[Any], heard: NDArray[Any], most: int = 600) -> float:
    """SNR (dB) of ``reference`` over ``heard - reference`` at the best lag of ``heard``
    (0 .. ``most`` samples late)."""
    best = -math.inf
    for lag in range(0, most + 1):
        a = np.asarray(reference[:reference.size - lag], np.float64)
        b = np.asarray(heard[lag:lag + a.size], np.float64)
        a = a[:b.size]
        best = max(best, 10 * math.log10(np.sum(a**2) / max(np.sum((a - b) ** 2), 1e-12)))
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--stt", default="base", help="Whisper model for the WER proxy "
                        "('none': skip)")
    args = parser.parse_args()
    speech = _speech()
    frames = _frames(speech)
    print(f"{len(frames)} frames ({len(frames) * 0.02:.1f} s of speech), median of "
          f"{args.runs} runs; load average {os.getloadavg()[0]:.2f}")

    def pyav_encode() -> int:
        encoder = PyAvEncoder()
        for pcm in frames:
            encoder.encode(pcm)
        return len(frames)

    def ctypes_encode() -> int:
        encoder = MonoOpusEncoder()
        for pcm in frames:
            encoder.encode(pcm)
        return len(frames)

    product = MonoOpusEncoder()
    packets = [product.encode(pcm) for pcm in frames]
    reference = PyAvEncoder()
    same = sum(reference.encode(pcm) == p for pcm, p in zip(frames, packets, strict=True))
    print(f"packets byte-identical to PyAV's: {same} of {len(frames)}")

    def pyav_decode_guard() -> int:
        decoder, guard = PyAvDecoder(), InputGuard()
        for i, payload in enumerate(packets):
            for frame in decoder.decode(payload, i * _FRAME):
                guard.convert(np.reshape(frame.to_ndarray(), -1), frame.sample_rate, 1)
        return len(packets)

    def ctypes_decode_guard() -> int:
        decoder, guard = MonoOpusDecoder(), InputGuard()
        for i, payload in enumerate(packets):
            for frame in decoder.decode(_Packet(payload, i * _FRAME)):
                guard.convert(frame.samples, frame.sample_rate, 1)
        return len(packets)

    def pyav_decode() -> int:
        decoder = PyAvDecoder()
        for i, payload in enumerate(packets):
            for frame in decoder.decode(payload, i * _FRAME):
                frame.to_ndarray()
        return len(packets)

    def ctypes_decode() -> int:
        decoder = MonoOpusDecoder()
        for i, payload in enumerate(packets):
            decoder.decode(_Packet(payload, i * _FRAME))
        return len(packets)

    got = _medians(args.runs, {
        "pyav encode": pyav_encode, "ctypes encode": ctypes_encode,
        "pyav decode+guard": pyav_decode_guard, "ctypes decode+guard": ctypes_decode_guard,
        "pyav decode": pyav_decode, "ctypes decode": ctypes_decode,
    })
    print(f"\n{'us per 20 ms frame':24} {'PyAV (before)':>14} {'ctypes (now)':>13} "
          f"{'now/before':>11}")
    for what, before, now in (("encode 48 kHz", "pyav encode", "ctypes encode"),
                              ("decode + guard", "pyav decode+guard", "ctypes decode+guard"),
                              ("decode alone", "pyav decode", "ctypes decode")):
        print(f"{what:24} {got[before]:14.1f} {got[now]:13.1f} {got[now] / got[before]:11.2f}")
    figure("opus encode", round(got["ctypes encode"], 1), "us/frame")
    figure("opus decode + guard", round(got["ctypes decode+guard"], 1), "us/frame")

    stt = None
    if args.stt != "none":
        from voxflow_voice.engines.stt import SttSettings, WhisperStt

        stt = WhisperStt(SttSettings(model=args.stt))
    ten = _decoded48(packets)
    original = np.frombuffer(b"".join(frames), np.int16).astype(np.float64) / 32768 * _GAIN
    print(f"\n{'complexity':>10} {'us/frame':>9} {'bytes/pkt':>10} {'SNR vs 10':>10} "
          f"{'SNR vs reply':>13} {'word errors':>12}")
    words = sum(len(normalize(text)) for text in REPLIES)
    for complexity in (10, 8, 6, 5, 3):
        def encode(complexity: int = complexity) -> int:
            encoder = MonoOpusEncoder(complexity=complexity)
            for pcm in frames:
                encoder.encode(pcm)
            return len(frames)

        cost = _medians(args.runs, {"encode": encode})["encode"]
        encoder = MonoOpusEncoder(complexity=complexity)
        these = [encoder.encode(pcm) for pcm in frames]
        heard = _decoded48(these)
        vs_ten = "same bytes" if these == packets else f"{_aligned_snr(ten, heard, most=0):.1f}"
        vs_reply = _aligned_snr(original, heard)
        errors = "-"
        if stt is not None:
            count = _word_errors(stt, heard)
            errors = f"{count}/{words}"
        print(f"{complexity:>10} {cost:9.1f} {np.mean([len(p) for p in these]):10.1f} "
              f"{vs_ten:>10} {vs_reply:13.1f} {errors:>12}")


def _word_errors(stt: Any, heard: NDArray[np.float64]) -> int:
    """Word errors of the decoded replies, each transcribed alone (split at the pauses
    between them)."""
    audio16 = resample(heard.astype(np.float32), _RATE, 16_000)
    gap = 9600 // 3
    quiet = np.abs(audio16) < 1e-3
    # the replies, in order, cut at the silences _speech() put between them
    cuts, run, start = [], 0, 0
    for i, q in enumerate(quiet):
        run = run + 1 if q else 0
        if run == gap:
            cuts.append(audio16[start:i])
            start = i
    cuts.append(audio16[start:])
    spoken = [c for c in cuts if np.max(np.abs(c), initial=0) > 0.01]
    if len(spoken) != len(REPLIES):  # (a pause inside a reply: score the whole)
        text = stt.transcribe_sync(AudioChunk.from_float(audio16, 16_000))
        return word_errors(" ".join(REPLIES), text.text if text else "")
    total = 0
    for reply, clip in zip(REPLIES, spoken, strict=True):
        text = stt.transcribe_sync(AudioChunk.from_float(clip, 16_000))
        total += word_errors(reply, text.text if text else "")
    return total


class _Packet:
    """A received packet as the receive path hands it to the decoder (a JitterFrame)."""

    __slots__ = ("data", "timestamp")

    def __init__(self, data: bytes, timestamp: int) -> None:
        self.data, self.timestamp = data, timestamp


if __name__ == "__main__":
    main()
