"""Every number of the voice settings is bounded: too large, NaN, infinite or negative is
a ``ValidationError`` naming the field, never a setting that breaks the session later
(an infinite ``rise_hold`` made ``BargeInArbiter`` fail converting it to samples)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError
from voxflow_adapters.hosting.admission import AdmissionController, AdmissionSettings
from voxflow_voice.listen.barge_in import BargeInArbiter, BargeInSettings
from voxflow_voice.listen.turn_detector import TurnDetection

pytestmark = pytest.mark.unit

MODELS: tuple[type[BaseModel], ...] = (BargeInSettings, TurnDetection, AdmissionSettings)


def numeric_fields(model: type[BaseModel]) -> list[str]:
    return [name for name, info in model.model_fields.items()
            if info.annotation in (int, float)]


FIELDS = [(model, name) for model in MODELS for name in numeric_fields(model)]


def test_the_models_have_the_fields_the_task_names() -> None:
    names = {(m.__name__, n) for m, n in FIELDS}
    assert {("BargeInSettings", "rise_hold"), ("BargeInSettings", "resume_hold"),
            ("TurnDetection", "end_of_turn_silence"), ("AdmissionSettings", "ramp_seconds"),
            ("AdmissionSettings", "window_turns")} <= names


@pytest.mark.parametrize("bad", [1e9, math.nan, math.inf, -math.inf, -1])
@pytest.mark.parametrize(("model", "field"), FIELDS,
                         ids=[f"{m.__name__}.{n}" for m, n in FIELDS])
def test_an_out_of_range_number_is_refused_naming_the_field(
    model: type[BaseModel], field: str, bad: float,
) -> None:
    with pytest.raises(ValidationError) as caught:
        model(**{field: bad})
    error = caught.value.errors()[0]
    assert error["loc"] == (field,), caught.value
    assert field in str(caught.value)


@pytest.mark.parametrize(("field", "top"), [("rise_hold", 5), ("resume_hold", 5)])
def test_the_holds_take_their_whole_range(field: str, top: float) -> None:
    assert getattr(BargeInSettings(**{field: top}), field) == top
    assert getattr(BargeInSettings(**{field: 0}), field) == 0
    with pytest.raises(ValidationError, match=field):
        BargeInSettings(**{field: top + 0.001})


@settings(max_examples=200, derandomize=True, deadline=None, database=None)
@given(field=st.sampled_from(numeric_fields(BargeInSettings)),
       value=st.floats(allow_nan=True, allow_infinity=True))
def test_any_float_is_a_working_arbiter_or_an_error_naming_the_field(
    field: str, value: float,
) -> None:
    try:
        barge_in = BargeInSettings(**{field: value})
    except ValidationError as exc:
        error = exc.errors()[0]
        # its own range, or the rule tying decide_window to confirm_window
        assert error["loc"] == (field,) or field in str(exc), exc
    else:
        assert math.isfinite(value)
        BargeInArbiter(barge_in)  # converts every time to samples


def test_a_p95_that_could_never_count_is_refused() -> None:
    with pytest.raises(ValidationError, match=r"min_turns .* at most window_turns"):
        AdmissionSettings(min_turns=41, window_turns=40)
    admission = AdmissionController(AdmissionSettings(min_turns=5, window_turns=5))
    for _ in range(5):
        admission.record(2_000.0)
    assert admission.load().p95_ms == 2_000.0
