"""voxflow.LLM over real litellm with ``mock_response=`` (offline, deterministic)."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest
from pydantic import BaseModel

from voxflow.errors import ProviderError
from voxflow.llm import (
    LLM,
    BaseLLM,
    LLMConfig,
    LLMEvent,
    coerce_llm,
    normalize_messages,
    observe_llm,
)

pytestmark = pytest.mark.unit


class Route(BaseModel):
    intent: str


async def test_acall_returns_the_mocked_answer() -> None:
    llm = LLM("openai/gpt-4o-mini", mock_response="Hello there")
    response = await llm.acall("hi")
    assert response.content == "Hello there"
    assert str(response) == "Hello there"
    assert response.model == "openai/gpt-4o-mini"


async def test_streaming_delivers_chunks_to_observers_and_returns_the_whole_answer() -> None:
    llm = LLM("openai/gpt-4o-mini", mock_response="Your order ships today.")
    events: list[LLMEvent] = []
    with observe_llm(events.append):
        response = await llm.acall([{"role": "user", "content": "where?"}], stream=True)
    chunks = [e.content for e in events if e.type == "llm_stream_chunk"]
    assert len(chunks) > 1
    assert "".join(chunks) == "Your order ships today."
    assert response.content == "Your order ships today."
    assert events[0].type == "llm_call_started"
    assert events[-1].type == "llm_call_completed"
    assert len({e.call_id for e in events}) == 1


async def test_astream_yields_text_deltas() -> None:
    llm = LLM("openai/gpt-4o-mini", mock_response="abcdefghij")
    async with llm.astream("go") as stream:
        pieces = [piece async for piece in stream]
    assert "".join(pieces) == "abcdefghij"
    assert stream.response is not None and stream.response.content == "abcdefghij"
    assert stream.closed


async def test_cancelling_the_consumer_closes_the_provider_stream_without_draining() -> None:
    llm = LLM("openai/gpt-4o-mini", mock_response="x" * 300)
    got_first = asyncio.Event()
    stream = llm.astream("long story")

    async def consume() -> None:
        async with stream:
            async for _ in stream:
                got_first.set()
                await asyncio.Event().wait()  # e.g. waiting on TTS backpressure

    task = asyncio.create_task(consume())
    await got_first.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert stream.closed
    assert stream.chunks_received == 1  # 100 chunks available; the rest never read
    assert stream.response is None


async def test_leaving_the_block_early_closes_the_stream() -> None:
    llm = LLM("openai/gpt-4o-mini", mock_response="y" * 300)
    async with llm.astream("go") as stream:
        async for _ in stream:
            break
    assert stream.closed
    assert stream.chunks_received == 1


async def test_structured_output_is_parsed_into_the_response_format() -> None:
    llm = LLM("openai/gpt-4o-mini", mock_response='{"intent": "order"}')
    response = await llm.acall("where is my order", response_format=Route)
    assert isinstance(response.parsed, Route)
    assert response.parsed.intent == "order"


async def test_structured_output_that_does_not_match_leaves_parsed_empty() -> None:
    llm = LLM("openai/gpt-4o-mini", mock_response="not json")
    response = await llm.acall("x", response_format=Route)
    assert response.parsed is None
    assert response.content == "not json"


async def test_tool_calls_come_back_typed() -> None:
    llm = LLM(
        "openai/gpt-4o-mini",
        mock_response={"tool_calls": [{"id": "c1", "name": "add", "arguments": {"a": 1, "b": 2}}]},
    )
    tools = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}]
    response = await llm.acall("add", tools=tools)
    assert len(response.tool_calls) == 1
    call = response.tool_calls[0]
    assert (call.id, call.name, call.parsed_arguments()) == ("c1", "add", {"a": 1, "b": 2})


async def test_a_list_of_mocks_is_consumed_one_per_call() -> None:
    llm = LLM("openai/gpt-4o-mini", mock_response=["one", "two"])
    assert (await llm.acall("a")).content == "one"
    assert (await llm.acall("b")).content == "two"
    assert (await llm.acall("c")).content == "two"


@pytest.mark.parametrize(
    ("mock", "retryable"),
    [("litellm.RateLimitError", True), ("litellm.InternalServerError", True)],
)
async def test_provider_errors_become_voxflow_errors(mock: str, retryable: bool) -> None:
    llm = LLM("openai/gpt-4o-mini", mock_response=mock)
    with pytest.raises(ProviderError) as info:
        await llm.acall("hi")
    assert info.value.retryable is retryable
    assert info.value.provider == "openai/gpt-4o-mini"
    assert info.value.__cause__ is not None


async def test_a_non_transient_error_is_not_retryable() -> None:
    import litellm

    bad = litellm.AuthenticationError(message="no key", llm_provider="openai", model="m")
    llm = LLM("openai/gpt-4o-mini", mock_response=bad)
    with pytest.raises(ProviderError) as info:
        await llm.acall("hi")
    assert info.value.retryable is False


async def test_mid_stream_failure_is_translated() -> None:
    llm = LLM("openai/gpt-4o-mini", mock_response="Exception: mock_streaming_error")
    with pytest.raises(ProviderError) as info:
        await llm.acall("hi", stream=True)
    assert info.value.retryable is True


def test_sync_call_wraps_acall() -> None:
    assert LLM("openai/gpt-4o-mini", mock_response="sync ok").call("hi").content == "sync ok"


async def test_sync_call_inside_a_running_loop_does_not_reenter_it() -> None:
    llm = LLM("openai/gpt-4o-mini", mock_response="from a thread")
    assert llm.call("hi").content == "from a thread"


def test_model_id_string_or_config_mapping() -> None:
    assert LLM("gpt-4o-mini").model == "gpt-4o-mini"
    llm = LLM({"model": "openai/gpt-4o-mini", "max_tokens": 512, "top_p": 0.5})
    assert llm.config.max_tokens == 512
    assert llm.config.params == {"top_p": 0.5}
    assert LLM("m", temperature=0.2).config.temperature == 0.2
    assert isinstance(llm, BaseLLM)


def test_invalid_configuration_is_rejected_naming_the_parameter() -> None:
    with pytest.raises(TypeError, match=r"router\.llm"):
        coerce_llm(42, name="router.llm")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="intent_llm"):
        coerce_llm({"max_tokens": 5}, name="intent_llm")
    with pytest.raises(ValueError):
        LLMConfig(model="")
    assert coerce_llm(None) is None


def test_messages_are_validated() -> None:
    assert normalize_messages("hi") == [{"role": "user", "content": "hi"}]
    with pytest.raises(ValueError, match="empty"):
        normalize_messages([])
    with pytest.raises(ValueError, match="role"):
        normalize_messages([{"content": "x"}])
    with pytest.raises(TypeError):
        normalize_messages(3)  # type: ignore[arg-type]


# Records, in a fresh interpreter, every module of litellm's (and of what its first call
# imports: the OpenAI SDK, the tokenizer, anyio's async backend) imported on the thread
# that runs the event loop, while two first calls (streamed and not) run on that loop.
FIRST_CALL_ON_THE_LOOP = """
import asyncio, sys, threading
FAMILIES = ("litellm", "openai", "tiktoken", "tiktoken_ext", "anyio")
on_loop = []
loop_thread = []

