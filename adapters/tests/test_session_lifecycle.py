"""A voice session's lifetime on the real models: closing mid-reply and failing providers.

The call ends while a reply plays (the script is over and the client leaves with no
tail): every delivery must settle and nothing committed may be lost.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, ClassVar

import pytest
from voxflow_adapters.testkit.flows import STORY, Teller
from voxflow_adapters.testkit.scenario import CallResult, run_call
from voxflow_adapters.testkit.script import CallScript
from voxflow_voice.engines import VoiceEngines
from voxflow_voice.session import VoiceSession
from voxflow_voice.speak.history import INTERRUPTED_MARK

from voxflow import ConversationConfig, Flow, listen, start
from voxflow.clock import VirtualClock
from voxflow.conversation import RouterContext
from voxflow.jobs import JobRecord, JobRunner, JobState, JobWorkFlow, JobWorkState, add_job
from voxflow.replies import ReplyQueue, ReplyQueueState
from voxflow.turns import TurnRunner

pytestmark = pytest.mark.models


async def test_closing_mid_reply_cuts_it_and_keeps_the_committed_turn(
    engines: VoiceEngines,
) -> None:
    turns = TurnRunner(Teller(trigger=None))  # every turn: the story
    # The client leaves at 4 s, a second or two into a reply of about 12 s.
    script = CallScript().user_says(0.3, "Tell me a story.").until(4.0)
    call = await asyncio.wait_for(run_call(turns, script, engines, tail=0.0), timeout=120)
    kinds = [e.kind for e in call.events]
    assert kinds[-1] == "session_closed"
    (delivery,) = call.replies()
    assert call.settled(delivery) == "interrupted"
    assert "barge_in" not in kinds  # closed, not barged in
    interrupted = call.of_kind("reply_interrupted")[0]
    assert 0.5 < interrupted.heard_seconds < 3.0
    assert interrupted.stop_latency_ms is None  # no barge-in onset to measure from
    assert call.stale_samples() == 0
    # Nothing of it was played after the client's last frame.
    end = call.tape.start + len(call.tape.heard) * 0.02
    assert all(r.at < end for r in call.tape.receipts)
    # The committed turn and both messages are kept; the reply as heard.
    state = turns.flow.state
    (turn,) = state.turns.values()
    assert turn.status == "completed" and turns.running_turn_id() is None
    assert [m.role for m in state.messages] == ["user", "assistant"]
    assert state.messages[0].content == call.transcripts()[0]
    assistant = state.messages[1]
    assert assistant.content == f"{interrupted.heard_text} {INTERRUPTED_MARK}"
    assert STORY.startswith(interrupted.heard_text.rstrip(".,"))
    assert assistant.metadata["generated_text"] == STORY
    (metrics,) = call.metrics()
    assert metrics.interrupted and metrics.first_audio is not None


# -- announcements: the active one is interrupted, a pending one skipped ----------------

FIRST = (
    "Your first parcel has arrived at the depot, and it will be delivered tomorrow "
    "morning, between eight and ten, to the address on your account."
)
SECOND = "Your second parcel is on its way."


class Lookup(JobRecord):
    output_fields: ClassVar[frozenset[str]] = frozenset({"answer"})
    answer: str = ""
    delay: float = 1.0
    text: str = ""


class ShopState(ReplyQueueState, JobState[Lookup]):
    pass


class LookupWork(JobWorkFlow[JobWorkState[Lookup]]):
    pause: Callable[[float], None] = staticmethod(lambda s: None)

    @start()
    def look_up(self) -> None:
        job = self.state.job
        self.publish_update("started")
        self.publish_update("stage_started", stage="lookup")
        self.pause(job.delay)
        self.publish_update("stage_completed", stage="lookup", outputs={"answer": job.text})
        self.publish_update("completed")


@ConversationConfig(system_prompt="")
class Shop(Flow[ShopState]):
    start_job: Callable[[Lookup], None] | None = None

    def route_turn(self, context: RouterContext) -> str | None:
        return "orders"

    @listen("orders")
    def handle_orders(self) -> str:
        running = [t for t in self.state.turns.values() if t.status == "running"]
        assert self.start_job is not None
        for delay, text in ((1.0, FIRST), (3.0, SECOND)):
            job = Lookup(
                session_id=self.state.id, origin_turn_id=running[-1].turn_id, delay=delay, text=text
            )
            assert add_job(self.state, job)
            self.start_job(job)
        return "Checking both."


async def call_with_jobs(engines: VoiceEngines, script: CallScript) -> tuple[CallResult, Shop]:
    flow = Shop()
    turns = TurnRunner(flow)
    replies = ReplyQueue(turns)
    clock = VirtualClock(autojump=True)
    loop = asyncio.get_running_loop()
    holder: dict[str, VoiceSession] = {}

    def pause(seconds: float) -> None:  # the worker thread waits on the call's clock
        asyncio.run_coroutine_threadsafe(clock.sleep(seconds), loop).result()

    def make_work(job: Lookup, inputs: Any, publish: Any) -> LookupWork:
        work = LookupWork(
            state=JobWorkState[Lookup](job=job), publish=publish, suppress_flow_events=True
        )
        work.pause = pause
        return work

    async def on_update(snapshot: dict[str, Any]) -> None:
        await holder["session"].on_job_update(snapshot)

    jobs = JobRunner(flow.state, make_work, on_update=on_update)
    flow.start_job = lambda job: jobs.submit(job, {})
    try:
        call = await asyncio.wait_for(
            run_call(
                turns,
                script,
                engines,
                clock=clock,
                replies=replies,
                jobs=jobs,
                on_session=lambda s: holder.__setitem__("session", s),
                tail=0.0,
            ),
            timeout=120,
        )
    finally:
        await jobs.aclose()
    return call, flow


async def test_closing_during_an_announcement_settles_every_delivery(
    engines: VoiceEngines,
) -> None:
    # "Checking both." ends at about 3 s; the first job's long announcement starts right
    # after and is still playing when the client leaves; the second job completes while
    # it plays, so its announcement is still waiting for the floor.
    script = CallScript().user_says(0.3, "Where are my orders?").until(6.5)
    call, flow = await call_with_jobs(engines, script)
    records = list(flow.state.deliveries.values())  # in order of enqueueing
    statuses = [d.status for d in records]
    assert statuses == ["interrupted", "skipped"], statuses
    assert all(d.status != "scheduled" and d.status != "pending" for d in records)
    assert flow.state.delivery_floor.closed
    announced = [e for e in call.events if e.kind == "reply_started" and e.reply_kind != "answer"]
    assert [e.delivery_id for e in announced] == [records[0].delivery_id]
    assert call.settled(records[0].delivery_id) == "interrupted"
    heard = call.heard_seconds(records[0].delivery_id)
    assert 0.0 < heard < 5.0  # cut before its end (about 9 s of speech)
    assert call.stale_samples() == 0
    assert call.events[-1].kind == "session_closed"
    # The foreground turn and both job results are kept; of the cut announcement, the
    # history keeps only the words heard, marked as an interrupted announcement.
    assert [m.role for m in flow.state.messages] == ["user", "assistant", "assistant"]
    cut = flow.state.messages[-1]
    assert cut.metadata["announcement"] and cut.metadata["interrupted"]
    assert cut.metadata["delivery_id"] == records[0].delivery_id
    assert FIRST.startswith(cut.metadata["heard_text"]) and cut.metadata["heard_text"] != FIRST
    assert sorted(j.answer for j in flow.state.jobs.values()) == sorted([FIRST, SECOND])
    assert all(j.status == "completed" for j in flow.state.jobs.values())
