"""The PostgreSQL job-queue tests' fixtures: a fresh schema per test (dropped after it;
skipped with the reason where no PostgreSQL answers) and a migrated queue in it."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest

from tests.conftest import PG_URL, skip_without_postgres
from voxflow.jobs import PostgresJobQueue


@pytest.fixture
def schema() -> Iterator[str]:
    skip_without_postgres()
    name = f"vxq_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    yield name
    import psycopg

    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute("SET lock_timeout = '60s'")  # a connection left open fails, not hangs
        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


@pytest.fixture
async def queue(schema: str) -> AsyncIterator[PostgresJobQueue]:
    q = PostgresJobQueue(PG_URL, schema=schema)
    await q.migrate()
    yield q
    q.close()
    await q.inbox.close()
