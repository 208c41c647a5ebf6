"""Speculative replies on the real models, on deterministic virtual time.

The session answers the utterance heard up to a short pause (``end_pad``) while it waits
for the end of the turn, with the reply's audio held. If the turn ends there, that reply
is the turn's and plays at once; if the user speaks on, it is dropped unheard and the
flow's state (history, turn records, the persisted snapshot) is rolled back.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pydantic import ConfigDict, Field
from voxflow_adapters.testkit.flows import ACKNOWLEDGEMENT, Teller, words
from voxflow_adapters.testkit.scenario import CallResult, run_call
from voxflow_adapters.testkit.script import CallScript
from voxflow_voice.engines import VoiceEngines
from voxflow_voice.events import ReplyStarted, SpeculativeReplyDiscarded, TurnCommitted
from voxflow_voice.listen.turn_detector import TurnDetection
from voxflow_voice.session import VoiceSettings

from voxflow import SQLiteFlowPersistence, persist
from voxflow.clock import VirtualClock
from voxflow.turns import TurnRunner, TurnState
from voxflow.wiring import AssistantState, AssistantWiring

pytestmark = pytest.mark.models


@pytest.fixture
def engines(voice_engines: VoiceEngines) -> VoiceEngines:
    """The real engines with the silence timer (the end of the turn is a known silence;
    tests/test_end_of_turn_session.py speculates with the end-of-turn model)."""
    return dataclasses.replace(voice_engines, end_of_turn=None)

# A long end-of-turn wait, so a mid-sentence pause of ~0.5 s is a pause, not a turn end.
PATIENT = VoiceSettings(turn_detection=TurnDetection(end_of_turn_silence=1.2))


def spoken_seconds(engines: VoiceEngines, text: str) -> float:
    """How long the bundled voice takes to say ``text``."""
    chunks = list(engines.tts.synthesize(text))
    return sum(c.samples.size for c in chunks) / engines.tts.sample_rate


def delivered(call: CallResult) -> set[str]:
    """Deliveries of which the client played at least one sample."""
    return {r.delivery_id for r in call.tape.receipts if r.num_samples > 0}


async def test_a_turn_that_ends_at_the_pause_is_answered_by_its_speculative_reply(
    engines: VoiceEngines,
) -> None:
    turns = TurnRunner(Teller())
    script = CallScript().user_says(0.3, "What time is it?").until(6.0)
    call = await run_call(turns, script, engines)
    [metrics] = call.metrics()
    assert metrics.speculative
    [committed] = call.of_kind("turn_committed")
    [started] = call.of_kind("reply_started")
    kinds = [e.kind for e in call.events]
    assert kinds.index("turn_committed") < kinds.index("reply_started")  # held until confirmed
    assert committed.turn_id == started.turn_id == metrics.turn_id
    assert call.settled(started.delivery_id) == "completed"
    assert not call.of_kind("speculative_reply_discarded")
    # the audio waited for the end of the turn (about 0.6 s of silence), then came at once
    assert metrics.first_audio is not None
    assert metrics.first_audio - metrics.speech_end >= 0.6 - 0.04
    assert [m.content for m in turns.flow.state.messages][1] == ACKNOWLEDGEMENT


async def test_a_reply_the_user_talks_over_is_never_heard_nor_kept(
    engines: VoiceEngines, tmp_path: Path,
) -> None:
    backend = SQLiteFlowPersistence(tmp_path / "calls.db")

    class SavedTeller(Teller):
        pass

    turns = TurnRunner(persist(backend)(SavedTeller)())
    first, second = "What time", "is it in Paris?"
    resume = 0.3 + spoken_seconds(engines, first) + 0.35
    script = CallScript().user_says(0.3, first).user_says(resume, second).until(9.0)
    call = await run_call(turns, script, engines, settings=PATIENT)

    [discarded] = call.of_kind("speculative_reply_discarded")
    assert isinstance(discarded, SpeculativeReplyDiscarded)
    assert words(discarded.text) == words(first)
    assert discarded.reason == "the user spoke on"
    # It was prepared (synthesized and held), then dropped: not a sample was played.
    assert call.session.playback.statistics().chunks_dropped > 0
    started = [e for e in call.events if isinstance(e, ReplyStarted)]
    assert [e.turn_id for e in started] != [discarded.turn_id]
    assert delivered(call) == {e.delivery_id for e in started}
    assert call.stale_samples() == 0
    # One turn, the whole sentence; the discarded one left no trace, live or stored.
    [committed] = [e for e in call.events if isinstance(e, TurnCommitted)]
    assert words(committed.text) == words(f"{first} {second}")
    state = turns.flow.state
    assert [m.role for m in state.messages] == ["user", "assistant"]
    assert words(state.messages[0].content) == words(committed.text)
    assert list(state.turns) == [committed.turn_id]
    stored = backend.load_state(str(state.id))
    assert stored is not None
    assert [m["content"] for m in stored["messages"]] == [m.content for m in state.messages]
    assert list(stored["turns"]) == [committed.turn_id]


async def test_speculation_can_be_turned_off(engines: VoiceEngines) -> None:
    turns = TurnRunner(Teller())
    script = CallScript().user_says(0.3, "What time is it?").until(6.0)
    call = await run_call(
        turns, script, engines, settings=VoiceSettings(speculative_replies=False)
    )
    [metrics] = call.metrics()
    assert not metrics.speculative
    assert len(call.replies()) == 1
    assert np.isfinite(metrics.speech_end)


async def test_a_call_that_ends_in_the_pause_closes_with_its_held_reply_unheard(
    engines: VoiceEngines,
) -> None:
    # The caller asks and hangs up within the end-of-turn silence: the end of input
    # confirms the turn, but nobody plays audio any more. The held reply (longer than the
    # client's buffer) must be cut, not released into a transport that never drains.
    turns = TurnRunner(Teller())
    script = CallScript().user_says(0.3, "Tell me a story.")
    call = await asyncio.wait_for(
        run_call(turns, script, engines, settings=PATIENT, tail=0.8), timeout=120
    )
    [committed] = call.of_kind("turn_committed")
    [metrics] = call.metrics()
    assert metrics.speculative and metrics.turn_id == committed.turn_id
    [reply] = call.replies()
    assert call.settled(reply) == "interrupted"
    assert call.heard_seconds(reply) == 0.0
    assert call.of_kind("session_closed")


class _GuardedState(TurnState):
    """A state holding an object that cannot be copied (so no rollback point either)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    guard: Any = Field(default_factory=threading.Lock)


