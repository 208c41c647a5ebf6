"""Session events carry the core's types: a settled delivery's status is a SettleStatus."""

from __future__ import annotations

from typing import get_args

import pytest
from pydantic import TypeAdapter, ValidationError
from voxflow_voice.events import AnnouncementQueued, DeliverySettled, SessionEvent

from voxflow.ids import DeliveryId, JobId, SessionId, TurnId
from voxflow.replies import SettleStatus

pytestmark = pytest.mark.unit

EVENTS: TypeAdapter[SessionEvent] = TypeAdapter(SessionEvent)


@pytest.mark.parametrize("status", get_args(SettleStatus))
def test_a_settled_delivery_round_trips_each_settle_status(status: str) -> None:
    event = DeliverySettled(session_id=SessionId("s"), at=1.0, delivery_id=DeliveryId("d"),
                            status=status)  # type: ignore[arg-type]
    back = EVENTS.validate_json(event.model_dump_json())
    assert isinstance(back, DeliverySettled) and back.status == status


@pytest.mark.parametrize("status", ["unknown", "scheduled", "pending", "COMPLETED", ""])
def test_a_status_that_is_not_a_settle_status_is_refused(status: str) -> None:
    with pytest.raises(ValidationError, match="status"):
        DeliverySettled(session_id=SessionId("s"), at=1.0, delivery_id=DeliveryId("d"),
                        status=status)  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="status"):
        EVENTS.validate_python({"kind": "delivery_settled", "session_id": "s", "at": 1.0,
                                "delivery_id": "d", "status": status})


def test_a_queued_announcement_round_trips_with_its_jobs() -> None:
    event = AnnouncementQueued(session_id=SessionId("s"), at=2.5, delivery_id=DeliveryId("d"),
                               turn_id=TurnId("t"), job_ids=(JobId("j1"), JobId("j2")))
    back = EVENTS.validate_json(event.model_dump_json())
    assert back == event and back.kind == "announcement_queued"
    with pytest.raises(ValidationError, match="job_ids"):
        EVENTS.validate_python({"kind": "announcement_queued", "session_id": "s", "at": 1.0,
                                "delivery_id": "d", "turn_id": "t", "job_ids": "j1"})
