"""Where voice to voice goes, stage by stage, for ``end_of_turn.py --v2v``.

The session's STT, end-of-turn model and TTS are wrapped so every call is stamped on the
monotonic clock (the :class:`~voxflow.clock.MonotonicClock` a real-time call runs on), and
each committed turn whose reply was heard is laid out from the user's last speech sample
on the tape (-40 dBFS): the VAD's speech end, the pause's STT (start, end), the Smart Turn
decision (start, end), the commit, the reply's first text, its first synthesized chunk and
the first sample played (audible).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

from numpy.typing import NDArray
from voice_latency import speech_span
from voxflow_voice.audio import AudioChunk, ReplyChunk
from voxflow_voice.engines import SpeechToText, SpokenSentence, TextToSpeech
from voxflow_voice.engines.end_of_turn import EndOfTurnModel
from voxflow_voice.engines.stt import Transcript
from voxflow_voice.events import AudioStarted, ReplyStarted, TurnCommitted, TurnMetrics
from voxflow_voice.session.metrics import Distribution

from voxflow.ids import DeliveryId

__all__ = ["STAGES", "StampedModel", "StampedStreamingStt", "StampedStt", "StampedTts", "Stamps",
           "stages"]


@dataclass(slots=True)
class Stamps:
    """(start, end) on the monotonic clock of every STT, model and first TTS chunk."""

    stt: list[tuple[float, float]] = field(default_factory=list)
    model: list[tuple[float, float]] = field(default_factory=list)
    tts: list[tuple[float, float]] = field(default_factory=list)  # (asked, first chunk)


class StampedStt:
    def __init__(self, inner: SpeechToText, stamps: Stamps) -> None:
        self.inner, self.stamps = inner, stamps

    async def transcribe(self, audio: AudioChunk) -> Transcript | None:
        start = time.monotonic()
        try:
            return await self.inner.transcribe(audio)
        finally:
            self.stamps.stt.append((start, time.monotonic()))


class StampedStreamingStt(StampedStt):
    """A streaming engine's wrapper (``whisper-streaming``): its partial, closing and tail
    decodes are stamped as STT calls too (the one running at the pause is the pause's)."""

    streaming = True

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def _stamped(self, fn: Any, *args: Any) -> Any:
        start = time.monotonic()
        try:
            return fn(*args)
        finally:
            self.stamps.stt.append((start, time.monotonic()))

    def decode_words(self, *args: Any) -> Any:
        return self._stamped(self.inner.decode_words, *args)  # type: ignore[attr-defined]

    def decode_tail(self, *args: Any) -> Any:
        return self._stamped(self.inner.decode_tail, *args)  # type: ignore[attr-defined]

    def decode_text(self, *args: Any) -> Any:
        return self._stamped(self.inner.decode_text, *args)  # type: ignore[attr-defined]


class StampedModel:
    def __init__(self, inner: EndOfTurnModel, stamps: Stamps) -> None:
        self.inner, self.stamps = inner, stamps

    def probability(self, audio: AudioChunk | NDArray[Any]) -> float:
        start = time.monotonic()
        try:
            return self.inner.probability(audio)
        finally:
            self.stamps.model.append((start, time.monotonic()))


class StampedTts:
    def __init__(self, inner: TextToSpeech, stamps: Stamps) -> None:
        self.inner, self.stamps = inner, stamps

    @property
    def sample_rate(self) -> int:
        return self.inner.sample_rate

    def synthesize(self, text: str) -> Iterator[SpokenSentence]:
        return self.inner.synthesize(text)

    async def stream(
        self, text: str, *, delivery_id: DeliveryId, segment_id: int
    ) -> AsyncIterator[ReplyChunk]:
        start = time.monotonic()
        first = True
        async for chunk in self.inner.stream(text, delivery_id=delivery_id,
                                             segment_id=segment_id):
            if first:
                self.stamps.tts.append((start, time.monotonic()))
                first = False
            yield chunk


STAGES = ("VAD speech end", "STT start (the pause's)", "STT end", "Smart Turn start",
          "Smart Turn end", "turn committed", "reply's first text", "TTS asked",
          "TTS first chunk", "first sample played")


def _last_before(
    spans: list[tuple[float, float]], lo: float, hi: float
) -> tuple[float, float] | None:
    """The latest (start, end) that started in [lo, hi]."""
    inside = [s for s in spans if lo <= s[0] <= hi]
    return max(inside) if inside else None


def stages(call: Any, stamps: Stamps) -> list[tuple[str, str]]:
    """Per stage, the distribution (ms after the user's last speech sample) over the
    committed turns whose reply was heard."""
    events = call.events
    tape = call.tape
    user = tape.track("user")
    spans = [(s, e) for _, s, e in call.client._rendered.utterances]
    delivery = {e.turn_id: e.delivery_id for e in events if isinstance(e, ReplyStarted)}
    audible = {e.delivery_id: e.at for e in events if isinstance(e, AudioStarted)}
    text = {m.turn_id: m.first_text for m in events if isinstance(m, TurnMetrics)}
    rows: dict[str, list[float]] = {name: [] for name in STAGES}
    for c in (e for e in events if isinstance(e, TurnCommitted)):
        turn_delivery = delivery.get(c.turn_id)
        heard = audible.get(turn_delivery) if turn_delivery is not None else None
        if heard is None:
            continue  # taken back, or never played
        end = c.speech_end_at - tape.start
        line = min(spans, key=lambda s: abs(s[1] - end))
        last = tape.start + speech_span(user, *line)[1]

        def ms(t: float, last: float = last) -> float:
            return (t - last) * 1000.0

        rows["VAD speech end"].append(ms(c.speech_end_at))
        # (the session's speech_end_at runs late while its listen loop awaits a verdict:
        # its clock anchor is the frame's processing time; the tape is the reference)
        stt = _last_before(stamps.stt, last, c.at)
        if stt is not None:
            rows["STT start (the pause's)"].append(ms(stt[0]))
            rows["STT end"].append(ms(stt[1]))
        model = _last_before(stamps.model, last, c.at)
        if model is not None:
            rows["Smart Turn start"].append(ms(model[0]))
            rows["Smart Turn end"].append(ms(model[1]))
        rows["turn committed"].append(ms(c.at))
        first = text.get(c.turn_id)
        if first is not None:
            rows["reply's first text"].append(ms(first))
        tts = [s for s in stamps.tts if s[0] >= last]
        if tts:
            rows["TTS asked"].append(ms(min(tts)[0]))
            rows["TTS first chunk"].append(ms(min(tts)[1]))
        rows["first sample played"].append(ms(heard))
    return [(f"  {name}", str(Distribution.of(values))) for name, values in rows.items()
            if values]
