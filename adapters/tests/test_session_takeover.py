"""A stored session restored by any entry point, not only a resumed WebRTC call: the
speaking floor its dead process held is taken over by the wiring
(:class:`~voxflow.wiring.AssistantWiring`), so the announcement that process never made
is made once, in text chat (``voxflow chat``'s :func:`~voxflow.wiring.chat_text`) and in a
simulated voice call (``run_call`` given the flow). Real SQLite and PostgreSQL stores,
real models for the call."""

from __future__ import annotations

from typing import Any

import pytest
from voxflow_adapters.testkit.scenario import run_call
from voxflow_adapters.testkit.script import CallScript
from voxflow_voice.engines import VoiceEngines

from voxflow.clock import VirtualClock
from voxflow.examples.assistant import assistant_class
from voxflow.replies import ClientActivity
from voxflow.wiring import AssistantWiring, chat_text

SHIPPED = "order 417 has shipped"


async def died_mid_reply(store: Any) -> tuple[type[Any], str]:
    """A session saved by a process that died mid-reply: its foreground turn held the
    floor, its client was playing the answer (observation 40), and the order lookup the
    turn started had completed, not announced (the floor was busy)."""
    flow_class = assistant_class(None, lookup_seconds=0.05)
    dead = flow_class(persistence=store)
    wiring = AssistantWiring(dead)
    assert wiring.replies is not None
    assert "checking your order" in await wiring.text_turn("Where is my order?")
    (answer,) = dead.state.replies.values()
    async with wiring.state_lock:
        wiring.replies.set_foreground(True)
        assert wiring.replies.observe_client(ClientActivity(
            session_id=dead.state.id, seq=40, recording=False, playback=True, muted=False,
            delivery_id=answer.delivery_id))
    assert await wiring.wait_for_jobs(10)
    assert [j.status for j in dead.state.jobs.values()] == ["completed"]
    await dead.asave_state("died")  # the last save; the process is gone after it
    await wiring.aclose()
    return flow_class, dead.state.id


def said(flow: Any) -> list[str]:
    return [m.content for m in flow.state.messages
            if m.role == "assistant" and SHIPPED in m.content]


@pytest.mark.unit
async def test_a_text_chat_restoring_a_dead_processs_session_announces_its_job_once(
    make_store: Any,
) -> None:
    store = make_store("takeover_chat")
    flow_class, session_id = await died_mid_reply(store)
    flow = flow_class(persistence=store)
    assert await flow.aload_session(session_id)
    assert flow.state.delivery_floor.foreground  # the dead process's floor, as stored
    written: list[str] = []
    await chat_text(flow, read=lambda _prompt: (_ for _ in ()).throw(EOFError),
                    write=written.append, job_grace=5.0)
    assert [line for line in written if SHIPPED in line] == [
        "Assistant: Good news: order 417 has shipped. It arrives on Thursday."]
    await flow.asave_state("announced")

    again = flow_class(persistence=store)  # the next restore: covered, not said twice
    assert await again.aload_session(session_id)
    written.clear()
    await chat_text(again, read=lambda _prompt: (_ for _ in ()).throw(EOFError),
                    write=written.append, job_grace=5.0)
    assert written == []
    assert len(said(again)) == 1


@pytest.mark.unit
async def test_a_wiring_on_a_session_nobody_held_changes_nothing(make_store: Any) -> None:
    """Nothing to take over (a fresh session, or one saved with the floor free): the
    wiring leaves the reply queue's state as it was, sequence included."""
    store = make_store("takeover_free")
    flow_class = assistant_class(None, lookup_seconds=0.01)
    flow = flow_class(persistence=store)
    before = flow.state.model_dump(include={"delivery_floor", "delivery_sequence"})
    async with AssistantWiring(flow):
        assert flow.state.model_dump(include={"delivery_floor", "delivery_sequence"}) == before


@pytest.mark.models
async def test_a_simulated_call_restoring_a_dead_processs_session_announces_its_job(
    make_store: Any, engines: VoiceEngines,
) -> None:
    store = make_store("takeover_call")
    flow_class, session_id = await died_mid_reply(store)
    flow = flow_class(persistence=store)
    assert await flow.aload_session(session_id)
    call = await run_call(flow, CallScript().until(6.0), engines,
                          clock=VirtualClock(autojump=True))
    heard = [e.text for e in call.events if e.kind == "reply_finished"]
    assert heard == ["Good news: order 417 has shipped. It arrives on Thursday."]
    assert len(said(flow)) == 1
