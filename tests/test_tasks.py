"""Block-scoped tasks (voxflow.tasks): cancelled and waited for when the block ends, the
block's exception unwrapped, the helper's own failure never lost."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import pytest

from voxflow.tasks import background, cancel_and_wait

pytestmark = pytest.mark.unit


async def test_the_helper_is_cancelled_and_waited_for_when_the_block_ends() -> None:
    ended: list[str] = []

    async def helper() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            await asyncio.sleep(0)  # its cleanup awaits: the block waits for it
            ended.append("helper")

    async with background(helper(), name="helper") as task:
        await asyncio.sleep(0)
    assert ended == ["helper"] and task.cancelled()


async def test_the_blocks_exception_goes_on_unwrapped() -> None:
    async def helper() -> None:
        await asyncio.Event().wait()

    with pytest.raises(KeyError):  # a TaskGroup would raise an ExceptionGroup
        async with background(helper(), name="helper"):
            raise KeyError("block")


async def test_the_helpers_own_failure_is_raised_where_the_block_ends() -> None:
    async def helper() -> None:
        raise RuntimeError("lease lost")

    with pytest.raises(RuntimeError, match="lease lost"):
        async with background(helper(), name="helper"):
            await asyncio.sleep(0.01)


async def test_with_both_failing_the_blocks_goes_on_and_the_helpers_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def helper() -> None:
        raise RuntimeError("helper broke")

    with caplog.at_level(logging.ERROR, logger="voxflow.tasks"), pytest.raises(KeyError):
        async with background(helper(), name="the-helper"):
            await asyncio.sleep(0.01)
            raise KeyError("block")
    (record,) = caplog.records
    assert "the-helper" in record.getMessage() and record.exc_info is not None
    assert str(record.exc_info[1]) == "helper broke"


async def test_a_failure_the_block_awaited_and_raised_is_not_logged_twice(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def helper() -> None:
        raise ValueError("helper")

    with caplog.at_level(logging.ERROR, logger="voxflow.tasks"), pytest.raises(ValueError):
        async with background(helper(), name="helper") as task:
            await task  # the block raises the helper's failure itself
    assert not caplog.records  # whoever handles the ValueError reports it, once


async def cancel_the_owner_while_the_helper_ends(
    block: Callable[[], Awaitable[None]], cleanup_failure: BaseException | None
) -> None:
    """Run ``block`` in a ``background`` block whose helper's cleanup is slow (and raises
    ``cleanup_failure``), cancelling the block's owner while background waits for it."""
    started = asyncio.Event()

    async def helper() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            started.set()
            await asyncio.sleep(0.05)  # a slow cleanup
            if cleanup_failure is not None:
                raise cleanup_failure from None
            raise

    async def owner() -> None:
        async with background(helper(), name="slow helper"):
            await asyncio.sleep(0)  # the helper is waiting
            await block()

    runner = asyncio.create_task(owner())
    await started.wait()  # the block ended: background waits for the helper's cleanup
    runner.cancel()  # and its owner is cancelled meanwhile
    with pytest.raises(asyncio.CancelledError):
        await runner


async def test_a_helper_failing_while_its_owner_is_cancelled_is_logged_not_lost(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def block() -> None:
        pass

    with caplog.at_level(logging.ERROR, logger="voxflow.tasks"):
        await cancel_the_owner_while_the_helper_ends(block, OSError("cleanup failed"))
    assert [r.getMessage() for r in caplog.records] == ["slow helper failed as its block ended"]
    assert isinstance(caplog.records[0].exc_info[1], OSError)  # type: ignore[index]


async def test_a_block_failure_replaced_by_a_cancellation_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def block() -> None:
        raise KeyError("the block's own failure")

    with caplog.at_level(logging.ERROR, logger="voxflow.tasks"):
        await cancel_the_owner_while_the_helper_ends(block, None)
    (record,) = caplog.records
    assert "slow helper" in record.getMessage()
    assert isinstance(record.exc_info[1], KeyError)  # type: ignore[index]


async def test_a_helper_that_returned_is_not_cancelled() -> None:
    async def helper() -> int:
        return 7

    async with background(helper(), name="helper") as task:
        assert await task == 7
    assert not task.cancelled() and task.result() == 7


async def test_cancel_and_wait_holds_the_callers_cancellation_until_the_tasks_ended() -> None:
    ended = asyncio.Event()

    async def slow_cleanup() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            await asyncio.sleep(0.05)
            ended.set()

    task = asyncio.create_task(slow_cleanup())
    await asyncio.sleep(0)
    owner = asyncio.create_task(cancel_and_wait([task]))
    await asyncio.sleep(0.01)
    owner.cancel()  # the owner is cancelled while its task still cleans up
    with pytest.raises(asyncio.CancelledError):
        await owner
    assert ended.is_set() and task.cancelled()  # the task ended before its owner did
