"""A call worker for ``test_job_queue_pg.py``: one persisted text turn that starts a
background job on the queue, then it waits to be killed.

``python queue_call_worker.py URL SCHEMA``: prints the session id once the turn is saved
and the job queued.
"""

from __future__ import annotations

import asyncio
import sys

from voxflow import persist
from voxflow.flow.postgres import PostgresFlowPersistence
from voxflow.jobs import PostgresJobQueue
from voxflow.loader import load_flow_class
from voxflow.wiring import AssistantWiring


async def main(url: str, schema: str, flow_spec: str) -> None:
    store = PostgresFlowPersistence(url, schema=schema)
    saved = persist(store)(type("SavedTravel", (load_flow_class(flow_spec),), {}))
    queue = PostgresJobQueue(url, schema=schema)
    flow = saved()
    wiring = AssistantWiring(flow, job_queue=queue)
    await wiring.text_turn("is my flight on time?")
    print(flow.state.id, flush=True)
    await asyncio.sleep(600)  # killed here, its job queued and not yet run


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
