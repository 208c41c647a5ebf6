"""Whisper made incremental (issue 33): words committed during speech, the tail at the pause.

The agreement itself is model-free; the rest runs the real Silero VAD and Whisper tiny.en
on speech from the bundled Piper voice and espeak-ng voices, each frame pushed as a
session pushes it, every partial decode awaited before the next frame (a machine fast
enough to keep up: the words are the same on a slower one, later). Each final is
compared with Whisper's decode of the whole utterance.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import NoReturn

import numpy as np
import pytest
from numpy.typing import NDArray
from voxflow_voice import (
    STT_SAMPLE_RATE,
    EarlyTranscriber,
    SileroVad,
    TurnDetection,
    TurnDetector,
    UtteranceReady,
    WhisperStt,
)
from voxflow_voice.engines.registry import choose_engine
from voxflow_voice.engines.stt_streaming import (
    LocalAgreement,
    RunawayDecode,
    StreamingSttSettings,
    StreamingWhisperStt,
    Word,
)
from voxflow_voice.listen.incremental_stt import IncrementalStt

from .conftest import CHUNK, Speech, espeak, follow, needs_espeak, words


def w(text: str, start: float, end: float) -> Word:
    return Word(text, round(start * STT_SAMPLE_RATE), round(end * STT_SAMPLE_RATE))


def test_two_decodes_commit_what_they_agree_on_from_the_start() -> None:
    agreement = LocalAgreement(0, 0, hold_back=round(0.4 * STT_SAMPLE_RATE))
    assert agreement.update([w("Book", 0.1, 0.4), w("a", 0.4, 0.5)], 16000) == []
    second = [w("book", 0.1, 0.4), w("a", 0.4, 0.5), w("table.", 0.5, 0.9)]
    committed = agreement.update(second, round(1.2 * STT_SAMPLE_RATE))
    assert [x.text for x in committed] == ["book", "a"]  # case and punctuation aside
    assert [x.text for x in agreement.tentative] == ["table."]
    # "table" ends within hold_back of the audio's end: not trusted yet, however agreed
    third = [w("book", 0.1, 0.4), w("a", 0.4, 0.5), w("table", 0.5, 0.9)]
    assert agreement.update(third, round(1.25 * STT_SAMPLE_RATE)) == []
    fourth = [*third, w("for", 0.9, 1.1)]
    assert [x.text for x in agreement.update(fourth, 2 * STT_SAMPLE_RATE)] == ["table"]
    assert agreement.text == "book a table" and agreement.revisions == 0


def test_a_committed_word_two_decodes_no_longer_agree_on_is_taken_back_and_counted() -> None:
    agreement = LocalAgreement(0, 0, hold_back=0)
    agreement.update([w("at", 0, 0.2), w("seven", 0.2, 0.5)], 16000)
    agreement.update([w("at", 0, 0.2), w("seven", 0.2, 0.5)], 16000)
    assert agreement.text == "at seven"
    agreement.update([w("at", 0, 0.2), w("730", 0.2, 0.9)], 16000)
    assert agreement.text == "at" and agreement.revisions == 1


def test_the_streaming_engine_is_registered_by_name() -> None:
    chosen = choose_engine("stt", "whisper-streaming:tiny.en,interval=0.4")
    assert isinstance(chosen.options, StreamingSttSettings)
    assert chosen.options.interval == 0.4 and chosen.options.model == "tiny.en"


def test_plain_whisper_runs_no_partial_decodes() -> None:
    """A non-streaming engine: heard() is a no-op and no words are known before the pause."""

    class Plain:
        async def transcribe(self, audio: object) -> None:
            return None

    early = EarlyTranscriber(Plain())
    detector = TurnDetector(SileroVad(), TurnDetection())
    early.heard(np.zeros(CHUNK, np.float32), detector)
    assert early.incremental is None and early.partial is None


def errors(reference: str, heard: str | None) -> int:
    """Word edit distance (numbers as Whisper writes them aside: the sentences have none)."""
    ref, hyp = words(reference), words(heard)
    row = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        prev, row[0] = row[0], i
        for j, h in enumerate(hyp, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (r != h))
    return row[-1]


@pytest.fixture(scope="module")
def tails() -> StreamingWhisperStt:
    """No decode when the speech pauses: the final is the committed words and a tail
    (decodes every 0.5 s: more words committed, a shorter tail)."""
    return StreamingWhisperStt(StreamingSttSettings(
        model="tiny.en", closing_decode=False, interval=0.5))


SENTENCES = [
    "Could you book me a table for four people tomorrow evening near the station",
    "Please remind me to call my sister when I get home from work tonight",
]


@pytest.mark.models
@pytest.mark.parametrize("text", SENTENCES)
async def test_the_bundled_voice_is_finished_by_a_tail_with_the_whole_decode_words(
    text: str, speech: Speech, tails: StreamingWhisperStt, stt: WhisperStt
) -> None:
    audio = speech(text)
    ready, transcript, at_pause, early = await follow(tails, audio)
    whole = stt.transcribe_sync(ready.audio)
    assert whole is not None
    assert at_pause is not None and len(words(at_pause.committed)) >= 4  # known at the pause
    assert words(at_pause.text)[:4] == words(whole.text)[:4]
    stats = early.incremental.statistics() if early.incremental else None
    assert early.incremental is not None
    assert stats is not None and (stats.tails, stats.whole) == (1, 0), (
        early.incremental.whole_reasons)  # a tail, not the whole
    assert stats.tail_seconds < ready.audio.duration / 2
    assert words(getattr(transcript, "text", None)) == words(whole.text)


@pytest.mark.models
async def test_a_decode_when_the_speech_pauses_is_the_final_with_nothing_left_to_decode(
    speech: Speech, streaming: StreamingWhisperStt, stt: WhisperStt
) -> None:
    ready, transcript, _, early = await follow(streaming, speech(SENTENCES[0]))
    whole = stt.transcribe_sync(ready.audio)
    assert early.incremental is not None
    stats = early.incremental.statistics()
    assert (stats.covered, stats.tails, stats.whole) == (1, 0, 0)
    assert words(getattr(transcript, "text", None)) == words(whole.text if whole else None)


@pytest.mark.models
@needs_espeak
@pytest.mark.parametrize(("voice", "rate"), [("en-us+f3", 150), ("en-gb+m3", 175)])
async def test_other_voices_end_no_worse_than_the_whole_decode(
    voice: str, rate: int, tmp_path: Path, tails: StreamingWhisperStt, stt: WhisperStt
) -> None:
    audio = espeak(tmp_path, SENTENCES[1], voice, rate)
    ready, transcript, _, early = await follow(tails, audio)
    whole = stt.transcribe_sync(ready.audio)
    assert whole is not None
    # the same words, or no more mistakes than the whole decode makes
    heard = getattr(transcript, "text", None)
    assert words(heard) == words(whole.text) or (
        errors(SENTENCES[1], heard) <= errors(SENTENCES[1], whole.text)), (heard, whole.text)
    assert early.incremental is not None and early.incremental.statistics().partial_decodes > 2


def count_alignments(
        engine: StreamingWhisperStt, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """faster-whisper's word alignments of ``engine``'s decodes (one a pass with word
    times), counted from now on."""
    aligned: list[int] = []
    model = engine._model
    align = model.find_alignment

    def counted(*args: object, **kwargs: object) -> object:
        aligned.append(1)
        return align(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(model, "find_alignment", counted)
    return aligned


@pytest.mark.models
@needs_espeak
@pytest.mark.parametrize("seconds", [0.5, 2.0, None])
def test_a_partial_decode_is_one_pass_over_its_window(
    seconds: float | None, tmp_path: Path, streaming: StreamingWhisperStt,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With word times faster-whisper would decode the window again from the last word's
    end (its padded silence: more time, and made-up words such as " in." after "Read me
    the news headlines."); a partial decode is the first pass only."""
    audio = espeak(tmp_path, SENTENCES[1], "en-gb+m3", 175)
    piece = audio if seconds is None else audio[: round(seconds * STT_SAMPLE_RATE)]
    aligned = count_alignments(streaming, monkeypatch)
    try:
        found, said = streaming.decode_words(piece, 0, None)
    except RunawayDecode:
        found, said = [], None
    assert len(aligned) <= 1
    if seconds is None:
        assert said is not None and errors(SENTENCES[1], said.text) <= 3, said.text
        assert [w.text for w in found] == said.text.split()


