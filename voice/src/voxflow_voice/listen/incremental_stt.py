"""Words while the user speaks: partial decodes during speech, the tail at the pause.

:class:`IncrementalStt` drives a streaming engine
(:class:`~voxflow_voice.engines.stt_streaming.StreamingWhisperStt`): fed every input frame
with the turn detector's state (:meth:`IncrementalStt.heard`), it decodes the audio of the
speech under way after the last cut whenever its previous decode is done and ``interval``
of new audio came, commits the words two decodes agree on
(:class:`~voxflow_voice.engines.stt_streaming.LocalAgreement`), and at the pause
(:meth:`IncrementalStt.final`) decodes only the audio after the cut. Partial decodes are
``speculative`` work on a model scheduler. When the speech pauses (the VAD's first
silent frame), one more decode covers all of it: if the user stays silent, that is the
utterance's transcript when the pause is handed out (``covered``), with nothing left to
decode; otherwise the tail after the committed words is decoded then.
:attr:`IncrementalStt.partial` is what the decodes during speech know so far
(:class:`PartialWords`: the committed and tentative words). Once the pause's decode is
done, :meth:`IncrementalStt.heard_all` (the one test of "a decode heard all the speech",
which :meth:`IncrementalStt.final` uses too) gives its words as the transcript without
waiting, for the end-of-turn verdict and the speculative reply
(:meth:`~voxflow_voice.listen.early_stt.EarlyTranscriber.pause_words`). The committed
words alone never decide a verdict: the last ``hold_back`` of the latest decode and the
audio after it may hold words that change it ("Can you book a table" of "... a table
for": a question, then an unfinished request).

:meth:`IncrementalStt.final` returns :data:`WHOLE` when the utterance must be decoded whole:
nothing committed, another utterance than the one followed, audio before the cut not
the one decoded, a tail that ran away, or no words in a tail where the VAD heard speech,
or a tail longer than one decode's window holds (``longest``: no partial decodes start
past it either).
"""

from __future__ import annotations

import asyncio
import enum
import logging
from dataclasses import dataclass
from typing import Any, Final, Protocol

import numpy as np
from numpy.typing import NDArray

from ..audio import STT_SAMPLE_RATE, AudioChunk
from ..engines.stt import Transcript
from ..engines.stt_streaming import LocalAgreement, RunawayDecode, StreamingWhisperStt
from ..scheduler import Work, scheduled
from .turn_detector import UtterancePaused, UtteranceReady

__all__ = ["NOT_HEARD", "WHOLE", "DetectorState", "IncrementalStatistics", "IncrementalStt",
           "NotHeard", "PartialWords", "Whole"]


class Whole(enum.Enum):
    """The type of :data:`WHOLE` (one member: ``said is WHOLE`` narrows the type)."""

    WHOLE = "whole"


class NotHeard(enum.Enum):
    """The type of :data:`NOT_HEARD` (one member: ``heard is NOT_HEARD`` narrows the type)."""

    NOT_HEARD = "not heard"


WHOLE: Final = Whole.WHOLE
"""What :meth:`IncrementalStt.final` returns when the utterance must be decoded whole."""

NOT_HEARD: Final = NotHeard.NOT_HEARD
"""What :meth:`IncrementalStt.heard_all` returns when no decode heard all the speech."""

_log = logging.getLogger(__name__)

_LEAD = round(0.3 * STT_SAMPLE_RATE)  # audio before the onset a first decode includes
_KEEP = 2 * STT_SAMPLE_RATE  # audio kept before the onset (the utterance's pre-roll)
_CLOSING = round(0.2 * STT_SAMPLE_RATE)  # silence after which no decode starts
_TAIL_SPEECH = round(0.25 * STT_SAMPLE_RATE)  # VAD speech after the cut that must have words


def _starts_with(text: str, prefix: str) -> bool:
    words, start = text.split(), prefix.split()
    return [_key(w) for w in words[: len(start)]] == [_key(w) for w in start]


def _key(word: str) -> str:
    return "".join(c for c in word.lower() if c.isalnum())


