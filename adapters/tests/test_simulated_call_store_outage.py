"""A simulated-transport call (``run_call`` given a persisted flow) whose session store is
away for a while keeps talking, and saves once the store is back (issue 29): the hosted
call deferred its saves (:mod:`voxflow_adapters.hosting.deferred_saves`), ``run_call``
did not. With its PostgreSQL away from the moment the second question began, that
question's turn failed ("reply failed": its save raised PersistenceUnavailableError)
and the caller heard no answer to it. Now the save is deferred
(:func:`~voxflow_adapters.hosting.deferred_saves.saves_deferred`, the hosted call's
own), the question is answered, and the whole conversation is stored once the store is
back.

A store already away when the call begins (PostgreSQL refusing connections, SQLite's
folder unusable) is no outage the call rides out: nothing of the session was ever saved,
and a store that never answers may be a wrong URL or path. ``run_call`` then failed the
first turn ("reply failed", logged; the caller heard nothing) and returned as if the call
had gone well; it now raises the store's PersistenceUnavailableError before the call
begins, naming the store and the fix, as a hosted call worker refuses to start. A store
of one's own without ``check_writable`` (no :class:`~voxflow.flow.persistence.WritableCheck`)
has nothing to prove before the call: it runs, and saves there.

A real PostgreSQL (a database of the test's own, ``pg_faults``: it refuses connections
and its open ones are reset), the real models, real time.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from pathlib import Path
from typing import Any

import pytest
from voxflow_adapters.testkit.scenario import run_call
from voxflow_adapters.testkit.script import CallScript
from voxflow_voice.engines import VoiceEngines

from voxflow.clock import MonotonicClock
from voxflow.errors import PersistenceUnavailableError
from voxflow.examples.assistant import assistant_class
from voxflow.flow.persistence import SQLiteFlowPersistence, WritableCheck
from voxflow.flow.postgres import PostgresFlowPersistence

from ._stored_calls import ANSWER, deferred_saves, logged, stored_messages


@pytest.mark.models
async def test_a_simulated_call_keeps_talking_through_a_store_outage(
    engines: VoiceEngines, pg_faults: Any, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    store = PostgresFlowPersistence(pg_faults.url, connect_timeout=1)
    flow = assistant_class(None)(persistence=store)
    outage = pg_faults.down()
    turns: list[str] = []
    down, back = threading.Event(), threading.Event()

    def on_event(event: Any) -> None:
        if event.kind == "turn_committed":
            turns.append(event.text)
        if event.kind == "speech_started" and len(turns) == 1 and not down.is_set():
            down.set()  # the second question: its turn's saves meet the outage
            outage.__enter__()
        if event.kind == "turn_metrics" and len(turns) == 2 and not back.is_set():
            back.set()  # (5 s on: past the store's own retry on a fresh connection)
            threading.Timer(5.0, outage.__exit__, (None, None, None)).start()

    script = (CallScript().user_says(0.5, "Hello there!").user_says(7.0, "Hello there!")
              .user_says(20.0, "Hello there!").until(26.0))
    try:
        call = await run_call(flow, script, engines, on_event=on_event,
                              clock=MonotonicClock())
    finally:
        if down.is_set() and not back.is_set():
            outage.__exit__(None, None, None)
    try:
        assert down.is_set() and back.is_set(), turns
        assert [e.text for e in call.events if e.kind == "reply_finished"] == [ANSWER] * 3
        assert await stored_messages(store, flow.state.id) == [
            ("user", "Hello there."), ("assistant", ANSWER)] * 3
        assert deferred_saves(caplog), logged(caplog)
    finally:
        with contextlib.suppress(Exception):
            store.close()


@pytest.mark.models
@pytest.mark.parametrize("kind", ["postgres", "sqlite"])
async def test_a_simulated_call_whose_store_is_away_from_the_start_is_refused(
    engines: VoiceEngines, pg_faults: Any, tmp_path: Path, kind: str,
) -> None:
    if kind == "postgres":
        store: Any = PostgresFlowPersistence(pg_faults.url, connect_timeout=1)
        names, fix = pg_faults.name, "that the server is running"
    else:  # its folder is a file: nothing can be created there
        (tmp_path / "home").write_text("not a folder")
        store = SQLiteFlowPersistence(tmp_path / "home" / "calls.db")
        names, fix = str(tmp_path / "home" / "calls.db"), "writable"
    flow = assistant_class(None)(persistence=store)
    events: list[str] = []
    script = CallScript().user_says(0.5, "Hello there!").until(6.0)
    try:
        with pg_faults.down(), pytest.raises(PersistenceUnavailableError) as raised:
            await run_call(flow, script, engines, clock=MonotonicClock(),
                           on_event=lambda event: events.append(event.kind))
        assert names in str(raised.value) and fix in str(raised.value), raised.value
        assert events == []  # refused before the call: no turn taken and failed
    finally:
        with contextlib.suppress(Exception):
            store.close()


class _Memory:
    """A session store of one's own (a ``FlowPersistence``) with no ``check_writable``:
    nothing to prove before the call, its first save tells."""

    def __init__(self) -> None:
        self.saved: dict[str, dict[str, Any]] = {}

    def save_state(self, flow_uuid: str, method_name: str, state: dict[str, Any]) -> None:
        self.saved[flow_uuid] = state

    def load_state(self, flow_uuid: str) -> dict[str, Any] | None:
        return self.saved.get(flow_uuid)

    def save_pending_feedback(self, *args: Any) -> None: ...

    def load_pending_feedback(self, flow_uuid: str) -> None:
        return None

    def clear_pending_feedback(self, flow_uuid: str) -> None: ...


@pytest.mark.models
async def test_a_simulated_call_whose_store_has_no_check_runs_and_saves(
    engines: VoiceEngines,
) -> None:
    memory = _Memory()
    assert not isinstance(memory, WritableCheck)
    flow = assistant_class(None)(persistence=memory)
    call = await run_call(flow, CallScript().user_says(0.5, "Hello there!").until(6.0), engines)
    assert [e.text for e in call.events if e.kind == "reply_finished"] == [ANSWER]
    assert [m["content"] for m in memory.saved[flow.state.id]["messages"]] == [
        "Hello there.", ANSWER]


@pytest.mark.models
async def test_run_call_refuses_what_is_not_a_flow_before_the_call(
    engines: VoiceEngines,
) -> None:
    with pytest.raises(TypeError, match=r"conversational Flow.*got _Memory"):
        await run_call(_Memory(), CallScript().user_says(0.5, "Hi"), engines)  # type: ignore[arg-type]
