"""ModelRates: each model's recent real-time factor, from the jobs its engine records."""

from __future__ import annotations

import math

import pytest
from voxflow_voice.engines import VoiceEngines
from voxflow_voice.engines.rates import ModelRates
from voxflow_voice.engines.stt import WhisperStt
from voxflow_voice.engines.tts import PiperTts
from voxflow_voice.engines.vad import SileroVad


def test_the_recent_factor_is_the_jobs_seconds_over_their_audios() -> None:
    rates = ModelRates(recent=2)
    assert rates.recent() == {}
    rates.record("stt", 0.3, 3.0)
    rates.record("stt", 0.1, 1.0)
    assert rates.recent() == {"stt": pytest.approx(0.1)}
    rates.record("stt", 2.0, 1.0)  # a loaded machine: the oldest job drops out
    assert rates.recent() == {"stt": pytest.approx(2.1 / 2.0)}
    rates.record("tts", 0.0, 0.0)  # no audio: nothing to divide by, not counted
    assert "tts" not in rates.recent()
    assert "stt 1.050" in repr(rates)


@pytest.mark.parametrize(("model", "seconds", "audio"), [
    ("whisper", 0.1, 1.0), ("stt", -0.1, 1.0), ("stt", math.nan, 1.0),
    ("stt", 0.1, math.inf), ("stt", 0.1, -1.0)])
def test_a_bad_job_is_refused(model: str, seconds: float, audio: float) -> None:
    with pytest.raises(ValueError):
        ModelRates().record(model, seconds, audio)  # type: ignore[arg-type]


@pytest.mark.parametrize("recent", [0, -1, 10_001, True, 2.5])
def test_a_bad_window_is_refused(recent: object) -> None:
    with pytest.raises(ValueError, match="recent"):
        ModelRates(recent)  # type: ignore[arg-type]


def test_engines_refuse_rates_that_are_not_model_rates() -> None:
    for engine in (WhisperStt, PiperTts, SileroVad):
        with pytest.raises(TypeError, match="ModelRates"):
            engine(rates=object())  # type: ignore[arg-type]


def test_loaded_engines_share_one_recorder() -> None:
    engines = VoiceEngines.load(end_of_turn="none")
    assert engines.rates.warmed_up is None
    assert engines.stt.rates is engines.rates  # type: ignore[attr-defined]
    assert engines.tts.rates is engines.rates  # type: ignore[attr-defined]
    assert engines.make_vad().rates is engines.rates  # type: ignore[attr-defined]
