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
