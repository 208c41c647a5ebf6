"""When a background job's result is queued for announcement, after the job returned.

A voice call (real models, virtual time: the figures are exact and repeatable) of a
small travel assistant: the user asks about a flight, whose check takes 3 s as a
background job, and then either stays quiet, or takes another turn whose end-of-turn
silence (where its answer is prepared, waiting for the verdict) the job returns in.
Prints, for each, when the result was queued after the job returned, and what the
testing kit's ``assert_announcement_waited`` reports as the wait.

Issue 30 found 5.6-5.9 s after the turn with a busy user (the pause-answer held the
state lock until its turn was final; with the job's clock hold, such a call hung), and
the job itself started 0.62 s after its turn's commit (3.62 s from commit to result).
Now (virtual time, so on any machine): quiet and busy, queued 0.00 s after the job
returned, 3.00 s after its turn committed; the kit's wait 0.00 s (quiet) and 1.88 s
(busy: the second question's answer held the floor; Dec 4, Smart Turn by default, the
second question asked at 3.85 s so that the job returns in its 0.2 s pause; 2.14 s with
the timer).
Run: ``uv run python benchmarks/job_results.py``.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import ClassVar

from voxflow_adapters.testkit import CallScript, run_call
from voxflow_adapters.testkit.assertions import assert_announcement_waited
from voxflow_voice.engines import VoiceEngines
from voxflow_voice.session import VoiceSettings

from voxflow import Flow, listen
from voxflow.conversation import RouterContext
from voxflow.jobs import JobContext, background_job
from voxflow.wiring import AssistantState

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _figures import figure

RETURNED: list[float] = []
JOB_SECONDS = 3.0


@background_job
async def check_flight(job: JobContext) -> str:
    await job.sleep(JOB_SECONDS)
    RETURNED.append(job.clock.now())
    return "Flight BA 117 is on time."


class Travel(Flow[AssistantState]):
    conversational: ClassVar[bool] = True

    def route_turn(self, context: RouterContext) -> str | None:
        return "flight" if "flight" in (self.state.current_user_message or "").lower() else "chat"

    @listen("flight")
    def handle_flight(self) -> str:
        check_flight.start(self)
        return "I'm checking your flight."

    @listen("chat")
    def handle_chat(self) -> str:
        return "Sure, let me think about that."


async def one(engines: VoiceEngines, busy: bool) -> tuple[float, float, float]:
    """(queued after returned, queued after the asking turn, the kit's wait) in s."""
    RETURNED.clear()
    script = CallScript().user_says(0.5, "Is my flight on time?")
    if busy:  # the job returns in this question's end-of-turn silence
        script = script.user_says(3.85, "What about the weather?")
    call = await run_call(Travel(), script, engines, settings=VoiceSettings())
    [returned] = RETURNED
    if busy:
        second = call.of_kind("turn_committed")[1].at
        silence = call.of_kind("speech_ended")[-1].end_at
        if not silence < returned < second:
            raise SystemExit(f"the job returned at {returned:.2f} s, not in the second "
                             f"question's end-of-turn silence ({silence:.2f}-{second:.2f} s)")
    [queued] = call.of_kind("announcement_queued")
    asked = call.of_kind("turn_committed")[0].at
    waited = assert_announcement_waited(call)
    return queued.at - returned, queued.at - asked, waited.waited


async def main() -> None:
    engines = VoiceEngines.from_environment(deterministic=True)
    for label, busy in (("quiet", False), ("busy", True)):
        after_return, after_turn, waited = await one(engines, busy)
        print(f"{label} user: job result queued {after_return:.2f} s after the job returned "
              f"({after_turn:.2f} s after its turn committed; a {JOB_SECONDS:.0f} s job); "
              f"assert_announcement_waited: waited {waited:.2f} s from the result ready")
        figure(f"queued after returned, {label} user", round(after_return, 3), "s",
               target="== 0")


if __name__ == "__main__":
    asyncio.run(main())
