"""Real Piper and Whisper: round trips, noise rejection, streaming, identity, cancellation."""

from __future__ import annotations

import asyncio
import re

import numpy as np
import pytest
from pydantic import ValidationError
from voxflow_voice import (
    DETERMINISTIC_TTS_SETTINGS,
    AudioChunk,
    PiperTts,
    SttSettings,
    TtsSettings,
    WhisperStt,
)

from voxflow.ids import DeliveryId

from .conftest import Speech

pytestmark = pytest.mark.models

RATE = 16000
SENTENCES = [
    "Please turn on the kitchen lights.",
    "What is the weather like in London tomorrow?",
    "Remind me to call my sister at six.",
    "The meeting has been moved to Friday morning.",
]


def words(text: str) -> list[str]:
    return re.sub(r"[^a-z0-9 ]", "", text.lower()).split()


def word_error_rate(reference: str, hypothesis: str) -> float:
    ref, hyp = words(reference), words(hypothesis)
    dist = np.arange(len(hyp) + 1)
    for i, r in enumerate(ref, 1):
        prev, dist = dist, np.empty_like(dist)
        dist[0] = i
        for j, h in enumerate(hyp, 1):
            dist[j] = min(prev[j] + 1, dist[j - 1] + 1, prev[j - 1] + (r != h))
    return float(dist[-1]) / max(len(ref), 1)


def test_piper_to_whisper_round_trip(speech: Speech, stt: WhisperStt) -> None:
    errors = []
    for text in SENTENCES:
        transcript = stt.transcribe_sync(speech(text))
        assert transcript is not None
        assert transcript.no_speech_prob < 0.5 and transcript.avg_logprob > -0.5
        errors.append(word_error_rate(text, transcript.text))
    assert float(np.mean(errors)) <= 0.1, errors


async def test_transcribe_runs_in_a_thread_and_accepts_chunks(
    speech: Speech, stt: WhisperStt
) -> None:
    chunk = AudioChunk.from_float(speech(SENTENCES[0]), RATE)
    transcript = await stt.transcribe(chunk)
    assert transcript is not None and words(transcript.text) == words(SENTENCES[0])
    assert transcript.duration == pytest.approx(chunk.duration)


@pytest.mark.parametrize(
    "audio",
    [
        np.zeros(2 * RATE, np.float32),
        (np.random.default_rng(0).standard_normal(2 * RATE) * 0.03).astype(np.float32),
        (np.random.default_rng(1).standard_normal(2 * RATE) * 0.2).astype(np.float32),
        (0.1 * np.sin(2 * np.pi * 100 * np.arange(2 * RATE) / RATE)).astype(np.float32),
    ],
    ids=["silence", "quiet-noise", "loud-noise", "hum"],
)
def test_silence_and_noise_transcribe_to_nothing(stt: WhisperStt, audio: np.ndarray) -> None:
    assert stt.transcribe_sync(audio) is None


def test_a_real_thank_you_is_not_taken_for_a_hallucination(speech: Speech, stt: WhisperStt) -> None:
    transcript = stt.transcribe_sync(speech("Thank you."))
    assert transcript is not None and words(transcript.text) == ["thank", "you"]


def test_long_audio_is_bounded(speech: Speech) -> None:
    stt = WhisperStt(SttSettings(max_utterance=1.0))
    transcript = stt.transcribe_sync(speech(SENTENCES[1]))
    assert transcript is not None and transcript.truncated and transcript.duration == 1.0


def test_stt_inputs_are_validated(stt: WhisperStt) -> None:
    with pytest.raises(ValueError, match="16000"):
        stt.transcribe_sync(AudioChunk(b"\x00\x00" * 100, 8000))
    with pytest.raises(ValueError, match="1-D"):
        stt.transcribe_sync(np.zeros((2, 100), np.float32))
    with pytest.raises(ValidationError):
        SttSettings(beam_size=0)
    assert stt.transcribe_sync(np.zeros(0, np.float32)) is None


