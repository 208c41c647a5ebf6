"""Announcements are conversation: a heard announcement enters the history, is persisted,
and the next turn's LLM (real litellm, ``mock_response``) is sent it."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import litellm
import pytest
from litellm.integrations.custom_logger import CustomLogger

from voxflow import LLM, ConversationConfig, Flow, listen
from voxflow.conversation import RouterContext
from voxflow.flow import SQLiteFlowPersistence, persist
from voxflow.jobs import JobContext, background_job
from voxflow.llm import preload
from voxflow.replies import INTERRUPTED_MARK, record_announcement
from voxflow.wiring import AssistantState, AssistantWiring

pytestmark = pytest.mark.unit

RESULT = "Your parcel arrives on Thursday."


class Sent(CustomLogger):
    """What litellm itself was asked to send (after voxflow built the request)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[list[dict[str, Any]]] = []

    def log_pre_api_call(self, model: Any, messages: Any, kwargs: Any) -> None:
        self.calls.append(list(messages))


@pytest.fixture
def sent() -> Iterator[Sent]:
    # the process's one litellm warm-up (AssistantWiring starts it) runs before the
    # recorder listens: its pre-call hooks are not this test's calls (run alone, they were)
    asyncio.run(preload())
    recorder = Sent()
    saved = list(litellm.callbacks)
    litellm.callbacks = [*saved, recorder]
    try:
        yield recorder
    finally:
        litellm.callbacks = saved


@background_job
async def track_parcel(job: JobContext) -> str:
    return RESULT


@persist()
@ConversationConfig(system_prompt="Be brief.",
                    llm=LLM("openai/gpt-4o-mini", mock_response="Anything else?"))
class Shop(Flow[AssistantState]):
    conversational = True

    def route_turn(self, context: RouterContext) -> str | None:
        return "parcel" if "parcel" in (self.state.current_user_message or "") else None

    @listen("parcel")
    def handle_parcel(self) -> str:
        track_parcel.start(self)
        return "Let me check."


async def test_the_next_turns_llm_is_sent_the_heard_announcement(
    sent: Sent, tmp_path: Path
) -> None:
    store = SQLiteFlowPersistence(tmp_path / "states.db")
    flow = Shop(persistence=store, suppress_flow_events=True)
    async with AssistantWiring(flow) as wiring:
        assert await wiring.text_turn("where is my parcel?") == "Let me check."
        assert await wiring.wait_for_jobs(5.0)
        assert await wiring.announce_ready() == [RESULT]
        assert await wiring.text_turn("and my refund?") == "Anything else?"  # the LLM's turn
    [call] = sent.calls
    assert [(m["role"], m["content"]) for m in call] == [
        ("system", "Be brief."),
        ("user", "where is my parcel?"),
        ("assistant", "Let me check."),
        ("assistant", RESULT),  # the announcement, where it was heard
        ("user", "and my refund?"),
    ]
    # persisted like any message, with the marks that say what it was
    stored = store.load_state(flow.state.id)
    assert stored is not None
    [announced] = [m for m in stored["messages"] if m.get("metadata", {}).get("announcement")]
    [job] = flow.state.jobs.values()
    [delivery] = flow.state.deliveries.values()
    assert announced["content"] == RESULT
    assert announced["metadata"]["job_ids"] == [job.job_id]
    assert announced["metadata"]["delivery_id"] == delivery.delivery_id
    assert announced["metadata"]["interrupted"] is False


async def test_a_cut_announcement_keeps_only_what_was_heard() -> None:
    flow = Shop(suppress_flow_events=True)
    message = record_announcement(flow, "d-1", heard_text="Your parcel arrives",  # type: ignore[arg-type]
                                  full_text=RESULT, interrupted=True, heard_seconds=1.234)
    assert message is not None
    assert message.content == f"Your parcel arrives {INTERRUPTED_MARK}"
    assert message.metadata["heard_text"] == "Your parcel arrives"
    assert message.metadata["generated_text"] == RESULT
    assert message.metadata["heard_seconds"] == 1.234
    # nothing heard: nothing said
    assert record_announcement(flow, "d-2", heard_text=" ", full_text=RESULT,  # type: ignore[arg-type]
                               interrupted=True) is None
    assert list(flow.state.messages) == [message]


async def test_reopen_gives_the_next_client_a_fresh_floor_unless_the_call_ended() -> None:
    from voxflow.replies import ClientActivity

    flow = Shop(suppress_flow_events=True)
    async with AssistantWiring(flow) as wiring:
        replies = wiring.replies
        assert replies is not None
        sid = flow.state.id
        def seen(seq: int, muted: bool) -> ClientActivity:
            return ClientActivity(session_id=sid, seq=seq, recording=False, playback=False,
                                  muted=muted)

        assert replies.observe_client(seen(5, muted=True))
        replies.close()
        assert replies.statistics().busy_reason == "floor closed"
        replies.reopen()
        floor = flow.state.delivery_floor
        assert (floor.closed, floor.muted, floor.client_seq) == (False, False, 0)
        assert replies.observe_client(seen(1, muted=False))  # a new client: from seq 1
        replies.close()
        flow.state.ended = True
        replies.reopen()
        assert flow.state.delivery_floor.closed  # an ended conversation stays closed


async def test_a_result_left_unsaid_when_a_session_closed_is_said_after_reopen() -> None:
    # The job completed and its announcement waited for the floor when the client went
    # (a reconnect): close() skipped it, and the next client must still hear it.
    flow = Shop(suppress_flow_events=True)
    async with AssistantWiring(flow) as wiring:
        replies = wiring.replies
        assert replies is not None
        assert await wiring.text_turn("where is my parcel?") == "Let me check."
        assert await wiring.wait_for_jobs(5.0)
        [job] = flow.state.jobs.values()
        waiting = replies.enqueue(job)
        assert waiting is not None
        replies.close()
        assert flow.state.deliveries[waiting].status == "skipped"
        replies.reopen()
        assert await wiring.announce_ready() == [RESULT]
        assert flow.state.deliveries[waiting].status == "completed"
        replies.close()  # and once the conversation ended, nothing comes back
        flow.state.ended = True
        replies.reopen()
        assert flow.state.deliveries[waiting].status == "completed"
