"""The job inbox through a reset of its database connections (``pg_terminate_backend``,
the server up): the next operations see nothing of it. The database is the test's own
(``pg_faults``): every connection reset is the test's."""

from __future__ import annotations

from tests.conftest import PgFaults
from voxflow.jobs.inbox import JobInbox


async def test_a_reset_of_every_inbox_connection_is_invisible_to_the_next_operations(
    pg_faults: PgFaults,
) -> None:
    inbox = JobInbox(pg_faults.url, connect_timeout=5)
    try:
        assert await inbox.pending("s") == []
        pool = await inbox._open()
        held = [await pool.getconn() for _ in range(3)]  # a busy worker's pool
        for conn in held:
            await pool.putconn(conn)
        assert pg_faults.reset() >= 3
        for _ in range(4):  # more than the pool held: none of its dead connections is used
            assert await inbox.pending("s") == []
        assert await inbox.ack("s", []) == 0
        assert await inbox.purge(3600) == 0
    finally:
        await inbox.close()