def _join(committed: str, tail: str) -> str:
    """The committed words and the tail's; the tail's first word in lower case when it
    goes on a sentence (Whisper capitalizes what it decodes first)."""
    first, _, rest = tail.partition(" ")
    if (committed and committed[-1] not in ".?!" and first[:1].isupper()
            and first[1:].islower() and first != "I" and not first.startswith("I'")):
        tail = f"{first.lower()} {rest}".rstrip()
    return f"{committed} {tail}"


class DetectorState(Protocol):
    """What the partial decodes read of the turn detector
    (:class:`~voxflow_voice.listen.turn_detector.TurnDetector` is one), in samples of
    the input stream."""

    @property
    def active_onset(self) -> int | None:
        """The onset sample of the speech being heard or of the utterance still open;
        ``None`` when idle."""

    @property
    def speech_end(self) -> int:
        """The sample after the latest speech frame."""

    @property
    def position(self) -> int:
        """Input samples scored so far."""


@dataclass(frozen=True, slots=True)
class PartialWords:
    """The words of the speech under way known so far.

    Attributes:
        onset_sample: the utterance's onset (the detector's ``active_onset``).
        committed: the words the latest two decodes agree on (taken back only if the
            next two do not: rarely, counted as a revision).
        tentative: the latest decode's words after them (they may change).
        upto_sample: the end of the audio the latest decode covered.
    """

    onset_sample: int
    committed: str
    tentative: str
    upto_sample: int

    @property
    def text(self) -> str:
        """The committed and tentative words together."""
        return " ".join(t for t in (self.committed, self.tentative) if t)


@dataclass(frozen=True, slots=True)
class IncrementalStatistics:
    """How the incremental path went.

    Attributes:
        partial_decodes: decodes run during speech.
        tails: utterances finished by a tail decode.
        whole: utterances decoded whole instead (see :data:`WHOLE`).
        tail_seconds: audio decoded at the pause by the tails, in total.
        covered: utterances whose last partial decode had heard all the speech (it
            started when the speech paused): nothing decoded at the pause.
    """

    partial_decodes: int
    tails: int
    whole: int
    tail_seconds: float
    covered: int = 0


