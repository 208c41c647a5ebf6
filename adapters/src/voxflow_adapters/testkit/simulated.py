"""A simulated client: scripted user speech in, assistant audio played out at 1x.

:class:`SimulatedClient` implements :class:`~voxflow_voice.transport.AudioTransport`.
One tick task drives both directions in 20 ms steps on the session's clock:

* *in*: the microphone frame is the scripted user speech (plus optional noise and an
  echo of what the assistant is playing), or silence while muted;
* *out*: 20 ms of reply audio is pulled from a :class:`~voxflow_voice.speak.playout.PlayoutQueue`
  (chunks are resampled whole to 16 kHz when written), a :class:`PlaybackReceipt` per piece is
  reported (exactly like a real client), and everything is written to a :class:`Tape`.

With a :class:`~voxflow.clock.MonotonicClock` the call runs in real time (latency
figures); with a :class:`~voxflow.clock.VirtualClock` (``autojump=True``) it runs in
deterministic audio time, so the same script gives the same event log on any machine.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray
from voxflow_voice.audio import STT_SAMPLE_RATE, AudioChunk, ReplyChunk, resample
from voxflow_voice.listen.input_guard import InputGuard, InputStatistics
from voxflow_voice.speak.playout import PlayoutQueue
from voxflow_voice.transport import (
    ClientObservation,
    MuteChanged,
    PlaybackReceipt,
)

from voxflow.clock import Clock
from voxflow.ids import DeliveryId

from .script import CallScript, RenderedScript, ScriptedStep

__all__ = ["SimulatedClient", "StepOutcome", "Tape"]

logger = logging.getLogger(__name__)

FRAME_SECONDS = 0.02
_FRAME_IN = int(STT_SAMPLE_RATE * FRAME_SECONDS)


@dataclass(slots=True)
class Tape:
    """Everything that crossed the simulated client, on the call's clock.

    Attributes:
        user: the user's clean speech at 16 kHz (left channel of a call recording).
        mic: what the microphone sent (speech, noise, echo) at 16 kHz.
        heard: the assistant audio as the user heard it, at 16 kHz.
        receipts: every playback receipt sent, in order.
        flushes: (clock time, delivery, samples dropped) for every flush.
        pauses: (clock time, delivery, ``"pause"``/``"resume"``) for every pause and resume.
        played_after_flush: samples of a delivery played after its flush (must be 0).
        start: clock time of the first tick.
    """

    user: list[NDArray[np.float32]] = field(default_factory=list)
    mic: list[NDArray[np.float32]] = field(default_factory=list)
    heard: list[NDArray[np.float32]] = field(default_factory=list)
    receipts: list[PlaybackReceipt] = field(default_factory=list)
    flushes: list[tuple[float, DeliveryId, int]] = field(default_factory=list)
    pauses: list[tuple[float, DeliveryId, str]] = field(default_factory=list)
    played_after_flush: dict[DeliveryId, int] = field(default_factory=dict)
    start: float = 0.0

    def track(self, name: str) -> NDArray[np.float32]:
        """One track (``user``, ``mic`` or ``heard``) as a single array."""
        frames: list[NDArray[np.float32]] = getattr(self, name)
        return np.concatenate(frames) if frames else np.zeros(0, np.float32)

    def stereo(self) -> NDArray[np.float32]:
        """(n, 2) float array: the user on the left, the assistant as heard on the right."""
        left, right = self.track("user"), self.track("heard")
        n = max(left.size, right.size)
        out = np.zeros((n, 2), np.float32)
        out[: left.size, 0] = left
        out[: right.size, 1] = right
        return out

    def heard_seconds(self, delivery_id: DeliveryId) -> float:
        """Seconds of ``delivery_id`` the user heard."""
        return sum(r.num_samples / r.sample_rate for r in self.receipts
                   if r.delivery_id == delivery_id)

    def stale_samples(self) -> int:
        """Samples of any delivery played after that delivery was flushed."""
        return sum(self.played_after_flush.values())


@dataclass(slots=True)
class StepOutcome:
    """What became of one reactive step of the script (times: s since the call started).

    Attributes:
        number: the step's place in the script (1 for the first ``then_...``).
        step: the step as written.
        armed_at: when it started waiting for its reply (None: never armed, a step
            before it could not happen).
        trigger_at: when the reply it waited for started (``reply_start``) or ran dry
            (``reply_end``); None if it fired on its ``max_wait``, or never fired.
        fired_at: when it fired (its speech or mute begins one frame later); None if
            it could not happen.
        missed: why it could not happen when it said; None if it did.
        missed_at: when the call gave it up (None for a step never armed).
    """

    number: int
    step: ScriptedStep
    armed_at: float | None = None
    trigger_at: float | None = None
    fired_at: float | None = None
    missed: str | None = None
    missed_at: float | None = None

    def describe(self) -> str:
        """``script step N, then_says("...", after=..., gap=...)``."""
        return f"script step {self.number}, {self.step.describe()}"


class SimulatedClient:
    """A scripted caller that speaks, listens at 1x and reports what it heard.

    Args:
        script: what the user says and does (rendered once with :meth:`render`).
        clock: the call's clock (virtual for deterministic runs).
        lead: seconds of reply audio the client buffers ahead of playout.
        tail: seconds the call goes on after the script's last event.
        max_duration: the call ends by then whatever the steps wait for.
        answer_wait: how long a step waits for its reply to start (a step without a
            ``max_wait`` whose reply did not start by then could not happen: the call
            ends, :meth:`steps` says why); after the last step, how long to wait for a
            reply to start.
    """

    def __init__(
        self, script: CallScript, *, clock: Clock, lead: float = 0.5, tail: float = 3.0,
        max_duration: float = 300.0, answer_wait: float = 10.0,
    ) -> None:
        if not isinstance(script, CallScript):
            raise TypeError(f"script must be a CallScript, got {type(script).__name__}")
        if lead <= 0:
            raise ValueError("lead must be > 0")
        if tail < 0:
            raise ValueError("tail must be >= 0")
        if not answer_wait > 0:
            raise ValueError("answer_wait must be > 0")
        self.script = script
        self.clock = clock
        self.tape = Tape()
        self._lead = lead
        self._tail = tail
        self._rendered: RenderedScript | None = None
        self._playout = PlayoutQueue(clock=clock, rate=STT_SAMPLE_RATE)
        self._input: asyncio.Queue[AudioChunk | None] = asyncio.Queue()
        self._guard = InputGuard()
        self._observations: asyncio.Queue[ClientObservation | None] = asyncio.Queue()
        self._writable = asyncio.Event()
        self._writable.set()
        self._was_playing: DeliveryId | None = None
        self._echo: deque[NDArray[np.float32]] = deque()
        self._muted = False
        self._mute_switch = False  # set_muted: the user's own mute button
        self._ticker: asyncio.Task[None] | None = None
        self._steps: _StepRunner | None = None
        self._active_tick = 0  # the last tick that played reply audio
        self._max_duration = max_duration
        self._answer_wait = answer_wait
        self.finished = asyncio.Event()

    async def render(self, tts: Any | None = None) -> None:
        """Render the script's utterances to 16 kHz audio (text needs a ``tts``)."""
        self._rendered = await self.script.render(tts)

    # -- AudioTransport -----------------------------------------------------------

    async def audio_input(self) -> AsyncIterator[AudioChunk]:
        """Microphone frames (16 kHz mono, 20 ms) until the script ends."""
        while True:
            chunk = await self._input.get()
            if chunk is None:
                return
            yield chunk

    async def wait_writable(self) -> None:
        """Wait until less than ``lead`` seconds of reply audio is queued."""
        while self._playout.queued_seconds >= self._lead:
            self._writable.clear()
            await self._writable.wait()

    def write_nowait(self, chunk: ReplyChunk) -> None:
        """Queue a reply chunk for playout (at 16 kHz, the rate the user hears)."""
        # Each chunk is resampled whole, so its 16 kHz samples map back to its own
        # samples exactly (receipts) and every frame stays aligned to its tick.
        self._playout.put(chunk, resample(chunk.samples(), chunk.sample_rate, STT_SAMPLE_RATE))

    def flush(self, delivery_id: DeliveryId) -> int:
        """Drop every queued chunk of ``delivery_id`` now."""
        dropped = self._playout.flush(delivery_id)
        self._wake_writer()
        self.tape.flushes.append((self.clock.now(), delivery_id, dropped))
        return dropped

    def pause(self, delivery_id: DeliveryId) -> bool:
        """Hold ``delivery_id``'s playout from the next frame on; its queued audio stays."""
        if not self._playout.pause(delivery_id):
            return False
        self.tape.pauses.append((self.clock.now(), delivery_id, "pause"))
        return True

    def resume(self, delivery_id: DeliveryId) -> bool:
        """Play on from the sample where ``delivery_id`` paused."""
        if not self._playout.resume(delivery_id):
            return False
        self.tape.pauses.append((self.clock.now(), delivery_id, "resume"))
        return True

    async def observations(self) -> AsyncIterator[ClientObservation]:
        """Receipts, drains and mute changes, in order."""
        while True:
            item = await self._observations.get()
            if item is None:
                return
            yield item

    def set_muted(self, muted: bool) -> None:
        """Mute or unmute the microphone from the next tick on, as the user's own button
        (besides the script's mutes); the change is observed as a :class:`MuteChanged`."""
        if not isinstance(muted, bool):
            raise TypeError(f"muted must be a bool, got {type(muted).__name__}")
        self._mute_switch = muted

    # -- the call -----------------------------------------------------------------

    async def __aenter__(self) -> SimulatedClient:
        if self._rendered is None:
            await self.render()
        self._ticker = asyncio.create_task(self._tick_loop(), name="SimulatedClient.tick")
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop the call (idempotent): input and observations end."""
        if self._ticker is not None:
            self._ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ticker
            self._ticker = None
        self._end_streams()

    def _end_streams(self) -> None:
        self._input.put_nowait(None)
        self._observations.put_nowait(None)
        self.finished.set()

    async def _tick_loop(self) -> None:
        assert self._rendered is not None
        rendered = self._rendered
        timed_ticks = round(rendered.duration / FRAME_SECONDS)
        tail_ticks = round(self._tail / FRAME_SECONDS)
        max_ticks = round(self._max_duration / FRAME_SECONDS)
        answer_ticks = round(self._answer_wait / FRAME_SECONDS)
        start = self.clock.now()
        self.tape.start = start
        # The steps begin after the timed part of the script, not at until(): a step
        # armed after the reply it waits for would wait for one that never comes.
        steps = self._steps = _StepRunner(
            rendered, start_tick=round(rendered.steps_from / FRAME_SECONDS),
            answer_ticks=answer_ticks,
        )
        tick = 0
        try:
            while tick < max_ticks:
                # The call ends `tail` after the script is done *and* the assistant fell
                # silent, so the last reply is heard whole. A reply still being prepared
                # (STT on a slow machine) is waited for up to `answer_wait` (not after a
                # step that could not happen: nothing it said is to be answered).
                done = max(timed_ticks, max_ticks if steps.done_tick is None else steps.done_tick)
                last = max(done, self._active_tick)
                if tick >= last + tail_ticks and (
                    self._active_tick > done or tick >= done + answer_ticks
                    or not steps.steps or steps.gave_up
                ):
                    break
                target = start + tick * FRAME_SECONDS
                delay = target - self.clock.now()
                if delay > 0:
                    await self.clock.sleep(delay)
                self._tick(tick, rendered)
                tick += 1
        finally:
            steps.close(tick, max_ticks)
            self._end_streams()

    def _tick(self, tick: int, rendered: RenderedScript) -> None:
        now = self.clock.now()
        begin = tick * _FRAME_IN
        t = tick * FRAME_SECONDS
        steps = self._steps
        assert steps is not None
        muted = rendered.muted_at(t) or steps.muted(tick) or self._mute_switch
        if muted != self._muted:
            self._muted = muted
            self._observations.put_nowait(MuteChanged(muted=muted, at=now))
        heard = self._play(now)
        if self._was_playing is not None:
            self._active_tick = tick
        steps.observe(tick, playing=self._was_playing is not None)
        user = rendered.user[begin : begin + _FRAME_IN]
        if user.size < _FRAME_IN:
            user = np.pad(user, (0, _FRAME_IN - user.size))
        user = user + steps.speech(tick)
        self.tape.user.append(user)
        self.tape.heard.append(heard)
        mic = user.copy()
        if rendered.noise > 0:
            mic += rendered.noise_frame(tick, _FRAME_IN)
        if rendered.echo_gain > 0:
            self._echo.append(heard)
            if len(self._echo) > rendered.echo_delay_frames:
                mic += rendered.echo_gain * self._echo.popleft()
        if muted:
            mic = np.zeros(_FRAME_IN, np.float32)
        mic = np.clip(mic, -1.0, 1.0).astype(np.float32)
        self.tape.mic.append(mic)
        chunk = self._guard.convert(mic, STT_SAMPLE_RATE)  # validated like a real device's
        if chunk is not None:
            self._input.put_nowait(chunk)

    def _play(self, now: float) -> NDArray[np.float32]:
        """Play one frame of queued reply audio; return it at 16 kHz."""
        pulled = self._playout.pull(_FRAME_IN, at=now)
        for receipt in pulled.receipts:
            self.tape.receipts.append(receipt)
            self._observations.put_nowait(receipt)
            self._was_playing = receipt.delivery_id
        if pulled.drained is not None:
            self._observations.put_nowait(pulled.drained)
            self._was_playing = None
        self.tape.played_after_flush = dict(self._playout.stale)
        self._wake_writer()
        return pulled.samples

    def _wake_writer(self) -> None:
        if self._playout.queued_seconds < self._lead:
            self._writable.set()

    def input_statistics(self) -> InputStatistics:
        """The microphone frames the audio boundary dropped or zeroed (NaN, bad shapes)."""
        return self._guard.statistics()

    def step_log(self) -> list[tuple[float, str, str]]:
        """(call time, action, text) of every reactive step that fired, in order."""
        return list(self._steps.log) if self._steps is not None else []

    def steps(self) -> list[StepOutcome]:
        """What became of each reactive step of the script, in order: when it was armed,
        what it waited for and when that came, when it fired, or why it could not happen
        when it said (``missed``). Empty before the call started."""
        if self._steps is None:
            return []
        return [dataclasses.replace(o) for o in self._steps.outcomes]

    def __repr__(self) -> str:
        return (
            f"SimulatedClient(queued={self._playout.queued_seconds:.2f}s, "
            f"receipts={len(self.tape.receipts)}, muted={self._muted})"
        )


class _StepRunner:
    """Fires a script's reactive steps from what the client hears, tick by tick, and
    records what became of each (:class:`StepOutcome`)."""

    def __init__(self, rendered: RenderedScript, *, start_tick: int, answer_ticks: int) -> None:
        self.steps = list(rendered.steps)
        self.outcomes = [StepOutcome(i, r.step) for i, r in enumerate(self.steps, 1)]
        self._index = 0
        self._armed = start_tick  # the tick the current step was armed at
        self._answer_ticks = answer_ticks
        self._started: int | None = None  # first playing tick since arming
        self._drained: int | None = None  # first silent tick after that playback
        self._speech: tuple[int, NDArray[np.float32]] | None = None  # (start tick, audio)
        self._mute: tuple[int, int] | None = None  # [start, end) ticks
        self.done_tick: int | None = start_tick if not self.steps else None
        self.gave_up = False  # a step could not happen: the rest never will
        self.log: list[tuple[float, str, str]] = []

    def observe(self, tick: int, *, playing: bool) -> None:
        """Track the assistant's playback, then fire the current step if it is due."""
        if tick < self._armed or self._index >= len(self.steps) or self.gave_up:
            return
        outcome = self.outcomes[self._index]
        if outcome.armed_at is None:
            outcome.armed_at = tick * FRAME_SECONDS
        if playing:
            if self._started is None:
                self._started = tick
            self._drained = None
        elif self._started is not None and self._drained is None:
            self._drained = tick
        step = self.steps[self._index].step
        gap = round(step.gap / FRAME_SECONDS)
        trigger = self._started if step.after == "reply_start" else self._drained
        if trigger is not None:
            if tick - trigger >= gap:
                outcome.trigger_at = trigger * FRAME_SECONDS
                self._fire(tick)
        elif self._started is None:  # no reply yet
            waited = tick - self._armed
            if step.max_wait is not None:
                if waited >= round(step.max_wait / FRAME_SECONDS):
                    self._fire(tick)  # as written: "or after max_wait"
            elif waited >= self._answer_ticks:
                self._give_up(tick, (
                    f"no reply started within {self._answer_ticks * FRAME_SECONDS:.1f} s "
                    f"after it was armed at {outcome.armed_at:.2f} s"
                ))

    def _fire(self, tick: int) -> None:
        rendered = self.steps[self._index]
        step = rendered.step
        self.outcomes[self._index].fired_at = tick * FRAME_SECONDS
        self.log.append((tick * FRAME_SECONDS, step.action, step.text or ""))
        if step.action == "say":
            self._speech = (tick + 1, rendered.speech)
            end = tick + 1 + -(-rendered.speech.size // _FRAME_IN)
        else:
            end = tick + 1 + round(step.duration / FRAME_SECONDS)
            self._mute = (tick + 1, end)
        self._index += 1
        self._armed, self._started, self._drained = end, None, None
        if self._index >= len(self.steps):
            self.done_tick = end

    def _give_up(self, tick: int, reason: str) -> None:
        """The current step cannot happen when it says: neither can the ones after it."""
        current = self.outcomes[self._index]
        current.missed, current.missed_at = reason, tick * FRAME_SECONDS
        for later in self.outcomes[self._index + 1 :]:
            later.missed = f"never armed: script step {self._index + 1} before it could not happen"
        self._index = len(self.steps)
        self.done_tick, self.gave_up = tick, True

    def close(self, tick: int, max_ticks: int) -> None:
        """The call ended at ``tick``: a step still waiting could not happen."""
        if self._index >= len(self.steps) or self.gave_up:
            return
        limit = " (its max_duration)" if tick >= max_ticks else ""
        outcome = self.outcomes[self._index]
        if outcome.armed_at is None:
            self._give_up(tick, f"the call ended at {tick * FRAME_SECONDS:.2f} s{limit}, "
                                "before the step was armed")
            return
        waiting = ("the reply's audio to start" if self._started is None
                   else "the reply's audio to end" if self._drained is None else "its gap")
        self._give_up(tick, f"the call ended at {tick * FRAME_SECONDS:.2f} s{limit} while it "
                            f"waited for {waiting} (armed at {outcome.armed_at:.2f} s)")

    def speech(self, tick: int) -> NDArray[np.float32]:
        """The reactive speech of this tick's frame (zeros when none)."""
        frame = np.zeros(_FRAME_IN, np.float32)
        if self._speech is not None:
            start, audio = self._speech
            offset = (tick - start) * _FRAME_IN
            if 0 <= offset < audio.size:
                piece = audio[offset : offset + _FRAME_IN]
                frame[: piece.size] = piece
        return frame

    def muted(self, tick: int) -> bool:
        """Whether a reactive mute covers this tick."""
        return self._mute is not None and self._mute[0] <= tick < self._mute[1]
