"""Speech said again is synthesized once (the real Piper voice): served from memory or a
directory, identical audio and word timings, another voice or speed never matching, a
damaged file a miss, both bounds kept."""

from __future__ import annotations

import glob
import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from voxflow_voice import DETERMINISTIC_TTS_SETTINGS, PiperTts
from voxflow_voice.audio import WordTiming
from voxflow_voice.engines.speech_cache import SpeechCache

from voxflow.ids import DeliveryId

pytestmark = pytest.mark.unit

GREETING = "Hello! How can I help you today?"


Chunk = tuple[bytes, int | None, tuple[WordTiming, ...]]


async def chunks_of(tts: PiperTts, text: str) -> list[Chunk]:
    return [(c.pcm, c.start_sample, c.words)
            async for c in tts.stream(text, delivery_id=DeliveryId("d-1"), segment_id=1)]


async def test_a_sentence_said_again_is_served_from_the_cache_as_it_was_first_made() -> None:
    tts = PiperTts(settings=DETERMINISTIC_TTS_SETTINGS.model_copy(update={"cache_mb": 8}))
    first = await chunks_of(tts, GREETING)
    made = tts.statistics()
    again = await chunks_of(tts, GREETING)
    after = tts.statistics()
    assert after.sentences == made.sentences  # nothing synthesized the second time
    assert after.cached - made.cached == made.sentences == 2  # both sentences from the cache
    assert again == first  # the same samples, positions and word timings
    assert [w.word for _, _, words in again for w in words] == GREETING.split()
    assert tts.cache is not None and tts.cache.statistics().hit_rate == 0.5


async def test_another_speed_or_no_cache_never_reuses_the_audio() -> None:
    slow = PiperTts(settings=DETERMINISTIC_TTS_SETTINGS.model_copy(
        update={"cache_mb": 8, "length_scale": 1.3}))
    plain = PiperTts(settings=DETERMINISTIC_TTS_SETTINGS.model_copy(update={"cache_mb": 8}))
    await chunks_of(plain, "Thank you.")
    await chunks_of(slow, "Thank you.")
    assert slow.statistics().cached == 0 and slow.statistics().sentences == 1
    off = PiperTts(settings=DETERMINISTIC_TTS_SETTINGS.model_copy(update={"cache_mb": 0}))
    assert off.cache is None
    for _ in range(2):
        await chunks_of(off, "Thank you.")
    assert off.statistics().sentences == 2 and off.statistics().cached == 0


async def test_a_directory_keeps_sentences_across_engines_and_a_damaged_file_is_a_miss(
    tmp_path: Path,
) -> None:
    folder = str(tmp_path)
    update = {"cache_mb": 8, "cache_dir": folder}
    first = PiperTts(settings=DETERMINISTIC_TTS_SETTINGS.model_copy(update=update))
    made = await chunks_of(first, "Your table is booked.")
    second = PiperTts(settings=DETERMINISTIC_TTS_SETTINGS.model_copy(update=update))
    assert second is not first and second.cache is not first.cache
    assert await chunks_of(second, "Your table is booked.") == made
    assert second.statistics().sentences == 0
    assert second.cache is not None and second.cache.statistics().disk_hits == 1
    # a damaged file: synthesized again, no error, the file replaced by a good one
    [file] = glob.glob(os.path.join(folder, "*.voxspeech.npz"))
    os.truncate(file, 100)
    third = PiperTts(settings=DETERMINISTIC_TTS_SETTINGS.model_copy(update=update))
    assert await chunks_of(third, "Your table is booked.") == made
    assert third.statistics().sentences == 1
    fourth = PiperTts(settings=DETERMINISTIC_TTS_SETTINGS.model_copy(update=update))
    await chunks_of(fourth, "Your table is booked.")
    assert fourth.statistics().sentences == 0


def test_memory_holds_the_most_recent_sentences_within_its_bound() -> None:
    cache = SpeechCache(3 * 4000)  # three sentences of 1,000 float32 samples
    keys = [cache.key(("sentence", i)) for i in range(4)]
    for i, key in enumerate(keys[:3]):
        cache.put(key, np.full(1000, i / 10, dtype=np.float32), ())
    assert cache.get(keys[0]) is not None  # used: the most recent now
    cache.put(keys[3], np.zeros(1000, dtype=np.float32), ())
    assert cache.get(keys[1]) is None  # the least recently used went
    assert all(cache.get(k) is not None for k in (keys[0], keys[2], keys[3]))
    assert cache.statistics().bytes == 12_000 and cache.statistics().entries == 3
    got = cache.get(keys[0])
    assert got is not None and not got[0].flags.writeable  # never changed in place
    cache.put(cache.key(("too long",)), np.zeros(5000, dtype=np.float32), ())
    assert cache.statistics().entries == 3  # larger than the bound: not kept


def test_the_directory_is_bounded_oldest_first(tmp_path: object) -> None:
    cache = SpeechCache(0, directory=str(tmp_path), max_disk_bytes=30_000)
    keys = [cache.key((i,)) for i in range(5)]
    for key in keys:
        cache.put(key, np.zeros(2000, dtype=np.float32), (WordTiming("a", 0, 10),))
    from pathlib import Path

    total = sum(p.stat().st_size for p in Path(str(tmp_path)).glob("*.voxspeech.npz"))
    assert 0 < total <= 30_000
    assert cache.get(keys[-1]) is not None and cache.get(keys[0]) is None


@settings(max_examples=200, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=4000))
def test_fuzz_any_file_in_the_directory_is_a_miss_or_a_well_formed_sentence(
    tmp_path: object, data: bytes
) -> None:
    cache = SpeechCache(1 << 20, directory=str(tmp_path))
    key = cache.key(("fuzzed",))
    from pathlib import Path

    (Path(str(tmp_path)) / f"{key}.voxspeech.npz").write_bytes(data)
    found = cache.get(key)
    if found is not None:
        samples, words = found
        assert samples.dtype == np.float32 and np.all(np.isfinite(samples))
        assert all(w.start >= 0 and w.end <= samples.size for w in words)
