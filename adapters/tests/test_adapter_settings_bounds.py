"""Every number of the adapters' settings is bounded: too large, NaN, infinite or negative
is a ``ValidationError`` naming the field (``voxflow serve --max-calls 20000`` used to pass
the server's settings and fail later, building the admission controller)."""

from __future__ import annotations

import math

import pytest
from pydantic import BaseModel, ValidationError
from voxflow_adapters.hosting.admission import AdmissionSettings
from voxflow_adapters.hosting.call_cost import CallProfile, CostSettings
from voxflow_adapters.local import LocalAudioSettings
from voxflow_adapters.webrtc.peer import PeerSettings
from voxflow_adapters.webrtc.signaling import ServerSettings

pytestmark = pytest.mark.unit

MODELS: tuple[type[BaseModel], ...] = (PeerSettings, ServerSettings, LocalAudioSettings,
                                       AdmissionSettings, CostSettings, CallProfile)


def numeric_fields(model: type[BaseModel]) -> list[str]:
    """The fields holding a number (``int | None`` and ``"low" | float`` included)."""
    names = []
    for name, info in model.model_fields.items():
        shown = str(info.annotation)
        if info.annotation in (int, float) or "int" in shown or "float" in shown:
            names.append(name)
    return names


FIELDS = [(model, name) for model in MODELS for name in numeric_fields(model)
          if name not in ("input_device", "output_device")]  # an index or a device's name


def test_the_fields_include_the_ones_found_unbounded() -> None:
    names = {(m.__name__, n) for m, n in FIELDS}
    assert {("PeerSettings", "max_call_seconds"), ("ServerSettings", "max_calls"),
            ("ServerSettings", "resume_wait"), ("LocalAudioSettings", "latency"),
            ("LocalAudioSettings", "input_rate")} <= names


@pytest.mark.parametrize("bad", [1e9, math.nan, math.inf, -math.inf, -1])
@pytest.mark.parametrize(("model", "field"), FIELDS,
                         ids=[f"{m.__name__}.{n}" for m, n in FIELDS])
def test_an_out_of_range_number_is_refused_naming_the_field(
    model: type[BaseModel], field: str, bad: float,
) -> None:
    with pytest.raises(ValidationError) as caught:
        model(**{field: bad})
    assert all(error["loc"][0] == field for error in caught.value.errors()), caught.value
    assert field in str(caught.value)


def test_the_server_takes_as_many_calls_as_the_admission_controller() -> None:
    assert ServerSettings(max_calls=10_000).max_calls == 10_000
    with pytest.raises(ValidationError, match="max_calls"):
        ServerSettings(max_calls=10_001)
