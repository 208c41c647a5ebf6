"""Shared fixtures for adapter tests: the real engines, loaded once per test session."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from voxflow_voice.audio import AudioChunk, resample, write_wav
from voxflow_voice.engines import VoiceEngines


@pytest.fixture(scope="session")
def engines(voice_engines: VoiceEngines) -> VoiceEngines:
    """Whisper tiny.en + the bundled Piper voice + Silero VAD (real models), with
    noise-free synthesis so that virtual-time runs are exactly repeatable: the
    ``voice_engines`` fixture of voxflow's own pytest plugin
    (voxflow_adapters.testkit.pytest_plugin)."""
    return voice_engines


@pytest.fixture
def hello_wav(engines: VoiceEngines, tmp_path: Path) -> Path:
    """"Hello there!" in the bundled voice, then 3 s of silence, at 48 kHz: the fake
    microphone of the Chromium tests (Chromium loops the file)."""
    speech = np.concatenate([np.asarray(s.samples, np.float32)
                             for s in engines.tts.synthesize("Hello there!")])
    speech = resample(speech, engines.tts.sample_rate, 48_000)
    samples = np.concatenate([np.zeros(24_000, np.float32), speech,
                              np.zeros(3 * 48_000, np.float32)])
    path = tmp_path / "hello.wav"
    write_wav(path, AudioChunk.from_float(samples, 48_000))
    return path


def _root_conftest() -> Any:
    """The repository's ``tests/conftest.py`` (its ``make_store`` fixture: SQLite, and
    PostgreSQL skipped with its reason when none answers)."""
    path = Path(__file__).resolve().parents[2] / "tests" / "conftest.py"
    spec = importlib.util.spec_from_file_location("_voxflow_root_conftest", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_ROOT = _root_conftest()
make_store = _ROOT.make_store
pg_faults = _ROOT.pg_faults
pg_schema_url = _ROOT.pg_schema_url
skip_without_postgres = _ROOT.skip_without_postgres
PG_URL: str = _ROOT.PG_URL