@pytest.mark.models
@needs_espeak
async def test_the_decode_when_the_speech_pauses_aligns_no_words(
    tmp_path: Path, streaming: StreamingWhisperStt, stt: WhisperStt,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The decode at the pause is the final if the user stays silent: nothing to agree
    on, so it skips faster-whisper's word alignment (a second pass over the decoder),
    and is still the utterance's words."""
    aligned = count_alignments(streaming, monkeypatch)
    audio = espeak(tmp_path, SENTENCES[1], "en-us+f3", 150)
    ready, transcript, _, early = await follow(streaming, audio)
    assert early.incremental is not None
    stats = early.incremental.statistics()
    assert (stats.covered, stats.tails, stats.whole) == (1, 0, 0)
    assert len(aligned) == stats.partial_decodes - 1  # all but the one at the pause
    whole = stt.transcribe_sync(ready.audio)
    heard = getattr(transcript, "text", None)
    assert whole is not None and errors(SENTENCES[1], heard) <= errors(
        SENTENCES[1], whole.text), (heard, whole.text)


@pytest.mark.models
@needs_espeak
async def test_speech_is_decoded_about_once_a_second_while_it_is_spoken(
    tmp_path: Path, streaming: StreamingWhisperStt,
) -> None:
    """Every decode during speech keeps the decoder busy when the speech may pause (and
    costs CPU): one a second of new audio, and the one at the pause."""
    audio = espeak(tmp_path, SENTENCES[1], "en-us+f3", 150)
    ready, _, _, early = await follow(streaming, audio)
    assert early.incremental is not None
    spoken = (ready.end_sample - ready.onset_sample) / STT_SAMPLE_RATE
    assert early.incremental.statistics().partial_decodes <= spoken + 1.5


@pytest.mark.models
async def test_audio_unlike_what_was_decoded_is_decoded_whole(
    speech: Speech, streaming: StreamingWhisperStt, stt: WhisperStt
) -> None:
    """The committed words belong to the audio decoded: a pause whose audio differs (here
    altered after the fact) is decoded whole, never finished from the wrong words."""
    audio = speech(SENTENCES[0])
    detector = TurnDetector(SileroVad(), TurnDetection())
    early = EarlyTranscriber(streaming)
    padded = np.concatenate([np.zeros(8000, np.float32), audio, np.zeros(32000, np.float32)])
    for i in range(0, padded.size, CHUNK):
        frame = padded[i : i + CHUNK]
        for event in detector.push(frame):
            if isinstance(event, UtteranceReady):
                other = speech("Turn off the lights in the kitchen and the hall please")
                altered = UtteranceReady(
                    type(event.audio).from_float(
                        np.resize(other, event.audio.num_samples), STT_SAMPLE_RATE,
                        start_sample=event.audio.start_sample),
                    event.onset_sample, event.end_sample, event.truncated)
                transcript = await early.final(altered)
                assert early.incremental is not None
                assert early.incremental.statistics().whole == 1
                whole = stt.transcribe_sync(altered.audio)
                assert words(getattr(transcript, "text", None)) == words(
                    whole.text if whole else None)
                await early.aclose()
                return
        early.heard(frame, detector)
        if early.incremental is not None:
            await early.incremental.decoded()
    raise AssertionError("the turn never ended")


class _Speaking:
    """A turn detector's view while the user speaks from sample 0 (no pause yet)."""

    def __init__(self) -> None:
        self.active_onset: int | None = 0
        self.speech_end = 0
        self.position = 0


class _BrokenDecoder(StreamingWhisperStt):
    """The real engine whose windowed decode fails (a decoder error)."""

    def decode_words(
        self, samples: NDArray[np.float32], start: int, prompt: str | None
    ) -> NoReturn:
        raise RuntimeError("the decoder broke")


@pytest.mark.models
async def test_a_failed_partial_decode_is_logged_not_lost(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A partial decode that raises leaves the whole decode to do at the pause, and says
    why in the log (its exception was retrieved and dropped)."""
    incremental = IncrementalStt(_BrokenDecoder(StreamingSttSettings(model="tiny.en")))
    detector = _Speaking()
    frame = np.zeros(STT_SAMPLE_RATE // 10, np.float32)
    with caplog.at_level(logging.WARNING, logger="voxflow_voice.listen.incremental_stt"):
        for _ in range(12):  # 1.2 s of speech: one partial decode started
            detector.position += frame.size
            detector.speech_end = detector.position
            incremental.heard(frame, detector)
        assert incremental.statistics().partial_decodes == 1
        await incremental.aclose()
    failed = [r for r in caplog.records if r.getMessage() == "a partial decode failed"]
    assert len(failed) == 1 and failed[0].exc_info is not None
    assert "the decoder broke" in str(failed[0].exc_info[1])


@pytest.mark.models
@needs_espeak
def test_a_decode_of_29_5_seconds_fits_whispers_window(
    tmp_path: Path, streaming: StreamingWhisperStt
) -> None:
    """Review finding 7: a window fitted to 29.5 s of audio was 31 s, and faster-whisper's
    encoder takes 3000 frames only (ValueError: ... (1, 80, 3100)); it is 30 s now."""
    gap = np.zeros(STT_SAMPLE_RATE // 2, np.float32)
    parts: list[NDArray[np.float32]] = []
    while sum(p.size for p in parts) < 30 * STT_SAMPLE_RATE:
        folder = tmp_path / str(len(parts))
        folder.mkdir()
        parts += [espeak(folder, SENTENCES[len(parts) // 2 % 2], "en-gb+m3", 175), gap]
    audio = np.concatenate(parts)[: round(29.5 * STT_SAMPLE_RATE)]
    found, said = streaming.decode_words(audio, 0, None)
    assert said is not None and len(found) >= 20, said
    assert streaming.window_of(29.5) == 30


class _Sizes(StreamingWhisperStt):
    """The real engine's settings; its partial decodes only note how much audio they got."""

    def __init__(self) -> None:
        super().__init__(StreamingSttSettings(model="tiny.en"))
        self.sizes: list[int] = []

    def decode_words(
        self, samples: NDArray[np.float32], start: int, prompt: str | None
    ) -> tuple[list[Word], None]:
        self.sizes.append(samples.size)
        return [], None


@pytest.mark.models
async def test_no_partial_decode_is_given_more_than_its_window_holds() -> None:
    """Every partial decode covers the utterance from its start: past ``longest`` (29 s,
    a 30 s window) none starts, the pause decodes the tail or the whole utterance."""
    stt = _Sizes()
    incremental = IncrementalStt(stt)
    detector = _Speaking()
    frame = np.zeros(STT_SAMPLE_RATE // 10, np.float32)
    for _ in range(320):  # 32 s of speech
        detector.position += frame.size
        detector.speech_end = detector.position
        incremental.heard(frame, detector)
        await incremental.decoded()
    await incremental.aclose()
    assert max(stt.sizes) <= 29 * STT_SAMPLE_RATE < max(stt.sizes) + STT_SAMPLE_RATE
    assert stt.longest == 29
