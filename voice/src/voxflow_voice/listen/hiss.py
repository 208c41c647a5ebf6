"""Hiss: an unvoiced first consonant heard before the VAD hears speech.

Silero scores *voiced* speech. A turn that opens on an unvoiced consonant ("Stop,
please.", "Sorry, …", "Cancel that.", "Thanks.") starts with up to ~100 ms of noise the
VAD scores low: on five voices that are not the bundled one (espeak-ng and Piper at other
rates) "Stop, please." reached the turn detector's ``onset_threshold`` 76-140 ms after its
first sample, "Wait, stop." 44 ms. A barge-in that opens that way paused the reply that
much later.

:class:`HissDetector` hears the one unvoiced consonant that opens most interruptions,
the 's' ("Stop", "Sorry", "So", "Sure"). It splits the 16 kHz signal, in 8 ms steps, into
its high half and its low half with the two simplest filters there are (the first
difference ``x[n] - x[n-1]``, gain ``2 sin(pi f / fs)``, and the sum ``x[n] + x[n-1]``,
``2 cos(pi f / fs)``: they cross at 4 kHz). A step is *hiss* when

* its high half is ``tilt_db`` (1.5 dB) louder than its low half: an 's' puts most of its
  energy over 4 kHz (+2.4 to +4.6 dB on five voices that are not the bundled one), white
  noise (a bump, a door, a fan: 0 dB), pink noise and breath (-5 to -11 dB), voiced
  speech and hum (-10 dB and below) do not;
* and its high half is ``rise_db`` (12 dB) over the floor, a level that follows the
  quietest recent steps (down at once, up 10 dB/s), and louder than ``level_db``.

Hiss *sustained* for ``sustain`` seconds (24 ms) counts, so a click, a keystroke or a bump
of the microphone (a few ms) never does, while an 's' of ~100 ms does within its first
frames. A hiss longer than ``longest`` (0.3 s: no word opens on that much of it) stops
counting until it ends. The turn detector treats a frame with sustained hiss like one
that rose over ``onset_threshold``: with ``BargeInSettings.pause_on_rise`` the reply pauses
there, and resumes after ``rise_hold`` if no speech follows. Other unvoiced openings ('f',
'k', 'h', 'sh' in most voices) tilt low and are left to the VAD.

A telephone line (8 kHz, G.711: the phone path) carries nothing over 4 kHz, so the
wideband split never sees an 's' there. With ``band="telephone"`` the detector takes every
other sample of the 16 kHz input (the line's own 8 kHz samples: nothing lies above 4 kHz
to alias) and applies the same two filters at 8 kHz, where they cross at 2 kHz: the part
of an 's' the line keeps (2.5 to 3.4 kHz) tilts high there, white line noise does not
(0 dB), breath, hum and voiced speech tilt low. On a telephone line 'sh' and the 'f' of
some voices tilt high too; they open words as well (``benchmarks/phone_onset.py``
measures the cue on voices that are not the bundled one, and noise, through μ-law).

Deterministic: audio time only, the same samples give the same answer in any chunking.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

from ..audio import STT_SAMPLE_RATE

__all__ = ["HissBand", "HissDetector"]

HissBand = Literal["wide", "telephone"]
"""The input's band: ``wide`` (16 kHz audio, split at 4 kHz) or ``telephone`` (audio
from an 8 kHz line upsampled to 16 kHz, split at 2 kHz)."""

_STEP = 128  # samples: 8 ms at 16 kHz
_FLOOR_MIN_DB = -100.0  # digital silence is this quiet, not -inf
_FLOOR_RISE_DB_PER_S = 10.0


class HissDetector:
    """Sustained high-frequency noise over the recent floor, frame by frame.

    Args:
        rise_db: how far over the floor (dB) a step must be to be hiss.
        level_db: how loud (dBFS of the first difference) a step must be at least.
        tilt_db: how much louder (dB) its high half must be than its low half.
        sustain: seconds of consecutive hiss steps that count.
        longest: seconds of consecutive hiss steps after which they count no more.
        band: ``wide``, or ``telephone`` for audio that came over an 8 kHz line (see
            the module).

    Raises:
        ValueError: a setting is out of range or not finite, or ``band`` is unknown.
    """

    def __init__(self, rise_db: float = 12.0, level_db: float = -55.0, tilt_db: float = 1.5,
                 sustain: float = 0.024, longest: float = 0.3, band: HissBand = "wide",
                 ) -> None:
        if band not in ("wide", "telephone"):
            raise ValueError(f"band must be 'wide' or 'telephone', got {band!r}")
        for name, value, low, high in (("rise_db", rise_db, 0.0, 80.0),
                                       ("tilt_db", tilt_db, -40.0, 40.0),
                                       ("level_db", level_db, -100.0, 0.0),
                                       ("sustain", sustain, 0.0, 1.0),
                                       ("longest", longest, 0.0, 10.0)):
            if not isinstance(value, int | float) or isinstance(value, bool) or not (
                    math.isfinite(value) and low <= value <= high):
                raise ValueError(f"{name} must be a number from {low} to {high}, got {value!r}")
        self.rise_db = float(rise_db)
        self.level_db = float(level_db)
        self.tilt_db = float(tilt_db)
        self.band: HissBand = band
        self._stride = 2 if band == "telephone" else 1  # (8 kHz: every other sample)
        self._sustain_steps = max(1, math.ceil(sustain * STT_SAMPLE_RATE / _STEP))
        self._longest_steps = max(self._sustain_steps, round(longest * STT_SAMPLE_RATE / _STEP))
        self._up = _FLOOR_RISE_DB_PER_S * _STEP / STT_SAMPLE_RATE
        self.reset()

    def reset(self) -> None:
        """Forget the floor and the run (a new stream)."""
        self._floor: float | None = None
        self._run = 0
        self._last = 0.0  # the last sample seen (the difference across a step boundary)
        self._pending = np.zeros(0, np.float32)

    def push(self, frame: NDArray[Any]) -> bool:
        """Feed the next samples (any length); True if hiss was sustained in them (the
        run reached ``sustain`` in one of their steps, or goes on from an earlier one).

        Raises:
            ValueError: a sample is NaN or infinite (nothing changed).
        """
        data = np.asarray(frame, dtype=np.float32).reshape(-1)
        if not np.isfinite(data).all():
            raise ValueError("samples must be finite: NaN or infinity found")
        if self._pending.size:
            data = np.concatenate([self._pending, data])
        count = data.size // _STEP
        self._pending = data[count * _STEP:].copy()
        if count == 0:
            return False
        # (steps start at multiples of _STEP in the stream, so the stride keeps its phase)
        steps = data[: count * _STEP : self._stride].astype(np.float64)
        before = np.concatenate(([self._last], steps[:-1]))
        self._last = float(steps[-1])
        size = _STEP // self._stride
        high = np.mean(np.square(steps - before).reshape(count, size), axis=1)
        low = np.mean(np.square(steps + before).reshape(count, size), axis=1)
        levels = 10.0 * np.log10(high + 1e-12)
        tilts = 10.0 * np.log10((high + 1e-12) / (low + 1e-12))
        sustained = False
        for level, tilt in zip(levels.tolist(), tilts.tolist(), strict=True):
            floor = self._floor if self._floor is not None else level
            if level >= max(floor + self.rise_db, self.level_db) and tilt >= self.tilt_db:
                self._run += 1
                sustained = sustained or (
                    self._sustain_steps <= self._run <= self._longest_steps)
            else:
                self._run = 0
            self._floor = max(_FLOOR_MIN_DB, min(level, floor + self._up))
        return sustained

    def __repr__(self) -> str:
        return (f"HissDetector(rise_db={self.rise_db}, level_db={self.level_db}, "
                f"tilt_db={self.tilt_db}, band={self.band!r}, sustain_steps={self._sustain_steps})")