def test_synthesis_gives_22k_audio_with_ordered_word_timings(tts: PiperTts) -> None:
    assert tts.sample_rate == 22050
    text = "The quick brown fox jumps over the lazy dog."
    (sentence,) = list(tts.synthesize(text))
    assert sentence.samples.dtype == np.float32 and 1.0 < sentence.samples.size / 22050 < 5.0
    assert [w.word for w in sentence.words] == text.split()
    starts = [w.start for w in sentence.words]
    assert starts == sorted(starts)
    assert all(0 <= w.start < w.end <= sentence.samples.size for w in sentence.words)


def test_word_timings_fall_back_when_espeak_reads_more_words(tts: PiperTts) -> None:
    text = "It costs 42 dollars."  # espeak says "forty two": more phoneme words than words
    (sentence,) = list(tts.synthesize(text))
    assert [w.word for w in sentence.words] == text.split()
    assert all(a.end <= b.start for a, b in zip(sentence.words, sentence.words[1:], strict=False))


def test_word_timings_match_where_whisper_hears_the_words(tts: PiperTts, stt: WhisperStt) -> None:
    (sentence,) = list(tts.synthesize("Call my sister tonight."))
    cut = sentence.words[2].end  # everything up to "sister"
    from voxflow_voice import resample

    heard = stt.transcribe_sync(resample(sentence.samples[:cut], 22050, RATE))
    assert heard is not None and words(heard.text)[-1] == "sister"


async def test_stream_tags_every_chunk_with_its_identity(tts: PiperTts) -> None:
    delivery = DeliveryId("delivery-1")
    text = "Sure. I can help with that."
    chunks = [c async for c in tts.stream(text, delivery_id=delivery, segment_id=3)]
    assert len(chunks) > 5
    assert {(c.delivery_id, c.segment_id, c.sample_rate) for c in chunks} == {(delivery, 3, 22050)}
    positions = [c.start_sample for c in chunks]
    assert positions[0] == 0
    assert all(
        (a.start_sample or 0) + a.num_samples == b
        for a, b in zip(chunks, positions[1:], strict=False)
    )
    assert all(c.duration <= 0.1 + 1e-9 for c in chunks)
    heard_words = [w.word for c in chunks for w in c.words]
    assert heard_words == text.split()


@pytest.fixture(scope="module")
def uncached() -> PiperTts:
    """The voice without its speech cache: these tests count the sentences synthesized,
    and the session's voice serves a sentence another test said from its cache."""
    return PiperTts(settings=DETERMINISTIC_TTS_SETTINGS.model_copy(update={"cache_mb": 0}))


async def test_leaving_the_stream_stops_synthesis_before_the_next_sentence(
    uncached: PiperTts,
) -> None:
    tts = uncached
    text = " ".join(SENTENCES)  # four sentences
    before = tts.statistics().sentences
    stream = tts.stream(text, delivery_id=DeliveryId("d"), segment_id=1)
    async for _ in stream:
        break
    await stream.aclose()
    assert tts.statistics().sentences - before == 1


async def test_cancelling_the_consumer_stops_synthesis(uncached: PiperTts) -> None:
    tts = uncached
    text = " ".join(SENTENCES)
    before = tts.statistics().sentences
    first = asyncio.Event()

    async def consume() -> None:
        async for _ in tts.stream(text, delivery_id=DeliveryId("d"), segment_id=1):
            first.set()

    task = asyncio.create_task(consume())
    await first.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.sleep(0)
    assert tts.statistics().sentences - before <= 2  # the first, perhaps one in flight


def test_tts_settings_are_validated() -> None:
    with pytest.raises(ValidationError):
        TtsSettings(chunk_duration=0)
    with pytest.raises(TypeError, match="settings"):
        PiperTts(settings={"volume": 2})  # type: ignore[arg-type]


def test_deterministic_settings_repeat_the_same_samples() -> None:
    tts = PiperTts(settings=DETERMINISTIC_TTS_SETTINGS)
    first = [s.samples for s in tts.synthesize("Same words, same sound.")]
    again = [s.samples for s in tts.synthesize("Same words, same sound.")]
    assert all(np.array_equal(a, b) for a, b in zip(first, again, strict=True))
