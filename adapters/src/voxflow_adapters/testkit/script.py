"""Call scripts: what a simulated user says and does, and when.

A :class:`CallScript` is a small timeline (``user_says`` at t, ``mute`` from t1 to t2,
background noise, an echo of the assistant). :meth:`CallScript.render` turns it into
16 kHz audio once; the simulated client then plays it frame by frame.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol

import numpy as np
from numpy.typing import NDArray
from voxflow_voice.audio import STT_SAMPLE_RATE, AudioChunk, read_wav, resample
from voxflow_voice.engines import SpokenSentence

__all__ = [
    "CallScript",
    "RenderedScript",
    "RenderedStep",
    "ScriptedStep",
    "ScriptedUtterance",
    "Trigger",
]


class _Synthesizer(Protocol):
    @property
    def sample_rate(self) -> int: ...

    def synthesize(self, text: str) -> Iterator[SpokenSentence]: ...


@dataclass(frozen=True, slots=True)
class ScriptedUtterance:
    """One thing the user says.

    Attributes:
        at: call time (s) at which the user starts speaking.
        text: what is said (synthesized with the bundled voice unless ``audio`` is given);
            also the expected transcript.
        audio: the recorded utterance, if not synthesized.
        gain: loudness factor applied to the speech.
    """

    at: float
    text: str | None = None
    audio: AudioChunk | None = None
    gain: float = 1.0


Trigger = Literal["reply_end", "reply_start"]


@dataclass(frozen=True, slots=True)
class ScriptedStep:
    """A step that waits for the assistant instead of a fixed time.

    Steps run one after the other, after the timed part of the script (the last
    ``user_says`` utterance's end and the last ``mute``'s; ``until`` only keeps the call
    going). The first step is *armed* there, each next one when the previous one
    finished (its speech ended, or its mute was lifted), and it fires:

    * ``after="reply_end"``: ``gap`` s after the assistant's audio, started since the
      step was armed, ran dry;
    * ``after="reply_start"``: ``gap`` s after the assistant's audio started (since
      arming): a barge-in when the step speaks.

    A step whose reply never started cannot happen when it says: unless it has a
    ``max_wait`` (then it fires ``max_wait`` s after arming, as written), the call gives
    it up (the simulated client's ``answer_wait``, 10 s), ends, and
    :func:`~voxflow_adapters.testkit.scenario.run_call` raises
    :class:`~voxflow_adapters.testkit.assertions.ScriptStepError` naming it.

    Attributes:
        action: ``say`` (``text``/``audio``) or ``mute`` (for ``duration`` s).
        max_wait: fire this long after arming if no reply started by then (None: the
            reply must come).
    """

    action: Literal["say", "mute"]
    after: Trigger
    gap: float
    text: str | None = None
    audio: AudioChunk | None = None
    duration: float = 0.0
    max_wait: float | None = None

    def describe(self) -> str:
        """The step as it was written: ``then_says("Stop.", after="reply_start", gap=2.0)``."""
        if self.action == "say":
            what = [f'"{self.text}"' if self.text is not None else ""]
            if self.audio is not None:
                what.append(f"audio=<{self.audio.duration:.2f} s>")
            head = ", ".join(w for w in what if w)
            name = "then_says"
        else:
            head, name = repr(self.duration), "then_mutes"
        tail = f'after="{self.after}", gap={self.gap!r}'
        if self.max_wait is not None:
            tail += f", max_wait={self.max_wait!r}"
        return f"{name}({head}, {tail})"


@dataclass(frozen=True, slots=True)
class RenderedStep:
    """A step with its speech rendered at 16 kHz (empty for a mute)."""

    step: ScriptedStep
    speech: NDArray[np.float32]


@dataclass(frozen=True, slots=True)
class RenderedScript:
    """A script as audio: the user's track, and the rest of the timeline."""

    user: NDArray[np.float32]
    utterances: tuple[tuple[ScriptedUtterance, float, float], ...]  # (utterance, start, end)
    mutes: tuple[tuple[float, float], ...]
    noise: float
    echo_gain: float
    echo_delay_frames: int
    duration: float
    seed: int
    steps: tuple[RenderedStep, ...] = ()
    steps_from: float = 0.0
    """Call time the first step is armed at: the end of the last utterance or mute."""

    def muted_at(self, t: float) -> bool:
        """Whether the microphone is muted at call time ``t``."""
        return any(a <= t < b for a, b in self.mutes)

    def noise_frame(self, tick: int, size: int) -> NDArray[np.float32]:
        """Deterministic white noise for one frame (same tick, same noise)."""
        rng = np.random.default_rng((self.seed, tick))
        return (rng.standard_normal(size) * self.noise).astype(np.float32)


@dataclass(slots=True)
class CallScript:
    """A simulated user's timeline.

    Example::

        script = (CallScript()
                  .user_says(0.5, "What time is it?")
                  .user_says(6.0, "Stop, please.")
                  .mute(9.0, 12.0))
    """

    utterances: list[ScriptedUtterance] = field(default_factory=list)
    mutes: list[tuple[float, float]] = field(default_factory=list)
    noise: float = 0.0
    echo_gain: float = 0.0
    echo_delay: float = 0.04
    seed: int = 0
    end_at: float | None = None
    steps: list[ScriptedStep] = field(default_factory=list)

    def user_says(
        self, at: float, text: str | None = None, *, audio: AudioChunk | str | Path | None = None,
        gain: float = 1.0,
    ) -> CallScript:
        """The user starts saying ``text`` (or playing ``audio``, a chunk or WAV path) at ``at``."""
        if not isinstance(at, int | float) or at < 0:
            raise ValueError(f"at must be a time >= 0, got {at!r}")
        if text is None and audio is None:
            raise ValueError("user_says needs text, audio, or both")
        if text is not None and (not isinstance(text, str) or not text.strip()):
            raise ValueError("text must be a non-empty string")
        if gain <= 0:
            raise ValueError("gain must be > 0")
        chunk = read_wav(audio) if isinstance(audio, str | Path) else audio
        self.utterances.append(ScriptedUtterance(float(at), text, chunk, gain))
        return self

    def then_says(
        self, text: str | None = None, *, audio: AudioChunk | str | Path | None = None,
        after: Trigger = "reply_end", gap: float = 0.8, max_wait: float | None = None,
    ) -> CallScript:
        """Then the user says ``text`` once the assistant has answered (see
        :class:`ScriptedStep`); ``after="reply_start"`` speaks over the reply;
        ``max_wait``: or that long after the previous step if no reply started."""
        if text is None and audio is None:
            raise ValueError("then_says needs text, audio, or both")
        if text is not None and (not isinstance(text, str) or not text.strip()):
            raise ValueError("text must be a non-empty string")
        _check_step(after, gap, max_wait)
        chunk = read_wav(audio) if isinstance(audio, str | Path) else audio
        self.steps.append(ScriptedStep("say", after, float(gap), text, chunk,
                                       max_wait=_seconds_or_none(max_wait)))
        return self

    def then_mutes(
        self, duration: float, *, after: Trigger = "reply_start", gap: float = 0.5,
        max_wait: float | None = None,
    ) -> CallScript:
        """Then the user mutes the microphone for ``duration`` s (see :class:`ScriptedStep`)."""
        if not duration > 0:
            raise ValueError("duration must be > 0")
        _check_step(after, gap, max_wait)
        self.steps.append(ScriptedStep("mute", after, float(gap), duration=float(duration),
                                       max_wait=_seconds_or_none(max_wait)))
        return self

    def mute(self, start: float, end: float) -> CallScript:
        """The user mutes the microphone from ``start`` to ``end`` (call time, s)."""
        if not 0 <= start < end:
            raise ValueError(f"mute needs 0 <= start < end, got {start!r}, {end!r}")
        self.mutes.append((float(start), float(end)))
        return self

    def with_noise(self, rms: float, *, seed: int = 0) -> CallScript:
        """Add white background noise of ``rms`` amplitude to the microphone."""
        if not 0 <= rms < math.inf:
            raise ValueError(f"rms must be a finite amplitude >= 0, got {rms!r}")
        self.noise, self.seed = float(rms), seed
        return self

    def with_echo(self, gain: float, delay: float = 0.04) -> CallScript:
        """Feed the assistant's played audio back into the microphone (speakers)."""
        if not (0 <= gain < math.inf and 0 <= delay < math.inf):
            raise ValueError(f"gain and delay must be finite and >= 0, got {gain!r}, {delay!r}")
        self.echo_gain, self.echo_delay = float(gain), float(delay)
        return self

    def until(self, end_at: float) -> CallScript:
        """Keep the call going until ``end_at`` even after the last utterance (and the
        last step); it never delays a step."""
        if end_at <= 0:
            raise ValueError("end_at must be > 0")
        self.end_at = float(end_at)
        return self

    async def render(self, tts: _Synthesizer | None = None) -> RenderedScript:
        """Synthesize text utterances (with ``tts``) and lay everything on one track."""
        placed: list[tuple[ScriptedUtterance, NDArray[np.float32]]] = []
        for utt in sorted(self.utterances, key=lambda u: u.at):
            if utt.audio is not None:
                samples = resample(utt.audio.samples(), utt.audio.sample_rate, STT_SAMPLE_RATE)
            else:
                if tts is None:
                    raise ValueError("text utterances need a tts to render them")
                assert utt.text is not None
                samples = await asyncio.to_thread(_synthesize, tts, utt.text)
            placed.append((utt, samples * utt.gain))
        ends = [u.at + s.size / STT_SAMPLE_RATE for u, s in placed]
        mute_ends = [b for _, b in self.mutes]
        steps_from = max([0.0, *ends, *mute_ends])  # until() keeps the call, not the steps
        duration = max(steps_from, self.end_at or 0.0)
        track = np.zeros(int(np.ceil(duration * STT_SAMPLE_RATE)) + 1, np.float32)
        spans = []
        for (utt, samples), end in zip(placed, ends, strict=True):
            begin = round(utt.at * STT_SAMPLE_RATE)
            track[begin : begin + samples.size] += samples[: track.size - begin]
            spans.append((utt, utt.at, end))
        steps = []
        for step in self.steps:
            speech = np.zeros(0, np.float32)
            if step.action == "say":
                if step.audio is not None:
                    speech = resample(step.audio.samples(), step.audio.sample_rate,
                                      STT_SAMPLE_RATE)
                else:
                    if tts is None:
                        raise ValueError("text steps need a tts to render them")
                    assert step.text is not None
                    speech = await asyncio.to_thread(_synthesize, tts, step.text)
            steps.append(RenderedStep(step, speech))
        return RenderedScript(
            steps=tuple(steps),
            user=track,
            utterances=tuple(spans),
            mutes=tuple(sorted(self.mutes)),
            noise=self.noise,
            echo_gain=self.echo_gain,
            echo_delay_frames=round(self.echo_delay / 0.02),
            duration=duration,
            seed=self.seed,
            steps_from=steps_from,
        )


def _check_step(after: str, gap: float, max_wait: float | None) -> None:
    if after not in ("reply_end", "reply_start"):
        raise ValueError(f"after must be 'reply_end' or 'reply_start', got {after!r}")
    if isinstance(gap, bool) or not isinstance(gap, int | float) or not 0 <= gap < math.inf:
        raise ValueError(f"gap must be a number of seconds >= 0, got {gap!r}")
    if max_wait is not None and (
        isinstance(max_wait, bool) or not isinstance(max_wait, int | float)
        or not 0 < max_wait < math.inf
    ):
        raise ValueError(f"max_wait must be a number of seconds > 0 (or None), got {max_wait!r}")


def _seconds_or_none(value: float | None) -> float | None:
    return None if value is None else float(value)


def _synthesize(tts: _Synthesizer, text: str) -> NDArray[np.float32]:
    parts = [np.asarray(s.samples, np.float32) for s in tts.synthesize(text)]
    audio = np.concatenate(parts) if parts else np.zeros(0, np.float32)
    return resample(audio * 0.5, tts.sample_rate, STT_SAMPLE_RATE)
