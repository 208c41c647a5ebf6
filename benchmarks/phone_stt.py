"""Whisper on telephone audio: word errors on the same utterances at 16 kHz and after
8 kHz G.711 μ-law, as ``voxflow phone`` hands them to STT.

Run: ``uv run python benchmarks/phone_stt.py [--models tiny.en base] [--quick]``

The utterances of ``benchmarks/stt_accuracy.py`` (:data:`UTTERANCES`), spoken by the
bundled Piper voice at three rates and by other voices (three espeak-ng voices, Piper
faster and slower: :func:`_stt_clips.build_other_voices`), every other clip with white or
pink noise at 20 dB SNR, each padded as the turn detector hands it over. The phone path:
16 kHz → 8 kHz (soxr), μ-law encoded (:class:`~voxflow_adapters.phone.codec.MulawEncoder`)
and decoded back to 16 kHz by the transport's own
:class:`~voxflow_adapters.phone.codec.MulawDecoder` (160-byte frames). Printed: the word
error rate per model, voice set and path, and the median decode time.

Measured Dec 4 (``--quick``: 34 utterances, load average ~8; WER %, median decode ms):

==========  ==============  ============  ============
model       voices          16 kHz        8 kHz μ-law
==========  ==============  ============  ============
tiny.en     bundled voice   4.8 (416)     3.5 (587)
tiny.en     other voices    12.3 (659)    28.9 (683)
base        bundled voice   3.1 (535)     3.9 (757)
base        other voices    10.5 (874)    25.9 (814)
==========  ==============  ============  ============

The bundled voice loses nothing on the phone line (the codec is not the problem), but
the other voices (espeak-ng's in particular) lose more than twice their words at 8 kHz,
with either model: ``base`` is the better of the two on the phone (25.9 vs 28.9 %, for
~130 ms more per decode) and the one to choose (``VOXFLOW_STT=whisper:base``), yet
neither is good enough for unfamiliar voices over a telephone band; a larger or
telephone-trained model is not installable here (none ships its weights in a package).
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from _stt_clips import Clip, build_clips, build_other_voices
from _wer import normalize, word_errors
from numpy.typing import NDArray
from stt_accuracy import UTTERANCES
from voxflow_adapters.phone.codec import MulawDecoder, MulawEncoder
from voxflow_voice import resample
from voxflow_voice.engines.stt import SttSettings, WhisperStt


def phone_line(audio: NDArray[np.float32]) -> NDArray[np.float32]:
    """16 kHz float → 8 kHz μ-law → 16 kHz float, frame by frame as on a call."""
    narrow = resample(audio, 16_000, 8_000)
    encoder, decoder = MulawEncoder(160), MulawDecoder()
    pieces = [decoder.decode(encoder.encode(narrow[i : i + 160]))
              for i in range(0, narrow.size, 160)]
    return np.frombuffer(b"".join(pieces), np.int16).astype(np.float32) / 32768.0


def score(stt: WhisperStt, clips: list[Clip], line: bool) -> tuple[float, float]:
    errors = words = 0
    times = []
    for clip in clips:
        audio = phone_line(clip.audio) if line else clip.audio
        began = time.perf_counter()
        transcript = stt.transcribe_sync(audio)
        times.append((time.perf_counter() - began) * 1000.0)
        heard = transcript.text if transcript is not None else ""
        errors += word_errors(clip.text, heard)
        words += len(normalize(clip.text))
    return 100.0 * errors / max(1, words), statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["tiny.en", "base"])
    parser.add_argument("--quick", action="store_true", help="every other utterance")
    args = parser.parse_args()
    texts = UTTERANCES[::2] if args.quick else UTTERANCES
    sets = {"bundled voice": build_clips(texts), "other voices": build_other_voices(texts)}
    print(f"{len(texts)} utterances; WER % (median decode ms)")
    print(f"{'model':10} {'voices':14} {'16 kHz':>16} {'8 kHz mu-law':>16}")
    for model in args.models:
        stt = WhisperStt(SttSettings(model=model))
        for name, clips in sets.items():
            wide, wide_ms = score(stt, clips, line=False)
            narrow, narrow_ms = score(stt, clips, line=True)
            print(f"{model:10} {name:14} {wide:8.1f} ({wide_ms:4.0f}) "
                  f"{narrow:8.1f} ({narrow_ms:4.0f})", flush=True)


if __name__ == "__main__":
    main()