def record(event, args):
    if event == "import" and args[0].split(".")[0] in FAMILIES:
        if loop_thread and threading.get_ident() == loop_thread[0]:
            on_loop.append(args[0])

sys.addaudithook(record)
from voxflow.llm import LLM

async def main():
    loop_thread.append(threading.get_ident())
    llm = LLM("openai/gpt-4o-mini", mock_response="Hello there")
    streamed = await llm.acall("hi", stream=True)
    whole = await llm.acall("hi")
    return streamed.content, whole.content

print(asyncio.run(main()), len(on_loop), sorted(set(on_loop))[:8])
"""


def test_a_first_llm_call_imports_litellm_off_the_event_loop() -> None:
    """A process's first LLM call imported litellm (seconds of CPU) and what its first
    request imports on the event loop: every call the process ran stalled that long
    (issue 29). Now they load on a thread of their own while the loop goes on."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", FIRST_CALL_ON_THE_LOOP], capture_output=True,
                         text=True, check=True, timeout=300)
    assert out.stdout.strip() == "('Hello there', 'Hello there') 0 []", out.stderr[-2000:]


def test_importing_voxflow_does_not_import_litellm() -> None:
    import subprocess
    import sys

    code = "import sys, voxflow, voxflow.llm; print('litellm' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_the_litellm_warm_up_is_not_reported_to_a_users_litellm_callbacks() -> None:
    """The warm-up's mock calls (once per process, on a thread of its own) do not reach a
    user's own litellm success/failure callbacks (cost tracking, tracing): litellm's
    ``no-log``. A fresh interpreter, so that this process's warm-up is the one run."""
    code = """
import asyncio, time
import litellm
from litellm.integrations.custom_logger import CustomLogger
class Recorder(CustomLogger):
    def __init__(self):
        super().__init__()
        self.events = []
    def log_success_event(self, kwargs, response_obj, start_time, end_time):
        self.events.append(kwargs.get("messages"))
    async def async_log_success_event(self, kwargs, response_obj, start_time, end_time):
        self.events.append(kwargs.get("messages"))
recorder = Recorder()
litellm.callbacks = [recorder]
from voxflow.llm import preload
asyncio.run(preload())
time.sleep(0.5)  # (litellm logs success on a worker thread)
warm = len(recorder.events)
litellm.completion(model="openai/gpt-4o-mini", mock_response="ok",
                   messages=[{"role": "user", "content": "hello"}])
time.sleep(0.5)
print(warm, len(recorder.events))
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120, check=True)
    assert result.stdout.split()[-2:] == ["0", "1"], result.stdout + result.stderr