class IncrementalStt:
    """Follows one input stream's speech with a streaming engine (see the module doc).

    Args:
        stt: the streaming engine.
        call: the call its work is queued for on a model scheduler.
    """

    def __init__(self, stt: StreamingWhisperStt, *, call: str = "") -> None:
        self._stt = stt
        self._call = str(call)
        self._interval = round(stt.settings.interval * STT_SAMPLE_RATE)
        self._hold_back = round(stt.settings.hold_back * STT_SAMPLE_RATE)
        self._longest = round(stt.longest * STT_SAMPLE_RATE)
        self._frames: list[NDArray[np.float32]] = []
        self._start = 0  # input sample of self._frames[0]
        self._fed = 0  # input samples seen
        self._agreement: LocalAgreement | None = None
        self._decoded_to = 0
        self._task: asyncio.Task[None] | None = None
        self._task_end = 0  # the end of the audio the running partial decodes
        self._partials = 0
        self._tails = 0
        self._whole = 0
        self._tail_samples = 0
        self._covered = 0
        self._closing = False  # whether the running decode is the one at the pause
        # the latest decode: its agreement, its audio's end, its transcript
        self._latest: tuple[LocalAgreement, int, Transcript | None] | None = None
        self.whole_reasons: dict[str, int] = {}
        """Why utterances were decoded whole, counted by reason."""

    def statistics(self) -> IncrementalStatistics:
        """Counters so far."""
        return IncrementalStatistics(self._partials, self._tails, self._whole,
                                     self._tail_samples / STT_SAMPLE_RATE, self._covered)

    @property
    def partial(self) -> PartialWords | None:
        """The words of the speech under way known so far; ``None`` when idle or before
        the first decode of it ended."""
        ag = self._agreement
        if ag is None or not ag.latest:
            return None
        return PartialWords(ag.onset, ag.text, " ".join(w.text for w in ag.tentative),
                            self._decoded_to)

    async def pause_decode(self, end_sample: int) -> bool:
        """Wait for the decode that started when the speech paused at ``end_sample``
        (if it runs and hears all of that speech); True if one ran. Cancelling the wait
        leaves the decode running (:meth:`final` uses it)."""
        task = self._task
        if task is None or not self._closing or self._task_end < end_sample:
            return False
        await asyncio.wait({task})
        return True

    async def decoded(self) -> None:
        """Wait for the running partial decode, if one runs (cancelling the wait leaves
        it running)."""
        if self._task is not None:
            await asyncio.wait({self._task})

    def heard(self, audio: AudioChunk | NDArray[Any], detector: DetectorState) -> None:
        """The frame just pushed to ``detector`` (the same samples, in order)."""
        samples = (audio.samples() if isinstance(audio, AudioChunk)
                   else np.asarray(audio, dtype=np.float32).reshape(-1))
        self._frames.append(samples)
        self._fed += samples.size
        onset = detector.active_onset
        if onset is None:
            self._agreement = None
            self._drop_before(self._fed - _KEEP)
            return
        self._drop_before(onset - _KEEP)
        ag = self._agreement
        if ag is None or ag.onset != onset:
            ag = self._agreement = LocalAgreement(
                onset, max(self._start, onset - _LEAD), hold_back=self._hold_back)
            self._decoded_to = ag.start
        if self._task is not None:
            return
        silent = detector.position - detector.speech_end
        if silent > 0:
            # The speech paused: one decode of all of it (the pause's final, if the
            # user stays silent), then none until the speech goes on.
            if (silent > _CLOSING or self._decoded_to >= detector.speech_end
                    or not self._stt.settings.closing_decode):
                return
        elif self._fed - self._decoded_to < self._interval:
            return
        if self._fed - ag.start > self._longest:
            # Past what one decode's window holds (Whisper's 30 s): no more partial
            # decodes; the pause decodes the tail after the committed words, or the
            # whole utterance (cut to max_utterance) when that tail is as long.
            return
        self._partials += 1
        end = self._task_end = self._fed
        chunk = self._slice(ag.start, end)
        with scheduled(Work(self._call, "speculative")):
            closing = self._closing = silent > 0
            self._task = asyncio.create_task(self._partial(ag, chunk, end, closing),
                                             name="voice.partial_stt")
        self._task.add_done_callback(self._partial_done)

    async def _partial(
        self, ag: LocalAgreement, chunk: NDArray[np.float32], end: int, closing: bool
    ) -> None:
        try:
            if closing:
                # The decode of all the speech at its pause: its transcript is the
                # final if the user stays silent, so it skips the word times
                # (faster-whisper's alignment pass); if the speech goes on, the next
                # partial decodes commit words again.
                words: list[Any] = []
                said = await self._run(self._stt.decode_text, chunk,
                                       self._stt.settings.closing_whole_window)
            else:
                words, said = await self._run(self._stt.decode_words, chunk, ag.start, None)
        except RunawayDecode:
            return
        if self._agreement is ag:
            self._decoded_to = end
            self._latest = (ag, end, said)
            if not closing:
                ag.update(words, end)

    def _partial_done(self, task: asyncio.Task[None]) -> None:
        if self._task is task:
            self._task = None
        if not task.cancelled() and (failure := task.exception()) is not None:
            # the whole decode is still done at the pause; the failure is said, not lost
            _log.warning("a partial decode failed", exc_info=failure)

    async def final(self, event: UtterancePaused | UtteranceReady) -> Transcript | Whole | None:
        """The transcript of the paused (or ended) utterance from the committed words and
        its tail, or :data:`WHOLE` when it must be decoded whole."""
        ag = self._agreement
        if self._task is not None and (
                self._task_end >= event.end_sample or (ag is not None and ag.committed)):
            # it may hear all the speech, or commit more: worth its wait (else the whole
            # decode starts now, beside it); a cancelled wait leaves it running
            await asyncio.wait({self._task})
        audio = event.audio.samples()
        first = event.audio.start_sample or 0
        if (ag is None or ag.onset != event.onset_sample
                or not first <= ag.start < first + audio.size):
            return self._decode_whole("not the utterance followed")
        heard = self.heard_all(event)
        if heard is not NOT_HEARD:
            # The latest partial decode heard all the speech (it started once the speech
            # paused): it is the utterance's transcript.
            self._covered += 1
            return heard
        if not ag.committed:
            return self._decode_whole("nothing committed")
        found = self._stt.tail_cut(audio[ag.start - first :], ag.latest, len(ag.committed),
                                   ag.start)
        if found is None:
            return self._decode_whole("no quiet boundary")
        kept, cut = found
        if not cut < first + audio.size or not self._same_audio(event, first, cut):
            return self._decode_whole("other audio")
        prompt = " ".join(w.text for w in ag.committed[:kept])
        prefix = " ".join(w.text for w in ag.committed[kept:]) or None
        tail = audio[cut - first :]
        if tail.size > self._longest:
            return self._decode_whole("a tail longer than a decode's window")
        try:
            said = await self._run(self._stt.decode_tail, tail, prompt, prefix)
        except RunawayDecode:
            return self._decode_whole("the tail ran away")
        if said is None and event.end_sample - cut > _TAIL_SPEECH:
            return self._decode_whole("no words in a spoken tail")
        if prefix is not None and (said is None or not _starts_with(said.text, prefix)):
            return self._decode_whole("forced words lost")  # never guess them
        self._tails += 1
        self._tail_samples += tail.size
        duration = audio.size / STT_SAMPLE_RATE
        if said is None:
            return Transcript(prompt, duration, 0.0, 0.0)
        text = f"{prompt} {said.text}" if prefix is not None else _join(prompt, said.text)
        return Transcript(text.strip(), duration, said.no_speech_prob,
                          said.avg_logprob)

    def heard_all(self, event: UtterancePaused | UtteranceReady) -> Transcript | NotHeard | None:
        """The transcript of ``event``'s utterance if the latest decode heard all of its
        speech, the very audio ``event`` carries (the decode when the speech paused,
        usually; ``None``: it heard no words), without waiting for anything; else
        :data:`NOT_HEARD`."""
        ag, latest = self._agreement, self._latest
        if (ag is None or latest is None or latest[0] is not ag
                or ag.onset != event.onset_sample or latest[1] < event.end_sample):
            return NOT_HEARD
        first = event.audio.start_sample or 0
        audio = event.audio.samples()
        if not first <= ag.start < first + audio.size or not self._same_audio(
                event, ag.start, latest[1]):
            return NOT_HEARD
        said = latest[2]
        return None if said is None else Transcript(
            said.text, audio.size / STT_SAMPLE_RATE, said.no_speech_prob, said.avg_logprob)

    def _same_audio(self, event: UtterancePaused | UtteranceReady, start: int, end: int) -> bool:
        """Whether ``event``'s audio from ``start`` to ``end`` is what this heard."""
        audio = event.audio.samples()
        first = event.audio.start_sample or 0
        lo = max(first, self._start, start)
        if end > first + audio.size:
            return False
        return bool(np.allclose(self._slice(lo, end), audio[lo - first : end - first],
                                atol=1.5 / 32768))

    def _decode_whole(self, why: str) -> Whole:
        self._whole += 1
        self.whole_reasons[why] = self.whole_reasons.get(why, 0) + 1
        _log.debug("utterance decoded whole: %s", why)
        return WHOLE

    async def _run(self, fn: Any, *args: Any) -> Any:
        scheduler = self._stt.scheduler
        if scheduler is not None:
            return await scheduler.run_on("stt", fn, *args)
        return await asyncio.to_thread(fn, *args)

    def _slice(self, start: int, end: int) -> NDArray[np.float32]:
        if not self._frames:
            return np.zeros(0, np.float32)
        audio = np.concatenate(self._frames) if len(self._frames) > 1 else self._frames[0]
        if len(self._frames) > 1:
            self._frames = [audio]
        return audio[max(0, start - self._start) : max(0, end - self._start)]

    def _drop_before(self, sample: int) -> None:
        while self._frames and self._start + self._frames[0].size <= sample:
            self._start += self._frames[0].size
            self._frames.pop(0)

    async def aclose(self) -> None:
        """Wait for the running partial decode (a thread cannot be stopped)."""
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)
