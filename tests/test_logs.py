"""Log lines with their time and identities: text for people, JSON for machines."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import re
from collections.abc import Iterator

import pytest

from voxflow.logs import bind_log_context, configure_logging

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def _restore_root() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def test_json_lines_carry_time_level_and_identities() -> None:
    out = io.StringIO()
    configure_logging("INFO", "json", stream=out)
    logging.getLogger("voxflow.test").info(
        "call ended", extra={"call_id": "c-1", "session_id": "s-1", "reason": "hangup"})
    logging.getLogger("voxflow.test").debug("not shown")
    lines = out.getvalue().splitlines()
    assert len(lines) == 1
    record = json.loads(lines[0])
    assert record["message"] == "call ended" and record["level"] == "INFO"
    assert (record["call_id"], record["session_id"], record["reason"]) == ("c-1", "s-1", "hangup")
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", record["time"])


def test_text_lines_start_with_the_time_and_end_with_the_identities() -> None:
    out = io.StringIO()
    configure_logging("WARNING", "text", stream=out)
    logging.getLogger("voxflow.test").warning("slow", extra={"call_id": "c-2"})
    line = out.getvalue().strip()
    assert re.match(r"\d{4}-\d\d-\d\dT[\d:.]+Z WARNING voxflow.test: slow call_id=c-2$", line)


@pytest.mark.parametrize(("level", "fmt"), [("LOUD", "text"), ("INFO", "xml")])
def test_unknown_levels_and_formats_are_rejected(level: str, fmt: str) -> None:
    with pytest.raises(ValueError):
        configure_logging(level, fmt)  # type: ignore[arg-type]


def test_a_bound_call_id_reaches_every_line_of_that_call_and_no_other() -> None:
    out = io.StringIO()
    configure_logging("INFO", "json", stream=out)
    log = logging.getLogger("voxflow.test")

    async def call(call_id: str) -> None:
        bind_log_context(call_id=call_id)

        async def inner() -> None:  # a task the call starts: a session, a peer callback
            log.info("inside", extra={"turn_id": "t-1"})

        await asyncio.get_running_loop().create_task(inner())
        log.info("explicit", extra={"call_id": "given"})  # extra= wins over the context

    async def main() -> None:
        await asyncio.gather(call("call-1"), call("call-2"))
        log.info("outside")

    asyncio.run(main())
    records = [json.loads(line) for line in out.getvalue().splitlines()]
    inside = sorted((r["call_id"], r["turn_id"]) for r in records if r["message"] == "inside")
    assert inside == [("call-1", "t-1"), ("call-2", "t-1")]
    assert [r["call_id"] for r in records if r["message"] == "explicit"] == ["given", "given"]
    assert [r.get("call_id") for r in records if r["message"] == "outside"] == [None]


@pytest.mark.parametrize(("ids", "error"), [
    ({"msg": "x"}, ValueError), ({"_secret": "x"}, ValueError), ({"call_id": 3}, TypeError),
])
def test_bad_log_context_is_refused(ids: dict[str, object], error: type[Exception]) -> None:
    with pytest.raises(error):
        bind_log_context(**ids)  # type: ignore[arg-type]
