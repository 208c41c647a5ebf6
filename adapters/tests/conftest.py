"""Shared fixtures for adapter tests: the real engines, loaded once per test session."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, cast

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


def _root_tests(name: str) -> Any:
    """A module of the repository's ``tests/`` (not importable from here: pytest runs
    with ``--import-mode=importlib``), loaded from its file."""
    path = Path(__file__).resolve().parents[2] / "tests" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"_voxflow_root_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# tests/conftest.py: its ``make_store`` fixture (SQLite, and PostgreSQL skipped with its
# reason when none answers) and PostgreSQL's helpers
_ROOT = _root_tests("conftest")
make_store = _ROOT.make_store
pg_faults = _ROOT.pg_faults
pg_schema_url = _ROOT.pg_schema_url
skip_without_postgres = _ROOT.skip_without_postgres
# (autouse: no test sees the environment's OTEL_* variables or leaves tracing set up)
_tracing_of_the_test_only = _ROOT._tracing_of_the_test_only
PG_URL: str = _ROOT.PG_URL

# tests/otel.py: the SDK's in-memory span exporter as the tracer provider for one test
_OTEL = _root_tests("otel")
spans = _OTEL.spans


@pytest.fixture
def span_children() -> Callable[[Sequence[Any], Any], list[Any]]:
    """``tests/otel.py``'s ``children(finished, parent)``: a span's children, in order."""
    return cast(Callable[[Sequence[Any], Any], list[Any]], _OTEL.children)


class MeasuredMachine:
    """An admission meter's clock and CPU seconds, moved by a test (the calls are real):
    ``CallCostMeter(..., cpu_time=machine.cpu_time, clock=machine.clock)``."""

    def __init__(self) -> None:
        self.now = 0.0
        self.cpu = 0.0

    def clock(self) -> float:
        return self.now

    def cpu_time(self) -> float:
        return self.cpu


BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def benchmark_module(name: str) -> ModuleType:
    """benchmarks/``name``.py, imported as its scripts import it (their folder on the
    path)."""
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    return importlib.import_module(name)