async def test_a_state_that_cannot_be_rolled_back_is_answered_the_usual_way(
    engines: VoiceEngines,
) -> None:
    turns = TurnRunner(Teller(state=_GuardedState()))
    script = CallScript().user_says(0.3, "What time is it?").until(6.0)
    call = await run_call(turns, script, engines)
    [metrics] = call.metrics()
    assert not metrics.speculative  # no speculation without a rollback point
    [reply] = call.replies()
    assert call.settled(reply) == "completed"
    assert [m.content for m in turns.flow.state.messages][1] == ACKNOWLEDGEMENT


class _RollbackFails(SQLiteFlowPersistence):
    """A store whose rollback write fails (the disk is full, say)."""

    def save_full_state(
        self,
        flow_uuid: str,
        method_name: str,
        state_data: dict[str, Any],
        *,
        expected_revision: int | None = None,
    ) -> int:
        if method_name == "rollback":
            raise OSError("disk full")
        return super().save_full_state(
            flow_uuid, method_name, state_data, expected_revision=expected_revision
        )

    def save_state_changes(self, flow_uuid: str, method_name: str, changes: Any) -> int | None:
        if method_name == "rollback":
            raise OSError("disk full")
        return super().save_state_changes(flow_uuid, method_name, changes)


async def test_a_failed_rollback_write_still_discards_the_reply(
    engines: VoiceEngines, tmp_path: Path,
) -> None:
    class SavedTeller(Teller):
        pass

    turns = TurnRunner(persist(_RollbackFails(tmp_path / "calls.db"))(SavedTeller)())
    first, second = "What time", "is it in Paris?"
    resume = 0.3 + spoken_seconds(engines, first) + 0.35
    script = CallScript().user_says(0.3, first).user_says(resume, second).until(9.0)
    call = await run_call(turns, script, engines, settings=PATIENT)
    [discarded] = call.of_kind("speculative_reply_discarded")
    assert discarded.reason == "the user spoke on"
    # The live state was rolled back all the same, and only the real turn has metrics.
    [committed] = call.of_kind("turn_committed")
    assert [m.turn_id for m in call.metrics()] == [committed.turn_id]
    assert list(turns.flow.state.turns) == [committed.turn_id]


class _Copied:
    """A state field that calls ``on_copy`` (once) when the state is copied: the
    speculative turn's rollback point is taken, the state lock held."""

    def __init__(self) -> None:
        self.on_copy: Callable[[], None] | None = None

    def __deepcopy__(self, memo: dict[int, Any]) -> _Copied:
        on_copy, self.on_copy = self.on_copy, None
        if on_copy is not None:
            on_copy()
        return self


class _CopyWatchedState(AssistantState):
    model_config = ConfigDict(arbitrary_types_allowed=True)

    watch: Any = Field(default_factory=_Copied)


async def test_a_reply_cut_before_its_turn_began_ends_interrupted_and_unheard(
    engines: VoiceEngines,
) -> None:
    # The caller asks and hangs up in the pause. The speculative turn's rollback point is
    # taken, then a job's commit takes the state lock before the turn can start: the end
    # of input confirms the reply and cuts it (nobody plays it any more) while its
    # generation still waits for the lock, before its first event.
    state = _CopyWatchedState()
    wiring = AssistantWiring(Teller(state=state), clock=VirtualClock(autojump=True))
    held: list[float] = []

    async def commit() -> None:
        async with wiring.state_lock:  # queued first: the turn's generation waits
            held.append(wiring.clock.now())
            await wiring.clock.sleep(3.0)
            held.append(wiring.clock.now())

    commits: list[asyncio.Task[None]] = []
    state.watch.on_copy = lambda: commits.append(asyncio.create_task(commit()))
    script = CallScript().user_says(0.3, "Tell me a story.")
    try:
        call = await asyncio.wait_for(
            run_call(wiring, script, engines, settings=PATIENT, tail=0.8), timeout=120
        )  # (before the fix the call never ended: the turn's cancelled run left no end)
    finally:
        await wiring.aclose()
    [task] = commits
    assert task.done() and len(held) == 2
    [committed] = call.of_kind("turn_committed")
    assert held[0] < committed.at < held[1]  # confirmed (and cut) while the lock was held
    [metrics] = call.metrics()
    assert metrics.speculative and metrics.interrupted
    delivery = metrics.delivery_id
    assert delivery is not None
    reply = state.replies[delivery]
    assert (reply.status, reply.interrupted) == ("interrupted", True)
    assert state.turns[committed.turn_id].status == "interrupted"
    assert call.settled(delivery) == "interrupted"
    assert call.heard_seconds(delivery) == 0.0
    assert not [r for r in call.tape.receipts if r.num_samples > 0]  # no audio at all
    assert call.stale_samples() == 0
