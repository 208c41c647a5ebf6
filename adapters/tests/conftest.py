"""Shared fixtures for adapter tests: the real engines, loaded once per test session."""

from __future__ import annotations

import pytest
from voxflow_voice.engines import VoiceEngines


@pytest.fixture(scope="session")
def engines(voice_engines: VoiceEngines) -> VoiceEngines:
    """Whisper tiny.en + the bundled Piper voice + Silero VAD (real models), with
    noise-free synthesis so that virtual-time runs are exactly repeatable: the
    ``voice_engines`` fixture of voxflow's own pytest plugin (voxflow_adapters.pytest_plugin)."""
    return voice_engines
