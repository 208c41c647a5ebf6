"""What a user's program and test run print is theirs: no noise from litellm around it.

Each case runs in a fresh interpreter (or pytest process), so its exit is observed too.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

pytest_plugins = ["pytester"]

SHOP = textwrap.dedent(
    """
    from voxflow import LLM, ConversationConfig, Flow, listen
    from voxflow.conversation import RouterContext
    from voxflow.jobs import JobContext, background_job
    from voxflow.wiring import AssistantState

    @background_job
    async def check_order(job: JobContext) -> str:
        return "It has shipped."

    @ConversationConfig(llm=LLM("openai/gpt-4o-mini", mock_response="Hi there."))
    class Shop(Flow[AssistantState]):
        def route_turn(self, context: RouterContext) -> str | None:
            text = self.state.current_user_message or ""
            return "order" if "order" in text else "job" if "job" in text else None

        @listen("order")
        def handle_order(self) -> str:
            return "On its way."

        @listen("job")
        def handle_job(self) -> str:
            check_order.start(self)  # no wiring here: JobNotAnnounceableError
            return "Checking."

    flow = Shop()
    print(flow.handle_turn("hello"))     # an LLM turn
    print(flow.handle_turn("my order"))  # then a turn without one
    """
)


def run(script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=240, check=False)


def test_an_llm_turn_then_a_turn_without_one_exit_quietly() -> None:
    result = run(SHOP)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split("\n")[:2] == ["Hi there.", "On its way."]
    assert result.stderr == ""  # was litellm's "LoggingWorker error: cannot reuse ..."


def test_a_users_error_is_the_last_thing_printed_and_stands_alone() -> None:
    result = run(SHOP + 'flow.handle_turn("a job please")\n')
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("voxflow.errors.JobNotAnnounceableError: cannot start "), last
    # one traceback, the user's: no litellm one after it, and no voxflow internals'
    # "During handling of the above exception" before it
    assert result.stderr.count("Traceback (most recent call last)") == 1, result.stderr
    assert "LoggingWorker" not in result.stderr and "no running event loop" not in (
        result.stderr)


def test_a_streamed_turn_after_a_turn_on_the_main_thread_is_quiet() -> None:
    # stream_turn runs its turn on a thread (and loop) of its own: litellm's logging
    # worker moves its queue to that loop, and said so on stderr ("event loop changed;
    # carried 1 pending ..."): nothing is lost, so nothing is worth saying.
    result = run(textwrap.dedent("""
        from voxflow import LLM, Agent, Flow, listen
        from voxflow.turns import TurnState

        clerk = Agent("Clerk", "Answer", llm=LLM("openai/gpt-4o-mini", mock_response="Hi."))

        class Chat(Flow[TurnState]):
            conversational = True

            def route_turn(self, context):
                return "ask"

            @listen("ask")
            async def handle_ask(self) -> str:
                return (await clerk.akickoff(self.conversation_messages)).raw

        print(Chat().handle_turn("one"))
        with Chat().stream_turn("two") as stream:
            print(sum(f.type == "llm_call_completed" for f in stream.events))
    """))
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split() == ["Hi.", "1"]
    assert result.stderr == ""


def test_a_test_module_with_a_scripted_llm_passes_without_warnings(
    pytester: pytest.Pytester,
) -> None:
    # The ScriptedLLM is made when the module is collected (as `voxflow chat file.py:Flow`
    # needs it), its calls run in the tests: pytest resets the warning filters litellm
    # installed for itself, so each call's pydantic "ReadOnly qualifier" UserWarnings
    # (litellm's TypedDicts) were listed in the summary, 13 to 16 of them.
    pytester.makepyfile(textwrap.dedent("""
        from voxflow import ConversationConfig, Flow
        from voxflow.testing import ScriptedLLM, reply
        from voxflow.turns import TurnState

        llm = ScriptedLLM(reply("Hello."))

        @ConversationConfig(llm=llm)
        class Shop(Flow[TurnState]):
            pass

        def test_hello():
            assert Shop().handle_turn("hi") == "Hello."

        def test_streamed_too():
            with Shop().stream_turn("hi") as stream:
                assert [f for f in stream.events]
    """))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:randomly")
    result.assert_outcomes(passed=2, warnings=0)
    assert "UserWarning" not in result.stdout.str()


def test_the_filter_is_litellms_own(tmp_path: Path) -> None:
    # The plugin restates for pytest the filter litellm installs at import (it is not
    # ours to widen): litellm still silences exactly this message itself.
    result = run("import warnings, litellm\n"
                 "print([f[1].pattern for f in warnings.filters if f[1] is not None])")
    assert ".*`ReadOnly` qualifier.*" in result.stdout, result.stdout + result.stderr
