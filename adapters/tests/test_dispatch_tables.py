"""The dispatch rows' models, without a database: a heartbeat's report and the row read
back are made of one definition of the report's fields; a malformed report column is
warned about once per worker and column, in memory that a fleet of churning worker ids
cannot grow without end."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from voxflow_adapters.hosting import dispatch_tables
from voxflow_adapters.hosting.dispatch_tables import (
    CORE_COLUMNS,
    REPORT_COLUMNS,
    WorkerReport,
    WorkerRow,
    worker_row,
)

FULL = WorkerReport(headroom=1.5, measured_slots=3, call_cost=0.132, prior_call_cost=0.157,
                    cost_source="measured", model_rtf={"stt": 0.07, "tts": 0.09},
                    p95_ms=640.0, refusal="too busy")


def _values(worker_id: str, report: WorkerReport, **report_values: Any) -> tuple[Any, ...]:
    """A row as DispatchStore.workers selects it: CORE_COLUMNS, then REPORT_COLUMNS (jsonb
    read back as psycopg does, a dict)."""
    core = {"worker_id": worker_id, "host": "h", "pid": 1, "slots": 4, "used": 1,
            "headroom": report.headroom, "draining": False, "heartbeat_age": 0.2,
            "kind": "webrtc"}
    fields = {**report.model_dump(), **report_values}
    return (*(core[c] for c in CORE_COLUMNS), *(fields[c] for c in REPORT_COLUMNS))


def test_every_report_field_is_a_row_field_of_the_same_definition() -> None:
    """One definition (before: WorkerRow repeated the seven fields, without their
    checks: a field added to the report could be forgotten in the row)."""
    assert set(REPORT_COLUMNS) == set(WorkerReport.model_fields) - {"headroom"}
    for name, field in WorkerReport.model_fields.items():
        row_field = WorkerRow.model_fields[name]
        assert (row_field.annotation, row_field.metadata) == (field.annotation,
                                                              field.metadata), name


def test_a_report_written_and_read_back_is_the_same_report() -> None:
    row = worker_row(_values("w-1", FULL))
    assert WorkerReport(**row.model_dump(include=set(WorkerReport.model_fields))) == FULL
    assert (row.worker_id, row.slots, row.used, row.kind) == ("w-1", 4, 1, "webrtc")


def test_a_row_keeps_a_nan_headroom_column_and_counts_no_free_slot_of_it() -> None:
    """The headroom is a core column (a worker of any version writes it): the row reads
    what is there, as before; a capped worker's free slots do not depend on it."""
    row = worker_row(_values("w-1", WorkerReport()))
    nan = row.model_copy(update={"headroom": float("nan")})
    assert nan.free == row.free == 3


def test_a_malformed_report_column_reads_as_not_reported_with_one_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    dispatch_tables._warned.clear()
    for _ in range(3):
        row = worker_row(_values("w-odd", FULL, call_cost=-1.0, model_rtf=[1]))
        assert row.call_cost is None and row.model_rtf == {} and row.p95_ms == 640.0
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 2 and all("w-odd" in m for m in said)
    assert ["call_cost" in said[0], "model_rtf" in said[1]] == [True, True]


def test_the_warnings_remembered_are_bounded_for_a_fleet_of_churning_worker_ids(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Before: a module-level set of every (worker, column) warned about, forever; a
    fleet whose workers restart under new ids grew it without end. Now the last 4,096
    pairs, the least recently read forgotten first."""
    caplog.set_level(logging.WARNING)
    dispatch_tables._warned.clear()
    odd = {"call_cost": -1.0}
    for n in range(5000):
        worker_row(_values(f"w-{n}", FULL, **odd))
    assert len(dispatch_tables._warned) <= 4096
    warned = len(caplog.records)
    assert warned == 5000  # each one once
    worker_row(_values("w-4999", FULL, **odd))  # recent: remembered, not said again
    assert len(caplog.records) == warned
    worker_row(_values("w-0", FULL, **odd))  # forgotten: said again (once)
    worker_row(_values("w-0", FULL, **odd))
    assert len(caplog.records) == warned + 1
