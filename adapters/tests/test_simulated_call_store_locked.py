"""A simulated-transport call (``run_call`` given a persisted flow) whose SQLite session
store is locked by another writer past its busy timeout keeps talking, and saves once the
lock is released (issue 29). Before, the save raised a raw ``sqlite3.OperationalError:
database is locked``, which the deferral (:func:`~voxflow_adapters.hosting.deferred_saves.
saves_deferred`, the hosted call's too) did not take for the store being away: that
question's turn failed and its answer was not heard. Now the store raises
:class:`~voxflow.errors.StoreLockedError`, the save is deferred, and the whole
conversation is stored once the other writer lets go.

Real SQLite (a second real connection holding ``BEGIN IMMEDIATE``), the real models,
real time.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest
from voxflow_adapters.testkit.scenario import run_call
from voxflow_adapters.testkit.script import CallScript
from voxflow_voice.engines import VoiceEngines

from voxflow import SQLiteFlowPersistence
from voxflow.clock import MonotonicClock
from voxflow.examples.assistant import assistant_class

from ._stored_calls import ANSWER, deferred_saves, logged, stored_messages


@pytest.mark.models
async def test_a_simulated_call_keeps_talking_while_its_sqlite_store_is_locked(
    engines: VoiceEngines, tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    path = tmp_path / "states.db"
    store = SQLiteFlowPersistence(path, busy_timeout=0.3)
    store.save_state("another-call", "setup", {"id": "another-call"})  # (the store in use)
    flow = assistant_class(None)(persistence=store)
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    turns: list[str] = []
    locked, released = threading.Event(), threading.Event()

    def release() -> None:
        other.execute("COMMIT")
        released.set()

    def on_event(event: Any) -> None:
        if event.kind == "turn_committed":
            turns.append(event.text)
        if event.kind == "speech_started" and not locked.is_set():
            locked.set()  # the first question: its turn's saves meet the lock
            other.execute("BEGIN IMMEDIATE")
        if event.kind == "turn_metrics" and len(turns) == 1 and not released.is_set():
            threading.Timer(2.0, release).start()  # (several deferred tries refused)

    script = (CallScript().user_says(0.5, "Hello there!").user_says(10.0, "Hello there!")
              .until(15.0))
    try:
        call = await run_call(flow, script, engines, on_event=on_event,
                              clock=MonotonicClock())
    finally:
        if locked.is_set() and not released.is_set():
            release()
        other.close()
    try:
        assert locked.is_set() and released.is_set(), turns
        assert len(turns) == 2, turns  # (the second asked after the release)
        assert [e.text for e in call.events if e.kind == "reply_finished"] == [ANSWER] * 2
        deferred = deferred_saves(caplog)
        assert deferred and "StoreLockedError" in deferred[0], logged(caplog)
        assert await stored_messages(store, flow.state.id) == [
            ("user", "Hello there."), ("assistant", ANSWER)] * 2
    finally:
        store.close()
