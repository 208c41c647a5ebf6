"""A call's close runs every closer, whatever one of them does."""

from __future__ import annotations

import asyncio

import pytest
from voxflow_adapters.hosting.calls import Call

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("outcome", [asyncio.CancelledError, RuntimeError])
async def test_every_closer_runs_even_when_one_fails_or_is_cancelled(
    outcome: type[BaseException],
) -> None:
    ran: list[str] = []

    async def journal() -> None:
        ran.append("journal")
        raise outcome("the journal's close")

    async def wiring() -> None:
        await asyncio.sleep(0)  # (it awaits, after the cancellation was taken)
        ran.append("wiring")

    call = Call(session=None, flow=None)  # type: ignore[arg-type]
    call._closers += [journal, wiring]
    with pytest.raises(outcome):
        await call.aclose()
    assert ran == ["journal", "wiring"]  # the job runner and connections were closed
    await call.aclose()  # idempotent: nothing runs twice
    assert ran == ["journal", "wiring"]
