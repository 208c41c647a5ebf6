"""The server's Opus: the reply track's encoder (mono, and each silent frame encoded
once) and the receive path's decoder (mono).

aiortc's ``OpusEncoder`` encodes stereo: every 20 ms mono frame of reply audio went
through an ``AudioResampler`` (mono → stereo, a filter graph, and -3 dB on each channel:
swresample's upmix) and then a stereo encode, about twice the work of a mono encode of
the same frame. :class:`MonoOpusEncoder` encodes the frame as it is, with the same
libopus settings (96 kb/s, ``voip``), after the same -3 dB, so a browser (or aiortc's
decoder, which outputs stereo) hears the reply at the level it heard before. WebRTC
negotiates Opus as ``opus/48000/2`` whatever the stream holds: each packet says whether
it is mono or stereo (RFC 7587: ``stereo=0`` is only a preference, a receiver decodes
both), and libopus decodes a mono packet to both channels.

While no reply is playing the track sends silence, 50 frames a second. libopus gives
digital silence a 3-byte packet, the same one frame after frame; once it has given the
same packet :data:`SILENT_REPEATS` times in a row, that packet is sent for every further
silent frame without encoding it, until a frame with audio comes. Its first packet is
then encoded by the same encoder, whose state after that many identical silent packets
is the state more silent frames would have left (measured over tones, noise and
modulated tones with 20 or more: every packet after byte-identical to encoding every
frame; with 15 or fewer, not), so the packets on the wire are the ones encoding every
frame gives, and a reply's first frame waits for nothing.

The caller's audio is wanted as 16 kHz mono. aiortc's ``OpusDecoder`` decodes every
packet to stereo, which the receive path then averaged back to mono; a browser's
microphone stream is mono (each channel of its stereo output a copy), so half of that
work was for nothing. :class:`MonoOpusDecoder` asks libopus for one channel: a mono
packet decodes to the samples either channel of the stereo output held
(``test_webrtc_opus.py``: identical), and a stereo packet to libopus's own downmix.
When both channels carry the same signal, that downmix is the mean of the stereo
decoder's two channels within 4 steps (the test compares them). For a true stereo
stream it can differ from that mean by more than 4 steps: where the codec overshoots,
the stereo decode clipped a channel at full scale before the old path averaged it, and
the downmix did not (up to 5,751 s16 steps measured at 32 kb/s, on 5 of 96,000
samples; none at 12 or 96 kb/s), so the mono decode is not worse there.
"""

from __future__ import annotations

import fractions
import math

import av
import numpy as np
from aiortc.jitterbuffer import JitterFrame

__all__ = ["SILENT_REPEATS", "MonoOpusDecoder", "MonoOpusEncoder"]

SILENT_REPEATS = 50
"""Identical silent packets in a row (1 s) after which silence is no longer encoded."""
_RATE = 48_000
_FRAME_SAMPLES = 960
_TIME_BASE = fractions.Fraction(1, _RATE)
_UPMIX_GAIN = math.sqrt(0.5)  # what aiortc's mono → stereo upmix left on each channel


class MonoOpusEncoder:
    """Encodes 20 ms, 48 kHz mono s16 frames to Opus packets, one packet per frame."""

    def __init__(self) -> None:
        codec = av.CodecContext.create("libopus", "w")
        codec.bit_rate = 96_000  # (aiortc's settings)
        codec.format = "s16"
        codec.layout = "mono"
        codec.options = {"application": "voip"}
        codec.sample_rate = _RATE
        codec.time_base = _TIME_BASE
        self._codec = codec
        self._last: bytes | None = None  # the last silent packet encoded
        self._repeats = 0  # how many times in a row it came out
        self.encoded = 0
        """Frames given to libopus."""
        self.reused = 0
        """Silent frames sent as the packet libopus settled on, without encoding."""

    def encode(self, pcm: bytes, *, silent: bool = False) -> bytes:
        """The Opus packet of one frame (960 samples of s16le); ``silent``: the frame is
        all zeros (its packet may be the one silence settled on)."""
        if len(pcm) != 2 * _FRAME_SAMPLES:
            raise ValueError(f"a frame is {2 * _FRAME_SAMPLES} bytes, got {len(pcm)}")
        if silent:
            if self._repeats >= SILENT_REPEATS:
                self.reused += 1
                assert self._last is not None
                return self._last
        else:
            self._last, self._repeats = None, 0
            gained = np.frombuffer(pcm, np.int16) * _UPMIX_GAIN
            pcm = np.rint(gained).astype(np.int16).tobytes()
        frame = av.AudioFrame(format="s16", layout="mono", samples=_FRAME_SAMPLES)
        frame.planes[0].update(pcm)
        frame.sample_rate = _RATE
        frame.pts = self.encoded * _FRAME_SAMPLES
        frame.time_base = _TIME_BASE
        self.encoded += 1
        (packet,) = self._codec.encode(frame)  # (libopus: one packet per 20 ms frame)
        payload = bytes(packet)
        if silent:
            self._repeats = self._repeats + 1 if payload == self._last else 1
            self._last = payload
        return payload


class MonoOpusDecoder:
    """Decodes Opus packets (mono or stereo) to 48 kHz mono s16 frames; a drop-in for
    aiortc's ``OpusDecoder`` in the receive path (the same ``decode``, the same ``pts``)."""

    def __init__(self) -> None:
        codec = av.CodecContext.create("libopus", "r")
        codec.format = "s16"
        codec.layout = "mono"
        codec.sample_rate = _RATE
        self._codec = codec

    def decode(self, encoded: JitterFrame) -> list[av.AudioFrame]:
        """The frames of one packet (``encoded.timestamp``: its pts, in samples)."""
        packet = av.Packet(encoded.data)
        packet.pts = encoded.timestamp
        packet.time_base = _TIME_BASE
        return [frame for frame in self._codec.decode(packet)
                if isinstance(frame, av.AudioFrame)]
