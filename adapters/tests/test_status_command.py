"""``voxflow status``: its refusals, each one line with the fix (a real deployment's status
is read in ``tests/docs/test_readme_monitoring_run.py``)."""

from __future__ import annotations

import pytest

from voxflow.cli import main

pytestmark = pytest.mark.unit


def test_without_a_database_it_says_which_variable(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("VOXFLOW_DATABASE_URL", raising=False)
    assert main(["status"]) == 2
    err = capsys.readouterr().err
    assert "set VOXFLOW_DATABASE_URL=postgresql://" in err and "Traceback" not in err


def test_an_unreachable_database_is_one_line_without_its_password(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("VOXFLOW_DATABASE_URL", "postgresql://ops:hunter2@127.0.0.1:1/fleet")
    assert main(["status"]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("error: cannot use the dispatch database at ")
    assert "hunter2" not in err and "Traceback" not in err and err.count("\n") == 1


def test_it_runs_no_flow(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as refused:
        main(["status", "examples/support.py:Support"])
    assert refused.value.code == 2
    assert "unrecognized arguments" in capsys.readouterr().err


async def test_each_call_worker_shows_its_kind_and_each_kind_its_free_slots(
    pg_schema_url: str,
) -> None:
    """Browser and phone workers share the dispatch tables but never each other's calls:
    ``voxflow status`` says which kind each worker answers (before: a phone worker's row
    looked like a browser worker's) and, with both kinds live, each kind's free slots."""
    import asyncio

    from voxflow_adapters.hosting.dispatch import DispatchStore
    from voxflow_adapters.hosting.fleet import read_fleet, render_fleet

    browsers = DispatchStore(pg_schema_url, kind="webrtc")
    phones = DispatchStore(pg_schema_url, kind="phone")
    try:
        await browsers.register("web-1", slots=4, host="box", pid=11, used=1)
        await phones.register("tel-1", slots=2, host="box", pid=12)
        seen_by_phones = await phones.workers()
    finally:
        await browsers.aclose()
        await phones.aclose()
    fleet = await asyncio.to_thread(read_fleet, pg_schema_url)
    assert [(w.worker_id, w.kind) for w in fleet.workers] == [("tel-1", "phone"),
                                                              ("web-1", "webrtc")]
    assert [(w.worker_id, w.kind) for w in seen_by_phones] == [("tel-1", "phone")]
    text = render_fleet(fleet).splitlines()
    assert text[0].startswith("call workers: 2 (2 live, 5 free slot(s): 2 phone, 3 webrtc)")
    assert text[1].split()[:3] == ["worker", "kind", "host"]
    assert text[2].split()[:2] == ["tel-1", "phone"]
    assert text[3].split()[:2] == ["web-1", "webrtc"]
    assert '"kind": "phone"' in fleet.model_dump_json(indent=1)


async def test_an_uncapped_worker_counts_its_measured_headroom_not_its_ceiling(
    pg_schema_url: str,
) -> None:
    """A worker with no ``--max-calls`` registers the admission's ceiling (10000 slots);
    its heartbeat's headroom says what it takes. ``voxflow status`` counts free slots as a
    front door does (before: two uncapped workers with headroom 1 and 2 showed "19999
    free slot(s)"), and shows such a worker's slots as measured, not 10000."""
    import asyncio

    import psycopg
    from voxflow_adapters.hosting.admission import UNBOUNDED_CALLS
    from voxflow_adapters.hosting.dispatch import DispatchStore
    from voxflow_adapters.hosting.dispatch_tables import WorkerReport
    from voxflow_adapters.hosting.fleet import read_fleet, render_fleet

    store = DispatchStore(pg_schema_url, kind="phone")
    try:
        await store.register("tel-1", slots=UNBOUNDED_CALLS, host="box", pid=11, used=1)
        await store.register("tel-2", slots=UNBOUNDED_CALLS, host="box", pid=12)
        await store.register("tel-3", slots=3, host="box", pid=13, used=1)
        with psycopg.connect(pg_schema_url, autocommit=True) as conn:
            for worker, headroom in (("tel-1", 1.0), ("tel-2", 1.5), ("tel-3", 0.0)):
                conn.execute(store.heartbeat_sql(), {
                    **WorkerReport(headroom=headroom).params(), "used": None,
                    "worker_id": worker})
        front_door_counts = await store.free_slots()
    finally:
        await store.aclose()
    fleet = await asyncio.to_thread(read_fleet, pg_schema_url)
    text = render_fleet(fleet).splitlines()
    assert front_door_counts == (1 + 2 + 2, 3)
    assert text[0].startswith("call workers: 3 (3 live, 5 free slot(s)) in schema ")
    assert text[1].split()[4:7] == ["slots", "calls", "free"]
    assert text[2].split()[:8] == ["tel-1", "phone", "box", "11", "2", "measured", "1", "1"]
    assert text[3].split()[:8] == ["tel-2", "phone", "box", "12", "2", "measured", "0", "2"]
    assert text[4].split()[:7] == ["tel-3", "phone", "box", "13", "3", "1", "2"]
    assert [w.free for w in fleet.workers] == [1, 2, 2]
    assert '"free":2' in fleet.model_dump_json()
    assert "10000" not in "\n".join(text)


async def test_each_worker_shows_what_a_call_costs_it_and_why_it_refuses(
    pg_schema_url: str,
) -> None:
    """Each heartbeat writes the worker's load (:class:`WorkerReport`): ``voxflow status``
    shows its measured slots, its cost per call and where that figure comes from, its
    p95, and a line with the prior, the models' recent real-time factors and why it
    refuses calls (before: slots, calls and headroom only; the figures admission decides
    by were in no row). A worker that reported none (an older version's) shows '-'."""
    import asyncio

    import psycopg
    from voxflow_adapters.hosting.admission import UNBOUNDED_CALLS
    from voxflow_adapters.hosting.dispatch import DispatchStore
    from voxflow_adapters.hosting.dispatch_tables import WorkerReport
    from voxflow_adapters.hosting.fleet import read_fleet, render_fleet
    from voxflow_adapters.hosting.heartbeat import Heartbeat

    reports = {
        "web-1": WorkerReport(headroom=3.0, measured_slots=5, call_cost=0.132,
                              prior_call_cost=0.157, cost_source="measured",
                              model_rtf={"stt": 0.21, "tts": 0.35, "vad": 0.012},
                              p95_ms=870.0),
        "web-2": WorkerReport(headroom=0.0, measured_slots=2, call_cost=0.199,
                              prior_call_cost=0.199, cost_source="models", p95_ms=1500.0,
                              refusal="this server is too busy: answers take 1,500 ms"),
    }
    store = DispatchStore(pg_schema_url)
    try:
        await store.register("web-1", slots=UNBOUNDED_CALLS, host="box", pid=11, used=2)
        await store.register("web-2", slots=4, host="box", pid=12, used=2)
        await store.register("web-3", slots=2, host="box", pid=13)
        with psycopg.connect(store.url, **store.connect_options) as conn:
            for worker_id, report in reports.items():
                Heartbeat(store, worker_id, interval=60.0, report=lambda r=report: r)._beat(
                    conn)
    finally:
        await store.aclose()
    fleet = await asyncio.to_thread(read_fleet, pg_schema_url)
    text = render_fleet(fleet).splitlines()
    assert text[1].split()[7:10] == ["headroom", "cost/call", "p95"]
    assert text[2].split()[:11] == ["web-1", "webrtc", "box", "11", "5", "measured", "2", "3",
                                   "3", "13.2%:measured", "870ms"]
    # (a --max-calls worker whose measured slots are fewer: both shown, free of the
    # fewer: before, '2/4' beside 2 free read as 2 of 4 used and 2 more to take)
    assert text[3].split()[:12] == ["web-2", "webrtc", "box", "12", "4", "(2", "measured)",
                                    "2", "0", "0", "19.9%:models", "1,500ms"]
    assert text[0].startswith("call workers: 3 (3 live, 5 free slot(s))")
    assert text[4].split()[:9] == ["web-3", "webrtc", "box", "13", "2", "0", "2", "-", "-"]
    assert text[5] == ("  web-1: prior 15.7% a call; models' recent RTF stt 0.210, "
                       "tts 0.350, vad 0.012")
    assert text[6] == ("  web-2: prior 19.9% a call; refusing: this server is too busy: "
                       "answers take 1,500 ms")
    assert [(w.measured_slots, w.cost_source, w.model_rtf) for w in fleet.workers] == [
        (5, "measured", {"stt": 0.21, "tts": 0.35, "vad": 0.012}), (2, "models", {}),
        (None, None, {})]
    assert '"call_cost":0.132' in fleet.model_dump_json()


async def test_a_table_an_older_version_made_reads_as_browser_workers(
    pg_schema_url: str,
) -> None:
    """The ``kind`` column is added when a worker or front door of this version starts;
    ``voxflow status`` run first against a deployment of an older version (its workers'
    table without the column) shows them, as browser workers (before: "cannot use the
    dispatch database")."""
    import asyncio

    import psycopg
    from voxflow_adapters.hosting.dispatch import DispatchStore
    from voxflow_adapters.hosting.fleet import read_fleet, render_fleet

    store = DispatchStore(pg_schema_url, kind="webrtc")
    try:
        await store.register("old-1", slots=3, host="box", pid=21)
    finally:
        await store.aclose()
    with psycopg.connect(pg_schema_url, autocommit=True) as conn:
        conn.execute("ALTER TABLE voxflow_call_workers DROP COLUMN kind")
    fleet = await asyncio.to_thread(read_fleet, pg_schema_url)
    assert [(w.worker_id, w.kind, w.slots) for w in fleet.workers] == [("old-1", "webrtc", 3)]
    assert render_fleet(fleet).splitlines()[2].split()[:2] == ["old-1", "webrtc"]


async def test_a_report_column_this_version_cannot_read_counts_as_not_reported(
    pg_schema_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A report column of another shape (another version's ``model_rtf``, a NaN cost) is
    read as not reported, with one warning naming the worker and the column: ``voxflow
    status`` shows '-' and exits 0, the workers' list and the dead-worker sweep go on
    (before: a pydantic traceback; the sweep rolled back, leaving every dead row)."""
    import asyncio

    from voxflow_adapters.hosting.dispatch import DispatchStore

    store = DispatchStore(pg_schema_url)
    try:
        for worker_id in ("bad-1", "bad-2", "good-1"):
            await store.register(worker_id, slots=2, host="box", pid=1)
        await store._run(lambda conn: conn.execute(
            "UPDATE voxflow_call_workers SET model_rtf = CASE worker_id "
            "WHEN 'bad-1' THEN '{\"stt\": null}'::jsonb WHEN 'bad-2' THEN '[1]'::jsonb END, "
            "call_cost = CASE worker_id WHEN 'bad-1' THEN 'NaN'::float8 ELSE 0.1 END "
            "WHERE worker_id <> 'good-1'"))
        rows = {w.worker_id: w for w in await store.workers()}
        assert (rows["bad-1"].model_rtf, rows["bad-1"].call_cost) == ({}, None)
        assert (rows["bad-2"].model_rtf, rows["bad-2"].call_cost) == ({}, 0.1)
        monkeypatch.setenv("VOXFLOW_DATABASE_URL", pg_schema_url)
        assert await asyncio.to_thread(main, ["status"]) == 0
        out, err = capsys.readouterr()
        lines = {line.split()[0]: line.split() for line in out.splitlines()[2:5]}
        assert lines["bad-1"][9] == "-" and "Traceback" not in err
        warned = [r.getMessage() for r in caplog.records if "bad-1" in r.getMessage()]
        assert any("model_rtf" in m for m in warned) and any("call_cost" in m for m in warned)
        await store._run(lambda conn: conn.execute(
            "UPDATE voxflow_call_workers SET heartbeat_at = heartbeat_at - 3600"))
        gone = await store.forget_dead_workers()
        assert sorted(w.worker_id for w in gone) == ["bad-1", "bad-2", "good-1"]
        assert await store.workers() == []
    finally:
        await store.aclose()


def test_a_cost_over_64_cores_is_not_reported() -> None:
    """A cost is a share of a core (0.132), bounded as ``CostSettings.prior_call_cost``
    is (at most 64 cores): a figure past it (a percent by mistake, 132 for 132 %) is
    left out (before: accepted, shown as 13200.0%)."""
    from voxflow_adapters.hosting.dispatch_tables import WorkerReport

    report, dropped = WorkerReport.leniently(
        {"headroom": 1.0, "call_cost": 132.0, "prior_call_cost": 64.5, "p95_ms": 870.0})
    assert (report.headroom, report.call_cost, report.prior_call_cost, report.p95_ms) == (
        1.0, None, None, 870.0)
    assert dropped == ["call_cost", "prior_call_cost"]
