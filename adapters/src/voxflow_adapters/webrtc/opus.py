"""The server's Opus: the reply track's encoder (mono, and each silent frame encoded
once) and the receive path's decoder (straight to 16 kHz mono), both libopus called
through ctypes (:mod:`._libopus`, the copy PyAV's wheel bundles).

aiortc's ``OpusEncoder`` encodes stereo: every 20 ms mono frame of reply audio goes
through an ``AudioResampler`` (mono → stereo, a filter graph, and -3 dB on each channel:
swresample's upmix) and then a stereo encode, about twice the work of a mono encode of
the same frame. :class:`MonoOpusEncoder` encodes the frame as it is, with the same
libopus settings (96 kb/s, ``voip``, and FFmpeg's unconstrained VBR), after the same
-3 dB, so a browser (or aiortc's decoder, which outputs stereo) hears the reply at the
level aiortc's encoder gives it. WebRTC negotiates Opus as ``opus/48000/2`` whatever the stream
holds: each packet says whether it is mono or stereo (RFC 7587: ``stereo=0`` is only a
preference, a receiver decodes both), and libopus decodes a mono packet to both channels.

While no reply is playing the track sends silence, 50 frames a second. libopus gives
digital silence a 3-byte packet, the same one frame after frame; once it has given the
same packet :data:`SILENT_REPEATS` times in a row, that packet is sent for every further
silent frame without encoding it, until a frame with audio comes. Its first packet is
then encoded by the same encoder, whose state after that many identical silent packets
is the state more silent frames would have left (measured over tones, noise and
modulated tones with 20 or more: every packet after byte-identical to encoding every
frame; with 15 or fewer, not), so the packets on the wire are the ones encoding every
frame gives, and a reply's first frame waits for nothing.

The caller's audio is wanted as 16 kHz mono. :class:`MonoOpusDecoder` asks libopus for
one channel at 16 kHz (SILK's own rate; CELT's bands above 8 kHz left out): a mono
packet decodes to what either channel of a stereo 48 kHz decode held after the input
guard's 48 → 16 kHz decimator, and a stereo packet to libopus's own downmix. On Piper's
speech (``test_webrtc_opus.py``) both are within 39 dB SNR of the 48 kHz path's
(aiortc's 48 kHz decode, the channels' mean for a stereo stream, then the decimator),
21 samples (1.3 ms, the decimator's delay) sooner, and Whisper hears the same words. A
true stereo stream's downmix can differ from that mean where the codec overshoots: the
stereo decode clips a channel at full scale before it is averaged, the downmix does not
(up to 5,751 s16 steps measured at 32 kb/s at 48 kHz, on 5 of 96,000 samples).

Both skip PyAV's ``libopus`` codec (an ``av.AudioFrame`` or ``av.Packet`` around every
frame). ``benchmarks/opus_codec.py --runs 7`` (Piper's speech, 639 frames, CPU us per
20 ms frame, medians of 7 runs, load 3.1-3.3 on 2 shared cores, 2026-12-05): encode 81.2
(PyAV's codec: 91.9; the same bytes, 639 of 639); decode and input guard 38.8 (PyAV's
48 kHz decode and the guard's decimator: 80.7), of which the 16 kHz decode is 27.1
(PyAV's 48 kHz decode alone: 31.6). At 50 packets a second each way that is ~0.2 points
of a core less per call for the caller's packets (they come all call long) and ~0.05
less while a reply plays. A WebRTC call's cost over a simulated one
(``webrtc_cpu.py --pairs 4 --turns 3``, load 0.3-0.6): simulated 9.4 %, WebRTC 11.7 %,
+2.4 points.
Lower encoder complexity, same run: 8 gives the same bytes as 10; 6 and 5 ~64 us (17 less),
their decode 29 dB from complexity 10's; 3 54 us, 27 dB; Whisper base made the same
2 word errors in 43 words on each decoded reply. At most 0.08 points of a core while a
reply plays: not worth a change of sound, so the product keeps 10.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ._libopus import (
    APPLICATION_VOIP,
    OpusDecoderHandle,
    OpusEncoderHandle,
    OpusLibraryError,
    library_path,
    library_version,
)

__all__ = [
    "DECODED_RATE",
    "SILENT_REPEATS",
    "DecodedFrame",
    "MonoOpusDecoder",
    "MonoOpusEncoder",
    "doctor_checks",
]

SILENT_REPEATS = 50
"""Identical silent packets in a row (1 s) after which silence is no longer encoded."""
DECODED_RATE = 16_000
"""The rate :class:`MonoOpusDecoder` decodes to (what VAD and STT take)."""
_RATE = 48_000
_FRAME_SAMPLES = 960
_BITRATE = 96_000  # (aiortc's settings)
_UPMIX_GAIN = math.sqrt(0.5)  # what aiortc's mono → stereo upmix left on each channel


class MonoOpusEncoder:
    """Encodes 20 ms, 48 kHz mono s16 frames to Opus packets, one packet per frame; its
    libopus encoder is freed when it is collected (the reply track holds it for the
    call).

    Args:
        complexity: libopus's complexity, 0..10 (10, its default, is what the product
            uses: see the module docstring for what lower ones measured).

    Raises:
        OpusLibraryError: no libopus could be loaded (the error names the fix).
    """

    def __init__(self, *, complexity: int = 10) -> None:
        codec = OpusEncoderHandle(_RATE, 1, APPLICATION_VOIP)
        codec.set_bitrate(_BITRATE)
        codec.set_vbr_constraint(False)  # (as PyAV's libopus codec: FFmpeg's "vbr on")
        codec.set_complexity(complexity)
        self._codec = codec
        self._last: bytes | None = None  # the last silent packet encoded
        self._repeats = 0  # how many times in a row it came out
        self.encoded = 0
        """Frames given to libopus."""
        self.reused = 0
        """Silent frames sent as the packet libopus settled on, without encoding."""

    def encode(self, pcm: bytes | bytearray | memoryview, *, silent: bool = False) -> bytes:
        """The Opus packet of one frame (960 samples of s16le, any contiguous buffer);
        ``silent``: the frame is all zeros (its packet may be the one silence settled on).

        Raises:
            ValueError: ``pcm`` is not a contiguous buffer of 1,920 bytes.
        """
        try:
            view = memoryview(pcm)
        except TypeError:
            raise ValueError(f"a frame is {2 * _FRAME_SAMPLES} bytes, got "
                             f"{type(pcm).__name__}") from None
        size = view.nbytes if view.c_contiguous else -1
        if size != 2 * _FRAME_SAMPLES:
            raise ValueError(f"a frame is {2 * _FRAME_SAMPLES} contiguous bytes, got "
                             f"{'a strided buffer' if size < 0 else size}")
        if silent:
            if self._repeats >= SILENT_REPEATS:
                self.reused += 1
                assert self._last is not None
                return self._last
            samples = np.frombuffer(pcm, np.int16)  # (read only: libopus only reads it)
        else:
            self._last, self._repeats = None, 0
            gained = np.frombuffer(pcm, np.int16) * _UPMIX_GAIN
            samples = np.rint(gained).astype(np.int16)
        self.encoded += 1
        payload = self._codec.encode(samples)
        if silent:
            self._repeats = self._repeats + 1 if payload == self._last else 1
            self._last = payload
        return payload


@dataclass(frozen=True, slots=True)
class DecodedFrame:
    """One packet's audio: 16 kHz mono s16 samples, and the packet's RTP timestamp from
    the stream's first packet on (as aiortc's decoder stamps its frames' ``pts``), in
    the RTP clock's units: 48 kHz for Opus, whatever ``sample_rate`` is (seconds are
    ``rtp_timestamp / 48_000``)."""

    samples: NDArray[np.int16]
    rtp_timestamp: int
    sample_rate: int = DECODED_RATE


class MonoOpusDecoder:
    """Decodes Opus packets (mono or stereo) to 16 kHz mono s16; shaped as aiortc's
    ``OpusDecoder`` for the receive path (``decode(JitterFrame)`` → a list of frames, one
    a packet, with the packet's RTP timestamp), the frames :class:`DecodedFrame`. Its
    libopus decoder is freed when it is collected (the receive path holds it for the
    call).

    Raises:
        OpusLibraryError: no libopus could be loaded (the error names the fix).
    """

    def __init__(self) -> None:
        self._codec = OpusDecoderHandle(DECODED_RATE, 1)

    def decode(self, encoded: Any) -> list[DecodedFrame]:
        """The frame of one packet (``encoded.data``: its bytes; ``encoded.timestamp``: its
        RTP timestamp).

        Raises:
            OpusCodecError: the packet is empty, longer than ``MAX_PACKET_BYTES`` or
                libopus could not decode it (the decoder's state is kept: the next
                packet decodes).
        """
        return [DecodedFrame(self._codec.decode(encoded.data), encoded.timestamp)]


def doctor_checks() -> list[tuple[str, str, str, str]]:
    """``voxflow doctor``'s row for libopus (its ``voxflow.doctor`` entry point):
    ``(check, status, detail, fix)``; ``missing`` when it cannot be loaded (``voxflow
    serve`` would refuse to start)."""
    check = "libopus (voxflow serve's call audio)"
    try:
        return [(check, "ok", f"{library_version()} ({library_path()})", "")]
    except OpusLibraryError as exc:
        return [(check, "missing", exc.reason, exc.fix)]
